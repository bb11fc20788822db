"""The agent runtime: one :class:`Agent` per host and one :class:`JobRuntime` per job.

Grouped by concept, lowest layer first (``tests/test_repository.py`` enforces the order):

* ``services``, ``record_thread`` — what a job runtime is given: narrow protocols of its
  agent, and the one thread per-record work runs on.
* ``epochs/`` — pure per-epoch state: worker, clock, window panes, CPU budget.
* ``results/`` — what a master holds and how good it is: store, spill, quality, previews, lake.
* ``recovery/`` — all fault tolerance behind one facade and its ``host`` protocols.
* ``job/`` — :class:`JobRuntime` as a facade over its parts; ``local/`` — ``elf run``.
* ``ops/`` — HTTP API, operator API, OpenAPI, metrics, logs, dashboard.
* ``host/`` — :class:`Agent` as a facade: job table, ticks, peer API, ports.

The runtime's timings and bounds are :class:`agent.tunables.RuntimeTunables` (``[runtime]`` in
the agent config).
"""
