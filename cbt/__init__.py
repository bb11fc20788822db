"""The compressed buffer tree (CBT): the in-memory group-by-aggregate store every agent
pre-reduces into.

Parsed key-value pairs become partial aggregation objects (PAOs) that are inserted into an
(a,b)-tree whose nodes carry zstandard-compressed, hash-ordered buffers. ``flush`` returns the
whole aggregate so far as a :class:`Snapshot` (mergeable, invertible for count/sum/avg, with a
checksummed wire format); ``empty`` starts a new batch. This package knows nothing of jobs,
the overlay or the network.
"""
