"""Shared reducer trees (SRT): one (or m) aggregation trees per job over the overlay.

Agents route a JOIN toward the job's id; the union of the paths is the tree and the node
closest to the id is the job master. This package forms and maintains the trees, rolls up
CBT snapshots epoch by epoch through a combining-tree barrier over an authenticated HTTP data
plane, and multicasts control from the master down the tree.
"""
