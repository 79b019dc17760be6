"""What the master and a worker say to each other, and the transport interface between them.

The master's loop sees only :class:`Transport`: ``send`` a :class:`Task` to a
worker, ``receive`` the next :class:`Result` from any worker. The MPI transport
(:mod:`evolve.mpi_transport`) implements it across ranks; :class:`InProcessTransport`
implements it in one process, for tests and single-rank runs.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

import numpy as np

from ensemble.results import Evaluation
from ensemble.specs import NetworkSpec, TrainSpec


@dataclass(frozen=True)
class Task:
    """One network to train: its settings as plain values, and the seed for its weights and batches."""

    id: int
    network: dict
    training: dict
    seed: int

    @classmethod
    def build(cls, ident: int, network: NetworkSpec, training: TrainSpec, seed: int) -> Task:
        return cls(ident, asdict(network), asdict(training), seed)

    def specs(self) -> tuple[NetworkSpec, TrainSpec]:
        return NetworkSpec(**self.network), TrainSpec(**self.training)


@dataclass
class Result:
    task_id: int
    evaluation: Evaluation


class Transport(Protocol):
    """The master's view of its workers."""

    workers: list[int]

    def send(self, worker: int, task: Task) -> None:
        """Start ``task`` on an idle ``worker``."""

    def receive(self, timeout: float | None = None) -> tuple[int, Result] | None:
        """The next finished result and its worker; None if ``timeout`` seconds pass first."""

    def stop(self) -> None:
        """Tell every worker there is no more work."""


def failed_evaluation(message: str, val_shape: tuple[int, int], test_shape: tuple[int, int], seconds: float = 0.0) -> Evaluation:
    """The record of an evaluation that raised: no predictions, worst possible scores."""
    return Evaluation(
        status="error",
        val_accuracy=0.0,
        val_loss=math.inf,
        test_accuracy=0.0,
        seconds=seconds,
        epochs_done=0,
        val_probs=np.full(val_shape, np.nan, dtype=np.float32),
        test_probs=np.full(test_shape, np.nan, dtype=np.float32),
        message=message,
    )


def evaluate_safely(evaluate: Callable[[Task], Evaluation], task: Task, val_shape, test_shape) -> Evaluation:
    """Run ``evaluate``; an exception becomes an ``"error"`` evaluation instead of killing the worker."""
    try:
        return evaluate(task)
    except Exception as exc:  # a bad network must not end the search
        return failed_evaluation(f"{type(exc).__name__}: {exc}".splitlines()[0][:500], val_shape, test_shape)


class InProcessTransport:
    """Workers that are plain function calls in this process, run one task at a time in send order."""

    def __init__(self, evaluate: Callable[[Task], Evaluation], workers: int, val_shape, test_shape):
        self.workers = list(range(1, workers + 1))
        self._evaluate = evaluate
        self._shapes = (tuple(val_shape), tuple(test_shape))
        self._queue: deque[tuple[int, Task]] = deque()
        self.stopped = False

    def send(self, worker: int, task: Task) -> None:
        self._queue.append((worker, task))

    def receive(self, timeout: float | None = None) -> tuple[int, Result] | None:
        if not self._queue:
            return None
        worker, task = self._queue.popleft()
        return worker, Result(task.id, evaluate_safely(self._evaluate, task, *self._shapes))

    def stop(self) -> None:
        self.stopped = True
