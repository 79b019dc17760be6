"""What the master and a worker say to each other, and the transport interface between them.

The master's loop sees only :class:`Transport`: ``send`` a :class:`Task` to a
worker, ``receive`` the next :class:`Result` from any worker. The MPI transport
(:mod:`evolve.transport.mpi_transport`) implements it across ranks; :class:`InProcessTransport`
implements it in one process, for tests and single-rank runs.

A result's payload (predictions and weights) is delivered only if the worker
offered it (its network cleared the entry bar the task carried) and the master
``wants`` it when the result arrives (it enters the hall of fame now): the bar a
task carried may be stale by then.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

Wants = Callable[[int, float, float], bool]  # (task id, fitness, validation loss) -> does the master want this result's payload?


def want_all(task_id: int, fitness: float, loss: float = math.inf) -> bool:
    return True

from ensemble.hall_of_fame import OPEN
from ensemble.results import Evaluation, failed_evaluation
from ensemble.specs import NetworkSpec, TrainSpec, network_spec


class Task:
    """One network to train: its settings as plain values, the seed for its weights and batches,
    and the hall of fame's entry bar (see :func:`ensemble.hall_of_fame.clears`): a result that does
    not clear it comes back without its payload. ``fold`` is ``(j, k)`` for one fold training of a
    cross-validated network (trained without fold j of k, scored on it: :mod:`ensemble.folds`), or ``()``.

    ``network`` and ``training`` are the settings as dicts of plain values (NetworkSpec and
    TrainSpec fields). The master makes its tasks from a genome's :meth:`~evolve.search.space.SearchSpace.key`
    (:meth:`from_key`) and those dicts are built only when first asked for: over MPI the worker
    builds them from the key (see :mod:`evolve.transport.mpi_transport`), so the master never does.
    """

    __slots__ = ("id", "seed", "entry_bar", "watch", "fold", "key", "space", "_network", "_training")

    def __init__(self, id: int, network: dict | None = None, training: dict | None = None, seed: int = 0,  # noqa: A002
                 entry_bar: tuple[float, float, int] = OPEN, watch: dict | None = None, fold: tuple = (), *, key: tuple | None = None,
                 space=None):
        if (network is None or training is None) and (key is None or space is None):
            raise ValueError("a task needs its network and training settings, or a key and the space that decodes it")
        self.id, self.seed, self.entry_bar, self.fold = id, seed, tuple(entry_bar), tuple(fold)
        self.watch = {} if watch is None else watch  # ensemble.train.Watch fields: early-stopping bars, time limit
        self._network, self._training = network, training
        self.key, self.space = key, space  # the genome's SearchSpace.key, and that SearchSpace

    @classmethod
    def build(cls, ident: int, network: NetworkSpec, training: TrainSpec, seed: int, entry_bar: tuple[float, float, int] = OPEN,
              watch: dict | None = None) -> Task:
        return cls(ident, _plain(network), _plain(training), seed, entry_bar, dict(watch or {}))

    @classmethod
    def from_key(cls, ident: int, space, key: tuple, seed: int, entry_bar: tuple[float, float, int] = OPEN, watch: dict | None = None,
                 fold: tuple = ()) -> Task:
        """The task of the genome whose ``space.key`` is ``key``; its settings are decoded when first asked for."""
        if key is None or space is None:
            raise ValueError("a task needs its network and training settings, or a key and the space that decodes it")
        task = cls.__new__(cls)  # what __init__ does, without its checks: once per evaluation on the master
        task.id, task.seed, task.entry_bar, task.watch, task.fold = ident, seed, tuple(entry_bar), {} if watch is None else watch, tuple(fold)
        task._network = task._training = None
        task.key, task.space = key, space
        return task

    @property
    def network(self) -> dict:
        if self._network is None:
            self._decode()
        return self._network

    @property
    def training(self) -> dict:
        if self._training is None:
            self._decode()
        return self._training

    def _decode(self) -> None:
        self._network, self._training = self.space.settings(self.key)

    def specs(self) -> tuple[NetworkSpec | dict, TrainSpec]:
        """The settings as training takes them (a user's network stays its settings: ensemble.builders)."""
        return network_spec(self.network), TrainSpec(**self.training)

    def plain(self) -> dict:
        """Every field as plain values: what ``Task(**plain)`` builds back (settings decoded)."""
        return {"id": self.id, "network": self.network, "training": self.training, "seed": self.seed,
                "entry_bar": self.entry_bar, "watch": self.watch, "fold": list(self.fold)}

    def __eq__(self, other) -> bool:
        return isinstance(other, Task) and self.plain() == other.plain()

    __hash__ = None

    def __repr__(self) -> str:
        return f"Task(id={self.id}, seed={self.seed}, entry_bar={self.entry_bar}, watch={self.watch}, fold={self.fold}, network={self.network}, training={self.training})"


def _plain(spec) -> dict:
    # vars(), not dataclasses.asdict: the specs hold only plain values, and asdict deep-copies them;
    # tuples (per-layer widths) as lists, as JSON stores and gives them back
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(spec).items()}


SKIPPED = "skipped"  # the status of a task a worker dropped from its queue at a drain: it never ran, it is not a record


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

    # Optional: ``queues = True``, a worker takes tasks sent while it trains and starts them in order
    # (the master then keeps ``search.prefetch`` queued behind each training).
    # Optional: ``drain()``, tell every worker to drop the tasks queued behind its training
    # (``search.prefetch``), answering each with a result whose status is SKIPPED.
    # Optional: ``poll(wants)``, a finished result that is already here, or None at once, never waiting.
    # A transport that has it lets the master take the results already waiting in one loop turn
    # (MPIMasterTransport); one that has not (a simulated clock has no "already") gives one a turn.
    # Optional: ``end(seconds)``, the stop for a job that ends with trainings out: every worker ends now, the
    # training it runs abandoned (:class:`Ended`), and says so; the workers that did not within ``seconds``.


class Ended(Exception):
    """The master ended the job while this task trained: the training was stopped, and no result goes back."""


def evaluate_safely(evaluate: Callable[[Task], Evaluation], task: Task) -> Evaluation:
    """Run ``evaluate``; an exception becomes an ``"error"`` evaluation instead of killing the worker
    (:class:`Ended` excepted: it ends the worker's serve loop)."""
    try:
        return evaluate(task)
    except Ended:
        raise
    except Exception as exc:  # a bad network must not end the search
        return failed_evaluation(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])


def delivered(ev: Evaluation, task_id: int, wants: Wants) -> Evaluation:
    """``ev`` as the master receives it: without its payload unless the master wants it."""
    return ev if not ev.has_payload or wants(task_id, ev.fitness, ev.loss) else ev.drop_payload()


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
