"""``evens report --csv``: one row per evaluation, for pandas, R or a spreadsheet.

The columns follow :class:`~evolve.search.records.Record`'s fields: ``id`` first, then each field
in its declared order (``status``, ``fitness``, every metric any evaluation reported, ``seconds``,
``epochs_done``, ``message``, ``curve``, ``parent_a`` and ``parent_b``, ``operators``, ``worker``,
``started``, ``finished``; with successive halving also ``rung`` and ``network``), then ``budget`` (the
epochs the network had trained when the row's training ended: with successive halving, the stage's rung
budget), ``ensemble_weight`` (the network's share of the stored ensemble's
picks, 0 if not a member; the weights sum to 1), and last one ``gene_<name>`` column for every gene
of the search space, in genome order. A gene that is inactive for a network (the kernel size of an
MLP) is empty: it did not shape that network. A metric an evaluation did not report is empty too.
Numbers are written in full precision; ``-inf`` fitness (a failed evaluation) is written as
``-inf``; a curve is its values separated by spaces.
"""
from __future__ import annotations

import csv
import io
import math

from ensemble.results import kinds
from evolve.engine.state import SearchState
from evolve.search.records import Record
from evolve.search.space import SearchSpace


def records_table(state: SearchState, space: SearchSpace) -> tuple[list[str], list[list]]:
    """The header and rows of the CSV, in evaluation order."""
    fields = kinds(Record)
    metric_names = {name: sorted({k for r in state.records for k in getattr(r, name)}) for name, kind in fields.items() if kind == "named"}
    weights = state.ensemble_weights()
    order = ["id"] + [name for name, kind in fields.items() if name != "id" and kind != "vector"]
    header = []
    for name in order:
        kind = fields[name]
        header += metric_names[name] if kind == "named" else [f"{name.removesuffix('s')}_a", f"{name.removesuffix('s')}_b"] \
            if kind == "pair" else [name]
    header += ["budget", "ensemble_weight"] + [f"gene_{g}" for g in space.names]
    rows = []
    for r in sorted(state.records, key=lambda r: r.id):
        row = []
        for name in order:
            value, kind = getattr(r, name), fields[name]
            if kind == "named":
                row += [value.get(m, "") for m in metric_names[name]]
            elif kind == "pair":
                row += list(value)
            elif kind == "reals":
                row.append(" ".join(map(_cell, value)))
            else:
                row.append(value)
        active = space.active(r.genome)
        values = space.key(r.genome)
        row += [budget(r), weights.get(r.id, 0.0)] + [v if active[g] else "" for g, v in zip(space.names, values)]
        rows.append(row)
    return header, rows


def budget(r: Record) -> int:
    """The epochs the network had trained when this record's training ended: its own, or with successive halving
    those its stage carried on from as well (a promotion that trained again from the start did them all itself)."""
    return int(r.metrics.get("carried_on_from", 0)) + r.epochs_done


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
