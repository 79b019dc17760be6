"""What the master and a worker say to each other, and the transport interface between them.

The master's loop sees only :class:`Transport`: ``send`` a :class:`Task` to a
worker, ``receive`` the next :class:`Result` from any worker. The MPI transport
(:mod:`evolve.mpi_transport`) implements it across ranks; :class:`InProcessTransport`
implements it in one process, for tests and single-rank runs.

A result's payload (predictions and weights) is delivered only if the worker
offered it (its network cleared the entry bar the task carried) and the master
``wants`` it when the result arrives (it enters the hall of fame now): the bar a
task carried may be stale by then.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

Wants = Callable[[int, float], bool]  # (task id, fitness) -> does the master want this result's payload?


def want_all(task_id: int, fitness: float) -> bool:
    return True

from ensemble.hall_of_fame import OPEN
from ensemble.results import Evaluation, failed_evaluation
from ensemble.specs import NetworkSpec, TrainSpec


@dataclass(frozen=True)
class Task:
    """One network to train: its settings as plain values, the seed for its weights and batches,
    and the hall of fame's entry bar (see :func:`ensemble.hall_of_fame.clears`): a result that does
    not clear it comes back without its payload."""

    id: int
    network: dict
    training: dict
    seed: int
    entry_bar: tuple[float, int] = OPEN
    watch: dict = field(default_factory=dict)  # ensemble.train.Watch fields: early-stopping bars, time limit

    @classmethod
    def build(cls, ident: int, network: NetworkSpec, training: TrainSpec, seed: int, entry_bar: tuple[float, int] = OPEN,
              watch: dict | None = None) -> Task:
        # vars(), not dataclasses.asdict: the specs hold only plain values, and asdict deep-copies them;
        # tuples (per-layer widths) as lists, as JSON stores and gives them back
        return cls(ident, _plain(network), _plain(training), seed, tuple(entry_bar), dict(watch or {}))

    def specs(self) -> tuple[NetworkSpec, TrainSpec]:
        return NetworkSpec(**self.network), TrainSpec(**self.training)


def _plain(spec) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(spec).items()}


@dataclass
class Result:
    task_id: int
    evaluation: Evaluation


class Transport(Protocol):
    """The master's view of its workers."""

    workers: list[int]

    def send(self, worker: int, task: Task) -> None:
        """Start ``task`` on an idle ``worker``."""

    def receive(self, timeout: float | None = None, wants: Wants = want_all) -> tuple[int, Result] | None:
        """The next finished result and its worker; None if ``timeout`` seconds pass first.

        The result carries its payload only if the worker offered one and ``wants`` says yes.
        """

    def stop(self) -> None:
        """Tell every worker there is no more work."""


def evaluate_safely(evaluate: Callable[[Task], Evaluation], task: Task) -> Evaluation:
    """Run ``evaluate``; an exception becomes an ``"error"`` evaluation instead of killing the worker."""
    try:
        return evaluate(task)
    except Exception as exc:  # a bad network must not end the search
        return failed_evaluation(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])


def delivered(ev: Evaluation, task_id: int, wants: Wants) -> Evaluation:
    """``ev`` as the master receives it: without its payload unless the master wants it."""
    return ev if not ev.has_payload or wants(task_id, ev.fitness) else ev.drop_payload()


class InProcessTransport:
    """Workers that are plain function calls in this process, run one task at a time in send order."""

    def __init__(self, evaluate: Callable[[Task], Evaluation], workers: int):
        self.workers = list(range(1, workers + 1))
        self._evaluate = evaluate
        self._queue: deque[tuple[int, Task]] = deque()
        self.stopped = False

    def send(self, worker: int, task: Task) -> None:
        self._queue.append((worker, task))

    def receive(self, timeout: float | None = None, wants: Wants = want_all) -> tuple[int, Result] | None:
        if not self._queue:
            return None
        worker, task = self._queue.popleft()
        return worker, Result(task.id, delivered(evaluate_safely(self._evaluate, task), task.id, wants))

    def stop(self) -> None:
        self.stopped = True
