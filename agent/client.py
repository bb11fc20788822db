"""A small synchronous client of the agent HTTP API, used by the ``elf`` CLI and tests.

Contract: each method returns the decoded JSON body; a non-2xx answer raises
:class:`ApiError` carrying the status and the server's error message; a refused connection
raises :class:`ApiError` with status 0 and the address it tried.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson


class ApiError(Exception):
    """The API refused a request (``status`` ≥ 400) or could not be reached (``status`` 0);
    ``field`` is the request field the agent named as at fault (None when it named none)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.field = field


class ApiClient:
    """Talks to one agent's API at ``url`` with bearer ``token``."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def __repr__(self) -> str:  # never the token: clients end up in logs and tracebacks
        return f"ApiClient({self.url!r}, token=<redacted>, timeout={self.timeout})"

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw: bytes | None = None,
        timeout: float | None = None,
    ) -> Any:
        """``method path`` with a JSON ``body`` (or ``raw`` bytes); ``timeout``: seconds for
        this request (default the client's)."""
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return orjson.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            field = None
            try:
                doc = orjson.loads(payload)
                message = doc.get("error", "")
                field = doc.get("field") if isinstance(doc.get("field"), str) else None
            except (orjson.JSONDecodeError, AttributeError):
                message = payload.decode("utf-8", "replace")[:200]
            raise ApiError(exc.code, message, field) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}") from None

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "/api/v1/jobs", spec)

    def change(self, name: str, change: dict[str, Any]) -> dict[str, Any]:
        """A runtime change of a running job (docs/http-api.md); returns when all applied."""
        return self.call("POST", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/change", change)

    def timings(self, name: str) -> dict[str, Any]:
        """This agent's epoch and control timings of a job (docs/http-api.md)."""
        return self.call("GET", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/timings")

    def jobs(self) -> list[dict[str, Any]]:
        return self.call("GET", "/api/v1/jobs")["jobs"]

    def stop_job(self, name: str) -> dict[str, Any]:
        return self.call("DELETE", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}")

    def results(
        self, name: str, epoch: int | None = None, emit: str | None = None
    ) -> dict[str, Any]:
        """``GET .../results[?epoch=E][&emit=final|changes]`` (docs/http-api.md)."""
        params = {k: v for k, v in (("epoch", epoch), ("emit", emit)) if v is not None}
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self.call("GET", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/results{query}")

    def follow_results(
        self,
        name: str,
        emit: str | None = None,
        after: str | None = None,
        read_timeout: float = 60.0,
    ) -> Iterator[dict[str, Any]]:
        """``GET .../results/stream``: its events (``result``, ``gone``, ``keepalive``,
        ``end``) as dicts until the agent ends the stream; ``after``: a cursor ``E:R`` to
        resume from; ``read_timeout``: the longest silence accepted (the agent sends a
        keepalive at least every 15 s). A connection lost mid-stream raises ``ApiError``
        (status 0)."""
        params = {k: v for k, v in (("emit", emit), ("after", after)) if v is not None}
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        path = f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/results/stream{query}"
        with self._open_stream(path, "application/x-ndjson", read_timeout) as resp:
            try:
                for line in resp:
                    if line.strip():
                        yield orjson.loads(line)
            except (OSError, ValueError) as exc:  # a reset, a cut-off line, a read timeout
                raise ApiError(0, f"results stream from {self.url} lost: {exc}") from None

    def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/query", message)

    def local(self, name: str, **params: Any) -> dict[str, Any]:
        """``GET /api/v1/jobs/{name}/local?k=v``: the job's instance on *this* agent answers."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self.call("GET", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/local{query}")

    def status(self) -> dict[str, Any]:
        return self.call("GET", "/api/v1/status")

    def tap(self, name: str, limit: int = 10, timeout: float = 10.0) -> dict[str, Any]:
        """``GET /api/v1/jobs/{name}/tap``: up to ``limit`` records the job sees on *this*
        agent from now on, waiting at most ``timeout`` s (docs/http-api.md)."""
        query = urllib.parse.urlencode({"limit": limit, "timeout": timeout})
        path = f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/tap?{query}"
        # the agent answers after at most ``timeout`` s: wait that long, and some more
        return self.call("GET", path, timeout=max(self.timeout, timeout + 10.0))

    def retire_origin(self, name: str, origin: str, why: str | None = None) -> dict[str, Any]:
        """Retire ``origin`` (hex node id) from job ``name``: each of its masters answers."""
        body = {"origin": origin, **({"why": why} if why is not None else {})}
        return self.call("POST", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/retire", body)

    def retire_agent(self, agent: str, why: str | None = None) -> dict[str, Any]:
        """Retire ``agent`` (hex node id) from every running job it is an origin of."""
        body = {"agent": agent, **({"why": why} if why is not None else {})}
        return self.call("POST", "/api/v1/retire", body)

    def leave(self) -> dict[str, Any]:
        """Ask the agent to stop gracefully, as SIGTERM would (answered before it stops)."""
        return self.call("POST", "/api/v1/leave")

    def dashboard_url(self, with_token: bool = False) -> str:
        """The agent's dashboard page; ``with_token`` appends ``#token=...`` (a URL fragment:
        browsers never send it to the server, so it reaches no access log; the page moves it
        into the tab's session storage and off the address bar). The link is a secret."""
        url = f"{self.url}/dashboard/"
        return f"{url}#token={urllib.parse.quote(self.token, safe='')}" if with_token else url

    def dashboard(self) -> dict[str, Any]:
        """The cluster picture the agent's dashboard shows (docs/dashboard.md)."""
        return self.call("GET", "/api/v1/dashboard/cluster")

    def events(self, read_timeout: float = 60.0) -> Iterator[tuple[str, Any]]:
        """The dashboard's Server-Sent Events as ``(event, data)`` pairs, until the agent
        ends the stream (``read_timeout``: the longest silence accepted; the agent sends a
        comment line at least every 15 s)."""
        req = urllib.request.Request(self.url + "/api/v1/dashboard/events", method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "text/event-stream")
        try:
            resp = urllib.request.urlopen(req, timeout=read_timeout)
        except urllib.error.HTTPError as exc:
            try:
                message = orjson.loads(exc.read()).get("error", "")
            except (orjson.JSONDecodeError, AttributeError):
                message = exc.reason
            raise ApiError(exc.code, str(message)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}") from None
        with resp:
            yield from parse_events(resp)

    def _open_stream(self, path: str, accept: str, read_timeout: float) -> Any:
        """An open streaming response (a context manager); a refusal raises ``ApiError``
        with the server's status, message and field, as :meth:`call` does."""
        req = urllib.request.Request(self.url + path, method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", accept)
        try:
            return urllib.request.urlopen(req, timeout=read_timeout)
        except urllib.error.HTTPError as exc:
            raise _refusal(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}") from None

    def ingest(self, input_name: str, lines: Sequence[str | bytes]) -> dict[str, Any]:
        """POST lines (text, or bytes sent as they are) to an ingest input."""
        raw = b"".join((x.encode() if isinstance(x, str) else bytes(x)) + b"\n" for x in lines)
        path = f"/api/v1/ingest/{urllib.parse.quote(input_name, safe='')}"
        return self.call("POST", path, raw=raw)


def _refusal(exc: urllib.error.HTTPError) -> ApiError:
    """The ``ApiError`` of an HTTP error answer (its JSON ``error`` and ``field``)."""
    payload = exc.read()
    try:
        doc = orjson.loads(payload)
        message, field = str(doc.get("error", "")), doc.get("field")
    except (orjson.JSONDecodeError, AttributeError):
        message, field = payload.decode("utf-8", "replace")[:200], None
    return ApiError(exc.code, message, field if isinstance(field, str) else None)


def parse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, Any]]:
    """Server-Sent Events frames (``event:``/``data:`` lines ended by a blank line; ``:``
    comments skipped) as ``(event, JSON data)`` pairs; a frame without data yields nothing."""
    event, data = "message", []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, orjson.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue  # a keep-alive comment
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
