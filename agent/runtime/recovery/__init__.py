"""All of a job's fault tolerance, apart from the happy path (docs/fault-tolerance.md).

Which origins an epoch expects and which are absent, left or retired; the commit; repair by
pull and late folds; the master's standby and hand-over; retained epochs, hot checkpoints,
permanent loss, durable read positions and fencing terms. The job runtime holds one facade
and speaks to these parts only through it; the parts speak to the job only through the
protocols of this package's ``host`` module, never by importing the job.
"""
