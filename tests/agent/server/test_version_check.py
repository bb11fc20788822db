"""The every-version reader's judge and recorder, without a cluster (``agent.server.
version_check``, ``agent.server.version_watch``): synthetic versions against hand-computed
verdicts, and a real lake written by :class:`spark_sink.lake.Lake` read by the watch. A judge
that misjudges would hide exactly the versions it exists to find."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from agent.client import ApiError
from agent.server.chaos import JobPlan
from agent.server.version_check import (
    EXACT,
    FLAG_DISHONEST,
    FLAGGED_OK,
    UNFLAGGED_WRONG,
    UNJUDGED,
    Fault,
    OriginReference,
    Seen,
    figures,
    judge,
    origin_name,
    rows_key,
    two_row_sets,
)
from agent.server.version_watch import VersionWatch
from spark_sink.lake import Lake, Rollup

WC = JobPlan("wc", "wordcount", start_epoch=100)
A, B, C = "a1", "b2", "c3"
# per origin, epoch 100: keys and lines (a: 2 lines, b: 2 lines, c: 1 line - 5 in all)
REF = OriginReference(
    WC,
    counts={
        A: {100: Counter({"x": 2, "y": 1}), 101: Counter({"x": 1})},
        B: {100: Counter({"x": 1, "z": 3}), 101: Counter({"y": 1})},
        C: {100: Counter({"y": 2}), 101: Counter()},
    },
    lines={A: {100: 2, 101: 1}, B: {100: 2, 101: 1}, C: {100: 1}},
    epochs=range(100, 102),
    lost=frozenset({B}),
)
FULL = [["x", 3], ["y", 3], ["z", 3]]
WITHOUT_B = [["x", 2], ["y", 3]]


def seen(rows: list[Any], *, epoch: int = 100, version: int = 1, term: int = 0,
         tentative: bool = False, partial: bool = False, coverage: float | None = 1.0,
         lacking: tuple[str, ...] = (), source: str = "api", first: float = 10.0,
         last: float = 10.0, tree: int | None = None, trees: int = 1) -> Seen:  # fmt: skip
    return Seen(source, "wc", epoch, version, term, tentative, partial, True, coverage,
                lacking, rows, rows_key(rows), first, last, "here", tree, trees)  # fmt: skip


def test_exact_and_unflagged_wrong() -> None:
    assert judge(REF, seen(FULL)).verdict == EXACT
    assert judge(REF, seen(list(reversed(FULL)))).verdict == EXACT  # order-free
    short = judge(REF, seen(WITHOUT_B))
    assert short.verdict == UNFLAGGED_WRONG
    assert short.short_origins == [B]  # b's whole share: x 1, z 3
    assert short.missing == {"z": 3, "x": 1} and short.extra == {}
    assert short.short_share == round(4 / 9, 4)
    extra = judge(REF, seen([*FULL[:2], ["z", 4]]))
    assert extra.verdict == UNFLAGGED_WRONG and extra.extra == {"z": 1}
    # short of a and c together (x 2, y 3): a pair found; short of part of a: "~"
    assert judge(REF, seen([["x", 1], ["z", 3]])).short_origins == [A, C]
    assert judge(REF, seen([["x", 2], ["y", 3], ["z", 3]])).short_origins == ["~"]
    # a final result that is not complete (a tree missing) is flagged, not final
    incomplete = seen(WITHOUT_B)
    incomplete.complete = False
    assert judge(REF, incomplete).verdict != UNFLAGGED_WRONG


def test_flagged_versions_must_name_what_they_lack_and_say_their_coverage() -> None:
    # lacking b, rows without b, coverage 3/5 (b wrote 2 of 5 lines): honest
    ok = judge(REF, seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=0.6))
    assert ok.verdict == FLAGGED_OK and ok.coverage_truth == 0.6
    # part of b already in: still between "the others" and "everything"
    assert judge(REF, seen([["x", 3], ["y", 3], ["z", 1]], tentative=True, lacking=(B,),
                           coverage=0.6)).verdict == FLAGGED_OK  # fmt: skip
    # the lacking set is wrong: it names c, but b's records are the ones missing
    wrong_set = judge(REF, seen(WITHOUT_B, tentative=True, lacking=(C,), coverage=0.8))
    assert wrong_set.verdict == FLAG_DISHONEST
    assert wrong_set.missing == {"z": 3, "x": 1} and wrong_set.short_origins == [B]
    # nothing named at all, rows short: dishonest
    assert judge(REF, seen(WITHOUT_B, tentative=True, lacking=())).verdict == FLAG_DISHONEST
    # coverage: within 5 points of 0.6 is fine, beyond is not
    assert judge(REF, seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=0.64)).verdict == (
        FLAGGED_OK
    )
    off = judge(REF, seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=1.0))
    assert off.verdict == FLAG_DISHONEST and off.kind == "coverage_over"
    under = judge(REF, seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=0.5))
    assert under.verdict == FLAG_DISHONEST and under.kind == "coverage_under"
    # an epoch without lines: any coverage is true (0 of 0)
    empty = OriginReference(WC, {A: {100: Counter()}}, {A: {}}, range(100, 101))
    assert judge(empty, seen([], tentative=True, lacking=(A,), coverage=0.0)).verdict == (
        FLAGGED_OK
    )
    # counts above everything written: dishonest even when flagged
    assert judge(
        REF, seen([["x", 9]], tentative=True, lacking=(A, B, C), coverage=0.0)
    ).verdict == (FLAG_DISHONEST)
    # partial (not tentative) is a flag too; padded ids name the same origin
    assert judge(REF, seen(WITHOUT_B, partial=True, lacking=("00" + B,), coverage=0.6)).verdict == (
        FLAGGED_OK
    )
    # "?": origins the master cannot name: the counts must only not exceed the reference
    assert judge(REF, seen([["x", 1]], tentative=True, lacking=("?",), coverage=0.1)).verdict == (
        FLAGGED_OK
    )
    assert judge(REF, seen([["x", 4]], tentative=True, lacking=("?",))).verdict == FLAG_DISHONEST


def test_a_top_k_is_judged_on_its_own_keys() -> None:
    top = OriginReference(JobPlan("top", "wordcount", 100, top_k=2), REF.counts, REF.lines,
                          REF.epochs, REF.lost)  # fmt: skip
    assert judge(top, seen([["x", 3], ["y", 3]])).verdict == EXACT  # a tie at the k-th: z or y
    short = judge(top, seen([["x", 2], ["y", 3]]))  # x is short of b's 1, b's z left out
    assert short.verdict == UNFLAGGED_WRONG and short.missing == {"x": 1}
    assert short.short_origins == [B] and short.short_share == round(1 / 6, 4)
    assert judge(top, seen([["x", 2], ["y", 3]], tentative=True, lacking=(B,),
                           coverage=0.6)).verdict == FLAGGED_OK  # fmt: skip


def test_unjudged_outside_the_window_and_for_one_tree_of_several() -> None:
    assert judge(REF, seen(FULL, epoch=99)).verdict == UNJUDGED
    assert judge(REF, seen(FULL, epoch=102)).verdict == UNJUDGED
    assert judge(REF, seen(FULL, source="lake", tree=0, trees=2)).verdict == UNJUDGED
    assert judge(REF, seen([["x"]])).verdict == UNJUDGED  # rows that do not parse


def test_two_row_sets_for_one_term_and_version() -> None:
    one = seen(FULL, source="lake", tree=0)
    other = seen(WITHOUT_B, source="lake", tree=0)
    assert two_row_sets([one, other])["count"] == 1
    assert two_row_sets([one, seen(WITHOUT_B, source="lake", tree=0, term=1)])["count"] == 0
    assert two_row_sets([one, seen(WITHOUT_B, source="lake", tree=0, version=2)])["count"] == 0
    api = two_row_sets([seen(FULL), seen(WITHOUT_B)])
    assert api["count"] == 0 and api["api_count"] == 1  # reported, not a lake violation


def test_figures_durations_and_fault_timings() -> None:
    versions = [
        seen(FULL, first=100.1, last=100.2),
        # b crashed at 100.3: a version naming it at 100.7, an unflagged short one seen 2.5 s
        seen(WITHOUT_B, version=2, tentative=True, lacking=(B,), coverage=0.6, first=100.7,
             last=100.9),
        seen(WITHOUT_B, version=3, first=101.0, last=103.5),
        seen(WITHOUT_B, version=3, source="lake", tree=0, first=101.1, last=102.0),
        # b back at 101.5; epoch 100 final and exact at 101.75, epoch 101 at 101.9
        seen(FULL, version=4, first=101.75, last=104.0),
        seen([["x", 1], ["y", 1]], epoch=101, first=101.9, last=104.0),
        # before the crash, naming b with a coverage off by 30 points
        seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=0.9, first=100.0, last=100.1),
    ]  # fmt: skip
    faults = [Fault("kill", B, 100.3), Fault("restart", B, 101.5)]
    figs = figures(versions, {"wc": REF}, faults)
    wrong = figs["visible_unflagged_wrong"]
    assert (wrong["count"], wrong["api"], wrong["lake"], wrong["max_visible_s"]) == (2, 1, 1, 2.5)
    assert wrong["examples"][0]["short_origins"] == [B]
    assert wrong["epochs"] == [("wc", 100)]
    dishonest = figs["visible_flag_dishonest"]
    assert dishonest["count"] == 1 and dishonest["by_kind"] == {"coverage_over": 1}  # 0.9
    assert figs["killed_for_good_unflagged_undercounted"]["count"] == 2  # b is lost in REF
    assert figs["two_row_sets"]["count"] == 0
    assert figs["violations"] == 3
    (crash,) = figs["crash_to_first_flagged_s"]
    assert crash["first_flagged_s"] == 0.4 and crash["per_epoch"] == {"wc:100": 0.4}
    (back,) = figs["restart_to_final_exact_s"]
    assert back["missed_epochs"] == {"wc": [100, 101]}
    assert back["final_exact_s"] == 0.4  # epoch 101, 0.4 s after the restart
    assert figs["versions_seen"]["api"][EXACT] == 3
    # an epoch never final and exact after the restart: None
    figs = figures(versions[:4], {"wc": REF}, faults)
    assert figs["restart_to_final_exact_s"][0]["final_exact_s"] is None


def test_reference_from_files_counts_per_origin_and_closes_the_window(tmp_path: Path) -> None:
    files = {}
    for name, lines in ((A, [(100.1, "X Y"), (100.5, "X"), (101.2, "Z")]), (B, [(100.9, "Y")])):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"ts": t, "line": w}) + "\n" for t, w in lines))
        files[name] = path
    with files[B].open("a") as f:
        f.write('{"ts": 102.5, "li')  # a torn last line is not a record
    ref = OriginReference.from_files(WC, files, lost=["0" + B])
    assert ref.full(100) == Counter({"x": 2, "y": 2})
    assert ref.lines == {A: {100: 2, 101: 1}, B: {100: 1}}
    assert ref.epochs == range(100, 101)  # the newest line's epoch (101) may be cut short
    assert ref.lost == {B}
    assert ref.coverage([B], 100) == 2 / 3
    # a graceful leave declared from epoch 101 on: a's lines of 101 are not expected
    gone = OriginReference.from_files(WC, files, left={A: 101})
    assert gone.counts[A] == {100: Counter({"x": 2, "y": 1})} and gone.lines[A] == {100: 2}
    assert origin_name("00ab") == "ab" and origin_name("?") == "?"


class FakeClient:
    """Answers like the results API: the newest epoch, or one epoch; 404 beyond."""

    url = "http://fake"

    def __init__(self, answers: dict[int, dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[int | None] = []

    def results(self, job: str, epoch: int | None = None) -> dict[str, Any]:
        self.asked.append(epoch)
        e = max(self.answers) if epoch is None else epoch
        if e not in self.answers:
            raise ApiError(404, f"job {job!r} has no result for epoch {e}")
        return {"epoch": e, **self.answers[e]}


def test_the_watch_reads_every_lake_version_once_and_every_distinct_answer(
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    base = Rollup("wc", 0, 1, 100, 1.0, [("x", 2), ("y", 3)], tentative=True, coverage=0.6,
                  lacking=["b2"])  # fmt: skip
    v1 = lake.write(base)
    client = FakeClient({
        100: {"version": 1, "tentative": True, "coverage": 0.6, "lacking": ["b2"],
              "rows": WITHOUT_B},
        101: {"version": 1, "tentative": False, "coverage": 1.0, "lacking": [], "rows": []},
    })  # fmt: skip
    watch = VersionWatch(lambda: [client], [tmp_path / "lake"], {"wc": 100})  # type: ignore[list-item]
    watch.tick()
    watch.tick()
    assert watch.stats()["files_read"] == 1  # read once, listed twice
    # a final v2 (a new file), and v1 rewritten in place with other rows (a broken promise),
    # and a colleague's term segment in a name
    lake.write(Rollup("wc", 0, 1, 100, 1.0, [("x", 3), ("y", 3), ("z", 3)], version=2))
    table = pq.read_table(v1)
    pq.write_table(table.slice(0, 1), v1)
    os.utime(v1, ns=(1, os.stat(v1).st_mtime_ns + 1))
    termed = v1.replace("-v1.parquet", "-t2-v1.parquet")
    pq.write_table(table, termed)
    client.answers[100] = {"version": 2, "tentative": False, "coverage": 1.0, "lacking": [],
                           "rows": FULL}  # fmt: skip
    watch.tick()
    got = watch.seen()
    lake_seen = sorted((v.term, v.version, len(v.rows)) for v in got if v.source == "lake")
    assert lake_seen == [(0, 1, 1), (0, 1, 2), (0, 2, 3), (2, 1, 2)]
    assert next(v for v in got if v.term == 2).lacking == ("b2",)
    api_seen = sorted((v.epoch, v.version, v.tentative) for v in got if v.source == "api")
    assert api_seen == [(100, 1, True), (100, 2, False), (101, 1, False)]
    assert two_row_sets(got)["count"] == 1
    # the current lake version (the highest (term, version)) is the one still visible
    watch.tick()
    current = max((v for v in watch.seen() if v.source == "lake"), key=lambda v: v.last_seen)
    assert (current.term, current.version) == (2, 1)


def test_an_understated_coverage_is_reported_not_a_violation() -> None:
    """Weighing a lacking origin by its recent rate understates coverage where its host died
    (it logs nothing more): conservative, reported apart; an overstatement is a violation."""
    versions = [
        seen(WITHOUT_B, tentative=True, lacking=(B,), coverage=0.1, first=100.0, last=100.1),
    ]
    figs = figures(versions, {"wc": REF}, [])
    assert figs["visible_coverage_understated"]["count"] == 1
    assert figs["visible_flag_dishonest"]["count"] == 0 and figs["violations"] == 0
