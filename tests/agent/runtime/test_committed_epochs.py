"""CommittedEpochs (``agent.runtime.recovery.committed_epochs``) against a reference model: a
contribution for an epoch is a duplicate of the committed version exactly when some commit
heard reached the epoch and no commit heard named one of its origins held back at or before
it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.recovery.committed_epochs import CommittedEpochs

TREE = 7
origin_ids = st.integers(min_value=1, max_value=6)
commits = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=30),
        st.dictionaries(origin_ids, st.integers(min_value=0, max_value=30), max_size=3),
    ),
    max_size=6,
)


@given(commits, st.integers(min_value=0, max_value=35), st.sets(origin_ids, max_size=3))
def test_covers_matches_the_model(heard: list, epoch: int, origins: set[int]) -> None:
    c = CommittedEpochs()
    for watermark, held in heard:
        c.hear(TREE, watermark, {format(o, "x"): e for o, e in held.items()})
    top = max((w for w, _ in heard), default=-1)
    held_back = {o for _, held in heard for o, first in held.items() if first <= epoch}
    want = bool(origins) and epoch <= top and not (origins & held_back)
    assert c.covers(TREE, epoch, origins) is want
    assert c.covers(TREE + 1, epoch, origins) is False  # another tree heard nothing


def test_a_hand_over_carries_what_was_heard() -> None:
    """A predecessor's export heard by the new master answers the same."""
    old, new = CommittedEpochs(), CommittedEpochs()
    assert old.export(TREE) is None
    old.hear(TREE, 12, {"3": 9})
    exported = old.export(TREE)
    assert exported is not None
    new.hear(TREE, exported["epoch"], exported["held"])
    assert new.watermark(TREE) == 12
    assert new.covers(TREE, 8, {1, 3}) and not new.covers(TREE, 9, {1, 3})
    assert new.covers(TREE, 12, {1}) and not new.covers(TREE, 13, {1})


def test_malformed_commits_are_ignored() -> None:
    c = CommittedEpochs()
    for epoch, held in [(-1, None), ("5", None), (None, {"x": 1}), (4, {"zz": 2, "2": "3"})]:
        c.hear(TREE, epoch, held)
    assert c.watermark(TREE) == 4
    assert c.covers(TREE, 4, {2})  # the malformed held entry named no origin
