"""Exceptions of the SRT package: :class:`SRTError` is the root of every error ``srt`` raises.

Every srt exception derives from :class:`SRTError` (``except srt.SRTError`` catches anything
the package raises on purpose) and keeps its other, more specific bases (``ValueError``,
``TimeoutError``, ...) so ``except`` clauses written against those still catch it. The tree
layer's errors (:class:`srt.trees.types.TreeError` and its subclasses) live next to the tree
types and derive from :class:`SRTError` too.

Data plane (srt.dataplane, srt.dataplane.upstream, srt.dataplane.barrier):
:class:`DataPlaneError` is what a sender sees when a snapshot or control call could not be
delivered (after the client's retries); ``status`` is the HTTP status (0 when no response came
back) and ``reason`` the server's machine-readable rejection reason (or the local failure).
Handlers registered on a :class:`~srt.dataplane.DataPlaneServer` raise :class:`Reject` (or
:class:`RetryLater`) to answer with a specific status instead of a 500; :class:`Incompatible`
(409) and ``srt.dataplane.barrier.EpochTooFarAhead`` (503) are such rejections, so wherever a
barrier refuses a peer's snapshot the server answers the documented code.
"""

from __future__ import annotations


class SRTError(Exception):
    """Root of every exception raised by the ``srt`` package."""


class DataPlaneError(SRTError):
    """A data-plane request failed; ``status`` 0 means no HTTP response (connection/timeout)."""

    def __init__(self, status: int, reason: str, detail: str = "") -> None:
        super().__init__(f"{status} {reason}: {detail}" if detail else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.detail = detail

    @property
    def transient(self) -> bool:
        """True if trying again later may succeed (no response, 408/422/425/429, 5xx)."""
        return self.status in (0, 408, 422, 425, 429) or self.status >= 500


class Reject(SRTError):
    """Raised by a server handler: answer ``status`` with ``{"error": reason, "detail": ...}``."""

    def __init__(self, status: int, reason: str, detail: str = "") -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"a rejection needs a 4xx/5xx status, got {status}")
        super().__init__(f"{status} {reason}: {detail}" if detail else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.detail = detail


class RetryLater(Reject):
    """A 503 rejection the sender retries (e.g. the receiver does not know the tree yet)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(503, reason, detail)


class Incompatible(Reject, ValueError):
    """A snapshot whose aggregator, aggregator parameters, hash function or keys do not match
    what its (job, tree) expects for that epoch: answered 409 ``incompatible`` before it
    touches any state (a ``ValueError`` too, as ``Snapshot.merge`` raises for a mismatch)."""

    def __init__(self, detail: str) -> None:
        super().__init__(409, "incompatible", detail)


class SnapshotNameError(SRTError, ValueError):
    """A snapshot name (or the headers carrying it) is malformed."""
