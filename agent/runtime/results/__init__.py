"""What a job's master holds and how good it is.

The stored epoch results and their bounds (``store``, ``spill``), a tentative result's quality
(``quality``, ``topk_accuracy``), the tentative previews of held-up epochs (``previews``), and
the rollup lake seen from the master: epochs written (``lake_sink``) and read back
(``lake_history``). Results know nothing of how missing shares are repaired: that is
:mod:`agent.runtime.recovery`, one layer up.
"""
