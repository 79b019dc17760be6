"""The fold trainings a cross-validated network had back when the checkpoint was written.

With ``data.folds``, a network pending at a checkpoint may have some of its fold trainings done
(``SearchState.folding``); they are kept here so that a resume trains only the rest::

    /folds/<id>/<fold>   attrs: outcome (JSON: the Outcome fields of that fold's Evaluation)
        val_pred, test_pred    its predictions on the fold's rows and on test
        weights/<name>         its trained state dict

One seal (``crc32`` on ``/folds``) covers the group's attributes and every dataset below it; the
parts are numbers and JSON only, so reading them executes nothing.
"""
from __future__ import annotations

import json

import h5py
import numpy as np

from ensemble import store
from ensemble.results import OUTCOME_FIELDS, Evaluation

GROUP = "folds"


def write_folding(f: h5py.File, folding: dict[int, dict[int, Evaluation]]) -> None:
    """``folding`` (network id -> fold -> its evaluation, with payload) as ``/folds``, sealed."""
    group = f.create_group(GROUP)
    for ident, parts in folding.items():
        for fold, ev in parts.items():
            g = group.create_group(f"{int(ident)}/{int(fold)}")
            g.attrs["outcome"] = json.dumps(ev.outcome())
            for name, array in ev.payload().items():
                store.checksummed(g, name, array)
    store.seal(group)


def read_folding(f: h5py.File) -> dict[int, dict[int, Evaluation]]:
    """What :func:`write_folding` wrote (nothing for a file without folds); ValueError for a damaged group."""
    if GROUP not in f:
        return {}
    group = f[GROUP]
    store.check_seal(group, f"/{GROUP}")
    folding: dict[int, dict[int, Evaluation]] = {}
    for ident, parts in group.items():
        for fold, g in parts.items():
            outcome = json.loads(g.attrs["outcome"])
            if set(outcome) != set(OUTCOME_FIELDS):
                raise ValueError(f"/{GROUP}/{ident}/{fold}: its outcome has fields {sorted(outcome)}")
            arrays: dict[str, np.ndarray] = {}
            g.visititems(lambda name, obj: arrays.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
            ev = Evaluation(**outcome)
            if arrays:
                ev.take_payload(arrays)
            folding.setdefault(int(ident), {})[int(fold)] = ev
    return folding
