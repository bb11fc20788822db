"""Columnar ingest: log lines parsed in bounded chunks into Arrow tables.

Contract: :class:`~agent.ingest.tail.FileTail` cuts what it reads into chunks of whole lines
(its offset stays the resume point); :func:`~agent.ingest.columnar.parse.parse_chunk` parses
one chunk of any input format into a :class:`~agent.ingest.columnar.parse.ParsedChunk` (an
Arrow table, one row per accepted line, plus the rejected lines with the row parser's
reasons), equal line by line to the row parsers of :mod:`agent.ingest.formats`, which stay
the reference. Per-format kernels live in their own
modules (``access``, ``syslog``, ``json_lines``, ``raw``); ``lines`` turns a chunk into one Arrow
string array decoded as the row path decodes a line. ``chunk``/``rowparse``/``reader`` run a
chunk on the runtime's columnar path (the vectorized kernels when they apply, the row parser
per line otherwise). See docs/ingest.md.
"""
