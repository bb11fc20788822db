"""SRT control plane: reducer trees over the overlay, their repair, multicast and queries.

``manager`` (:class:`TreeManager`: JOIN routes become trees, heartbeats repair them),
``types`` (public data types and errors), ``wire`` (the allow-listed tree messages),
``multicast`` (control from a root down its tree, confirmations back up), ``query``
(cross-job queries answered by another job's root) and ``balance`` (tree ids spread over
agents). The trees share only ids (``srt.ids``) with the data plane.
"""
