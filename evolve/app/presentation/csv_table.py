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
``-inf``; a curve is its values separated by spaces. The rows are in the order the evaluations were
recorded (as they finished; sort by ``id`` for the order they were proposed in), written a slice of the
history at a time, so a CSV of millions of evaluations takes no more memory than one of a thousand.
"""
from __future__ import annotations

import csv
import io
import math
import os
import sys
from typing import TextIO

from ensemble.results import kinds
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile.checkpoint import RunInfo
from evolve.runfile.history import History
from evolve.runfile.tempfiles import exclusive_temp
from evolve.search.records import Record
from evolve.search.space import SearchSpace


class Table:
    """The CSV's columns for a search space and the metric names the records have; :meth:`row` makes a record's row."""

    def __init__(self, space: SearchSpace, metric_names: dict[str, list[str]], weights: dict[int, float]):
        self.space, self.metric_names, self.weights = space, metric_names, weights
        self.fields = kinds(Record)
        self.order = ["id"] + [name for name, kind in self.fields.items() if name != "id" and kind != "vector"]
        self.header = []
        for name in self.order:
            kind = self.fields[name]
            self.header += metric_names[name] if kind == "named" else [f"{name.removesuffix('s')}_a", f"{name.removesuffix('s')}_b"] \
                if kind == "pair" else [name]
        self.header += ["budget", "ensemble_weight"] + [f"gene_{g}" for g in space.names]

    def row(self, r: Record) -> list:
        row = []
        for name in self.order:
            value, kind = getattr(r, name), self.fields[name]
            if kind == "named":
                row += [value.get(m, "") for m in self.metric_names[name]]
            elif kind == "pair":
                row += list(value)
            elif kind == "reals":
                row.append(" ".join(map(_cell, value)))
            else:
                row.append(value)
        active = self.space.decode(r.genome)  # the active genes' values
        return row + [budget(r), self.weights.get(r.id, 0.0)] + [active.get(g, "") for g in self.space.names]


def named_fields() -> list[str]:
    return [name for name, kind in kinds(Record).items() if kind == "named"]


def records_table(state: SearchState, space: SearchSpace) -> tuple[list[str], list[list]]:
    """The header and rows of the CSV, in the order recorded (every record in memory)."""
    metric_names = {name: sorted({k for r in state.records for k in getattr(r, name)}) for name in named_fields()}
    table = Table(space, metric_names, state.ensemble_weights())
    return table.header, [table.row(r) for r in state.records]


def write_streamed(out: TextIO, history: History, state: SearchState, space: SearchSpace, n_genes: int) -> int:
    """Write the CSV of the run whose segments ``history`` holds open to ``out``, a slice of records at a time (memory
    does not grow with the history); ``state``: its state file's (the stored ensemble's weights). Returns the rows."""
    table = Table(space, {name: history.named(name) for name in named_fields()}, state.ensemble_weights())
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.header)
    rows = 0
    for records in history.records(n_genes):
        writer.writerows([_cell(v) for v in table.row(r)] for r in records)
        rows += len(records)
    return rows


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


def write_csv(csv_path: str, path: str, state: SearchState, info: RunInfo, history: History | None) -> int:
    """``evens report --csv``: the CSV of every evaluation of the run whose state file is ``path`` to ``csv_path``
    (``-``: standard output): from ``history`` (the segments of the checkpoint ``state`` was read from, held open: see
    evolve.runfile.version) a slice at a time where given, else from ``state``'s records. A file is written under a
    temporary name and renamed when whole, so a failure (a damaged segment, a full disk) leaves no half-written CSV.
    Returns the rows written."""
    space = info.space()

    def emit(out: TextIO) -> int:
        if history is None:
            out.write(to_csv(state, space))
            return len(state.records)
        return write_streamed(out, history, state, space, len(info.gene_names))

    try:
        if csv_path == "-":
            return emit(sys.stdout)
        tmp = ""
        try:
            tmp = exclusive_temp(csv_path)
            with open(tmp, "w", encoding="utf-8") as f:
                rows = emit(f)
            os.replace(tmp, csv_path)
        except OSError as exc:
            raise RunDirError(f"{csv_path}: cannot write it ({exc.strerror or exc})") from None
        finally:
            if tmp and os.path.exists(tmp):
                os.remove(tmp)
        return rows
    except (KeyError, ValueError) as exc:  # a segment damaged past its CRC check
        raise RunDirError(f"{path}: damaged run file ({type(exc).__name__}: {exc})") from None
