"""Build, train and combine networks: no MPI and no search logic in here.

``models`` turns a :class:`NetworkSpec` into a torch module, ``train`` trains and
scores one network on resident data, ``combine`` averages members' probabilities
and measures the ensemble's uncertainty, ``device`` picks a device and threads.
"""
from .combine import accuracy, average_probabilities, entropy, top_k, uncertainty
from .models import FAMILIES, NetworkSpec, build_network, families_for
from .train import DeviceData, Evaluation, TrainSpec, predict_proba, train_and_evaluate

__all__ = [
    "FAMILIES",
    "DeviceData",
    "Evaluation",
    "NetworkSpec",
    "TrainSpec",
    "accuracy",
    "average_probabilities",
    "build_network",
    "entropy",
    "families_for",
    "predict_proba",
    "top_k",
    "train_and_evaluate",
    "uncertainty",
]
