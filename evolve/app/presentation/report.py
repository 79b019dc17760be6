"""Summaries of a run, from its checkpoint alone: the best network, the ensemble and its curve."""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import numpy as np

from ensemble.combine import combine, ensemble_prediction, mean_uncertainty
from ensemble.hall_of_fame import standing
from ensemble.problem import Problem, problem_from_dict
from ensemble.results import kinds
from evolve.app.infra.rundir import checkpoint_path
from evolve.app.presentation.report_text import describe, format_failures, format_summary, format_top
from evolve.app.presentation.summary import (
    BestNetwork,
    ChosenOn,
    Curve,
    EarlyStopping,
    EnsembleFacts,
    Failure,
    Hall,
    Halving,
    ParetoMember,
    Rung,
    SearchMetric,
    Summary,
    TopNetwork,
)
from evolve.engine.promotion import rung_count
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile.checkpoint import RunInfo
from evolve.runfile.history import History
from evolve.runfile.version import damage_as_one_line, open_run
from evolve.search.pareto import OBJECTIVES
from evolve.search.records import Record, best_first
from evolve.search.registry import capabilities
from evolve.search.tally import Tally


def ensemble_scores(state: SearchState, info: RunInfo, problem: Problem) -> EnsembleFacts | None:
    """The stored ensemble's members, weights, metrics on val and test, mean test uncertainty and curve."""
    sel = state.selection
    if sel is None:
        return None
    members = [state.hall_of_fame.by_id(i) for i in sel.ids]
    metrics: dict[str, float | None] = {}
    for split, y in (("val", info.val_y), ("test", info.test_y)):
        preds = [m.val_pred if split == "val" else m.test_pred for m in members]
        combined = combine(problem, preds, sel.weights, len(y))
        # a user's metric is the selection curve's (reading a run imports none of the user's code)
        scores = problem.scores(ensemble_prediction(problem, combined), y, user=False)
        metrics.update(undefined_as_none({f"{split}_{k}": v for k, v in scores.items()}))
        metrics.setdefault(f"{split}_{problem.metric_key}", (sel.curve_val if split == "val" else sel.curve_test)[sel.picks - 1])
        if split == "test":
            uncertainty = mean_uncertainty(problem, combined)
            calibration = problem.calibration(ensemble_prediction(problem, combined), y) if problem.kind == "classification" else None
    return EnsembleFacts(method=sel.method, size=sel.size, picks=sel.picks, members=sel.ids, weights=sel.weights,
                         curve=Curve(path=list(sel.path), val=list(sel.curve_val), test=list(sel.curve_test), metric=problem.metric_key),
                         metrics=metrics, test_uncertainty=uncertainty, test_calibration=calibration)


def tally_of(records: list[Record], info: RunInfo) -> Tally:
    """The account of ``records`` (a run's history, read back), as the master keeps it while it records."""
    search = info.config.search
    return Tally.of(records, info.space(), rung_count(search.eta, search.min_budget) if search.promotion else 0, info.config.data.fold_count)


def summarize(state: SearchState, info: RunInfo, run_dir: str | None = None, tally: Tally | None = None, pareto: bool = True,
              history: History | None = None) -> Summary:
    """The facts ``evens report --json`` prints (its ``to_dict()``): counts, best member, ensemble, time, utilization. From the account
    ``tally`` where given (the state file's: no history read), else from the state's records. A search of two
    objectives: its Pareto front too (``pareto``), whose members are read from ``run_dir``'s history where the state
    does not hold every record (from ``history``, the state's own checkpoint's segments held open, where given)."""
    problem = problem_from_dict(info.data["problem"])
    tally = tally if tally is not None else tally_of(state.records, info)
    hall = state.hall_of_fame
    space = info.space()
    search = info.config.search
    front = None
    if capabilities(search.mode).objectives == 2 and pareto and (run_dir or not state.dropped):
        ids = state.strategy.get("front", [])
        records = state.by_id() if not state.dropped else front_records(run_dir, state, info, ids, history)
        front = pareto_front(records, ids, search.second_objective, space)
    best = None
    if tally.best is not None:
        kept = hall.by_id(tally.best.id) if tally.best.id in hall.ids else None
        calibration = problem.calibration(kept.test_pred, info.test_y) if problem.kind == "classification" and kept is not None else None
        best = BestNetwork(**record_facts(tally.best), genome=space.decode(tally.best.genome), test_calibration=calibration)
    stopping = None
    if tally.stopped:
        stopping = EarlyStopping(stopped=tally.stopped, epochs_saved=tally.epochs_saved, epochs_trained=tally.epochs_trained)
    return Summary(
        run_dir=run_dir,
        problem=problem.kind,
        metric="accuracy" if problem.kind == "classification" else "rmse",
        search_metric=SearchMetric(name=problem.metric, key=problem.metric_key, higher_is_better=problem.higher_is_better),
        evaluations=tally.networks,
        budget=search.evaluations,
        status_counts=dict(tally.statuses),
        pending=len(state.pending),
        wall_seconds=info.wall_seconds,
        worker_utilization=state.utilization,
        sessions=info.sessions,
        space=info.preset,
        data=info.data,
        hall_of_fame=Hall(members=len(hall), capacity=hall.capacity, ids=hall.ids),
        chosen_on=chosen_on(info, problem),
        best=best,
        ensemble=ensemble_scores(state, info, problem),
        early_stopping=stopping,
        promotion=halving_facts(tally, search) if search.promotion else None,
        pareto=front,
    )


def halving_facts(tally: Tally, search) -> Halving:
    """Successive halving's account: each rung's stages and how many went on, and how the promotions trained."""
    rungs = [Rung(rung=i, stages=n, promoted=up) for i, (n, up) in enumerate(tally.at_rung)]
    return Halving(eta=search.eta, min_budget=search.min_budget, rungs=rungs, stages=tally.records, carried_on=tally.carried_on,
                   trained_again=tally.trained_again, epochs_trained=tally.epochs_trained)


def chosen_on(info: RunInfo, problem: Problem) -> ChosenOn:
    """The rows that decided which networks were kept and what the ensemble is: how many, which, and (for a
    classification) the standard error of an accuracy measured on them, at most 0.5 / sqrt(rows)."""
    rows, folds = len(info.val_y), info.config.data.fold_count
    se_max = 0.5 / math.sqrt(rows) if problem.kind == "classification" and rows else None
    return ChosenOn(rows=rows, folds=folds, split="training rows, out of fold" if folds else "validation rows",
                    word="oof" if folds else "val", accuracy_se_max=se_max)


SCALARS = ("integer", "real", "label", "text")


def record_facts(r: Record) -> dict:
    """A record's facts as :class:`~evolve.app.presentation.summary.NetworkFacts` takes them: each of its one-value fields (kinds of
    Record), and ``metrics``, its metrics with an undefined R² as None."""
    facts = {name: getattr(r, name) for name, kind in kinds(Record).items() if kind in SCALARS}
    metrics = {}
    for name, kind in kinds(Record).items():
        if kind == "named":
            metrics.update(getattr(r, name))
    return {**facts, "metrics": undefined_as_none(metrics)}


def undefined_as_none(scores: dict) -> dict:
    """R² of constant targets is undefined: NaN from ensemble.problem, and no value at all in a record read
    back from the run file (its columns store NaN as "none"). Both become None: null in JSON, n/a in text."""
    out = {k: None if k.endswith("_r2") and isinstance(v, float) and math.isnan(v) else v for k, v in scores.items()}
    for split in ("val", "test"):
        if f"{split}_rmse" in out:  # a regression's scores: R² is always beside the RMSE
            out.setdefault(f"{split}_r2", None)
    return out


def front_records(run_dir: str, state: SearchState, info: RunInfo, ids: list[int], history: History | None = None) -> dict[int, Record]:
    """The records of ``ids`` (a Pareto front's members), by id: those the state holds, the rest found in the run
    file's segments by a scan of their ids a slice at a time, and only those read whole. ``history``: the segments of
    the checkpoint ``state`` was read from, held open (else those of the run's checkpoint now, opened here)."""
    named = set(ids)
    mine = {r.id: r for r in state.records if r.id in named}
    wanted = np.asarray(sorted(named - set(mine)), dtype=np.int64)
    if not wanted.size:
        return mine

    def read(history: History) -> list[Record]:
        at = [(seg, start + int(row)) for seg, start, c in history.slices(("id",)) for row in np.flatnonzero(np.isin(c["id"], wanted))]
        return history.fetch(at, len(info.gene_names))
    path = checkpoint_path(run_dir)
    if history is not None:
        with damage_as_one_line(path):
            return {**{r.id: r for r in read(history)}, **mine}
    with open_run(path) as run, damage_as_one_line(path):
        return {**{r.id: r for r in read(run.history)}, **mine}


def pareto_front(records: dict[int, Record], ids: list[int], objective: str, space) -> list[ParetoMember]:
    """The NSGA-II run's Pareto front over every successful evaluation (``ids``, kept by the strategy; ``records`` holds
    them), by fitness: each member's id, fitness, second objective and network."""
    key = OBJECTIVES[objective]
    front = []
    for ident in ids:
        r = records[ident]
        genome = space.decode(r.genome)
        front.append(ParetoMember(id=r.id, fitness=r.fitness, objective=key, cost=r.metrics[key], network=describe(genome), genome=genome))
    return sorted(front, key=lambda m: (-m.fitness, m.id))


def top_networks(state: SearchState, space, k: int) -> list[TopNetwork]:
    """The ``k`` best successful networks, then every member of the stored ensemble ranked below them (a
    bagged greedy ensemble often takes a few): id, ``rank`` among the successful networks (1 is the best),
    ``ensemble_weight`` (its share of the ensemble's picks, 0 for a non-member), metrics, parameters,
    training seconds, and decoded genes."""
    ok = sorted((r for r in state.records if r.status == "ok"), key=best_first)
    weights = state.ensemble_weights()
    return [_top_row(r, place, weights, space) for place, r in enumerate(ok, 1) if place <= k or r.id in weights]


def _top_row(r: Record, place: int, weights: dict[int, float], space) -> TopNetwork:
    """A row of :func:`top_networks`: the record ranked ``place`` among the successful ones."""
    genome = space.decode(r.genome)
    facts = {**record_facts(r), "network": describe(genome)}  # (the record's own network, an id, gives way to the words)
    return TopNetwork(**facts, rank=place, ensemble_weight=weights.get(r.id, 0.0), genome=genome)


def _example(r: Record) -> str:
    """A failed record as :func:`failures_by_kind` shows its kind's first: its id and message."""
    return f"#{r.id}: {r.message}" if r.message else f"#{r.id}"


def streamed_top_and_failures(history: History, state: SearchState, info: RunInfo, k: int) -> tuple[list[TopNetwork], dict[str, Failure]]:
    """What :func:`top_networks` and :func:`failures_by_kind` give, from the run file's segments (``history``: those of
    the checkpoint ``state`` was read from, held open) a slice at a time: the best ``k`` and the stored ensemble's
    members ranked, and each kind of failure counted with its first example, reading whole records only for the rows
    shown (evolve.runfile.history). Memory does not grow with the history."""
    weights = state.ensemble_weights()
    members = [state.hall_of_fame.by_id(i) for i in weights if i in state.hall_of_fame.ids]
    marks = np.asarray([standing(m.fitness, m.loss, m.id) for m in members], dtype=np.float64).reshape(-1, 3)
    better = np.zeros(len(members), dtype=np.int64)  # successful records ahead of each member
    best = np.empty((0, 5))  # the k best so far: -fitness, loss, id, segment, row
    found: dict[int, tuple[int, int]] = {}  # member id -> where it is
    kinds: dict[str, list] = {}  # status -> [count, (segment, row) of its first]
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
    failures = {status: Failure(count=count, example=_example(r)) for (status, (count, _)), r in zip(kinds.items(), records[len(ranked):])}
    return top, failures


def plot_data(history: History, state: SearchState, info: RunInfo):
    """What ``--plot``'s figures draw (evolve.app.presentation.plots.PlotData), from the run file's segments (``history``, held open) a
    slice at a time."""
    from evolve.app.presentation.plots import PlotData

    return PlotData.of(history.records(len(info.gene_names)), state.utilization)


def failures_by_kind(state: SearchState) -> dict[str, Failure]:
    """For each status other than ok: how many, and the message of the first (a sample of what went wrong)."""
    counts: dict[str, int] = {}
    first: dict[str, Record] = {}
    for r in state.records:
        if r.status != "ok":
            counts[r.status] = counts.get(r.status, 0) + 1
            first.setdefault(r.status, r)
    return {status: Failure(count=n, example=_example(first[status])) for status, n in counts.items()}


def report(run_dir: str, as_json: bool = False, top: int = 10, csv_path: str | None = None, plot_dir: str | None = None,
           force: bool = False) -> str | None:
    """``evens report``: the summary, the top networks and the failures; optionally a CSV and figures. With ``csv_path``
    ``-``, the CSV goes to standard output as it is made, and nothing is returned."""
    path = checkpoint_path(run_dir)
    with open_run(path) as run:  # one checkpoint, its segments open: what a job writes meanwhile changes nothing read here
        return _report(run, run_dir, as_json, top, csv_path, plot_dir, force)


def _report(run, run_dir: str, as_json: bool, top: int, csv_path: str | None, plot_dir: str | None, force: bool) -> str | None:
    """:func:`report` of the checkpoint ``run`` (evolve.runfile.version.RunVersion) holds open."""
    path = run.path
    state, info = run.load()  # the state file alone (nothing here reads the master's memory)
    if csv_path and csv_path != "-":
        _refuse_to_replace(csv_path, force)
    history = run.history if state.tally is not None else None
    if history is not None:  # the summary from the run's account, the tables, the CSV and the figures a slice of the history at a time
        summary = summarize(state, info, run_dir, state.tally, history=history)
        with damage_as_one_line(path):
            shown, failures = streamed_top_and_failures(history, state, info, top)
    else:  # a run file from before the account was kept: every record
        state, info = run.load(history=True)
        summary = summarize(state, info, run_dir)
        shown, failures = top_networks(state, info.space(), top), failures_by_kind(state)
    summary = replace(summary, top=shown, failures=failures)
    space = info.space()
    notes = []
    if csv_path:
        from evolve.app.presentation.csv_table import write_csv

        rows = write_csv(csv_path, path, state, info, history)
        if csv_path == "-":
            return None
        notes.append(f"wrote {csv_path}: {rows} evaluations")
    if plot_dir:
        from evolve.app.presentation.plots import PlotData, write_plots

        for name in ("search.png", "ensemble.png", "workers.png", "pareto.png", "hyperparameters.png"):
            _refuse_to_replace(os.path.join(plot_dir, name), force)
        search = info.config.search
        objective = OBJECTIVES[search.second_objective] if capabilities(search.mode).objectives == 2 else None
        if history is not None:
            with damage_as_one_line(path):
                data = plot_data(history, state, info)
        else:
            data = PlotData.of([state.records], state.utilization)
        written = write_plots(data, summary, space, plot_dir, objective)
        notes.append(f"wrote {len(written)} figures: {', '.join(written)}")
    if as_json:
        return json.dumps(summary.to_dict(), indent=2, sort_keys=True)
    text = format_summary(summary)
    picks = summary.ensemble.picks if summary.ensemble else 0
    extra = format_top(shown, summary.metric, top, picks, summary.chosen_on.word) + format_failures(failures)
    return "\n".join([text, *extra, *notes])


def _refuse_to_replace(path: str, force: bool) -> None:
    if os.path.exists(path) and not force:
        raise RunDirError(f"{path}: already exists; refusing to replace it (use --force)")
