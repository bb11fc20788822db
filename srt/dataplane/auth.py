"""HMAC request/response authentication for the SRT HTTP data plane.

Mirrors the overlay's datagram authentication (``overlay/wire.py``) for HTTP: every request
carries a timestamp (milliseconds since the Unix epoch), a random nonce, the SHA-256 of its
body and an HMAC-SHA256 with the cluster secret over the canonical string::

    ELF-SRT-1 \\n METHOD \\n raw path (with query) \\n job \\n tree \\n epoch \\n sender
              \\n timestamp \\n nonce \\n body sha-256 (hex)

(joined by ``\\n``; the four name fields are the raw ``X-Elf-Job/Tree/Epoch/Sender`` header
values, empty for requests that carry no snapshot name). The receiver checks, in this order:
the MAC (constant-time), the timestamp against ``max_skew``, then - once the body is read -
that the body matches the signed digest, and only then the nonce against a replay cache that
remembers it for ``2 * max_skew`` of local time (every moment its timestamp could still pass).
Checking the body digest before the nonce means a body damaged in transit is answered 422
(resend) without burning the nonce, while a replayed request is always refused.

Responses are signed too: ``X-Elf-Signature`` = HMAC over ``ELF-SRT-1-R \\n status \\n request
nonce \\n body sha-256``, so a sender never drops a snapshot on a forged acknowledgement.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable, Mapping

from overlay.wire import ReplayCache
from srt.errors import SRTError

MIN_SECRET = 16
H_TIMESTAMP = "X-Elf-Timestamp"
H_NONCE = "X-Elf-Nonce"
H_DIGEST = "X-Elf-Content-Sha256"
H_SIGNATURE = "X-Elf-Signature"

_NONCE_RE = re.compile(r"[0-9a-f]{32}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_TS_RE = re.compile(r"[0-9]{1,16}")


class AuthError(SRTError):
    """A request failed authentication; ``reason`` names the rejection counter."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def body_digest(body: bytes) -> str:
    """Hex SHA-256 of a request or response body."""
    return hashlib.sha256(body).hexdigest()


class RequestAuth:
    """Signs and verifies data-plane requests and responses with one cluster secret.

    ``clock`` returns seconds since the Unix epoch; ``max_skew`` bounds the accepted clock
    difference between sender and receiver (both directions)."""

    def __init__(
        self,
        secret: bytes,
        *,
        max_skew: float = 30.0,
        clock: Callable[[], float] = time.time,
        nonce: Callable[[], bytes] | None = None,
    ) -> None:
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET:
            raise ValueError(f"the cluster secret must be at least {MIN_SECRET} bytes")
        if max_skew <= 0:
            raise ValueError("max_skew must be positive")
        self._secret = secret
        self.max_skew = max_skew
        self._clock = clock
        self._nonce = nonce or (lambda: os.urandom(16))
        self.replays = ReplayCache(2 * max_skew)

    def _mac(self, parts: tuple[str, ...]) -> str:
        data = "\n".join(parts).encode("utf-8", "surrogateescape")
        return hmac.new(self._secret, data, hashlib.sha256).hexdigest()

    def sign_request(
        self, method: str, path: str, fields: tuple[str, str, str, str], body: bytes
    ) -> dict[str, str]:
        """The authentication headers for one request (a fresh nonce every call)."""
        ts = str(int(self._clock() * 1000))
        nonce = self._nonce().hex()
        digest = body_digest(body)
        mac = self._mac(("ELF-SRT-1", method.upper(), path, *fields, ts, nonce, digest))
        return {H_TIMESTAMP: ts, H_NONCE: nonce, H_DIGEST: digest, H_SIGNATURE: mac}

    def verify_headers(
        self,
        method: str,
        path: str,
        fields: tuple[str, str, str, str],
        headers: Mapping[str, str],
    ) -> tuple[str, str]:
        """Check MAC and timestamp; returns ``(nonce, signed body digest)``.

        Raises :class:`AuthError` (``unauthenticated``, ``bad_mac``, ``stale_timestamp``). The
        caller must then check the body against the digest and call :meth:`check_replay`."""
        ts, nonce = headers.get(H_TIMESTAMP), headers.get(H_NONCE)
        digest, mac = headers.get(H_DIGEST), headers.get(H_SIGNATURE)
        if ts is None or nonce is None or digest is None or mac is None:
            raise AuthError("unauthenticated", "missing X-Elf-Timestamp/Nonce/Signature headers")
        if not (
            _TS_RE.fullmatch(ts)
            and _NONCE_RE.fullmatch(nonce)
            and _HEX64_RE.fullmatch(digest)
            and _HEX64_RE.fullmatch(mac)
        ):
            raise AuthError("unauthenticated", "malformed authentication headers")
        expected = self._mac(("ELF-SRT-1", method.upper(), path, *fields, ts, nonce, digest))
        if not hmac.compare_digest(expected, mac):
            raise AuthError("bad_mac", "signature does not match (wrong secret or altered)")
        skew = self._clock() - int(ts) / 1000.0
        if abs(skew) > self.max_skew:
            raise AuthError("stale_timestamp", f"clock skew {skew:.1f}s > {self.max_skew}s")
        return nonce, digest

    def check_replay(self, nonce: str) -> None:
        """Remember ``nonce``; raises :class:`AuthError` ``replay`` if it was seen already."""
        if not self.replays.check_and_add(nonce, time.monotonic()):
            raise AuthError("replay", "this request was already received")

    def sign_response(self, status: int, nonce: str, body: bytes) -> str:
        return self._mac(("ELF-SRT-1-R", str(status), nonce, body_digest(body)))

    def verify_response(self, status: int, nonce: str, body: bytes, signature: str | None) -> bool:
        if signature is None:
            return False
        return hmac.compare_digest(self.sign_response(status, nonce, body), signature)
