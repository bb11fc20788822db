"""The root of the agent's errors, and the errors it answers its users with (HTTP API, CLI).

Contract: every error the agent package raises on purpose derives from :class:`AgentError`, so
``except AgentError`` means "an error the agent anticipated" (a bug is anything else). Two
kinds:

* :class:`StatusError` and its subclasses are *answers*: each maps to one HTTP status
  (``status``) so the API layer never guesses, and the message always names what was wrong
  (the field, the job, the input) so a 4xx body is useful on its own. The HTTP API, and the
  agent answering a remote agent, map exactly these to their status.
* Domain errors — :class:`~agent.ingest.records.RecordError` (a bad input line),
  :class:`~agent.jobs.spec.JobSpecError` (an invalid job spec),
  :class:`~agent.jobs.job.UnknownJobClass`, :class:`~agent.ql.errors.QLError` (a bad query) —
  carry no status: the layer that catches one decides what it means (a quarantined line, a
  ``BadRequest`` at submission, a refused change). One that escapes to the API is a bug and is
  answered as an internal error (500), like any other exception.

Each class also keeps a built-in base (``ValueError``, ``LookupError``) so callers that catch
those catch it too. This module imports nothing from the project: everything may import it.
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of the errors the agent raises on purpose (see module docstring)."""


class StatusError(AgentError):
    """An error that is an answer to a request; ``status`` is the HTTP status it maps to.

    ``field`` (optional) names the request field at fault (a job-spec or change field such as
    ``epoch_seconds`` or ``params.min_length``); the HTTP API sends it as ``"field"`` next to
    ``"error"`` so a client need not parse the message."""

    status = 500

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class BadRequest(StatusError, ValueError):
    """The caller sent something invalid (a job spec field, a query body, an epoch)."""

    status = 400


class Unauthorized(StatusError):
    """Missing or wrong API token."""

    status = 401


class NotFound(StatusError, LookupError):
    """No such job, input or epoch result."""

    status = 404


class Conflict(StatusError):
    """The request clashes with the current state (e.g. a job of that name already runs)."""

    status = 409


class Gone(StatusError, LookupError):
    """The answer existed but a documented bound dropped it (e.g. an epoch past the master's
    epoch limit per tree); the message names the bound and where else to look."""

    status = 410


class TooManyRequests(StatusError):
    """A bounded resource is in use up to its bound (e.g. the concurrent taps of a job); the
    message names the bound. Retry later."""

    status = 429


class Unavailable(StatusError):
    """The answer needs a remote agent (a job master) that did not reply in time."""

    status = 503


class ConfigError(StatusError, ValueError):
    """An agent configuration value (file, environment or flag) is invalid; names its key."""

    status = 400
