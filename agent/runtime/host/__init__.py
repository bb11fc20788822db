"""The agent process's runtime: :class:`~agent.runtime.host.agent.Agent`, a facade that wires
the overlay node, trees, data plane, inputs, job table and the jobs of one agent.

Besides the agent: ``admission`` (a submitted spec dry-run), ``table_file`` (the job table on
disk), ``heap`` (freed memory back to the OS), ``cpu_limits`` (the agent's own CPU cap).
"""
