"""SRT control plane: reducer trees over the overlay, their repair, multicast and queries.

``manager`` (:class:`TreeManager`, the facade: JOIN routes become trees, heartbeats repair
them), its parts ``table`` (the trees and their state changes), ``formation`` (JOINs),
``maintenance`` (heartbeats, timeouts), ``handoff`` (leaving, take-over), ``multicast``
(control from a root down its tree, confirmations back up) and ``query`` (cross-job queries
answered by another job's root), which see the manager only through the Protocols in
``host``; ``state`` (the per-tree record), ``types`` (public data types and errors), ``wire``
(the allow-listed tree messages) and ``balance`` (tree ids spread over agents). The trees
share only ids (``srt.ids``) with the data plane.
"""
