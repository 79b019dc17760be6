"""The text of a run's summary: the lines that `evens report`, the summary at a search's end and `evens status` print,
from the facts that evolve.app.presentation.report gathers (evolve.app.presentation.summary's types), and the score format every output shares."""
from __future__ import annotations

import math

from evolve.app.presentation.summary import EnsembleFacts, Failure, Halving, ParetoMember, Scored, SearchMetric, Summary, TopNetwork
from evolve.search.space import TRAINING_GENES

# Scores between 0 and 1 print with four decimals (1 reads 1.0000, as 0.9944 does beside it); errors (rmse, loss, a
# user's metric) with four significant digits. The summary, `evens report`, `evens status` and the live line share these.
FRACTION_METRICS = frozenset({"accuracy", "balanced_accuracy", "macro_f1", "r2"})


def score_text(value: float | None, metric: str = "accuracy") -> str:
    """A score as every output prints it: ``score_text(1.0)`` is ``'1.0000'``, ``score_text(12.345, "rmse")`` ``'12.35'``."""
    if value is None or not math.isfinite(value):
        return "n/a" if value is None else "-"
    return f"{value:.4f}" if metric in FRACTION_METRICS else f"{value:.4g}"


def counted(n: int, noun: str) -> str:
    """``counted(1, "pick")`` is ``'1 pick'``, ``counted(3, "pick")`` ``'3 picks'``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def describe(g: dict) -> str:
    """A network and its training in a few words, from its active genes (:meth:`SearchSpace.decode`):
    "cnn depth 2 width 64/32 silu k5 avg-pool batch-norm residual, adamw lr 0.00092 cosine warm-up 0.1, 11 epochs".
    A user's network (no ``family`` gene) is its own genes: "channels 32 blocks 4, adam lr 0.003, 20 epochs"."""
    if "family" not in g:
        words = [f"{name} {_short(value)}" for name, value in g.items() if name not in TRAINING_GENES] or ["own network"]
        return f"{' '.join(words)}, {_training_words(g)}, {g['epochs']} epochs"
    width = g["width"] if "width" in g else "/".join(str(g[f"width_{i}"]) for i in range(1, g["depth"] + 1))
    words = [g["family"], f"depth {g['depth']}", f"width {width}"]
    if g["family"] == "rnn":
        words.append(f"{'bidirectional ' if g.get('bidirectional') else ''}{g.get('cell', 'gru')}")
    else:
        words.append(g.get("activation", "relu"))
    if g["family"] == "cnn":
        words += [f"k{g.get('kernel_size', 3)}", f"{g.get('pooling', 'max')}-pool"]
        if g.get("downsample", 1) > 1:
            words.append(f"input/{g['downsample']}")
    if g.get("norm", "none") != "none":
        words.append(f"{g['norm']}-norm")
    if g.get("residual"):
        words.append("residual")
    return f"{' '.join(words)}, {_training_words(g)}, {g['epochs']} epochs"


def _training_words(g: dict) -> str:
    training = [g.get("optimizer", "adam"), f"lr {g['learning_rate']:.2g}"]
    if g.get("schedule", "constant") != "constant":
        training.append(g["schedule"].replace("_", "-"))
    if g.get("warmup"):
        training.append(f"warm-up {g['warmup']:.2g}")
    return " ".join(training)


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def format_pareto(front: list[ParetoMember], metric: str) -> list[str]:
    """The Pareto front as a small table, best fitness first."""
    params = not front or front[0].objective == "params"  # else latency_us
    head = "val accuracy" if metric == "accuracy" else "val rmse"
    cost = "params" if params else "us/sample"
    lines = [f"pareto front ({len(front)} networks: {head} against {'parameters' if params else 'inference latency'}):",
             f"  {'id':>7}  {head:>12}  {cost:>10}  network"]
    for m in front:
        value = score_text(m.fitness) if metric == "accuracy" else score_text(-m.fitness, metric)
        c = f"{m.cost:,.0f}" if params else f"{m.cost:.4g}"
        lines.append(f"  {'#' + str(m.id):>7}  {value:>12}  {c:>10}  {m.network}")
    return lines


def _scores_text(s: Scored, metric: str, searched: SearchMetric, val: str = "val") -> str:
    """Val and test scores: the headline, and the search's own metric beside it where that is another. ``val``
    names the rows chosen on ("oof": the training rows out of fold, with data.folds)."""
    if metric == "accuracy":
        text = f"{val} {score_text(s.score('val', 'accuracy'))}  test {score_text(s.score('test', 'accuracy'))}"
    else:
        text = (f"{val} rmse {score_text(s.score('val', 'rmse'), 'rmse')} r2 {score_text(s.score('val', 'r2'), 'r2')}  "
                f"test rmse {score_text(s.score('test', 'rmse'), 'rmse')} r2 {score_text(s.score('test', 'r2'), 'r2')}")
    key = searched.key
    if key not in (metric, "r2") and f"val_{key}" in s.metrics and f"test_{key}" in s.metrics:
        text += f"  ({key}: {val} {score_text(s.score('val', key), key)}  test {score_text(s.score('test', key), key)})"
    if s.metrics.get("fold_std") is not None:
        text += f"  (spread over folds {score_text(s.metrics['fold_std'], key)})"
    return text


def format_curve(e: EnsembleFacts, val: str = "val") -> list[str]:
    """The ensemble curve: the headline metric on val (``val``: the rows' name) and test after each pick."""
    c = e.curve
    n = len(c.path)
    stride = math.ceil(n / CURVE_LINES)  # bagged selection pools up to bags x size picks: every stride-th is shown
    shown = sorted({0, n - 1, e.picks - 1, *range(stride - 1, n, stride)})
    every = "each pick" if stride == 1 else f"every {counted(stride, 'pick')}"
    lines = [f"ensemble curve ({e.method}, {c.metric} after {every}; * = the ensemble kept):"]
    for i in shown:
        mark = "*" if i + 1 == e.picks else " "
        lines.append(f"  {mark}{i + 1:>3}  +#{c.path[i]:<6} {val} {score_text(c.val[i], c.metric)}  test {score_text(c.test[i], c.metric)}")
    return lines


CURVE_LINES = 10  # the ensemble curve's lines in a summary, about


def describe_space(preset: dict | None) -> str:
    """Which search space a run searches, and why, in one line."""
    if preset is None:
        return "the config's own [space] table (the classic space under its genes)"
    if preset["chosen"] == "builder":
        return f"your model builder's genes, with the training genes scaled to the data ({preset['why']})"
    how = f"preset {preset['chosen']}" + (f", chosen for {preset['why']}" if preset["asked"] == "auto" else ", named in the config")
    return how + (f"; the config sets {', '.join(preset['overrides'])}" if preset["overrides"] else "")


def format_halving(h: Halving) -> str:
    """One line: each rung's stages and promotions, and how the promotions trained."""
    rungs = h.rungs
    parts = [f"rung {r.rung}: {r.stages}" + (f", {r.promoted} promoted" if r is not rungs[-1] else " whole trainings") for r in rungs]
    return (f"successive halving (eta {h.eta}): " + "; ".join(parts) + f"; {h.stages} stages, {h.epochs_trained} epochs trained; "
            f"promotions carried on {counted(h.carried_on, 'paused training')}, trained {h.trained_again} again from the start")


def format_summary(s: Summary) -> str:
    """A few human-readable lines."""
    lines = [
        f"evaluations: {s.evaluations} of {s.budget}"
        + "".join(f", {n} {k}" for k, n in sorted(s.status_counts.items()) if k not in ("ok", "paused")),
        f"wall time: {s.wall_seconds:.1f} s over {s.sessions} session(s); worker utilization {100 * s.worker_utilization:.1f} %",
        f"search space: {describe_space(s.space)}",
    ]
    if s.promotion:
        lines.append(format_halving(s.promotion))
    if s.early_stopping:
        stop = s.early_stopping
        lines.append(f"early stopping: {counted(stop.stopped, 'network')} stopped below the median, "
                     f"saving {counted(stop.epochs_saved, 'epoch')} ({stop.epochs_trained} trained in all)")
    metric = s.metric
    chosen = s.chosen_on
    word = chosen.word
    se = f"; an accuracy on them has a standard error of up to {chosen.accuracy_se_max:.3f}" if chosen.accuracy_se_max is not None else ""
    how = f" ({chosen.folds} folds)" if chosen.folds else ""
    lines.append(f"chosen on: {chosen.rows} {chosen.split}{how}{se}")
    b = s.best
    if b:
        lines.append(f"best network #{b.id}: {_scores_text(b, metric, s.search_metric, word)}  ({describe(b.genome)})")
    if s.pareto:
        lines.extend(format_pareto(s.pareto, metric))
    e = s.ensemble
    if e:
        members = ", ".join(f"#{i}" + (f" x{round(w * e.picks)}" if round(w * e.picks) > 1 else "") for i, w in zip(e.members, e.weights))
        u = e.test_uncertainty  # (named by ensemble.combine.UNCERTAINTY)
        spread = (
            f"test uncertainty: entropy {u['entropy']:.3f}, epistemic {u['epistemic']:.3f} nats, disagreement {u['disagreement']:.3f}"
            if metric == "accuracy"
            else f"test spread: member std {u['std']:.4g}"
        )
        lines.append(
            f"ensemble ({e.method}, {counted(e.picks, 'pick')} of {counted(len(e.members), 'network')}: {members}): "
            f"{_scores_text(e, metric, s.search_metric, word)}  ({spread})"
        )
        lines.extend(format_curve(e, word))
        if e.test_calibration and b and b.test_calibration:
            single, combined = b.test_calibration, e.test_calibration  # (named by Problem.calibration)
            lines.append(f"calibration on test (negative log-likelihood, expected calibration error): best network {single['nll']:.4f}, "
                         f"{single['ece']:.4f}; ensemble {combined['nll']:.4f}, {combined['ece']:.4f}")
    else:
        lines.append("no network finished successfully yet")
    if s.run_dir:
        lines.append(f"run directory: {s.run_dir}")
    return "\n".join(lines)


def format_top(top: list[TopNetwork], metric: str, k: int, picks: int = 0, val: str = "val") -> list[str]:
    """The table of :func:`top_networks` (``k`` asked for), with each member's share of the ensemble's ``picks``
    (``val``: what the rows chosen on are called, "oof" with data.folds)."""
    if not top:
        return []
    key = "accuracy" if metric == "accuracy" else "rmse"
    places = [t.rank for t in top]  # 1 the best: a place, not an MPI rank (tests/test_layering.py looks for comparisons of those)
    best = [t for t, place in zip(top, places) if place <= k]
    marks = f"* = in the ensemble, with its picks of the {picks}" if picks else "no ensemble chosen"
    lines = [f"top {len(best)} networks ({marks}):",
             f"  {'id':>6}  {'rank':>4}  {val + ' ' + key:>12}  {'test ' + key:>13}  {'params':>9}  {'train s':>8}  {'picks':>5}  network"]
    for i, t in enumerate(top):
        if i == len(best):
            lines.append(f"  and the ensemble's other {counted(len(top) - len(best), 'member')}:")
        params = f"{t.metrics['params']:,.0f}" if "params" in t.metrics else "?"
        member = t.ensemble_weight > 0
        taken = str(round(t.ensemble_weight * picks)) if member else ""
        lines.append(f"  {('*' if member else ' ') + '#' + str(t.id):>6}  {t.rank:>4}  {score_text(t.score('val', key), key):>12}  "
                     f"{score_text(t.score('test', key), key):>13}  {params:>9}  {t.seconds:>8.1f}  {taken:>5}  {t.network}")
    return lines


def format_failures(failures: dict[str, Failure]) -> list[str]:
    if not failures:
        return ["not ok: none"]
    return ["not ok, by kind:"] + [f"  {kind}: {f.count}  (e.g. {f.example})" for kind, f in sorted(failures.items())]
