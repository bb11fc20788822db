"""Jobs as data: what a job is and how it changes, independent of where it runs.

``job`` (the :class:`Job` base class job authors subclass, its :class:`JobContext` and the
registry of job classes by name), ``spec`` (the validated, versioned :class:`JobSpec`),
``schedule`` (epoch lengths over epoch indices), ``table`` (the cluster-wide job table every
agent keeps), ``changes`` (validated runtime changes) and ``ql_job`` (an ELF QL query as a job
class). Nothing here does I/O or knows about trees, inputs or the runtime.
"""
