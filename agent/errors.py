"""Errors the agent runtime raises toward its users (HTTP API, CLI, job code).

Contract: each class maps to one HTTP status (``status``) so the API layer never guesses; the
message always names what was wrong (the field, the job, the input) so a 4xx body is useful on
its own.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class; ``status`` is the HTTP status the API answers with."""

    status = 500


class BadRequest(AgentError, ValueError):
    """The caller sent something invalid (a job spec field, a query body, an epoch)."""

    status = 400


class Unauthorized(AgentError):
    """Missing or wrong API token."""

    status = 401


class NotFound(AgentError, LookupError):
    """No such job, input or epoch result."""

    status = 404


class Conflict(AgentError):
    """The request clashes with the current state (e.g. a job of that name already runs)."""

    status = 409


class Unavailable(AgentError):
    """The answer needs a remote agent (a job master) that did not reply in time."""

    status = 503


class ConfigError(AgentError, ValueError):
    """An agent configuration value (file, environment or flag) is invalid; names its key."""

    status = 400
