"""Judging every version a reader saw (issue "Final means final"), against a per-origin count.

Contract. The chaos harness's end-of-run :func:`agent.server.chaos.check` judges where results
converged; :class:`agent.server.version_watch.VersionWatch` records every version a reader
could see *during* the run (:class:`Seen`: from the results API or from a lake file, with the
first and last time it was seen). This module judges each of them:

* :class:`OriginReference` is the independent count: per origin (an agent: its own input
  file; named by its node id in hex, as results name lacking origins) and per epoch, a
  Counter of the plan's keys and the number of lines, for the epochs the harness judges
  (:func:`agent.server.chaos.expected_epochs`: from the job's start to the last epoch the
  lines written closed), and the origins killed for good.
* :func:`judge` gives one :class:`Judgement` per version. With ``full`` the reference over
  every origin and ``covered`` the reference over the origins the version does *not* name in
  ``lacking``:

  - ``exact``: not flagged (neither ``tentative`` nor ``partial``, and ``complete``) and
    equal to ``full`` (a valid top k of it for a top-k plan);
  - ``flagged_ok``: flagged, every key within ``covered[k] <= value <= full[k]`` (so
    ``lacking`` names at least the origins whose records are missing), and ``coverage``
    within 5 points of the truth (lines of the covered origins / all lines of the epoch).
    When ``lacking`` holds ``"?"`` (origins the master cannot name) each value must only be
    ``<= full[k]`` and coverage is not judged; nor is it for an epoch without lines;
  - violations: ``unflagged_wrong`` (not flagged and not equal; the origins whose share is
    missing are named when the shortfall is theirs) and ``flag_dishonest`` (flagged, but a
    value outside those bounds, or a coverage that *overstates* the truth by more than 5
    points). A coverage that *understates* it by more (``coverage_under``) is counted and
    reported (``visible_coverage_understated``) but is not a violation: the master weighs a
    lacking origin by its recent rate because it cannot tell a crashed agent, whose host keeps
    logging, from a dead host, which logs nothing more - so where the host died the estimate
    is conservative, never flattering;
  - ``unjudged``: an epoch outside the judged window, one tree of a job of several trees
    (its key range is the job's hash partition, not known here), or rows that do not parse.
* :func:`figures` sums the judgements up: violation counts with the longest time each was
  visible (last seen - first seen) and examples; lake (job, tree, epoch, term, version) keys
  seen with two row sets (``two_row_sets``, a violation: a version's rows never change);
  unflagged versions short exactly by origins killed for good; per crash, how soon a version
  naming the absent origin appeared; per restart, how long until the epochs the agent
  missed were final and exact; and, from the end-of-run check when given, the epochs final
  and exact at the end and those never repaired.

Bounds: pure functions over what the watch recorded; examples are capped (``examples``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.server.chaos import (
    EXACT as END_EXACT,
)
from agent.server.chaos import (
    MISDECLARED,
    TENTATIVE,
    UNNAMED,
    JobPlan,
    JobReport,
    expected_epochs,
    read_records,
    reference,
)

EXACT = "exact"
FLAGGED_OK = "flagged_ok"
UNFLAGGED_WRONG = "unflagged_wrong"
FLAG_DISHONEST = "flag_dishonest"
UNJUDGED = "unjudged"
JUDGEMENTS = (EXACT, FLAGGED_OK, UNFLAGGED_WRONG, FLAG_DISHONEST, UNJUDGED)
#: the most a flagged version's coverage may be off the truth (a share, 0.05 = 5 points)
COVERAGE_TOLERANCE = 0.05
UNNAMEABLE = "?"  # a lacking entry: origins the master cannot name
DOWN_ACTIONS = frozenset({"kill", "lose", "partition", "stall", "terminate"})
BACK_ACTIONS = frozenset({"restart", "heal", "resume"})


def origin_name(raw: Any) -> str:
    """A node id as results name it: lowercase hex without leading zeros (``"?"`` and other
    non-hex text unchanged)."""
    text = str(raw)
    try:
        return format(int(text, 16), "x")
    except ValueError:
        return text


@dataclass
class Seen:
    """One distinct version a reader saw: ``source`` ``"api"`` (``where``: the agent's URL
    that answered first) or ``"lake"`` (``where``: the lake's directory; ``path`` the file;
    ``tree`` of ``trees``). Two answers differing in any flag or row are two :class:`Seen`."""

    source: str
    job: str
    epoch: int
    version: int
    term: int
    tentative: bool
    partial: bool
    complete: bool
    coverage: float | None
    lacking: tuple[str, ...]
    rows: list[Any]
    rows_key: str  # the canonical rows (JSON): equal row sets have equal keys
    first_seen: float
    last_seen: float
    where: str = ""
    tree: int | None = None
    trees: int = 1
    path: str = ""

    @property
    def flagged(self) -> bool:
        return self.tentative or self.partial or not self.complete

    @property
    def visible_s(self) -> float:
        return max(0.0, self.last_seen - self.first_seen)


def rows_key(rows: Iterable[Any]) -> str:
    """Canonical JSON of a row set (order-free)."""
    return json.dumps(sorted(json.dumps(r, sort_keys=True) for r in rows))


@dataclass(frozen=True)
class Fault:
    """A fault as the judge needs it: ``action`` (``kill``, ``lose``, ``partition``, ``stall``
    take an origin away; ``restart``, ``heal``, ``resume`` bring it back), the origin's name
    and the wall time."""

    action: str
    origin: str
    at: float


@dataclass
class OriginReference:
    """Per origin and epoch: the plan's key counts and the line counts (module contract)."""

    plan: JobPlan
    counts: dict[str, dict[int, Counter[str]]]
    lines: dict[str, dict[int, int]]
    epochs: range
    lost: frozenset[str] = frozenset()

    @classmethod
    def from_files(
        cls,
        plan: JobPlan,
        files: dict[str, Path],
        lost: Iterable[str] = (),
        last_ts: float | None = None,
        left: dict[str, int] | None = None,
    ) -> OriginReference:
        """From each origin's input file (origin name → path). ``last_ts``: the newest line's
        time (default: read from the files), which closes the judged window. ``left``: origin
        → the first epoch it no longer feeds (a graceful leave's declared end, as
        :func:`agent.server.chaos.check` takes it): its lines from there on are left out."""
        per = {o: read_records([p]) for o, p in files.items()}
        if last_ts is None:
            last_ts = max((float(r["ts"]) for rs in per.values() for r in rs), default=0.0)
        counts = {origin_name(o): reference(plan, rs) for o, rs in per.items()}
        lines = {origin_name(o): line_counts(plan, rs) for o, rs in per.items()}
        for o, first_out in (left or {}).items():
            name = origin_name(o)
            counts[name] = {e: c for e, c in counts.get(name, {}).items() if e < first_out}
            lines[name] = {e: n for e, n in lines.get(name, {}).items() if e < first_out}
        return cls(
            plan,
            counts,
            lines,
            expected_epochs(plan, last_ts),
            frozenset(origin_name(x) for x in lost),
        )

    def full(self, epoch: int) -> Counter[str]:
        return sum((c.get(epoch, Counter()) for c in self.counts.values()), Counter())

    def over(self, origins: Iterable[str], epoch: int) -> Counter[str]:
        return sum((self.counts[o].get(epoch, Counter()) for o in origins), Counter())

    def coverage(self, lacking: Iterable[str], epoch: int) -> float | None:
        """The true coverage of a version lacking ``lacking``: lines of the other origins /
        all lines of the epoch (None for an epoch without lines: any coverage is true)."""
        names = set(lacking)
        total = sum(n.get(epoch, 0) for n in self.lines.values())
        if not total:
            return None
        return sum(n.get(epoch, 0) for o, n in self.lines.items() if o not in names) / total


def line_counts(plan: JobPlan, records: Iterable[dict[str, Any]]) -> dict[int, int]:
    """epoch → lines of ``records`` from the plan's start (per window for a windowed plan)."""
    per: Counter[int] = Counter()
    for r in records:
        epoch = plan.epoch_of(float(r["ts"]))
        if epoch >= plan.start_epoch:
            per[epoch] += 1
    if plan.window is None or not per:
        return dict(per)
    return {
        end: sum(per.get(e, 0) for e in range(end - plan.window + 1, end + 1))
        for end in range(min(per), max(per) + plan.window)
    }


@dataclass
class Judgement:
    """One version's verdict (module contract) and what differed."""

    verdict: str
    why: str = ""
    short_origins: list[str] = field(default_factory=list)
    missing: dict[str, int] = field(default_factory=dict)
    extra: dict[str, int] = field(default_factory=dict)
    coverage_truth: float | None = None
    short_share: float | None = None  # the share of the reference's counts it lacks
    #: for ``flag_dishonest``: ``rows`` (counts outside the bounds), ``coverage_over`` (it
    #: claims more than it covers) or ``coverage_under`` (less: pessimistic, still untrue)
    kind: str = ""


def judge(ref: OriginReference, v: Seen) -> Judgement:
    """One version's verdict (module contract)."""
    plan = ref.plan
    if v.epoch not in ref.epochs:
        return Judgement(UNJUDGED, "outside the judged window")
    if v.tree is not None and v.trees != 1:
        return Judgement(UNJUDGED, f"tree {v.tree} of {v.trees}: its key range is not known")
    try:
        got = plan.counter(v.rows)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return Judgement(UNJUDGED, f"rows do not parse: {exc!r}"[:200])
    full = ref.full(v.epoch)
    # a top k is compared on its own keys (the reference's others are not in it by design)
    scope = set(got) if plan.top_k is not None else None
    base = full if scope is None else Counter({k: full[k] for k in scope})
    missing, extra = dict(base - got), dict(got - full)
    total = sum(base.values())
    share = round(sum(missing.values()) / total, 4) if total else None
    if not v.flagged:
        if plan.matches(got, full):
            return Judgement(EXACT)
        return Judgement(
            UNFLAGGED_WRONG,
            "final and not equal to the reference",
            short_origins(ref, v.epoch, base - got, scope),
            _cap(missing),
            _cap(extra),
            short_share=share,
        )
    lacking = {origin_name(x) for x in v.lacking}
    if UNNAMEABLE in lacking:
        over = {k: n for k, n in got.items() if n > full[k]}
        if over:
            return Judgement(
                FLAG_DISHONEST, "counts above the reference", extra=_cap(over), kind="rows"
            )
        return Judgement(FLAGGED_OK, "lacks origins it cannot name")
    covered = ref.over([o for o in ref.counts if o not in lacking], v.epoch)
    keys = set(got) if plan.top_k is not None else set(full) | set(got)
    below = {k: covered[k] - got[k] for k in keys if got[k] < covered[k]}
    above = {k: got[k] - full[k] for k in keys if got[k] > full[k]}
    true_share = ref.coverage(lacking, v.epoch)
    truth = None if true_share is None else round(true_share, 4)
    if below or above:
        why = "counts below what the origins it covers wrote" if below else ""
        why = why or "counts above the reference"
        return Judgement(
            FLAG_DISHONEST,
            why,
            short_origins(ref, v.epoch, covered - got, scope),
            _cap(below),
            _cap(above),
            truth,
            share,
            kind="rows",
        )
    if (
        v.coverage is not None
        and truth is not None
        and abs(float(v.coverage) - truth) > COVERAGE_TOLERANCE
    ):
        return Judgement(
            FLAG_DISHONEST,
            f"coverage {v.coverage} vs true {truth}",
            coverage_truth=truth,
            short_share=share,
            kind="coverage_over" if float(v.coverage) > truth else "coverage_under",
        )
    return Judgement(FLAGGED_OK, coverage_truth=truth, short_share=share)


def _cap(d: dict[str, int], n: int = 8) -> dict[str, int]:
    return dict(sorted(d.items(), key=lambda kv: -kv[1])[:n])


def short_origins(
    ref: OriginReference, epoch: int, shortfall: Counter[str], keys: set[str] | None = None
) -> list[str]:
    """The origins whose share a version lacks: the smallest set (of up to three origins)
    whose counts (on ``keys`` only, when given: a top k's own keys) sum to ``shortfall``
    exactly; else the origins whose counts fit in it, marked with a trailing ``"~"`` (the
    shortfall is only partly theirs)."""
    if not shortfall:
        return []

    def part(origins: Iterable[str]) -> Counter[str]:
        got = ref.over(origins, epoch)
        return got if keys is None else Counter({k: got[k] for k in keys if got[k]})

    present = sorted(o for o in ref.counts if part([o]))
    for size in (1, 2, 3):
        for group in itertools.combinations(present, size):
            if part(group) == shortfall:
                return list(group)
    fits = [o for o in present if not (part([o]) - shortfall)]
    return [*fits, "~"]


# ---- figures ----------------------------------------------------------------------------


def example(v: Seen, j: Judgement) -> dict[str, Any]:
    """One judged version, for a report."""
    out: dict[str, Any] = {
        "source": v.source,
        "job": v.job,
        "epoch": v.epoch,
        "version": v.version,
        "term": v.term,
        "tentative": v.tentative,
        "partial": v.partial,
        "coverage": v.coverage,
        "lacking": list(v.lacking),
        "visible_s": round(v.visible_s, 3),
        "why": j.why,
        **({"kind": j.kind} if j.kind else {}),
        "short_origins": j.short_origins,
        "short_share": j.short_share,
        "missing": j.missing,
        "extra": j.extra,
    }
    if j.coverage_truth is not None:
        out["coverage_truth"] = j.coverage_truth
    if v.tree is not None:
        out["tree"] = v.tree
    return out


def _violations(found: list[tuple[Seen, Judgement]], examples: int) -> dict[str, Any]:
    found = sorted(found, key=lambda p: -p[0].visible_s)
    return {
        "count": len(found),
        "api": sum(v.source == "api" for v, _ in found),
        "lake": sum(v.source == "lake" for v, _ in found),
        "epochs": sorted({(v.job, v.epoch) for v, _ in found}),
        "max_visible_s": round(found[0][0].visible_s, 3) if found else 0.0,
        **(
            {"by_kind": dict(Counter(j.kind for _, j in found))}
            if any(j.kind for _, j in found)
            else {}
        ),
        "examples": [example(v, j) for v, j in found[:examples]],
    }


def two_row_sets(seen: Iterable[Seen], examples: int = 5) -> dict[str, Any]:
    """Lake (job, tree, epoch, term, version) keys seen with more than one row set (a
    violation), and the same for results-API answers (reported, not a violation by itself:
    the API's version is the highest over trees, and a re-issue may reuse one)."""
    groups: dict[tuple[Any, ...], set[str]] = {}
    for v in seen:
        key = (v.source, v.where if v.source == "lake" else "", v.job, v.tree, v.epoch)
        groups.setdefault((*key, v.term, v.version), set()).add(v.rows_key)
    twice = {k: n for k, n in groups.items() if len(n) > 1}
    lake = [k for k in twice if k[0] == "lake"]
    return {
        "count": len(lake),
        "examples": [
            {
                "job": k[2],
                "tree": k[3],
                "epoch": k[4],
                "term": k[5],
                "version": k[6],
                "row_sets": len(twice[k]),
            }
            for k in lake[:examples]
        ],
        "api_count": len(twice) - len(lake),
    }


def crash_to_first_flagged(
    seen: Sequence[Seen], faults: Sequence[Fault], refs: dict[str, OriginReference]
) -> list[dict[str, Any]]:
    """Per fault taking an origin away: per judged epoch from the one it happened in until
    it came back, the first time a version naming the origin appeared, in seconds after the
    fault (from the API and the lake, over every job watched)."""
    out = []
    for i, f in enumerate(faults):
        if f.action not in DOWN_ACTIONS:
            continue
        back = next((g.at for g in faults[i + 1 :] if g.origin == f.origin
                     and g.action in BACK_ACTIONS), math.inf)  # fmt: skip
        per_epoch: dict[str, float] = {}
        for v in seen:
            ref = refs.get(v.job)
            if ref is None or f.origin not in {origin_name(x) for x in v.lacking}:
                continue
            first = ref.plan.epoch_of(f.at)
            last = ref.plan.epoch_of(back) if back != math.inf else ref.epochs.stop
            if not first <= v.epoch <= last or v.epoch not in ref.epochs or v.first_seen < f.at:
                continue
            key = f"{v.job}:{v.epoch}"
            s = round(v.first_seen - f.at, 3)
            per_epoch[key] = min(per_epoch.get(key, s), s)
        out.append({
            "action": f.action,
            "origin": f.origin,
            "first_flagged_s": min(per_epoch.values()) if per_epoch else None,
            "per_epoch": dict(sorted(per_epoch.items())),
        })  # fmt: skip
    return out


def restart_to_final_exact(
    judged: Sequence[tuple[Seen, Judgement]],
    faults: Sequence[Fault],
    refs: dict[str, OriginReference],
) -> list[dict[str, Any]]:
    """Per origin brought back: the epochs it missed (from the one it went down in to the one
    it came back in, judged ones, per job) and the seconds from its return until the last of
    them was first answered final and exact by the results API (None: one never was)."""
    exact_at: dict[tuple[str, int], float] = {}
    for v, j in judged:
        if v.source == "api" and j.verdict == EXACT:
            key = (v.job, v.epoch)
            exact_at[key] = min(exact_at.get(key, v.first_seen), v.first_seen)
    out = []
    for i, f in enumerate(faults):
        if f.action not in BACK_ACTIONS:
            continue
        down = next((g for g in reversed(faults[:i]) if g.origin == f.origin
                     and g.action in DOWN_ACTIONS), None)  # fmt: skip
        if down is None:
            continue
        worst: float | None = 0.0
        missed: dict[str, list[int]] = {}
        for job, ref in refs.items():
            epochs = [
                e
                for e in range(ref.plan.epoch_of(down.at), ref.plan.epoch_of(f.at) + 1)
                if e in ref.epochs
            ]
            missed[job] = [epochs[0], epochs[-1]] if epochs else []
            for e in epochs:
                at = exact_at.get((job, e))
                if at is None:
                    worst = None
                elif worst is not None:
                    worst = max(worst, at - f.at)
        out.append({
            "action": f.action,
            "origin": f.origin,
            "missed_epochs": missed,
            "final_exact_s": None if worst is None else round(max(0.0, worst), 3),
        })  # fmt: skip
    return out


def at_end(reports: Sequence[JobReport], lost: frozenset[str]) -> dict[str, Any]:
    """From the end-of-run check: epochs final and exact, and epochs never repaired (still
    tentative, lacking an origin that is back, once the run settled)."""
    checks = [e for r in reports for e in r.epochs]
    never = [
        {"job": r.job, "epoch": e.epoch, "verdict": e.verdict, "lacking": e.lacking}
        for r in reports
        for e in r.epochs
        if e.verdict in (TENTATIVE, UNNAMED, MISDECLARED)
        and not ({origin_name(x) for x in e.lacking} <= lost and e.lacking)
    ]
    return {
        "epochs_final_exact_at_end": {
            "exact": sum(e.verdict == END_EXACT for e in checks),
            "of": len(checks),
        },
        "never_repaired": {"count": len(never), "epochs": never[:20]},
    }


def figures(
    seen: Sequence[Seen],
    refs: dict[str, OriginReference],
    faults: Sequence[Fault] = (),
    reports: Sequence[JobReport] | None = None,
    examples: int = 5,
) -> dict[str, Any]:
    """Every figure of the module contract (JSON-able). ``violations`` sums the three kinds
    the promise forbids."""
    judged = [(v, judge(refs[v.job], v)) for v in seen if v.job in refs]
    counts = {
        src: {k: sum(v.source == src and j.verdict == k for v, j in judged) for k in JUDGEMENTS}
        for src in ("api", "lake")
    }
    wrong = [(v, j) for v, j in judged if j.verdict == UNFLAGGED_WRONG]
    flagged_wrong = [(v, j) for v, j in judged if j.verdict == FLAG_DISHONEST]
    dishonest = [(v, j) for v, j in flagged_wrong if j.kind != "coverage_under"]
    understated = [(v, j) for v, j in flagged_wrong if j.kind == "coverage_under"]
    lost = frozenset().union(*(r.lost for r in refs.values())) if refs else frozenset()
    undercounted = [
        (v, j)
        for v, j in wrong
        if j.short_origins and "~" not in j.short_origins and set(j.short_origins) <= lost
        and not j.extra
    ]  # fmt: skip
    twice = two_row_sets(seen, examples)
    unjudged = Counter(j.why.split(":")[0] for _, j in judged if j.verdict == UNJUDGED)
    out: dict[str, Any] = {
        "versions_seen": counts,
        "unjudged_why": dict(unjudged),
        "visible_unflagged_wrong": _violations(wrong, examples),
        "visible_flag_dishonest": _violations(dishonest, examples),
        "visible_coverage_understated": _violations(understated, examples),
        "two_row_sets": twice,
        "killed_for_good_unflagged_undercounted": _violations(undercounted, examples),
        "crash_to_first_flagged_s": crash_to_first_flagged(seen, faults, refs),
        "restart_to_final_exact_s": restart_to_final_exact(judged, faults, refs),
        "violations": len(wrong) + len(dishonest) + twice["count"],
    }
    if reports is not None:
        out.update(at_end(reports, lost))
    return out


def headline(figs: dict[str, Any]) -> dict[str, Any]:
    """The figures a benchmark prints on top (issue "Final means final"), from
    :func:`figures`."""
    end = figs.get("never_repaired")
    return {
        "visible_unflagged_wrong": {
            "count": figs["visible_unflagged_wrong"]["count"],
            "max_visible_s": figs["visible_unflagged_wrong"]["max_visible_s"],
        },
        "visible_flag_dishonest": {
            "count": figs["visible_flag_dishonest"]["count"],
            "max_visible_s": figs["visible_flag_dishonest"]["max_visible_s"],
        },
        "visible_coverage_understated": figs["visible_coverage_understated"]["count"],
        "two_row_sets": figs["two_row_sets"]["count"],
        "epochs_final_exact_at_end": figs.get("epochs_final_exact_at_end"),
        "never_repaired": None if end is None else end["count"],
        "killed_for_good_unflagged_undercounted": figs["killed_for_good_unflagged_undercounted"][
            "count"
        ],
        "crash_to_first_flagged_s": [
            c["first_flagged_s"] for c in figs["crash_to_first_flagged_s"]
        ],
        "restart_to_final_exact_s": [r["final_exact_s"] for r in figs["restart_to_final_exact_s"]],
    }
