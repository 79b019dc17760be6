"""Train one network on data that is already resident, and score it.

The data lives on the worker's device for the whole run (:class:`DeviceData`);
each evaluation builds a network, trains it for a fixed number of epochs with
minibatches drawn by a seeded generator, and returns class probabilities on the
validation and test splits. A loss that turns NaN or infinite ends training
with status ``"diverged"`` instead of poisoning the search.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from .models import build_network
from .results import Evaluation
from .specs import NetworkSpec, TrainSpec

EVAL_BATCH = 4096


@dataclass
class Split:
    x: torch.Tensor  # float32, or uint8 scaled by 1/255 per batch
    y: torch.Tensor  # int64

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return as_float(self.x[index]), self.y[index]


@dataclass
class DeviceData:
    """The three splits as tensors on one device, shared by every evaluation on a worker."""

    train: Split
    val: Split
    test: Split
    num_classes: int
    device: torch.device

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], num_classes: int, device: torch.device | str = "cpu") -> DeviceData:
        """Wrap ``{"train/x": ..., "train/y": ..., "val/x": ...}``; on the CPU this shares memory, no copy."""
        device = torch.device(device)

        def tensor(name: str) -> torch.Tensor:
            return torch.from_numpy(arrays[name]).to(device)

        splits = {s: Split(tensor(f"{s}/x"), tensor(f"{s}/y")) for s in ("train", "val", "test")}
        return cls(splits["train"], splits["val"], splits["test"], num_classes, device)


def as_float(x: torch.Tensor) -> torch.Tensor:
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x


def make_optimizer(spec: TrainSpec, params) -> torch.optim.Optimizer:
    lr, wd = spec.learning_rate, spec.weight_decay
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
    return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)


def train(model: torch.nn.Module, data: Split, spec: TrainSpec, generator: torch.Generator) -> tuple[str, int]:
    """Minibatch training for ``spec.epochs`` epochs; returns (status, epochs completed).

    The loss is checked once per epoch (not per step, which would stall a GPU).
    """
    optimizer = make_optimizer(spec, model.parameters())
    n = data.y.shape[0]
    device = data.y.device
    model.train()
    for epoch in range(spec.epochs):
        order = torch.randperm(n, generator=generator).to(device)
        total = torch.zeros((), device=device)
        for start in range(0, n, spec.batch_size):
            if n - start == 1 and start > 0:
                break  # a last batch of one sample: batch norm cannot normalise it, and it adds nothing
            xb, yb = data.batch(order[start : start + spec.batch_size])
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        if not torch.isfinite(total):
            return "diverged", epoch
    return "ok", spec.epochs


@torch.no_grad()
def predict_proba(model: torch.nn.Module, x: torch.Tensor, batch_size: int = EVAL_BATCH) -> torch.Tensor:
    """Class probabilities (softmax), evaluated in batches with the model in eval mode."""
    model.eval()
    parts = [torch.softmax(model(as_float(x[i : i + batch_size])).float(), dim=1) for i in range(0, x.shape[0], batch_size)]
    return torch.cat(parts)


def _score(probs: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    # An exact fraction in double precision, as ensemble.combine.accuracy computes it, so that a
    # member and an ensemble with the same number of correct answers compare equal.
    accuracy = (probs.argmax(dim=1) == y).sum().item() / y.shape[0]
    loss = F.nll_loss(torch.log(probs.clamp_min(1e-12)), y).item()
    return accuracy, loss


def train_and_evaluate(network: NetworkSpec, training: TrainSpec, data: DeviceData, seed: int) -> Evaluation:
    """Build, train and score one network; never raises for a diverging network.

    >>> ev = train_and_evaluate(NetworkSpec("mlp", 1, 32), TrainSpec(1e-2, 64, 3), data, seed=0)  # doctest: +SKIP
    >>> ev.status, ev.val_probs.shape                                                             # doctest: +SKIP
    ('ok', (360, 10))
    """
    start = time.perf_counter()
    torch.manual_seed(seed)  # weight initialisation and dropout
    generator = torch.Generator().manual_seed(seed)  # minibatch order
    model = build_network(network, data.sample_shape, data.num_classes).to(data.device)
    status, epochs = train(model, data.train, training, generator)
    val_probs = predict_proba(model, data.val.x)
    test_probs = predict_proba(model, data.test.x)
    if status == "ok" and not (torch.isfinite(val_probs).all() and torch.isfinite(test_probs).all()):
        status = "diverged"
    if status == "ok":
        val_acc, val_loss = _score(val_probs, data.val.y)
        test_acc, _ = _score(test_probs, data.test.y)
    else:
        val_acc, val_loss, test_acc = 0.0, math.inf, 0.0
    if torch.cuda.is_available() and data.device.type == "cuda":
        torch.cuda.synchronize(data.device)
    return Evaluation(
        status=status,
        val_accuracy=val_acc,
        val_loss=val_loss,
        test_accuracy=test_acc,
        seconds=time.perf_counter() - start,
        epochs_done=epochs,
        val_probs=val_probs.cpu().numpy().astype(np.float32, copy=False),
        test_probs=test_probs.cpu().numpy().astype(np.float32, copy=False),
        message="" if status == "ok" else "loss became NaN or infinite",
    )
