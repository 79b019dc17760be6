"""Rows of a declared dataclass as plain numpy columns, and back: how the run file stores records.

The columns follow the fields of the class (declared with :func:`ensemble.results.column`), each by
its kind:

========  =====================================================================
integer   int64, one per row
real      float64, one per row
label     fixed-width UTF-8 bytes (a few short values: a status, operators)
text      ``<name>``: every row's UTF-8 bytes one after the other (uint8), and
          ``<name>_length``: each row's length in bytes
reals     ``<name>``: every row's floats one after the other (float64), and
          ``<name>_length``: each row's count
vector    (rows, width) float64: the width is fixed per run (a genome)
pair      (rows, 2) int64
named     a dict of float64 columns, one per name that any row has; NaN where a row has none
========  =====================================================================

So every column is a plain array, and concatenating two tables' columns (:func:`concatenated`) is
the table of their rows. Decoding reads numbers and bytes only: nothing is executed.
"""
from __future__ import annotations

import itertools
import math
from operator import attrgetter

import numpy as np

from ensemble.results import kinds

FLAT = ("text", "reals")  # kinds stored as a flat array beside a ``<name>_length`` column


def fixed(values: list[str]) -> np.ndarray:
    """Strings as a fixed-width byte array (UTF-8)."""
    return np.array([v.encode() for v in values], dtype=bytes) if values else np.zeros(0, dtype="S1")


def decoded(values: np.ndarray) -> list[str]:
    """Fixed-width strings (or a list of bytes) as ``str``, each distinct value decoded once."""
    seen: dict[bytes, str] = {}
    out = []
    for v in values.tolist() if isinstance(values, np.ndarray) else values:
        s = seen.get(v)
        if s is None:
            s = seen[v] = v.decode()
        out.append(s)
    return out


def encode(rows: list, cls, width: int) -> dict:
    """The columns of ``rows`` (instances of ``cls``); ``width``: the length of every vector field."""
    n = len(rows)
    columns: dict = {}
    for name, kind in kinds(cls).items():
        values = list(map(attrgetter(name), rows))
        if kind == "integer":
            columns[name] = np.fromiter(values, np.int64, n)
        elif kind == "real":
            columns[name] = np.fromiter(values, np.float64, n)
        elif kind == "label":
            columns[name] = fixed(values)
        elif kind == "text":
            encoded = {v: v.encode() for v in set(values)}  # most messages are empty: each distinct one encoded once
            parts = [encoded[v] for v in values]
            columns[name] = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
            columns[f"{name}_length"] = np.fromiter(map(len, parts), np.int64, n)
        elif kind == "reals":
            columns[f"{name}_length"] = np.fromiter(map(len, values), np.int64, n)
            columns[name] = np.fromiter(itertools.chain.from_iterable(values), np.float64, int(columns[f"{name}_length"].sum()))
        elif kind == "vector":
            columns[name] = np.fromiter(itertools.chain.from_iterable(values), np.float64, n * width).reshape(n, width)
        elif kind == "pair":
            columns[name] = np.fromiter(itertools.chain.from_iterable(values), np.int64, 2 * n).reshape(n, 2)
        else:  # named
            names = sorted({k for v in values for k in v})
            columns[name] = {k: np.fromiter((v.get(k, math.nan) for v in values), np.float64, n) for k in names}
    return columns


# what each kind's column holds: numpy dtype kinds, and its number of dimensions
_DTYPES = {"integer": ("iu", 1), "real": ("f", 1), "label": ("S", 1), "text": ("u", 1), "reals": ("f", 1), "vector": ("f", 2),
           "pair": ("iu", 2), "named": ("f", 1)}


def decode(columns: dict, cls, width: int | None = None) -> list:
    """The rows of ``columns`` (as :func:`encode` makes them) as instances of ``cls``; ``ValueError`` if a
    column is missing, holds another type or shape (a vector not ``width`` wide, when given), the columns
    differ in length, or a flat column does not add up."""
    fields = kinds(cls)
    try:
        rows = {name: columns[name] for name, kind in fields.items() if kind not in FLAT}
        rows.update({f"{name}_length": columns[f"{name}_length"] for name, kind in fields.items() if kind in FLAT})
        for name, kind in fields.items():
            _check(name, kind, columns[name], width)
            if kind in FLAT:
                _check(f"{name}_length", "integer", columns[f"{name}_length"], width)
    except KeyError as exc:
        raise ValueError(f"the column {exc.args[0]!r} is missing") from None
    lengths = {name: len(v) for name, v in rows.items() if not isinstance(v, dict)}
    lengths.update({f"{name}/{k}": len(c) for name, v in rows.items() if isinstance(v, dict) for k, c in v.items()})
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the columns have different lengths ({lengths})")
    n = next(iter(lengths.values()), 0)
    values = {name: _values(kind, name, columns, n) for name, kind in fields.items()}
    return [cls(**dict(zip(values, row))) for row in zip(*values.values())] if n else []


def _check(name: str, kind: str, column, width: int | None) -> None:
    codes, ndim = _DTYPES[kind]
    for key, values in column.items() if kind == "named" else ((name, column),):
        shape = getattr(values, "shape", ())
        if getattr(values, "dtype", None) is None or values.dtype.kind not in codes or len(shape) != ndim:
            raise ValueError(f"the column {key!r} holds {getattr(values, 'dtype', type(values).__name__)} {shape}, not {kind} values")
    if kind == "pair" and column.shape[1] != 2 or kind == "vector" and width is not None and column.shape[1] != width:
        raise ValueError(f"the column {name!r} has {column.shape[1]} values a row, not {2 if kind == 'pair' else width}")
    if kind == "text" and column.dtype.itemsize != 1:
        raise ValueError(f"the column {name!r} holds {column.dtype}, not UTF-8 bytes")


def _values(kind: str, name: str, columns: dict, n: int) -> list:
    column = columns[name]
    if kind in ("integer", "real", "vector"):
        return column.tolist()
    if kind == "label":
        return decoded(column)
    if kind == "pair":
        return list(map(tuple, column.tolist()))
    if kind == "text":
        return decoded(_split(column.tobytes(), columns[f"{name}_length"], name))
    if kind == "reals":
        return _split(column.tolist(), columns[f"{name}_length"], name)
    named = {k: v.tolist() for k, v in column.items()}  # named: NaN means the row has no such value
    return [{k: v[i] for k, v in named.items() if v[i] == v[i]} for i in range(n)]


def _split(flat, lengths: np.ndarray, what: str) -> list:
    """``flat`` (a list, or bytes) cut into consecutive pieces of ``lengths``."""
    ends = np.cumsum(lengths).tolist()
    if (ends[-1] if ends else 0) != len(flat) or (lengths < 0).any():
        raise ValueError(f"the {what} column does not add up to its lengths")
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def concatenated(parts: list[dict]) -> dict:
    """The columns of several tables' rows, one table after the other (a named value that only some
    tables have is NaN in the others)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for key, first in parts[0].items():
        if isinstance(first, dict):
            names = sorted({k for p in parts for k in p[key]})
            out[key] = {k: np.concatenate([p[key].get(k, np.full(_rows(p), math.nan)) for p in parts]) for k in names}
        else:
            out[key] = np.concatenate([p[key] for p in parts])
    return out


def _rows(columns: dict) -> int:
    """How many rows a table's columns hold (a flat column beside its lengths holds another count)."""
    return next((len(v) for k, v in columns.items() if not isinstance(v, dict) and f"{k}_length" not in columns), 0)
