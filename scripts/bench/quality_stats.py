"""The statistics and tables of bench_quality.py: means over seeds, paired differences, the issue's targets.

The runs of one dataset are ``{contender: [row, ...]}``, one row per seed in seed order, every
contender run on the same seeds; a row holds ``best_test`` (the test metric of the best network by
validation), ``ensemble_test``, ``cpu`` and so on (see bench_quality.score). A dataset's metric is
accuracy (higher is better) or RMSE (lower is better): differences are printed as they are
(``a - b`` in the metric's units), and an *advantage* is a difference signed so that a positive one
favours ``a``, which is what the targets compare.

A paired difference over seeds is the mean of ``a_s - b_s`` with its standard error
``stdev(a_s - b_s) / sqrt(seeds)``: the seeds are shared (the same training seeds for the same
evaluation index), so the pairing removes what the seed does to both.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

SUMMARY_KEYS = ("best_val", "best_test", "ensemble_test", "oracle_test", "cpu", "wall", "net_seconds", "epochs", "stopped")


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), NaNs left out; (NaN, NaN) for none."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, math.nan
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass(frozen=True)
class Paired:
    """The paired difference ``a - b`` over seeds, in the metric's units."""

    mean: float
    se: float  # standard error of the mean difference
    wins: int  # seeds where a is better than b
    ties: int
    seeds: int
    higher_better: bool

    @property
    def advantage(self) -> float:
        """The mean difference signed so that positive favours ``a``."""
        return self.mean if self.higher_better else -self.mean

    def to_dict(self) -> dict:
        return {"mean": self.mean, "se": self.se, "advantage": self.advantage, "wins": self.wins, "ties": self.ties, "seeds": self.seeds}


def paired(a: list[float], b: list[float], higher_better: bool = True) -> Paired:
    """``a - b`` over the seeds where both are finite."""
    pairs = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    d = [x - y for x, y in pairs]
    if not d:
        return Paired(math.nan, math.nan, 0, 0, 0, higher_better)
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    wins = sum((x > y) if higher_better else (x < y) for x, y in pairs)
    return Paired(statistics.mean(d), se, wins, sum(x == y for x, y in pairs), len(d), higher_better)


def summarise(runs: dict[str, list[dict]]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per contender, mean and standard deviation over seeds of every :data:`SUMMARY_KEYS` figure."""
    return {c: {k: mean_std([r[k] for r in rows]) for k in SUMMARY_KEYS} for c, rows in runs.items()}


def paired_differences(runs: dict[str, list[dict]], higher_better: bool, ours: str = "evens") -> dict[str, dict[str, Paired]]:
    """``ours - other`` for every other contender: best single (test), ensemble (test), and CPU seconds (lower is better)."""
    if ours not in runs:
        return {}
    out = {}
    for other, rows in runs.items():
        if other == ours:
            continue
        mine = runs[ours]
        out[other] = {
            "best_test": paired([r["best_test"] for r in mine], [r["best_test"] for r in rows], higher_better),
            "ensemble_test": paired([r["ensemble_test"] for r in mine], [r["ensemble_test"] for r in rows], higher_better),
            "cpu": paired([r["cpu"] for r in mine], [r["cpu"] for r in rows], higher_better=False),
        }
    return out


def check_targets(summary: dict, diffs: dict[str, dict[str, Paired]], higher_better: bool, ours: str = "evens") -> dict:
    """Issue 22's targets for ``ours`` on one dataset, on means over seeds (the contenders absent are left out).

    * against TPE: ensemble at least TPE's, best single at least TPE's, at no more CPU seconds;
    * against random search: best single ahead by at least one paired standard error;
    * against the classic space: best single and ensemble ahead by at least two paired standard
      errors each ("clearly"; the issue asks it on the generated tasks).
    """
    t: dict = {}
    if ours not in summary:
        return t
    if "optuna-tpe" in diffs:
        d = diffs["optuna-tpe"]
        t["ensemble_at_least_tpe"] = d["ensemble_test"].advantage >= 0
        t["best_single_at_least_tpe"] = d["best_test"].advantage >= 0
        t["cpu_at_most_tpe"] = summary[ours]["cpu"][0] <= summary["optuna-tpe"]["cpu"][0]
        t["beats_tpe"] = t["ensemble_at_least_tpe"] and t["best_single_at_least_tpe"] and t["cpu_at_most_tpe"]
    if "random" in diffs:
        d = diffs["random"]["best_test"]
        t["best_single_beats_random_by_se"] = d.advantage > 0 and d.advantage >= (d.se if math.isfinite(d.se) else math.inf)
    if "evens-classic" in diffs:
        d = diffs["evens-classic"]
        t["beats_classic_clearly"] = all(d[k].advantage > 0 and d[k].advantage >= 2 * (d[k].se if math.isfinite(d[k].se) else math.inf)
                                         for k in ("best_test", "ensemble_test"))
    return t


# ----------------------------------------------------------------------------------------------- tables

def _cell(value: tuple[float, float], digits: int) -> str:
    mean, std = value
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if math.isfinite(mean) else "-"


def summary_table(summaries: dict[str, dict], metrics: dict[str, str]) -> str:
    """Markdown: per dataset and contender, mean ± std over seeds."""
    lines = ["| dataset | contender | metric | best val | best test | ensemble test | oracle test | CPU s | CPU s/network | epochs | stopped |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for dataset, by_contender in summaries.items():
        for c, s in by_contender.items():
            lines.append(f"| {dataset} | {c} | {metrics[dataset]} | {_cell(s['best_val'], 4)} | {_cell(s['best_test'], 4)} | "
                         f"{_cell(s['ensemble_test'], 4)} | {_cell(s['oracle_test'], 4)} | {_cell(s['cpu'], 1)} | "
                         f"{_cell(s['net_seconds'], 2)} | {s['epochs'][0]:.0f} | {s['stopped'][0]:.1f} |")
    return "\n".join(lines)


def _diff(p: Paired, digits: int) -> str:
    if not math.isfinite(p.mean):
        return "-"
    se = f"{p.se:.{digits}f}" if math.isfinite(p.se) else "?"
    return f"{p.mean:+.{digits}f} ± {se} ({p.wins}/{p.seeds})"


def paired_table(diffs: dict[str, dict[str, dict[str, Paired]]], metrics: dict[str, str], ours: str = "evens") -> str:
    """Markdown: ``ours - other`` per dataset, mean ± standard error, and the seeds where ``ours`` is better."""
    lines = [f"| dataset | metric | {ours} − | best test | ensemble test | CPU s |", "| --- | --- | --- | --- | --- | --- |"]
    for dataset, by_other in diffs.items():
        for other, d in by_other.items():
            lines.append(f"| {dataset} | {metrics[dataset]} | {other} | {_diff(d['best_test'], 4)} | {_diff(d['ensemble_test'], 4)} | {_diff(d['cpu'], 1)} |")
    return "\n".join(lines)


def selection_table(runs: dict[str, dict[str, list[dict]]], metrics: dict[str, str], higher: dict[str, bool]) -> str:
    """Markdown: per dataset, each way of choosing the ensemble (bench_quality.SELECTIONS) on every search's
    hall of fame, every contender and seed pooled: its test metric, the paired difference from the first
    way with its standard error, the mean distinct members, and how many ensembles held one network."""
    lines = ["| dataset | selection | ensemble test | − first way | members | one network |", "| --- | --- | --- | --- | --- | --- |"]
    for dataset, by_contender in runs.items():
        rows = [r for c in by_contender.values() for r in c if r.get("selections")]
        if not rows:
            continue
        ways = list(rows[0]["selections"])
        base = [r["selections"][ways[0]][0] for r in rows]
        for way in ways:
            values = [r["selections"][way][0] for r in rows]
            members = [r["selections"][way][1] for r in rows]
            mean, std = mean_std(values)
            diff = paired(values, base, higher[dataset])
            lines.append(f"| {dataset} | {way} | {mean:.4f} ± {std:.4f} | {_diff(diff, 4) if way != ways[0] else '-'} | "
                         f"{statistics.mean(members):.1f} | {sum(m == 1 for m in members)}/{len(members)} |")
    return "\n".join(lines)


def target_lines(targets: dict[str, dict], summaries: dict[str, dict], diffs: dict, ours: str = "evens") -> list[str]:
    """One line per dataset: each target MET or NOT MET, with the figures it was judged on."""
    out = []
    word = {True: "MET", False: "NOT MET"}
    for dataset, t in targets.items():
        parts, s, d = [], summaries[dataset], diffs.get(dataset, {})
        if "beats_tpe" in t:
            parts.append(f"vs TPE {word[t['beats_tpe']]} (ensemble {s[ours]['ensemble_test'][0]:.4f} vs {s['optuna-tpe']['ensemble_test'][0]:.4f}, "
                         f"best single {s[ours]['best_test'][0]:.4f} vs {s['optuna-tpe']['best_test'][0]:.4f}, "
                         f"CPU {s[ours]['cpu'][0]:.1f} vs {s['optuna-tpe']['cpu'][0]:.1f} s)")
        if "best_single_beats_random_by_se" in t:
            p = d["random"]["best_test"]
            parts.append(f"best single vs random by >= 1 SE {word[t['best_single_beats_random_by_se']]} (advantage {p.advantage:+.4f}, SE {p.se:.4f})")
        if "beats_classic_clearly" in t:
            a, b = d["evens-classic"]["best_test"], d["evens-classic"]["ensemble_test"]
            parts.append(f"vs classic by >= 2 SE {word[t['beats_classic_clearly']]} (best single {a.advantage:+.4f} ± {a.se:.4f}, "
                         f"ensemble {b.advantage:+.4f} ± {b.se:.4f})")
        if parts:
            out.append(f"# {ours} on {dataset}: " + "; ".join(parts))
    return out


def finite(value):
    """``value`` with NaN and infinities as None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, Paired):
        return finite(value.to_dict())
    return value


def nan_for_none(value):
    """The inverse of :func:`finite` on a row read back from JSON: None as NaN."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: nan_for_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_for_none(v) for v in value]
    return value
