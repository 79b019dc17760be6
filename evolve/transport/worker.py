"""A worker's life: take a task, train, send the result, until told to stop."""
from __future__ import annotations

import math
import os
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from ensemble.hall_of_fame import clears
from ensemble.results import Evaluation

from .protocol import Ended, Result, Task, evaluate_safely

if TYPE_CHECKING:
    from ensemble.train import DeviceData


class WorkerChannel(Protocol):
    def next_task(self) -> Task | None:
        """The next task, or None when the master says stop."""

    def send_result(self, result: Result) -> None:
        ...


# Fault injection, for tests only: EVENS_TEST_FAULTS="kill:5,raise:7,nan:9,hang:11" makes evaluation 5
# kill its worker process (SIGKILL, as the out-of-memory killer does), 7 raise, 9 come back as an "ok"
# result whose fitness is NaN, and 11 stop its worker (SIGSTOP: a process that never answers again).
# A fault may name a design instead of an id: "kill:family=cnn&width=8" kills every evaluation whose
# network or training settings have those values (compared as text), whatever its id, as a network
# that kills its worker does each time it is trained.
FAULTS_VARIABLE = "EVENS_TEST_FAULTS"
FAULT_KINDS = ("kill", "raise", "nan", "hang")


@dataclass(frozen=True)
class Faults:
    """Faults by evaluation id, and by design (settings that must all match)."""

    by_id: dict[int, str] = field(default_factory=dict)
    by_design: tuple[tuple[dict[str, str], str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.by_id or self.by_design)

    def fault_of(self, task: Task) -> str | None:
        if task.id in self.by_id:
            return self.by_id[task.id]
        if self.by_design:
            settings = {**task.network, **task.training}
            for design, kind in self.by_design:
                if all(str(settings.get(name)) == value for name, value in design.items()):
                    return kind
        return None


def injected_faults(spec: str | None = None) -> Faults:
    """The faults ``spec`` names (default: the environment variable)."""
    spec = os.environ.get(FAULTS_VARIABLE, "") if spec is None else spec
    by_id, by_design = {}, []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, target = item.partition(":")
        target = target.strip()
        pairs = [part.partition("=") for part in target.split("&")]
        if kind in FAULT_KINDS and target.isdigit():
            by_id[int(target)] = kind
        elif kind in FAULT_KINDS and target and all(name and sep and value for name, sep, value in pairs):
            by_design.append(({name.strip(): value.strip() for name, _, value in pairs}, kind))
        else:
            raise ValueError(f"{FAULTS_VARIABLE}: {item!r} is not KIND:ID or KIND:NAME=VALUE[&NAME=VALUE...] "
                             f"with KIND one of {', '.join(FAULT_KINDS)}")
    return Faults(by_id, tuple(by_design))


def with_faults(evaluate: Callable[[Task], Evaluation], faults: Faults) -> Callable[[Task], Evaluation]:
    """``evaluate``, except that the evaluations ``faults`` names fail as told."""
    if not faults:
        return evaluate

    def faulty(task: Task) -> Evaluation:
        fault = faults.fault_of(task)
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "hang":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif fault == "raise":
            raise RuntimeError(f"injected fault in evaluation {task.id}")
        elif fault == "nan":
            return Evaluation(status="ok", fitness=math.nan, epochs_done=1, message="injected NaN")
        return evaluate(task)

    return faulty


PAUSED_CACHE_BYTES = 2 << 30  # per training process: the paused trainings it keeps for promotions (a few MB each, most never promoted)


def trainer_for(data: DeviceData, split_seed: int = 0) -> Callable[[Task], Evaluation]:
    """The evaluation function of a worker whose data is ``data`` (with the test faults of
    :data:`FAULTS_VARIABLE`, if it is set). A fold task trains on its fold's view of the data, the folds
    dealt by ``split_seed`` (``data.split_seed``) as every rank deals them (:func:`ensemble.folds.assign_folds`);
    fold ``(k, k)`` is a refit on every training row. A fold task always comes back whole (the master combines them)."""
    from ensemble.folds import assign_folds
    from ensemble.paused import PausedCache
    from ensemble.train import Watch, train_and_evaluate  # (here: a rank that only serves a training process imports no torch)

    folds: dict[int, object] = {}  # k -> each training row's fold
    paused = PausedCache(PAUSED_CACHE_BYTES)  # search.promotion: trainings paused at a rung, to carry on when promoted

    def evaluate(task: Task) -> Evaluation:
        network, training = task.specs()
        seen = data
        if task.fold:
            held, k = task.fold
            if k not in folds:
                folds[k] = assign_folds(data.y["train"], k, split_seed, data.problem.kind == "classification")
            seen = data.fold_view(folds[k], held)
        keep = (lambda fitness, loss: True) if task.fold else lambda fitness, loss: clears(fitness, loss, task.id, task.entry_bar)
        watch = Watch(**task.watch)
        owner = (watch.carry_on if watch.carry_on >= 0 else task.id, task.fold)  # the network's first stage names its training
        resume = paused.take(owner) if watch.carry_on >= 0 else None
        ev = train_and_evaluate(network, training, seen, task.seed, keep=keep, watch=watch, until=watch.pause_after or None, resume=resume)
        if watch.carry_on >= 0:
            ev.metrics["carried_on_from"] = float(resume.epoch if resume is not None else 0)  # 0: trained again from the start
        if ev.paused is not None:
            paused.put(owner, ev.paused)
            ev.paused = None  # the state stays here; only the scores go back
        return ev

    return with_faults(evaluate, injected_faults())


def serve(channel: WorkerChannel, evaluate: Callable[[Task], Evaluation]) -> int:
    """Evaluate tasks until the master says stop, or ends the job while one trains (``evaluate`` raises
    :class:`~evolve.transport.protocol.Ended`: no result goes back); returns how many were done."""
    done = 0
    while (task := channel.next_task()) is not None:
        try:
            ev = evaluate_safely(evaluate, task)
        except Ended:
            break
        channel.send_result(Result(task.id, ev))
        done += 1
    return done
