"""The hand-designed contenders of bench_small.py, each trained with its published recipe on the CPU.

* :func:`train_resnet`: the ResNet of Wang et al. (2017) as re-run by Fawaz et al. (2019),
  hfawaz/dl-4-tsc ``classifiers/resnet.py``: three residual blocks of 64, 128 and 128 channels,
  each three convolutions of kernels 8, 5 and 3 ('same' padding) with batch norm and ReLU, a
  shortcut (1x1 convolution and batch norm where the channels change, batch norm alone where they
  do not), global average pooling and a softmax layer. Adam at 1e-3, batches of
  ``int(min(n_train / 10, 64))`` (64 is resnet.py's cap; 16 is fcn.py's), 1,500 epochs, the
  learning rate halved after 50 epochs without the training loss improving by 1e-4 (down to 1e-4),
  and the weights of the epoch with the lowest training loss kept (ModelCheckpoint on 'loss').
  Keras' defaults are reproduced where PyTorch's differ: Glorot-uniform weights and zero biases,
  batch norm with momentum 0.99 and epsilon 1e-3, Adam's epsilon 1e-7. Inputs as Fawaz's
  pipeline has them: each univariate series z-normalised on its own (the UCR files already are,
  so it changes nothing but rounding), multivariate series left raw.
* :func:`train_mlp`: scikit-learn's ``MLPClassifier()`` with its defaults, translated to PyTorch,
  after a ``StandardScaler`` fitted on the training split (the scikit-learn user guide's advice):
  one hidden layer of 100 ReLU units, Adam at 1e-3, batches of ``min(200, n)``, an L2 penalty of
  1e-4 on the weights (as scikit-learn scales it: ``alpha / 2 * |W|^2 / batch size``), up to 200
  epochs, stopped once the training loss has not improved by 1e-4 for more than 10 epochs, the
  last weights kept; scikit-learn's uniform Glorot initialisation of weights and biases. One
  difference: two classes get two softmax outputs, where scikit-learn uses one logistic unit.

Both seed everything from ``seed`` through explicit generators, run on one thread (the benchmark
runs several processes side by side) and return a :class:`RecipeResult`.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class RecipeResult:
    """Test accuracy and log-loss (nats) of the weights a recipe keeps, and what the training cost."""

    accuracy: float
    log_loss: float
    cpu_seconds: float  # process CPU time of the training, evaluation included
    epochs: int  # epochs trained
    kept_epoch: int  # the epoch whose weights were kept (1-based)
    train_loss: float  # the kept epoch's training loss
    curve: dict[int, float] = field(default_factory=dict)  # epoch: test accuracy of the weights kept by then


class ResidualBlock(nn.Module):
    """Three convolutions (kernels 8, 5, 3) with batch norm, plus a shortcut, then ReLU."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.convs = nn.ModuleList(_same_conv(a, c_out, k) for a, k in ((c_in, 8), (c_out, 5), (c_out, 3)))
        self.norms = nn.ModuleList(_keras_norm(c_out) for _ in range(3))
        self.project = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        self.shortcut_norm = _keras_norm(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            h = norm(conv(h))
            h = F.relu(h) if i < 2 else h
        return F.relu(h + self.shortcut_norm(self.project(x)))


def _same_conv(c_in: int, c_out: int, kernel: int) -> nn.Sequential:
    """A convolution padded as Keras' 'same' pads (one more zero after than before for even kernels)."""
    return nn.Sequential(nn.ConstantPad1d(((kernel - 1) // 2, kernel // 2), 0.0), nn.Conv1d(c_in, c_out, kernel))


def _keras_norm(channels: int) -> nn.BatchNorm1d:
    return nn.BatchNorm1d(channels, eps=1e-3, momentum=0.01)  # Keras' momentum 0.99 counts the other way


def resnet1d(in_channels: int, classes: int, generator: torch.Generator) -> nn.Sequential:
    """Fawaz et al.'s ResNet for series of ``in_channels`` channels (logits out), initialised as Keras does."""
    model = nn.Sequential(ResidualBlock(in_channels, 64), ResidualBlock(64, 128), ResidualBlock(128, 128),
                          nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(128, classes))
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight, generator=generator)
            nn.init.zeros_(m.bias)
    return model


def znorm_univariate(x: np.ndarray) -> np.ndarray:
    """Each series of a univariate set (N, 1, L) z-normalised on its own, as Fawaz's reader does; others unchanged."""
    if x.shape[1] != 1:
        return x
    std = x.std(axis=2, keepdims=True)
    std[std == 0] = 1.0
    return ((x - x.mean(axis=2, keepdims=True)) / std).astype(np.float32)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean log-loss of ``model`` (in eval mode) on ``x, y``."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


def _epoch(model, optimizer, x, y, batch: int, generator, penalty=None) -> float:
    """One pass over ``x`` in shuffled batches; the epoch's training loss, averaged over samples as Keras does."""
    model.train()
    total = 0.0
    for rows in torch.randperm(len(y), generator=generator).split(batch):
        rows = rows.to(x.device)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        if penalty is not None:
            loss = loss + penalty(len(rows))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(rows)
    return total / len(y)


def _one_thread(run):
    """Run ``run()`` on one torch thread, timing its process CPU seconds; the thread count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.process_time()
    try:
        return run(), time.process_time() - start
    finally:
        torch.set_num_threads(threads)


def train_resnet(x_train, y_train, x_test, y_test, seed: int = 0, epochs: int = 1500,
                 curve_at: tuple[int, ...] = (), device: str = "cpu") -> RecipeResult:
    """Fawaz et al.'s ResNet recipe on series (N, C, L) with class indices; ``epochs`` fewer for a quick run only.
    ``device``: where it trains ("cuda" as the published runs did; the batches are drawn on the CPU either way).

    ``curve_at``: epochs at which to note the test accuracy of the weights kept so far (on a copy of
    the model, so the training is unchanged), to see what a shorter recipe would have given.

    >>> train_resnet(*small_data.read_splits("GunPoint.h5"), seed=0).accuracy  # doctest: +SKIP
    0.9933333396911621
    """
    def run():
        g = torch.Generator().manual_seed(seed)
        x, y = torch.from_numpy(znorm_univariate(x_train)).to(device), torch.from_numpy(y_train).long().to(device)
        x_eval, y_eval = torch.from_numpy(znorm_univariate(x_test)).to(device), torch.from_numpy(y_test).long().to(device)
        model = resnet1d(x.shape[1], int(max(y_train.max(), y_test.max())) + 1, g).to(device)
        lr, min_lr, optimizer = 1e-3, 1e-4, torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        batch = int(min(len(y) / 10, 64))
        best, plateau_best, wait, kept, curve = math.inf, math.inf, 0, (None, 0), {}
        for epoch in range(1, epochs + 1):
            loss = _epoch(model, optimizer, x, y, batch, g)
            if loss < best:
                best, kept = loss, ({k: v.clone() for k, v in model.state_dict().items()}, epoch)
            if loss < plateau_best - 1e-4:
                plateau_best, wait = loss, 0
            else:
                wait += 1
                if wait >= 50:
                    lr, wait = max(lr * 0.5, min_lr), 0
                    for group in optimizer.param_groups:
                        group["lr"] = lr
            if epoch in curve_at:
                snapshot = copy.deepcopy(model)
                snapshot.load_state_dict(kept[0])
                curve[epoch] = evaluate(snapshot, x_eval, y_eval)[0]
        model.load_state_dict(kept[0])
        return evaluate(model, x_eval, y_eval), kept[1], best, curve

    ((accuracy, log_loss), kept_epoch, best, curve), seconds = _one_thread(run)
    return RecipeResult(accuracy, log_loss, seconds, epochs, kept_epoch, best, curve)


def train_mlp(x_train, y_train, x_test, y_test, seed: int = 0, epochs: int = 200) -> RecipeResult:
    """scikit-learn's default ``MLPClassifier`` recipe on tables (N, F) with class indices, inputs standardised on train."""
    def run():
        g = torch.Generator().manual_seed(seed)
        mean, std = x_train.mean(axis=0), x_train.std(axis=0)
        std[std == 0] = 1.0
        x, y = torch.from_numpy(((x_train - mean) / std).astype(np.float32)), torch.from_numpy(y_train).long()
        classes = int(max(y_train.max(), y_test.max())) + 1
        model = nn.Sequential(nn.Linear(x.shape[1], 100), nn.ReLU(), nn.Linear(100, classes))
        for layer in (model[0], model[2]):
            bound = math.sqrt(6.0 / (layer.in_features + layer.out_features))
            nn.init.uniform_(layer.weight, -bound, bound, generator=g)
            nn.init.uniform_(layer.bias, -bound, bound, generator=g)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def penalty(n: int) -> torch.Tensor:
            return 0.5 * 1e-4 * (model[0].weight.square().sum() + model[2].weight.square().sum()) / n

        best, stale, epoch, loss = math.inf, 0, 0, math.inf
        while epoch < epochs and stale <= 10:
            epoch += 1
            loss = _epoch(model, optimizer, x, y, min(200, len(y)), g, penalty)
            stale = stale + 1 if loss > best - 1e-4 else 0
            best = min(best, loss)
        x_eval = torch.from_numpy(((x_test - mean) / std).astype(np.float32))
        return evaluate(model, x_eval, torch.from_numpy(y_test).long()), epoch, loss

    ((accuracy, log_loss), epoch, loss), seconds = _one_thread(run)
    return RecipeResult(accuracy, log_loss, seconds, epoch, epoch, loss)


RECIPES = {"series": train_resnet, "table": train_mlp}  # by SmallDataset.kind


def main(argv=None) -> int:
    """Each recipe on prepared evens files (small_data.prepare), a JSON line per run: for a machine where only the
    recipes run (a GPU machine without evens' dependencies), whose rows bench_small.py --recipe-rows reads."""
    import argparse
    import json
    import os

    import harness
    import small_data

    p = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    p.add_argument("folder", help="where <dataset>.h5 lie")
    p.add_argument("--datasets", default=",".join(small_data.DATASETS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    for seed in range(args.seeds):
        for name in args.datasets.split(","):
            data = small_data.DATASETS[name]
            splits = small_data.read_splits(os.path.join(args.folder, f"{name}.h5"))
            device = {"device": args.device} if data.kind == "series" else {}
            r = RECIPES[data.kind](*splits, seed=seed, **device)
            row = {"dataset": name, "contender": "recipe", "seed": seed, "evaluations": 0, "ensemble_test": r.accuracy,
                   "best_test": r.accuracy, "ensemble_nll": r.log_loss, "cpu": r.cpu_seconds, "device": args.device if device else "cpu"}
            harness.append_row(args.out, row)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
