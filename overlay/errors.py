"""Exceptions raised by the overlay's public API. All derive from :class:`OverlayError`.

So do the overlay's other exceptions, defined beside the code that raises them:
:class:`overlay.wire.WireError` (a rejected datagram, never seen outside the protocol) and
:class:`overlay.sim.SimulationStalled`. ``except OverlayError`` therefore catches anything
the overlay raises on purpose.
"""

from __future__ import annotations


class OverlayError(Exception):
    """Base class of every error the overlay raises to its callers."""


class MessageTooLarge(OverlayError):
    """The encoded datagram would exceed the size limit; nothing was sent (never truncated).
    Bulk data belongs on the HTTP data plane, not on the overlay's UDP control channel."""


class RequestTimeout(OverlayError):
    """No reply arrived within the timeout after all retries."""


class RemoteError(OverlayError):
    """The peer answered with an error: unknown RPC or kind, or its handler raised."""


class RouteError(OverlayError):
    """A routed message could not be delivered (hop limit, dropped, or no report in time)."""


class NotRunning(OverlayError):
    """The node has not been started or has already stopped."""
