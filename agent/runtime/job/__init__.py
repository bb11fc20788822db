"""One job on one agent: :class:`~agent.runtime.job.runtime.JobRuntime`, a facade over its parts.

The epoch pipeline (records in, closed epochs out, barriers and senders), the job's trees and
control multicasts, runtime changes, results serving and status. Fault tolerance is not here:
the runtime holds :mod:`agent.runtime.recovery`'s facade and calls it at a few named points.
"""
