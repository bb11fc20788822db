"""The operator's and user's view of an agent: HTTP API, metrics, logs, OpenAPI, dashboard.

``http_api`` (the user API over an ``AgentFacade``), ``ops_api`` (``/metrics``, health,
OpenAPI, request validation), ``openapi`` (+ ``openapi.json``), ``metrics``, ``logs``,
``looplag``, ``membership_api`` (retire and leave) and ``dashboard/``. They read plain
summaries through narrow protocols, never a job runtime or the overlay whole.
"""
