"""DataPlaneClient: one keep-alive aiohttp session per agent for snapshots and control calls.

Contract: :meth:`DataPlaneClient.send_snapshot` returns the receiver's acknowledgement
(``"merged"``, ``"duplicate"``, ``"overlap"`` or ``"stale"`` - all four mean "delivered, drop
your copy") or raises :class:`srt.errors.DataPlaneError` after its last attempt. A 422 (the
body failed the integrity check on arrival) is resent; other transient failures (no response,
timeout, 408, 425, 429, 5xx, an unauthenticated reply) are retried with exponential backoff;
permanent rejections (400, 401, 404, 405, 413) raise at once. Every attempt is signed afresh (new
timestamp and nonce), so a retry is never mistaken for a replay. :meth:`post_json` makes one
authenticated attempt (control calls need not be idempotent) and raises on any failure.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
from yarl import URL

from srt.config import DEFAULT_TUNABLES, Tunables
from srt.dataplane.auth import H_NONCE, H_SIGNATURE, RequestAuth
from srt.dataplane.name import ACK_RESULTS, SNAPSHOT_PATH, SnapshotName
from srt.errors import DataPlaneError


class DataPlaneClient:
    """Authenticated data-plane client over one keep-alive ``aiohttp.ClientSession``.

    From ``tunables`` (:class:`srt.Tunables`): ``request_timeout`` is the seconds per attempt
    (connect + send + reply); ``send_attempts``, ``send_backoff`` and ``send_max_backoff``
    shape :meth:`send_snapshot`'s retries (delay doubles from ``send_backoff``, with ±25 %
    jitter, capped at ``send_max_backoff``); ``max_skew`` bounds the clock difference of signed
    messages and ``connections_per_host`` the keep-alive connections per receiver. ``clock``
    (seconds since the Unix epoch) is injectable for tests. Create and use it inside one event
    loop."""

    def __init__(
        self,
        secret: bytes,
        *,
        tunables: Tunables = DEFAULT_TUNABLES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._auth = RequestAuth(secret, max_skew=tunables.max_skew, clock=clock)
        self.timeout = tunables.request_timeout
        self.attempts = tunables.send_attempts
        self.backoff = tunables.send_backoff
        self.max_backoff = tunables.send_max_backoff
        self._per_host = tunables.connections_per_host
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._counts: Counter[str] = Counter()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("DataPlaneClient is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0, limit_per_host=self._per_host, keepalive_timeout=60
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def stats(self) -> dict:
        """Counters: requests, acknowledgements by kind, resends (422), retries, failures."""
        return dict(self._counts)

    # ---- one authenticated exchange -----------------------------------------------------
    async def _transmit(
        self, method: str, url: URL, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request and read the whole reply (tests override this to damage bodies)."""
        session = self._get_session()
        async with session.request(method, url, headers=headers, data=body) as resp:
            data = await resp.read()
            return resp.status, dict(resp.headers), data

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        body: bytes = b"",
        *,
        name: SnapshotName | None = None,
        content_type: str = "application/octet-stream",
    ) -> tuple[int, bytes]:
        """One signed request to ``url`` + ``path``; returns ``(status, reply body)``.

        A 2xx reply must carry a valid response signature, otherwise this raises
        ``DataPlaneError(0, "unauthenticated_reply")``; no response raises status 0."""
        full = URL(url.rstrip("/") + path)
        if not full.absolute or full.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {url!r}")
        fields = tuple(name.to_headers().values()) if name is not None else ("", "", "", "")
        headers = self._auth.sign_request(method, full.raw_path_qs, fields, body)  # type: ignore[arg-type]
        if name is not None:
            headers.update(name.to_headers())
        headers["Content-Type"] = content_type
        self._counts["requests"] += 1
        try:
            status, rheaders, data = await self._transmit(method, full, headers, body)
        except TimeoutError as e:
            raise DataPlaneError(0, "timeout", f"no reply from {url} in {self.timeout}s") from e
        except (aiohttp.ClientError, OSError) as e:
            # nothing listens on that port (TCP reset): the process behind the URL is gone, a
            # much stronger sign than a timeout (``refused``, still transient: it may restart)
            refused = isinstance(getattr(e, "os_error", e), ConnectionRefusedError)
            reason = "refused" if refused else "unreachable"
            raise DataPlaneError(0, reason, f"{url}: {type(e).__name__}: {e}") from e
        if 200 <= status < 300 and not self._auth.verify_response(
            status, headers[H_NONCE], data, rheaders.get(H_SIGNATURE)
        ):
            raise DataPlaneError(0, "unauthenticated_reply", f"{url} sent an unsigned reply")
        return status, data

    @staticmethod
    def _error(status: int, data: bytes) -> DataPlaneError:
        try:
            obj = json.loads(data)
            return DataPlaneError(status, str(obj["error"]), str(obj.get("detail", "")))
        except Exception:
            return DataPlaneError(status, f"http_{status}", data[:200].decode("utf-8", "replace"))

    # ---- snapshots ----------------------------------------------------------------------
    async def send_snapshot(
        self,
        url: str,
        name: SnapshotName,
        payload: bytes,
        *,
        attempts: int | None = None,
        path: str = SNAPSHOT_PATH,
    ) -> str:
        """POST one named snapshot; returns "merged" | "duplicate" | "overlap" | "stale"
        (see module doc). ``path``: :data:`~srt.dataplane.name.REPLICA_SNAPSHOT_PATH` for a
        replica of the parent's position."""
        tries = self.attempts if attempts is None else attempts
        delay = self.backoff
        for attempt in range(1, tries + 1):
            try:
                status, data = await self.request("POST", url, path, payload, name=name)
                if status == 200:
                    try:
                        result = json.loads(data)["result"]
                    except Exception:
                        result = None
                    if result in ACK_RESULTS:
                        self._counts[result] += 1
                        return result
                    raise DataPlaneError(0, "bad_reply", f"unexpected reply {data[:100]!r}")
                raise self._error(status, data)
            except DataPlaneError as e:
                err = e
            if err.status == 422:
                self._counts["resends"] += 1
            if not err.transient or attempt == tries:
                self._counts["failures"] += 1
                raise err
            self._counts["retries"] += 1
            await asyncio.sleep(delay * random.uniform(0.75, 1.25))
            delay = min(self.max_backoff, delay * 2)
        raise AssertionError("unreachable")

    # ---- control ------------------------------------------------------------------------
    async def post_json(self, url: str, path: str, body: dict) -> dict:
        """One authenticated JSON POST; returns the JSON reply or raises DataPlaneError."""
        data = json.dumps(body, separators=(",", ":")).encode()
        status, reply = await self.request("POST", url, path, data, content_type="application/json")
        if not 200 <= status < 300:
            raise self._error(status, reply)
        try:
            out: Any = json.loads(reply)
        except ValueError as e:
            raise DataPlaneError(status, "bad_reply", f"reply is not JSON: {e}") from e
        if not isinstance(out, dict):
            raise DataPlaneError(status, "bad_reply", "reply is not a JSON object")
        return out
