"""Build, train and combine networks: no MPI and no search logic in here.

``specs`` describes a network and its training in plain values, ``problem`` says
what is learned and how it is scored, ``models`` turns a spec into a torch
module, ``train`` trains and scores one network on resident data,
``hall_of_fame`` keeps the best networks whole, ``select`` chooses the ensemble
from them, ``combine`` averages members' predictions and measures the
ensemble's uncertainty, ``store`` reads and writes all of it in a run file,
``predict`` applies it to new data (``load_ensemble``), ``device`` picks a
device and threads.

Names are imported on first use, so that ``import ensemble.specs`` (done by the
search, which must not need PyTorch) does not import torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "FAMILIES": "specs",
    "NetworkSpec": "specs",
    "TrainSpec": "specs",
    "families_for": "specs",
    "Evaluation": "results",
    "entropy": "combine",
    "Classification": "problem",
    "Regression": "problem",
    "HallOfFame": "hall_of_fame",
    "Selection": "select",
    "select_ensemble": "select",
    "build_network": "models",
    "DeviceData": "train",
    "train_and_evaluate": "train",
    "Ensemble": "predict",
    "load_ensemble": "predict",
    "EnsembleError": "store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ensemble' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
