"""The agent as a process: the daemon entry point and a local multi-process cluster.

``daemon`` (the ``elf agent`` process: configuration, logical agents, signals) and
``cluster`` (``elf cluster``: a local cluster of real agent processes, used by the demo, the
tests and the benchmarks). The HTTP API is not here: the :class:`~agent.runtime.host.agent.Agent`
serves it, so it lives in :mod:`agent.runtime.ops.http_api`, below the process shell.
"""
