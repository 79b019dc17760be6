"""Train one network on data that is already resident, and score it.

The data lives on the worker's device for the whole run (:class:`DeviceData`);
each evaluation builds a network, trains it for a fixed number of epochs with
minibatches drawn by a seeded generator, and scores its predictions on the
validation and test splits with the run's :mod:`~ensemble.problem`. A loss that
turns NaN or infinite ends training with status ``"diverged"`` instead of
poisoning the search. A network good enough for the hall of fame (``keep`` says
which) comes back whole: predictions and weights.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .builders import network_from_settings
from .models import build_network
from .inputs import EVAL_BATCH
from .paused import Paused
from .problem import Problem
from .references import import_by_name, is_reference
from .results import Evaluation
from .specs import NetworkSpec, TrainSpec

SPLITS = ("train", "val", "test")
# How a worker does its float arithmetic (the config's ``train.precision``):
#   fp32: IEEE float32 everywhere (matrix units' TF32 off, convolutions included);
#   tf32: float32 tensors, with matrix products and convolutions on a GPU's TF32 units (Ampere
#         and newer; 10 mantissa bits in the products, float32 sums); the same as fp32 on a CPU;
#   bf16: float32 weights and optimizer, forward passes under bfloat16 autocast (no loss
#         scaling needed: bfloat16 has float32's range). Softmax, losses and scores stay float32.
PRECISIONS = ("fp32", "tf32", "bf16")


def set_precision(precision: str) -> None:
    """Set this process's float32 matrix arithmetic for ``precision`` (torch keeps it process-wide)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    mode = "tf32" if precision == "tf32" else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
        # matrix products, convolutions and cuDNN's RNNs alike (an RNN would otherwise keep TF32 under "fp32")
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        torch.backends.cudnn.rnn.fp32_precision = mode
    else:  # pragma: no cover - older torch
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        torch.backends.cudnn.allow_tf32 = mode == "tf32"


LOSSES = {"classification": ("cross_entropy", "focal"), "regression": ("mse", "mae", "huber")}  # the first: "auto"
FOCAL_GAMMA = 2.0  # the focal loss's focusing parameter (Lin et al. 2017): a well-classified sample counts (1 - p)^2 as much


def check_loss(kind: str, loss: str) -> None:
    """ValueError in one line unless ``loss`` suits a ``kind`` problem."""
    if loss != "auto" and loss not in LOSSES[kind] and not is_reference(loss):
        raise ValueError(f"train.loss {loss!r} is not a {kind} loss (known: {', '.join(LOSSES[kind])}, or a function as 'module:function')")


def balanced_weights(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Each class's weight in the loss, inverse to its frequency: n / (C * count), as scikit-learn's
    ``class_weight="balanced"`` (a class absent from ``labels`` weighs 1)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).astype(np.float64)
    return np.where(counts > 0, counts.sum() / (num_classes * np.maximum(counts, 1)), 1.0)


class Head:
    """The problem's end of a network: its training loss, and raw outputs turned into predictions.

    Classification: cross-entropy (or ``focal``), and softmax probabilities. Regression: mean squared
    error (or ``mae``, ``huber``) on standardised targets, and outputs mapped back to the targets'
    units. ``loss`` may also name a user's function ``module:function``, called with the raw outputs
    (N, outputs) and what :meth:`fit_target` gives (labels, or standardised targets), returning a
    scalar tensor. ``class_weights`` (C,) weigh a classifier's loss per class.
    """

    def __init__(self, problem: Problem, device: torch.device | str = "cpu", loss: str = "auto", class_weights: np.ndarray | None = None):
        check_loss(problem.kind, loss)
        self.problem = problem
        self.loss_name = LOSSES[problem.kind][0] if loss == "auto" else loss
        self._user_loss = import_by_name(loss, "loss") if is_reference(loss) else None
        self._weight = None if class_weights is None else torch.tensor(class_weights, dtype=torch.float32, device=device)
        if problem.kind == "regression":
            self._mean = torch.tensor(problem.mean, dtype=torch.float32, device=device)
            self._scale = torch.tensor(problem.scale, dtype=torch.float32, device=device)

    def fit_target(self, y: np.ndarray) -> torch.Tensor:
        """What the loss compares training outputs with: labels, or standardised targets (N, outputs)."""
        if self.problem.kind == "classification":
            return torch.from_numpy(np.asarray(y, dtype=np.int64))
        y = torch.from_numpy(np.asarray(y, dtype=np.float32).reshape(len(y), -1))
        return (y.to(self._mean.device) - self._mean) / self._scale

    def loss(self, out: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
        """The training loss; ``label_smoothing`` softens a classifier's targets (a regression has none)."""
        name = self.loss_name
        if self._user_loss is not None:
            return self._user_loss(out, target)
        if name == "cross_entropy":
            return F.cross_entropy(out, target, weight=self._weight, label_smoothing=label_smoothing)
        if name == "focal":  # each sample's cross-entropy scaled by (1 - its probability of the true class)^gamma
            each = F.cross_entropy(out, target, weight=self._weight, label_smoothing=label_smoothing, reduction="none")
            p_true = torch.softmax(out.float(), dim=1).gather(1, target[:, None])[:, 0]
            return ((1.0 - p_true) ** FOCAL_GAMMA * each).mean()
        if name == "mae":
            return F.l1_loss(out.float(), target)
        if name == "huber":
            return F.huber_loss(out.float(), target)  # quadratic within one standard deviation of the targets, linear beyond
        return F.mse_loss(out.float(), target)

    def predictions(self, out: torch.Tensor) -> torch.Tensor:
        if self.problem.kind == "classification":
            return torch.softmax(out.float(), dim=1)
        return out.float() * self._scale + self._mean


@dataclass
class DeviceData:
    """The splits as tensors on one device, shared by every evaluation on a worker.

    ``x`` holds the inputs on the device (on the CPU, views of the caller's arrays: no copy);
    ``y`` the labels or targets as host arrays, for scoring; ``fit_target`` the training
    split's targets on the device, in the form the loss wants.
    """

    problem: Problem
    head: Head
    device: torch.device
    x: dict[str, torch.Tensor]
    y: dict[str, np.ndarray]
    fit_target: torch.Tensor
    precision: str = "fp32"

    def autocast(self):
        """The context forward passes run in: bfloat16 autocast for ``bf16``, else nothing."""
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x["train"].shape[1:])

    def fold_view(self, fold: np.ndarray, held: int) -> DeviceData:
        """This data for one fold training: trained on the training rows outside fold ``held`` (``fold``: each
        training row's fold, :func:`ensemble.folds.assign_folds`) and validated on the rows inside it; test
        as it is. The rows are gathered copies (cross-validation is for data small enough to copy)."""
        inside = torch.from_numpy(np.flatnonzero(fold == held))
        outside = torch.from_numpy(np.flatnonzero(fold != held))
        x, y = self.x["train"], self.y["train"]
        return DeviceData(self.problem, self.head, self.device,
                          {"train": x[outside.to(x.device)], "val": x[inside.to(x.device)], "test": self.x["test"]},
                          {"train": y[outside.numpy()], "val": y[inside.numpy()], "test": self.y["test"]},
                          self.fit_target[outside.to(self.fit_target.device)], self.precision)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], problem: Problem, device: torch.device | str = "cpu",
                    precision: str = "fp32", loss: str = "auto", class_weights: str = "none") -> DeviceData:
        """Wrap ``{"train/x": ..., "train/y": ..., "val/x": ...}`` for ``problem`` on ``device``,
        and set the process's arithmetic for ``precision`` (:data:`PRECISIONS`). ``loss`` and
        ``class_weights`` ("none", or "balanced": by inverse class frequency on the training split)
        make the training loss (:class:`Head`)."""
        set_precision(precision)
        device = torch.device(device)
        weights = None
        if class_weights == "balanced" and problem.kind == "classification":
            weights = balanced_weights(arrays["train/y"], problem.num_classes)
        head = Head(problem, device, loss, weights)
        x = {s: torch.from_numpy(arrays[f"{s}/x"]).to(device) for s in SPLITS}
        y = {s: arrays[f"{s}/y"] for s in SPLITS}
        return cls(problem, head, device, x, y, head.fit_target(y["train"]).to(device), precision)


def as_float(x: torch.Tensor) -> torch.Tensor:
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x


def make_optimizer(spec: TrainSpec, params) -> torch.optim.Optimizer:
    """The optimizer ``spec`` names, in its fastest form: fused kernels where torch has them (Adam,
    AdamW, SGD; one kernel per step instead of several per parameter, see
    scripts/bench/bench_train.py), else multi-tensor (RMSprop)."""
    lr, wd = spec.learning_rate, spec.weight_decay
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, fused=True)
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd, fused=True)
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd, fused=True)
    return torch.optim.RMSprop(params, lr=lr, weight_decay=wd, foreach=True)


def lr_factor(spec: TrainSpec, step: int, total: int) -> float:
    """The learning rate at ``step`` (0-based) of ``total``, as a fraction of ``spec.learning_rate``.

    A linear warm-up over the first ``spec.warmup`` of the steps, then ``constant`` (1), ``cosine``
    (annealed to 0 at the last step) or ``one_cycle`` (from 1/25 up to 1 over the warm-up, 30 % of
    the steps if none is set, then annealed to 1/25 of 1/10,000, as torch's OneCycleLR does).
    """
    one_cycle = spec.schedule == "one_cycle"
    rise = int(round((spec.warmup or (0.3 if one_cycle else 0.0)) * total))
    if step < rise:
        start = 1 / 25 if one_cycle else 0.0
        return start + (1 - start) * (step + 1) / rise
    if spec.schedule == "constant":
        return 1.0
    progress = (step - rise) / max(1, total - rise - 1)
    floor = 1 / 25 / 1e4 if one_cycle else 0.0
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_schedule(spec: TrainSpec, optimizer: torch.optim.Optimizer, steps_per_epoch: int, done: int = 0):
    """A per-step scheduler for ``spec.schedule`` and ``spec.warmup``, planned over the whole training and
    ``done`` steps into it (a training carried on); None for a constant rate."""
    if spec.schedule == "constant" and spec.warmup == 0:
        return None
    total = spec.epochs * steps_per_epoch
    if done:
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(spec, step, total), last_epoch=done - 1)


@dataclass(frozen=True)
class Watch:
    """What a training is held to while it runs (the master sends it with the task).

    ``stop_below[e]`` is the bar after epoch ``e + 1`` (evolve.search.early_stop.MedianRule: the median
    of earlier networks' running averages there; NaN for no bar); a training whose best fitness so
    far is below it, past ``warmup`` epochs, stops there (``"stopped"``). ``time_limit`` (seconds,
    0 for none) stops a training at the next batch (``"timeout"``). ``measure_latency`` times the
    trained network's inference (the metric ``latency_us``, for a search that minimises it).
    ``pause_after`` (successive halving; 0: never) pauses the training after that epoch (``"paused"``),
    and ``carry_on`` (-1: none) names the network whose paused training this task carries on, if the
    worker still holds it (:class:`PausedCache`; else it trains from the start, to the same network).
    """

    stop_below: tuple[float, ...] = ()
    warmup: int = 0
    time_limit: float = 0.0
    measure_latency: bool = False
    pause_after: int = 0
    carry_on: int = -1


def train(model: torch.nn.Module, data: DeviceData, spec: TrainSpec, generator: torch.Generator,
          on_epoch: Callable[[int], bool] | None = None, deadline: float | None = None, *,
          optimizer: torch.optim.Optimizer | None = None, first: int = 0, until: int | None = None) -> tuple[str, int]:
    """Minibatch training for ``spec.epochs`` epochs; returns (status, epochs completed).

    A training in stages (successive halving) passes its ``optimizer``, the epoch it carries on from
    (``first``) and the epoch to pause after (``until``: ``"paused"``); the schedule is planned over all
    ``spec.epochs`` either way, so that the stages together are the unbroken training.

    Divergence is checked once per epoch, on the epoch's last loss (not every step, which would
    stall a GPU): once a step has made the weights NaN or infinite, every later loss is too.
    ``on_epoch(epochs_done)`` is called after every epoch but the last; False stops the training
    (``"stopped"``). Past ``deadline`` (``time.monotonic()``) it stops at the next batch (``"timeout"``).
    """
    optimizer = optimizer or make_optimizer(spec, model.parameters())
    x, target = data.x["train"], data.fit_target
    n = x.shape[0]
    steps = sum(1 for start in range(0, n, spec.batch_size) if not (n - start == 1 and start > 0))
    schedule = make_schedule(spec, optimizer, steps, first * steps)
    end = spec.epochs if until is None else min(until, spec.epochs)
    for epoch in range(first, end):
        model.train()
        order = torch.randperm(n, generator=generator).to(data.device)
        for start in range(0, n, spec.batch_size):
            if n - start == 1 and start > 0:
                break  # a last batch of one sample: batch norm cannot normalise it, and it adds nothing
            if deadline is not None and time.monotonic() > deadline:
                return "timeout", epoch
            index = order[start : start + spec.batch_size]
            batch = as_float(x[index])
            if spec.augment == "shift" and batch.dim() > 2:
                batch = shifted(batch, generator)
            with data.autocast():
                out = model(batch)
            loss = data.head.loss(out.float(), target[index], spec.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if schedule is not None:
                schedule.step()
        if not torch.isfinite(loss.detach()):
            return "diverged", epoch
        if on_epoch is not None and epoch + 1 < spec.epochs and not on_epoch(epoch + 1):
            return "stopped", epoch + 1
    return ("ok" if end == spec.epochs else "paused"), end


def shifted(x: torch.Tensor, generator: torch.Generator, fraction: float = 1 / 8) -> torch.Tensor:
    """Each sample of ``x`` (N, C, *spatial) moved by its own random offset along each spatial dimension,
    of up to ``fraction`` of that dimension's size (at least 1), zeros filling in."""
    for dim in range(2, x.dim()):
        size = x.shape[dim]
        reach = max(1, int(size * fraction))
        offsets = torch.randint(-reach, reach + 1, (x.shape[0],), generator=generator).to(x.device)
        source = torch.arange(size, device=x.device)[None, :] - offsets[:, None]  # (N, size): where each position comes from
        inside = ((source >= 0) & (source < size)).to(x.dtype)
        shape = [x.shape[0]] + [1] * (x.dim() - 1)
        shape[dim] = size
        index = source.clamp(0, size - 1).reshape(shape).expand(x.shape)
        x = torch.gather(x, dim, index) * inside.reshape(shape)
    return x


@torch.no_grad()
def predict(model: torch.nn.Module, head: Head, x: torch.Tensor, batch_size: int = EVAL_BATCH,
            autocast=contextlib.nullcontext) -> torch.Tensor:
    """Predictions (probabilities or target values), float32 (N, outputs), in batches, in eval mode.

    ``autocast`` makes the context each forward pass runs in (``DeviceData.autocast``)."""
    model.eval()
    out = []
    for i in range(0, x.shape[0], batch_size):
        with autocast():
            raw = model(as_float(x[i : i + batch_size]))
        out.append(head.predictions(raw))
    return torch.cat(out) if out else torch.empty((0, head.problem.outputs), device=x.device)  # (no rows: a refit's validation)


def state_arrays(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The trained state dict as host numpy arrays (copies), to store or send."""
    return {name: t.detach().cpu().numpy().copy() for name, t in model.state_dict().items()}


def model_for(network: NetworkSpec | dict, data: DeviceData) -> torch.nn.Module:
    """The untrained network on ``data``'s device: a built-in family's, or a user's builder's (its settings
    name it, with its genes; ensemble.builders), with a standardising input layer fitted on train."""
    if isinstance(network, NetworkSpec):
        model = build_network(network, data.sample_shape, data.problem.outputs).to(data.device)
        if network.standardize:
            model[0].fit(as_float(data.x["train"]))
        return model
    return network_from_settings(network, data.sample_shape, data.problem.outputs).to(data.device)


def latency_us(model: torch.nn.Module, data: DeviceData) -> float:
    """Inference time in microseconds per sample: the median of 5 timed forward passes, after one to warm
    up (kernel choice, caches), over a batch of up to 256 validation samples."""
    batch = as_float(data.x["val"][:256])
    model.eval()
    times = []
    with torch.no_grad():
        for repeat in range(6):
            if data.device.type == "cuda":
                torch.cuda.synchronize(data.device)
            began = time.perf_counter()
            with data.autocast():
                model(batch)
            if data.device.type == "cuda":
                torch.cuda.synchronize(data.device)
            if repeat:
                times.append(time.perf_counter() - began)
    return float(np.median(times)) / batch.shape[0] * 1e6


def train_and_evaluate(
    network: NetworkSpec | dict, training: TrainSpec, data: DeviceData, seed: int, keep: Callable[[float, float], bool] = lambda fitness, loss: True,
    watch: Watch = Watch(), until: int | None = None, resume: Paused | None = None,
) -> Evaluation:
    """Build, train and score one network; never raises for a diverging network.

    In stages (successive halving): ``until`` pauses the training after that epoch (status ``"paused"``, its
    validation scores, and its state as ``paused``: :class:`~ensemble.paused.Paused` arrays), and ``resume``
    carries on a paused one; the stages together give the unbroken training's network bit for bit.

    The predictions and weights come back only if ``keep(fitness, validation loss)`` (a worker asks
    whether the network would enter the hall of fame). With ``watch.stop_below``, the validation fitness is
    measured after every epoch (the evaluation's ``curve``) and a network below the bar stops
    early; ``watch.time_limit`` bounds the training's seconds. A successful evaluation's metrics
    hold ``params``, the network's trainable parameters, and with ``watch.measure_latency``
    ``latency_us``, its inference time in microseconds per sample (:func:`latency_us`).

    >>> ev = train_and_evaluate(NetworkSpec("mlp", 1, 32), TrainSpec(1e-2, 64, 3), data, seed=0)  # doctest: +SKIP
    >>> ev.status, ev.metrics["val_accuracy"], ev.val_pred.shape                                 # doctest: +SKIP
    ('ok', 0.97, (359, 10))
    """
    start = time.perf_counter()
    deadline = time.monotonic() + watch.time_limit if watch.time_limit > 0 else None
    torch.manual_seed(seed)  # weight initialisation and dropout
    generator = torch.Generator().manual_seed(seed)  # minibatch order
    model = model_for(network, data)
    optimizer = make_optimizer(training, model.parameters())
    if resume is not None:
        resume.restore(model, optimizer, generator)
    curve: list[float] = list(resume.curve) if resume is not None else []
    last_val: dict[str, float] = {}

    def on_epoch(epochs_done: int) -> bool:
        """The median stopping rule: carry on unless the best fitness so far is below the bar, past the warm-up."""
        pred = predict(model, data.head, data.x["val"], autocast=data.autocast).cpu().numpy()
        last_val.clear()
        last_val.update(data.problem.scores(pred, data.y["val"]) if np.isfinite(pred).all() else {})
        fitness = data.problem.fitness(last_val) if last_val else -math.inf
        curve.append(fitness)
        bar = watch.stop_below[epochs_done - 1] if epochs_done <= len(watch.stop_below) else math.nan
        return not (epochs_done >= watch.warmup and math.isfinite(bar) and max(curve) < bar)

    first = resume.epoch if resume is not None else 0
    status, reached = train(model, data, training, generator, on_epoch if watch.stop_below else None, deadline, optimizer=optimizer,
                            first=first, until=until)
    epochs = reached - first  # trained here (a stage carried on trains from where its network paused)
    if status == "paused":
        return _paused(model, optimizer, generator, data, reached, epochs, curve, time.perf_counter() - start, watch.measure_latency)
    if status == "stopped":
        seconds = time.perf_counter() - start
        metrics = {f"val_{k}": v for k, v in last_val.items()}
        message = f"below the median of earlier networks after {reached} of {training.epochs} epochs"
        return Evaluation(status="stopped", fitness=curve[-1], metrics=metrics, seconds=seconds, epochs_done=epochs, message=message, curve=curve)
    if status == "timeout":
        message = f"stopped at its time limit of {watch.time_limit:g} s after {reached} of {training.epochs} epochs"
        return Evaluation(status="timeout", fitness=-math.inf, seconds=time.perf_counter() - start, epochs_done=epochs, message=message, curve=curve)
    preds = {}
    if status == "ok":
        preds = {s: predict(model, data.head, data.x[s], autocast=data.autocast).cpu().numpy() for s in ("val", "test")}
        if not all(np.isfinite(p).all() for p in preds.values()):
            status = "diverged"
    if data.device.type == "cuda":
        torch.cuda.synchronize(data.device)
    seconds = time.perf_counter() - start
    if status != "ok":
        return Evaluation(status=status, fitness=-math.inf, seconds=seconds, epochs_done=epochs, message="loss became NaN or infinite")
    scores = {s: data.problem.scores(preds[s], data.y[s]) for s in ("val", "test") if len(data.y[s])}
    metrics = {f"{s}_{name}": value for s in scores for name, value in scores[s].items()}
    fitness = data.problem.fitness(scores["val"]) if "val" in scores else math.nan  # no validation rows: a refit on all of them
    metrics["params"] = float(sum(p.numel() for p in model.parameters() if p.requires_grad))
    if watch.measure_latency and data.x["val"].shape[0] > 0:
        metrics["latency_us"] = latency_us(model, data)
    ev = Evaluation(status="ok", fitness=fitness, metrics=metrics, seconds=seconds, epochs_done=epochs, curve=curve + [fitness] if watch.stop_below else [])
    if keep(fitness, ev.loss):
        ev.val_pred, ev.test_pred, ev.weights = preds["val"], preds["test"], state_arrays(model)
    return ev


def _paused(model, optimizer, generator, data: DeviceData, reached: int, epochs: int, curve: list[float], seconds: float,
            measure_latency: bool = False) -> Evaluation:
    """A training paused after epoch ``reached`` (``epochs`` of them trained here): its validation scores now, its size
    (and inference time, if asked: what a two-objective search promotes by) and its state (diverged if it already has)."""
    pred = predict(model, data.head, data.x["val"], autocast=data.autocast).cpu().numpy()
    if not np.isfinite(pred).all():
        return Evaluation(status="diverged", fitness=-math.inf, seconds=seconds, epochs_done=epochs, message="loss became NaN or infinite")
    scores = data.problem.scores(pred, data.y["val"])
    state = Paused.capture(reached, model, optimizer, generator, curve).to_arrays()  # (before the timing below runs the model)
    metrics = {f"val_{k}": v for k, v in scores.items()}
    metrics["params"] = float(sum(p.numel() for p in model.parameters() if p.requires_grad))
    if measure_latency and data.x["val"].shape[0] > 0:
        metrics["latency_us"] = latency_us(model, data)
    ev = Evaluation(status="paused", fitness=data.problem.fitness(scores), metrics=metrics, seconds=seconds, epochs_done=epochs,
                    curve=list(curve))
    ev.paused = state
    return ev
