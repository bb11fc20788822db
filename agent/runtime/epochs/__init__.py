"""Pure per-epoch state of one job on one agent: records to per-epoch snapshots.

``worker`` (records → ``Job.map`` → per-epoch CBTs, on the record thread), ``clock`` (event-time
epochs, watermark, lateness, idle advance), ``window_panes`` (whether a snapshot holds an
agent's whole share of a window) and ``cpu_budget`` (a job's processing CPU over a sliding
window). Nothing here does I/O or touches the event loop; the layers above drive it.
"""
