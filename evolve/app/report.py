"""Summaries of a run, from its checkpoint alone: the best network, the ensemble and its curve."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from ensemble.combine import combine, ensemble_prediction, mean_uncertainty
from ensemble.hall_of_fame import standing
from ensemble.problem import Problem, problem_from_dict
from ensemble.results import kinds
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.engine.promotion import rung_count
from evolve.runfile.checkpoint import RunInfo, listing, segments_folder
from evolve.runfile.history import History
from evolve.search.pareto import OBJECTIVES
from evolve.search.records import Record, best_first
from evolve.search.registry import capabilities
from evolve.search.space import TRAINING_GENES
from evolve.search.tally import Tally

from .rundir import checkpoint_path, read_beside_a_job, read_run

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


def ensemble_scores(state: SearchState, info: RunInfo, problem: Problem) -> dict | None:
    """The stored ensemble's members, weights, metrics on val and test, mean test uncertainty and curve."""
    sel = state.selection
    if sel is None:
        return None
    members = [state.hall_of_fame.by_id(i) for i in sel.ids]
    result = {
        "method": sel.method,
        "size": sel.size,
        "picks": sel.picks,
        "members": sel.ids,
        "weights": sel.weights,
        "curve": {"path": list(sel.path), "val": list(sel.curve_val), "test": list(sel.curve_test), "metric": problem.metric_key},
    }
    for split, y in (("val", info.val_y), ("test", info.test_y)):
        preds = [m.val_pred if split == "val" else m.test_pred for m in members]
        combined = combine(problem, preds, sel.weights, len(y))
        # a user's metric is the selection curve's (reading a run imports none of the user's code)
        result.update(undefined_as_none({f"{split}_{k}": v for k, v in problem.scores(ensemble_prediction(problem, combined), y, user=False).items()}))
        result.setdefault(f"{split}_{problem.metric_key}", (sel.curve_val if split == "val" else sel.curve_test)[sel.picks - 1])
        if split == "test":
            result["test_uncertainty"] = mean_uncertainty(problem, combined)
            if problem.kind == "classification":
                result["test_calibration"] = problem.calibration(ensemble_prediction(problem, combined), y)
    return result


def tally_of(records: list[Record], info: RunInfo) -> Tally:
    """The account of ``records`` (a run's history, read back), as the master keeps it while it records."""
    search = info.config.search
    return Tally.of(records, info.space(), rung_count(search.eta, search.min_budget) if search.promotion else 0, info.config.data.fold_count)


def summarize(state: SearchState, info: RunInfo, run_dir: str | None = None, tally: Tally | None = None, pareto: bool = True) -> dict:
    """The facts ``evens report --json`` prints: counts, best member, ensemble, time, utilization. From the account
    ``tally`` where given (the state file's: no history read), else from the state's records. A search of two
    objectives: its Pareto front too (``pareto``), whose members are read from ``run_dir``'s history where the state
    does not hold every record."""
    problem = problem_from_dict(info.data["problem"])
    tally = tally if tally is not None else tally_of(state.records, info)
    hall = state.hall_of_fame
    summary = {
        "run_dir": run_dir,
        "problem": problem.kind,
        "metric": "accuracy" if problem.kind == "classification" else "rmse",  # the headline of the tables and figures
        "search_metric": {"name": problem.metric, "key": problem.metric_key, "higher_is_better": problem.higher_is_better},
        "evaluations": tally.networks,  # networks: with successive halving, a network's stages are one
        "budget": info.config.search.evaluations,
        "status_counts": dict(tally.statuses),
        "pending": len(state.pending),
        "wall_seconds": info.wall_seconds,
        "worker_utilization": state.utilization,
        "sessions": info.sessions,
        "space": info.preset,
        "data": info.data,
        "hall_of_fame": {"members": len(hall), "capacity": hall.capacity, "ids": hall.ids},
        "chosen_on": chosen_on(info, problem),
        "best": None,
        "ensemble": ensemble_scores(state, info, problem),
    }
    space = info.space()
    if tally.stopped:
        summary["early_stopping"] = {"stopped": tally.stopped, "epochs_saved": tally.epochs_saved, "epochs_trained": tally.epochs_trained}
    search = info.config.search
    if search.promotion:
        summary["promotion"] = halving_facts(tally, search)
    if capabilities(search.mode).objectives == 2 and pareto and (run_dir or not state.dropped):
        ids = state.strategy.get("front", [])
        records = state.by_id() if not state.dropped else front_records(run_dir, state, info, ids)
        summary["pareto"] = pareto_front(records, ids, search.second_objective, space)
    best = tally.best
    if best is not None:
        summary["best"] = {**record_facts(best), "genome": space.decode(best.genome)}
        kept = hall.by_id(best.id) if best.id in hall.ids else None
        if problem.kind == "classification" and kept is not None:
            summary["best"]["test_calibration"] = problem.calibration(kept.test_pred, info.test_y)
    return summary


def halving_facts(tally: Tally, search) -> dict:
    """Successive halving's account: each rung's stages and how many went on, and how the promotions trained."""
    return {"eta": search.eta, "min_budget": search.min_budget, "rungs": [{"rung": i, "stages": n, "promoted": up} for i, (n, up) in enumerate(tally.at_rung)],
            "stages": tally.records, "carried_on": tally.carried_on, "trained_again": tally.trained_again, "epochs_trained": tally.epochs_trained}


def chosen_on(info: RunInfo, problem: Problem) -> dict:
    """The rows that decided which networks were kept and what the ensemble is: how many, which, and (for a
    classification) the standard error of an accuracy measured on them, at most 0.5 / sqrt(rows)."""
    rows, folds = len(info.val_y), info.config.data.fold_count
    facts = {"rows": rows, "folds": folds, "split": "training rows, out of fold" if folds else "validation rows",
             "word": "oof" if folds else "val"}
    if problem.kind == "classification" and rows:
        facts["accuracy_se_max"] = 0.5 / math.sqrt(rows)
    return facts


SCALARS = ("integer", "real", "label", "text")


def record_facts(r: Record) -> dict:
    """A record as the report shows it: each of its one-value fields (kinds of Record), and its metrics flat."""
    facts = {name: getattr(r, name) for name, kind in kinds(Record).items() if kind in SCALARS}
    for name, kind in kinds(Record).items():
        if kind == "named":
            facts.update(getattr(r, name))
    return undefined_as_none(facts)


def undefined_as_none(scores: dict) -> dict:
    """R² of constant targets is undefined: NaN from ensemble.problem, and no value at all in a record read
    back from the run file (its columns store NaN as "none"). Both become None: null in JSON, n/a in text."""
    out = {k: None if k.endswith("_r2") and isinstance(v, float) and math.isnan(v) else v for k, v in scores.items()}
    for split in ("val", "test"):
        if f"{split}_rmse" in out:  # a regression's scores: R² is always beside the RMSE
            out.setdefault(f"{split}_r2", None)
    return out


def front_records(run_dir: str, state: SearchState, info: RunInfo, ids: list[int]) -> dict[int, Record]:
    """The records of ``ids`` (a Pareto front's members), by id: those the state holds, the rest found in the run
    file's segments by a scan of their ids a slice at a time, and only those read whole."""
    named = set(ids)
    mine = {r.id: r for r in state.records if r.id in named}
    wanted = np.asarray(sorted(named - set(mine)), dtype=np.int64)
    if not wanted.size:
        return mine
    path = checkpoint_path(run_dir)

    def read() -> list[Record]:
        with History(segments_folder(path), listing(path)) as history:
            at = [(seg, start + int(row)) for seg, start, c in history.slices(("id",)) for row in np.flatnonzero(np.isin(c["id"], wanted))]
            return history.fetch(at, len(info.gene_names))
    return {**{r.id: r for r in read_beside_a_job(path, read)}, **mine}


def pareto_front(records: dict[int, Record], ids: list[int], objective: str, space) -> list[dict]:
    """The NSGA-II run's Pareto front over every successful evaluation (``ids``, kept by the strategy; ``records`` holds
    them), by fitness: each member's id, fitness, second objective and network."""
    key = OBJECTIVES[objective]
    front = []
    for ident in ids:
        r = records[ident]
        genome = space.decode(r.genome)
        front.append({"id": r.id, "fitness": r.fitness, key: r.metrics[key], "network": describe(genome), "genome": genome})
    return sorted(front, key=lambda m: (-m["fitness"], m["id"]))


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


def format_pareto(front: list[dict], metric: str) -> list[str]:
    """The Pareto front as a small table, best fitness first."""
    key = "latency_us" if front and "latency_us" in front[0] else "params"
    head = "val accuracy" if metric == "accuracy" else "val rmse"
    cost = "params" if key == "params" else "us/sample"
    lines = [f"pareto front ({len(front)} networks: {head} against {'parameters' if key == 'params' else 'inference latency'}):",
             f"  {'id':>7}  {head:>12}  {cost:>10}  network"]
    for m in front:
        value = score_text(m["fitness"]) if metric == "accuracy" else score_text(-m["fitness"], metric)
        c = f"{m[key]:,.0f}" if key == "params" else f"{m[key]:.4g}"
        lines.append(f"  {'#' + str(m['id']):>7}  {value:>12}  {c:>10}  {m['network']}")
    return lines


def _scores_text(s: dict, metric: str, searched: dict | None = None, val: str = "val") -> str:
    """Val and test scores: the headline, and the search's own metric beside it where that is another. ``val``
    names the rows chosen on ("oof": the training rows out of fold, with data.folds)."""
    if metric == "accuracy":
        text = f"{val} {score_text(s['val_accuracy'])}  test {score_text(s['test_accuracy'])}"
    else:
        text = (f"{val} rmse {score_text(s['val_rmse'], 'rmse')} r2 {score_text(s['val_r2'], 'r2')}  "
                f"test rmse {score_text(s['test_rmse'], 'rmse')} r2 {score_text(s['test_r2'], 'r2')}")
    key = (searched or {}).get("key", metric)
    if key not in (metric, "r2") and f"val_{key}" in s and f"test_{key}" in s:
        text += f"  ({key}: {val} {score_text(s[f'val_{key}'], key)}  test {score_text(s[f'test_{key}'], key)})"
    if s.get("fold_std") is not None:
        text += f"  (spread over folds {score_text(s['fold_std'], key)})"
    return text


def format_curve(e: dict, val: str = "val") -> list[str]:
    """The ensemble curve: the headline metric on val (``val``: the rows' name) and test after each pick."""
    c = e["curve"]
    n = len(c["path"])
    stride = math.ceil(n / CURVE_LINES)  # bagged selection pools up to bags x size picks: every stride-th is shown
    shown = sorted({0, n - 1, e["picks"] - 1, *range(stride - 1, n, stride)})
    every = "each pick" if stride == 1 else f"every {counted(stride, 'pick')}"
    lines = [f"ensemble curve ({e['method']}, {c['metric']} after {every}; * = the ensemble kept):"]
    for i in shown:
        mark = "*" if i + 1 == e["picks"] else " "
        lines.append(f"  {mark}{i + 1:>3}  +#{c['path'][i]:<6} {val} {score_text(c['val'][i], c['metric'])}  test {score_text(c['test'][i], c['metric'])}")
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


def format_halving(h: dict) -> str:
    """One line: each rung's stages and promotions, and how the promotions trained."""
    rungs = h["rungs"]
    parts = [f"rung {r['rung']}: {r['stages']}" + (f", {r['promoted']} promoted" if r is not rungs[-1] else " whole trainings") for r in rungs]
    return (f"successive halving (eta {h['eta']}): " + "; ".join(parts) + f"; {h['stages']} stages, {h['epochs_trained']} epochs trained; "
            f"promotions carried on {counted(h['carried_on'], 'paused training')}, trained {h['trained_again']} again from the start")


def format_summary(s: dict) -> str:
    """A few human-readable lines."""
    lines = [
        f"evaluations: {s['evaluations']} of {s['budget']}"
        + "".join(f", {n} {k}" for k, n in sorted(s["status_counts"].items()) if k not in ("ok", "paused")),
        f"wall time: {s['wall_seconds']:.1f} s over {s['sessions']} session(s); worker utilization {100 * s['worker_utilization']:.1f} %",
        f"search space: {describe_space(s.get('space'))}",
    ]
    if s.get("promotion"):
        lines.append(format_halving(s["promotion"]))
    if s.get("early_stopping"):
        e = s["early_stopping"]
        lines.append(f"early stopping: {counted(e['stopped'], 'network')} stopped below the median, saving {counted(e['epochs_saved'], 'epoch')} "
                     f"({e['epochs_trained']} trained in all)")
    metric = s["metric"]
    chosen = s.get("chosen_on") or {"word": "val"}
    word = chosen["word"]
    if "rows" in chosen:
        se = f"; an accuracy on them has a standard error of up to {chosen['accuracy_se_max']:.3f}" if "accuracy_se_max" in chosen else ""
        how = f" ({chosen['folds']} folds)" if chosen["folds"] else ""
        lines.append(f"chosen on: {chosen['rows']} {chosen['split']}{how}{se}")
    if s["best"]:
        b = s["best"]
        lines.append(f"best network #{b['id']}: {_scores_text(b, metric, s.get('search_metric'), word)}  ({describe(b['genome'])})")
    if s.get("pareto"):
        lines.extend(format_pareto(s["pareto"], metric))
    e = s["ensemble"]
    if e:
        members = ", ".join(f"#{i}" + (f" x{round(w * e['picks'])}" if round(w * e["picks"]) > 1 else "") for i, w in zip(e["members"], e["weights"]))
        u = e["test_uncertainty"]
        spread = (
            f"test uncertainty: entropy {u['entropy']:.3f}, epistemic {u['epistemic']:.3f} nats, disagreement {u['disagreement']:.3f}"
            if metric == "accuracy"
            else f"test spread: member std {u['std']:.4g}"
        )
        lines.append(
            f"ensemble ({e['method']}, {counted(e['picks'], 'pick')} of {counted(len(e['members']), 'network')}: {members}): "
            f"{_scores_text(e, metric, s.get('search_metric'), word)}  ({spread})"
        )
        lines.extend(format_curve(e, word))
        if e.get("test_calibration") and s["best"] and s["best"].get("test_calibration"):
            b, c = s["best"]["test_calibration"], e["test_calibration"]
            lines.append(f"calibration on test (negative log-likelihood, expected calibration error): best network {b['nll']:.4f}, "
                         f"{b['ece']:.4f}; ensemble {c['nll']:.4f}, {c['ece']:.4f}")
    else:
        lines.append("no network finished successfully yet")
    if s["run_dir"]:
        lines.append(f"run directory: {s['run_dir']}")
    return "\n".join(lines)


def top_networks(state: SearchState, space, k: int) -> list[dict]:
    """The ``k`` best successful networks, then every member of the stored ensemble ranked below them (a
    bagged greedy ensemble often takes a few): id, ``rank`` among the successful networks (1 is the best),
    ``ensemble_weight`` (its share of the ensemble's picks, 0 for a non-member), metrics, parameters,
    training seconds, and decoded genes."""
    ok = sorted((r for r in state.records if r.status == "ok"), key=best_first)
    weights = state.ensemble_weights()
    return [_top_row(r, place, weights, space) for place, r in enumerate(ok, 1) if place <= k or r.id in weights]


def _top_row(r: Record, place: int, weights: dict[int, float], space) -> dict:
    """A row of :func:`top_networks`: the record ranked ``place`` among the successful ones."""
    genome = space.decode(r.genome)
    return {**record_facts(r), "rank": place, "ensemble_weight": weights.get(r.id, 0.0), "network": describe(genome), "genome": genome}


def _example(r: Record) -> str:
    """A failed record as :func:`failures_by_kind` shows its kind's first: its id and message."""
    return f"#{r.id}: {r.message}" if r.message else f"#{r.id}"


def streamed_top_and_failures(path: str, state: SearchState, info: RunInfo, k: int) -> tuple[list[dict], dict[str, dict]]:
    """What :func:`top_networks` and :func:`failures_by_kind` give, from the run file's segments a slice at a time:
    the best ``k`` and the stored ensemble's members ranked, and each kind of failure counted with its first
    example, reading whole records only for the rows shown (evolve.runfile.history). Memory does not grow with
    the history."""
    listed = listing(path)
    weights = state.ensemble_weights()
    members = [state.hall_of_fame.by_id(i) for i in weights if i in state.hall_of_fame.ids]
    marks = np.asarray([standing(m.fitness, m.loss, m.id) for m in members], dtype=np.float64).reshape(-1, 3)
    better = np.zeros(len(members), dtype=np.int64)  # successful records ahead of each member
    best = np.empty((0, 5))  # the k best so far: -fitness, loss, id, segment, row
    found: dict[int, tuple[int, int]] = {}  # member id -> where it is
    kinds: dict[str, list] = {}  # status -> [count, (segment, row) of its first]
    with History(segments_folder(path), listed) as history:
        for seg, start, c in history.slices(("status", "fitness", "metrics/val_loss", "id")):
            ok = c["status"] == b"ok"
            neg, loss, ids = -c["fitness"][ok], np.where(np.isnan(c["metrics/val_loss"][ok]), np.inf, c["metrics/val_loss"][ok]), c["id"][ok]
            rows = np.flatnonzero(ok) + start
            for j, (f, l, i) in enumerate(marks):
                better[j] += int(np.count_nonzero((neg < f) | ((neg == f) & ((loss < l) | ((loss == l) & (ids < i))))))
            for i, row in zip(ids.tolist(), rows.tolist()):
                if i in weights:
                    found[i] = (seg, row)
            pool = np.concatenate([best, np.column_stack([neg, loss, ids, np.full(ids.size, seg), rows])])
            best = pool[np.lexsort((pool[:, 2], pool[:, 1], pool[:, 0]))][:k]
            failed = ~ok
            for status in np.unique(c["status"][failed]).tolist():
                first = int(np.flatnonzero(c["status"] == status)[0]) + start
                entry = kinds.setdefault(status.decode(), [0, (seg, first)])
                entry[0] += int(np.count_nonzero(c["status"] == status))
        shown = [(int(s), int(r)) for s, r in best[:, 3:5]]
        ranked = [(place, at) for place, at in enumerate(shown, 1)]
        ranked += sorted((int(better[j]) + 1, found[m.id]) for j, m in enumerate(members) if m.id in found and better[j] + 1 > len(shown))
        records = history.fetch([at for _, at in ranked] + [at for _, at in kinds.values()], len(info.gene_names))
    space = info.space()
    top = [_top_row(r, place, weights, space) for (place, _), r in zip(ranked, records)]
    failures = {status: {"count": count, "example": _example(r)} for (status, (count, _)), r in zip(kinds.items(), records[len(ranked):])}
    return top, failures


def plot_data(path: str, state: SearchState, info: RunInfo):
    """What ``--plot``'s figures draw (evolve.app.plots.PlotData), from the run file's segments a slice at a time."""
    from .plots import PlotData

    with History(segments_folder(path), listing(path)) as history:
        return PlotData.of(history.records(len(info.gene_names)), state.utilization)


def failures_by_kind(state: SearchState) -> dict[str, dict]:
    """For each status other than ok: how many, and the message of the first (a sample of what went wrong)."""
    kinds: dict[str, dict] = {}
    for r in state.records:
        if r.status != "ok":
            entry = kinds.setdefault(r.status, {"count": 0, "example": _example(r)})
            entry["count"] += 1
    return kinds


def format_top(top: list[dict], metric: str, k: int, picks: int = 0, val: str = "val") -> list[str]:
    """The table of :func:`top_networks` (``k`` asked for), with each member's share of the ensemble's ``picks``
    (``val``: what the rows chosen on are called, "oof" with data.folds)."""
    if not top:
        return []
    key = "accuracy" if metric == "accuracy" else "rmse"
    best = [t for t in top if t["rank"] <= k]
    marks = f"* = in the ensemble, with its picks of the {picks}" if picks else "no ensemble chosen"
    lines = [f"top {len(best)} networks ({marks}):",
             f"  {'id':>6}  {'rank':>4}  {val + ' ' + key:>12}  {'test ' + key:>13}  {'params':>9}  {'train s':>8}  {'picks':>5}  network"]
    for i, t in enumerate(top):
        if i == len(best):
            lines.append(f"  and the ensemble's other {counted(len(top) - len(best), 'member')}:")
        params = f"{t['params']:,.0f}" if "params" in t else "?"
        member = t["ensemble_weight"] > 0
        taken = str(round(t["ensemble_weight"] * picks)) if member else ""
        lines.append(f"  {('*' if member else ' ') + '#' + str(t['id']):>6}  {t['rank']:>4}  {score_text(t['val_' + key], key):>12}  "
                     f"{score_text(t['test_' + key], key):>13}  {params:>9}  {t['seconds']:>8.1f}  {taken:>5}  {t['network']}")
    return lines


def format_failures(failures: dict[str, dict]) -> list[str]:
    if not failures:
        return ["not ok: none"]
    return ["not ok, by kind:"] + [f"  {kind}: {f['count']}  (e.g. {f['example']})" for kind, f in sorted(failures.items())]


def report(run_dir: str, as_json: bool = False, top: int = 10, csv_path: str | None = None, plot_dir: str | None = None,
           force: bool = False) -> str | None:
    """``evens report``: the summary, the top networks and the failures; optionally a CSV and figures. With ``csv_path``
    ``-``, the CSV goes to standard output as it is made, and nothing is returned."""
    path = checkpoint_path(run_dir)
    state, info = read_run(path, history=False, memory=False)  # nothing here reads the master's memory
    search = info.config.search
    if csv_path and csv_path != "-":
        _refuse_to_replace(csv_path, force)
    streamed = state.tally is not None
    if streamed:  # the summary from the run's account, the tables, the CSV and the figures a slice of the history at a time
        summary = summarize(state, info, run_dir, state.tally)
        summary["top"], summary["failures"] = read_beside_a_job(path, lambda: streamed_top_and_failures(path, state, info, top))
    else:  # a run file from before the account was kept: every record
        state, info = read_run(path)
        summary = summarize(state, info, run_dir)
        summary["top"] = top_networks(state, info.space(), top)
        summary["failures"] = failures_by_kind(state)
    space = info.space()
    notes = []
    if csv_path:
        from .csv_table import write_csv

        rows = write_csv(csv_path, path, state, info, streamed)
        if csv_path == "-":
            return None
        notes.append(f"wrote {csv_path}: {rows} evaluations")
    if plot_dir:
        from .plots import PlotData, write_plots

        for name in ("search.png", "ensemble.png", "workers.png", "pareto.png", "hyperparameters.png"):
            _refuse_to_replace(os.path.join(plot_dir, name), force)
        search = info.config.search
        objective = OBJECTIVES[search.second_objective] if capabilities(search.mode).objectives == 2 else None
        data = read_beside_a_job(path, lambda: plot_data(path, state, info)) if streamed else PlotData.of([state.records], state.utilization)
        written = write_plots(data, summary, space, plot_dir, objective)
        notes.append(f"wrote {len(written)} figures: {', '.join(written)}")
    if as_json:
        return json.dumps(summary, indent=2, sort_keys=True)
    text = format_summary(summary)
    picks = summary["ensemble"]["picks"] if summary["ensemble"] else 0
    extra = format_top(summary["top"], summary["metric"], top, picks, summary["chosen_on"]["word"]) + format_failures(summary["failures"])
    return "\n".join([text, *extra, *notes])


def _refuse_to_replace(path: str, force: bool) -> None:
    if os.path.exists(path) and not force:
        raise RunDirError(f"{path}: already exists; refusing to replace it (use --force)")
