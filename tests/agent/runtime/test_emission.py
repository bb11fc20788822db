"""EMIT FINAL / EMIT CHANGES emission filter (agent/runtime/results/emission.py), property-based.

A reference reader model (what the reader knows of each epoch after each poll) against the
filter, on arbitrary poll sequences; and a state machine of epochs living as a master stores
them (new tentative or final results, folds, give-ups, re-tentative after a hand-over), polled
by a FINAL and a CHANGES stream and a stream resumed from a cursor.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent.runtime.job.queries import merged_versions
from agent.runtime.results.emission import (
    Cursor,
    EmissionFilter,
    Seen,
    parse_cursor,
    shown,
)

STATES = ("final", "tentative", "partial")

seen_st = st.builds(
    Seen,
    epoch=st.integers(0, 12),
    revision=st.integers(1, 6),
    state=st.sampled_from(STATES),
)
polls_st = st.lists(st.lists(seen_st, max_size=8), max_size=10)
cursor_st = st.none() | st.builds(Cursor, st.integers(0, 12), st.integers(0, 6))


def reference(emit: str, after: Cursor | None, polls: list[list[Seen]]) -> list[list[Seen]]:
    """What a stream must emit per poll: make the reader's view of every shown epoch past
    the cursor current; without a cursor the reader starts knowing the first poll's shown
    epochs below its newest shown one."""
    known: dict[int, tuple[int, str]] = {}
    out = []
    for i, poll in enumerate(polls):
        view = {s.epoch: s for s in poll}  # a poll sees an epoch once: its last word
        if i == 0 and after is None:
            showable = [e for e, s in view.items() if shown(emit, s.state)]
            if showable:  # else nothing is known: every later shown epoch is news
                start = max(showable)
                for e, s in view.items():
                    if e < start and shown(emit, s.state):
                        known[e] = (s.revision, s.state)
        emitted = []
        for e in sorted(view):
            s = view[e]
            if not shown(emit, s.state):
                continue
            if after is not None and (e, s.revision) <= (after.epoch, after.revision):
                continue
            if known.get(e) != (s.revision, s.state):
                known[e] = (s.revision, s.state)
                emitted.append(s)
        out.append(emitted)
    return out


@settings(max_examples=300, deadline=None)
@given(emit=st.sampled_from(("final", "changes")), after=cursor_st, polls=polls_st)
def test_the_filter_matches_the_reference(
    emit: str, after: Cursor | None, polls: list[list[Seen]]
) -> None:
    filt = EmissionFilter(emit, after)
    got = [filt.offer(poll) for poll in polls]
    assert got == reference(emit, after, polls)
    flat = [s for batch in got for s in batch]
    if emit == "final":
        assert all(s.state != "tentative" for s in flat)  # never a tentative version
    for batch, poll in zip(got, polls, strict=True):
        assert all(s in poll for s in batch)  # only what was observed, oldest epoch first
        assert [s.epoch for s in batch] == sorted({s.epoch for s in batch})


def test_cursors_parse_and_print() -> None:
    assert parse_cursor("12:3") == Cursor(12, 3)
    assert str(Cursor(12, 3)) == "12:3"
    assert parse_cursor("7").epoch == 7 and parse_cursor("7").revision > 10**9
    for bad in ("", "a:1", "1:b", "-1:2", "1:-2", "1:2:3"):
        with pytest.raises(ValueError):
            parse_cursor(bad)
    with pytest.raises(ValueError):
        EmissionFilter("sometimes")


def test_final_waits_for_the_final_version_and_shows_partial_flagged() -> None:
    final, changes = EmissionFilter("final"), EmissionFilter("changes")
    polls = [
        [Seen(1, 1, "final"), Seen(2, 1, "tentative")],
        [Seen(1, 1, "final"), Seen(2, 2, "tentative"), Seen(3, 1, "tentative")],
        [Seen(2, 3, "final"), Seen(3, 2, "partial")],
        [Seen(2, 4, "final")],  # a late contribution folded: a correction
    ]
    assert [final.offer(p) for p in polls] == [
        [Seen(1, 1, "final")],
        [],
        [Seen(2, 3, "final"), Seen(3, 2, "partial")],
        [Seen(2, 4, "final")],
    ]
    assert [changes.offer(p) for p in polls] == [
        [Seen(2, 1, "tentative")],  # starts at the newest epoch; epoch 1 is taken as seen
        [Seen(2, 2, "tentative"), Seen(3, 1, "tentative")],
        [Seen(2, 3, "final"), Seen(3, 2, "partial")],
        [Seen(2, 4, "final")],
    ]


def test_the_trees_listings_merge_into_one_version_per_epoch() -> None:
    """PARTITIONS 2: an epoch shows once both trees' masters hold it; its revision is the sum
    of their versions (a new version of either part is a new revision), its state the worst."""
    a = {"epochs": [1, 2, 3], "states": [[1, 1, "final"], [2, 3, "partial"], [3, 1, "final"]]}
    b = {"epochs": [2, 3, 4], "states": [[2, 1, "final"], [3, 2, "tentative"], [4, 1, "final"]]}
    assert merged_versions([a, b]) == [Seen(2, 4, "partial"), Seen(3, 3, "tentative")]
    older_peer = {"epochs": [2, 3]}  # a listing without states: tentative, version 0
    assert merged_versions([a, older_peer]) == [Seen(2, 3, "tentative"), Seen(3, 1, "tentative")]
    assert merged_versions([]) == []


class EpochLife(RuleBasedStateMachine):
    """Epochs as a master stores them, polled by streams (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: dict[int, Seen] = {}
        self.final = EmissionFilter("final")
        self.changes = EmissionFilter("changes")
        self.views: dict[str, dict[int, Seen]] = {"final": {}, "changes": {}}
        self.sent: dict[str, list[Seen]] = {"final": [], "changes": []}
        self.first_poll: dict[int, Seen] | None = None
        self.resumed: EmissionFilter | None = None
        self.resumed_from: Cursor | None = None
        self.last_poll: list[Seen] = []
        self.pending_at_cut: set[int] = set()
        self.newest_at_cut = -1
        self.after_cut: list[Seen] = []  # what the CHANGES stream sent after the cut
        self.resumed_sent: list[Seen] = []

    @rule(tentative=st.booleans())
    def new_epoch(self, tentative: bool) -> None:
        epoch = max(self.epochs, default=-1) + 1
        self.epochs[epoch] = Seen(epoch, 1, "tentative" if tentative else "final")

    @rule(data=st.data(), state=st.sampled_from(STATES))
    def new_version(self, data: st.DataObject, state: str) -> None:
        """A fold, a give-up (partial), a repair (final), a hand-over's re-tentative."""
        if not self.epochs:
            return
        epoch = data.draw(st.sampled_from(sorted(self.epochs)))
        old = self.epochs[epoch]
        self.epochs[epoch] = Seen(epoch, old.revision + 1, state)

    @rule()
    def poll(self) -> None:
        poll = list(self.epochs.values())
        self.last_poll = poll
        if self.first_poll is None:
            self.first_poll = dict(self.epochs)
        for emit, filt in (("final", self.final), ("changes", self.changes)):
            for s in filt.offer(poll):
                self.views[emit][s.epoch] = s
                self.sent[emit].append(s)
                if emit == "changes" and self.resumed is not None:
                    self.after_cut.append(s)
        if self.resumed is not None:
            after = self.resumed_from
            assert after is not None
            for s in self.resumed.offer(poll):
                assert (s.epoch, s.revision) > (after.epoch, after.revision)
                self.resumed_sent.append(s)
            # resuming misses nothing of an epoch unsettled at the cut, nor of a newer one
            for s in self.after_cut:
                if s.epoch in self.pending_at_cut or s.epoch > self.newest_at_cut:
                    assert s in self.resumed_sent, (s, after, self.resumed_sent)
        # the stream's readers are current on every epoch they may see, once polled
        start = self._start("final")
        first = self.first_poll
        for e, s in self.epochs.items():
            # epochs from the start on, and older ones that were tentative then (not seen)
            if s.state != "tentative" and (
                e >= start or e not in first or first[e].state == "tentative"
            ):
                assert self.views["final"].get(e) == s
        start = self._start("changes")
        for e, s in self.epochs.items():
            if e >= start:
                assert self.views["changes"].get(e) == s

    @rule()
    def resume(self) -> None:
        """A reader of the CHANGES stream cut off after the last poll reconnects with the
        stream's resume cursor."""
        cursor = self.changes.resume(self.last_poll)
        if cursor is None or self.resumed is not None:
            return
        self.resumed_from = cursor
        self.resumed = EmissionFilter("changes", cursor)
        self.pending_at_cut = {s.epoch for s in self.last_poll if s.state == "tentative"}
        self.newest_at_cut = max(s.epoch for s in self.sent["changes"])

    def _start(self, emit: str) -> int:
        first = self.first_poll or {}
        shown_first = [e for e, s in first.items() if shown(emit, s.state)]
        if shown_first:
            return max(shown_first)
        # nothing shown at the first poll: every epoch after it (and its tentative ones) counts
        return min(first, default=0)

    @invariant()
    def final_never_shows_tentative(self) -> None:
        assert all(s.state != "tentative" for s in self.sent["final"])

    @invariant()
    def no_epoch_repeats_a_version(self) -> None:
        for sent in self.sent.values():
            last: dict[int, Seen] = {}
            for s in sent:
                assert last.get(s.epoch) != s
                last[s.epoch] = s


EpochLife.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_epoch_life = EpochLife.TestCase
