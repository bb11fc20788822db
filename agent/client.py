"""A small synchronous client of the agent HTTP API, used by the ``elf`` CLI and tests.

Contract: each method returns the decoded JSON body; a non-2xx answer raises
:class:`ApiError` carrying the status and the server's error message; a refused connection
raises :class:`ApiError` with status 0 and the address it tried.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
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

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
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

    def results(self, name: str, epoch: int | None = None) -> dict[str, Any]:
        query = "" if epoch is None else f"?epoch={int(epoch)}"
        return self.call("GET", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/results{query}")

    def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/query", message)

    def local(self, name: str, **params: Any) -> dict[str, Any]:
        """``GET /api/v1/jobs/{name}/local?k=v``: the job's instance on *this* agent answers."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self.call("GET", f"/api/v1/jobs/{urllib.parse.quote(name, safe='')}/local{query}")

    def status(self) -> dict[str, Any]:
        return self.call("GET", "/api/v1/status")

    def ingest(self, input_name: str, lines: Sequence[str | bytes]) -> dict[str, Any]:
        """POST lines (text, or bytes sent as they are) to an ingest input."""
        raw = b"".join((x.encode() if isinstance(x, str) else bytes(x)) + b"\n" for x in lines)
        path = f"/api/v1/ingest/{urllib.parse.quote(input_name, safe='')}"
        return self.call("POST", path, raw=raw)
