"""``elf run``: a query over a finished file on this machine, without an overlay.

``oneshot`` (the columnar one-shot path) and ``parallel`` (a file through a worker on several
cores). They reuse :mod:`agent.runtime.epochs`' pure state and nothing of the agent.
"""
