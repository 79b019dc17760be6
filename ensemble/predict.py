"""Apply a run's ensemble to new data: rebuild its members from the run file and average them.

::

    from ensemble import load_ensemble
    ens = load_ensemble("runs/digits-20261122-101500")     # a run directory, or its checkpoint.h5
    out = ens.predict(x)                                     # numpy in, numpy out
    out["label"], out["probabilities"], out["epistemic"]     # classification
    out["mean"], out["std"]                                  # regression

Members are rebuilt from their specs and stored weights (plain arrays: nothing
is unpickled, no ``torch.load``) on one device, a GPU when there is one. The
output is :func:`ensemble.combine.combine`'s: the weighted mean and per-sample
uncertainty. :meth:`Ensemble.combine_batch` takes an ``allreduce`` so that the
members can be spread over MPI ranks (``evens predict`` under ``mpiexec``): each
rank runs some members, and the sums complete the answer on every rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .builders import BuilderError, add_model_path, import_builders, network_from_settings
from .combine import VALUE_LIMIT, Z_LIMIT, Allreduce, combine, sum_unit
from .device import choose_device
from .folds import bagged, split_fold_weights
from .hall_of_fame import Member
from .problem import Problem
from .select import Selection
from .inputs import EVAL_BATCH, as_input, check_inputs  # noqa: F401 (the torch-free parts, named here too)
from .store import EnsembleError, StoredEnsemble, chosen_members, read_chosen, read_stored  # noqa: F401
from .train import Head, as_float


@dataclass
class LoadedMember:
    """A member rebuilt: its network, or with ``data.folds`` its fold networks, whose predictions it averages
    (:func:`ensemble.folds.bagged`)."""

    id: int
    weight: float
    models: list[torch.nn.Module]

    @torch.no_grad()
    def predictions(self, head: Head, x: torch.Tensor) -> np.ndarray:
        """The member's prediction for ``x`` (float, on the models' device): float32 (N, outputs)."""
        preds = [head.predictions(model(x)).cpu().numpy() for model in self.models]
        return preds[0] if len(preds) == 1 else bagged(preds)


class Ensemble:
    """Some or all members of an ensemble, rebuilt on one device, with their weights."""

    def __init__(self, problem: Problem, sample_shape: tuple[int, ...], x_dtype: str, members: list[LoadedMember], device: torch.device,
                 selection: Selection | None = None):
        self.problem = problem
        self.sample_shape = tuple(sample_shape)
        self.x_dtype = x_dtype
        self.members = members
        self.device = device
        self.selection = selection
        self.head = Head(problem, device)

    @property
    def ids(self) -> list[int]:
        return [m.id for m in self.members]

    @property
    def weights(self) -> list[float]:
        return [m.weight for m in self.members]

    @torch.no_grad()
    def member_predictions(self, x: np.ndarray) -> list[np.ndarray]:
        """Each member's prediction for a batch ``x`` (already checked), float32 (N, outputs).

        Members were finite on every split when they were trained (or they would not be members),
        so a NaN here means damaged weights, not a hard sample: an error, never a silent NaN.
        """
        xt = as_float(torch.from_numpy(x).to(self.device))
        preds = []
        for m in self.members:
            pred = m.predictions(self.head, xt)
            if not np.isfinite(pred).all():
                raise EnsembleError(f"member #{m.id} predicts NaN or infinite values; its stored weights are damaged")
            if self.problem.kind == "regression":  # the range the ensemble's exact sums hold (ensemble.combine)
                unit = sum_unit(self.problem)
                off = np.abs(pred - np.asarray(self.problem.mean)) / unit
                if off.max(initial=0.0) >= Z_LIMIT or np.abs(pred / unit).max(initial=0.0) >= VALUE_LIMIT:
                    raise EnsembleError(f"member #{m.id} predicts values {off.max():.3g} standard deviations from the "
                                        "training targets' mean; its stored weights are damaged")
            preds.append(pred)
        return preds

    def combine_batch(self, preds: list[np.ndarray], n: int, allreduce: Allreduce | None = None) -> dict[str, np.ndarray]:
        """The ensemble's answer from these members' predictions for ``n`` samples; with ``allreduce``
        (collective), these members are one rank's share of the ensemble."""
        return combine(self.problem, preds, self.weights, n, allreduce)

    def predict_batch(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The ensemble's answer for one batch (all members on this process)."""
        return self.combine_batch(self.member_predictions(x), x.shape[0])

    def predict(self, x: np.ndarray, batch_size: int = EVAL_BATCH) -> dict[str, np.ndarray]:
        """Predictions and uncertainty for ``x`` (N, *sample_shape), computed in batches.

        Returns numpy arrays: ``probabilities`` (N, C), ``label``, ``entropy``, ``aleatoric``,
        ``epistemic`` and ``disagreement`` for classification; ``mean`` and ``std`` for regression.
        """
        x = np.asarray(x)
        check_inputs(x.shape, x.dtype, self.sample_shape, self.x_dtype)
        if batch_size < 1:
            raise EnsembleError(f"batch_size must be at least 1, got {batch_size}")
        parts = [self.predict_batch(as_input(x[i : i + batch_size], self.x_dtype)) for i in range(0, len(x), batch_size)]
        if not parts:
            parts = [self.predict_batch(np.empty((0,) + self.sample_shape, dtype=self.x_dtype))]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def rebuild(member: Member, problem: Problem, sample_shape: tuple[int, ...], device: torch.device) -> list[torch.nn.Module]:
    """A member's network with its trained weights, in eval mode on ``device`` (a folded member: one per fold)."""
    if not member.weights:
        raise EnsembleError(f"member #{member.id} has no stored weights; this run cannot predict")
    try:
        parts = split_fold_weights(member.weights)
    except ValueError as exc:
        raise EnsembleError(f"member #{member.id}: {exc}") from None
    return [_network(member, weights, problem, sample_shape, device) for weights in parts]


def _network(member: Member, weights: dict[str, np.ndarray], problem: Problem, sample_shape: tuple[int, ...],
             device: torch.device) -> torch.nn.Module:
    try:
        model = network_from_settings(member.network, sample_shape, problem.outputs)
    except BuilderError as exc:
        raise EnsembleError(f"member #{member.id}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise EnsembleError(f"member #{member.id}: invalid network spec {member.network} ({exc})") from None
    except (MemoryError, RuntimeError) as exc:  # a crafted spec's absurd size too: a MemoryError, often without a message
        raise EnsembleError(f"member #{member.id}: its network cannot be built here ({_why(exc)})") from None
    try:
        model.load_state_dict({name: torch.from_numpy(np.asarray(w)) for name, w in weights.items()}, strict=True)
    except (RuntimeError, TypeError) as exc:
        raise EnsembleError(f"member #{member.id}: stored weights do not fit its network ({_why(exc)})") from None
    return model.to(device).eval()


def _why(exc: BaseException) -> str:
    """An exception on one line: its type, and the first line of its message if it has one."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def build_ensemble(problem: Problem, sample_shape: tuple[int, ...], x_dtype: str, chosen: list[tuple[Member, float]],
                   device: torch.device, selection: Selection | None = None, say: Callable[[str], None] | None = None,
                   made_with: str = "") -> Ensemble:
    """An :class:`Ensemble` of the ``chosen`` (member, weight) pairs, rebuilt on ``device``. A member made by
    a user's builder imports that builder by name from what is importable, saying so first (to stderr,
    or through ``say``); ``made_with`` (the run's ``model.path``) is named if its module is not importable."""
    try:
        import_builders([m.network for m, _ in chosen], **({"say": say} if say is not None else {}), made_with=made_with)
    except BuilderError as exc:
        raise EnsembleError(str(exc)) from None
    members = [LoadedMember(m.id, w, rebuild(m, problem, sample_shape, device)) for m, w in chosen]
    return Ensemble(problem, sample_shape, x_dtype, members, device, selection)


def load_ensemble(path: str, device: str | torch.device = "auto", model_path: str | None = None) -> Ensemble:
    """Load the ensemble of a run directory (or run file) for prediction.

    ``device`` is "auto" (a GPU if there is one), "cpu", "cuda" or a torch device. A run made with a
    user's model builder imports that builder's module by name (``model_path``: a folder to import it
    from, as ``evens predict --model-path``); nothing is imported from a path stored in the run.
    """
    stored, chosen = read_members(path, model_path)
    if not isinstance(device, torch.device):
        device = choose_device(0, device)
    return build_ensemble(stored.problem, stored.sample_shape, stored.x_dtype, chosen, device, stored.selection, made_with=stored.made_with)


def read_members(path: str, model_path: str | None = None) -> tuple[StoredEnsemble, list]:
    """The stored ensemble of a run directory (or run file) and its chosen members with their weights
    (:func:`chosen_members`), after ``model_path`` (a folder a user's builder is imported from) is added."""
    if model_path is not None:
        try:
            add_model_path(model_path)
        except BuilderError as exc:
            raise EnsembleError(str(exc)) from None
    stored = read_chosen(path)
    return stored, chosen_members(stored, path, need_weights=True)
