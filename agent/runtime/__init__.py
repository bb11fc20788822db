"""The agent runtime: one :class:`Agent` per host and one :class:`JobRuntime` per job.

``agent`` (the overlay node, trees, data plane, inputs and job table of one agent), ``job``
(a job's worker, forwarder and master roles over its trees), ``services`` (the narrow
protocols a job runtime is given instead of the agent), ``worker`` and ``clock`` (pure state:
records to per-epoch snapshots on event time), ``results`` (a master's stored epochs),
``offsets`` (file offsets persisted once acknowledged), ``lake_sink`` (epochs to the Parquet
lake), ``http_api`` (the user HTTP API the agent serves, given an ``AgentFacade``) and
``parallel`` (a file replayed through a worker on several cores). The runtime's timings and
bounds are :class:`agent.tunables.RuntimeTunables` (``[runtime]`` in the agent config).
"""
