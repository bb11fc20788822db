"""Ingest: log lines in, validated records out, bad lines counted and quarantined.

``base`` (the :class:`Input` and :class:`Resumable` protocols every input implements),
``tail`` (a followed file), ``stream`` (stdin and the HTTP ingest queue), ``inputs`` (an input
built from its configuration), ``formats`` and ``records`` (parsers and validation),
``deadletter`` (sampled bad lines), ``fastpath`` and ``projection`` (lines skipped or parsed
in part because no job reads the rest). Ingest never imports the runtime or the server.
"""
