"""The agent as a process: HTTP API, daemon entry point and a local multi-process cluster.

``http_api`` (the user API over aiohttp, given an :class:`AgentFacade`), ``daemon`` (the
``elf agent`` process: configuration, agents, signals) and ``cluster`` (``elf cluster``: a
local cluster of real agent processes, used by the demo and the tests).
"""
