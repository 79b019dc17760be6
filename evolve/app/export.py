"""``evens report --csv``: one row per evaluation, for pandas, R or a spreadsheet.

Columns, in this order: ``id``, ``status``, ``fitness`` (higher is better: the validation accuracy,
or minus the validation RMSE), every metric any evaluation reported (``val_accuracy``,
``test_loss``, ``params``, ...; empty where an evaluation has none), ``seconds`` (training time),
``epochs_done``, ``worker`` (MPI rank), ``started`` and ``finished`` (seconds since the Unix epoch),
``parent_a`` and ``parent_b`` (ids, -1 for none), ``operators``, ``in_ensemble`` (the member's
weight in the stored ensemble, 0 if not a member), ``message``, then the decoded hyperparameters
(``gene_<name>``; inactive genes hold their defaults). Numbers are written in full precision;
``-inf`` fitness (a failed evaluation) is written as ``-inf``.
"""
from __future__ import annotations

import csv
import io
import math

from ..master import SearchState
from ..space import SearchSpace


def records_table(state: SearchState, space: SearchSpace) -> tuple[list[str], list[list]]:
    """The header and rows of the CSV, in evaluation order."""
    metric_names = sorted({name for r in state.records for name in r.metrics})
    gene_names = list(space.decode(state.records[0].genome)) if state.records else []
    weights: dict[int, float] = {}
    if state.selection is not None:
        for ident, w in zip(state.selection.ids, state.selection.weights):
            weights[ident] = weights.get(ident, 0.0) + w
    header = (["id", "status", "fitness", *metric_names, "seconds", "epochs_done", "worker", "started", "finished",
               "parent_a", "parent_b", "operators", "in_ensemble", "message"] + [f"gene_{g}" for g in gene_names])
    rows = []
    for r in sorted(state.records, key=lambda r: r.id):
        genes = space.decode(r.genome)
        rows.append([r.id, r.status, r.fitness, *(r.metrics.get(m, "") for m in metric_names), r.seconds, r.epochs_done,
                     r.worker, r.started, r.finished, r.parents[0], r.parents[1], r.operators, weights.get(r.id, 0.0),
                     r.message, *(genes.get(g, "") for g in gene_names)])
    return header, rows


def _cell(value) -> str:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("-inf" if value < 0 else "inf" if value > 0 else "nan")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_csv(state: SearchState, space: SearchSpace) -> str:
    header, rows = records_table(state, space)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([_cell(v) for v in row] for row in rows)
    return out.getvalue()
