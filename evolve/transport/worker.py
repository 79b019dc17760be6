"""A worker's life: take a task, train, send the result, until told to stop."""
from __future__ import annotations

import math
import os
import signal
from typing import Callable, Protocol

from ensemble.hall_of_fame import clears
from ensemble.results import Evaluation
from ensemble.train import DeviceData, Watch, train_and_evaluate

from .protocol import Result, Task, evaluate_safely


class WorkerChannel(Protocol):
    def next_task(self) -> Task | None:
        """The next task, or None when the master says stop."""

    def send_result(self, result: Result) -> None:
        ...


# Fault injection, for tests only: EVENS_TEST_FAULTS="kill:5,raise:7,nan:9,hang:11" makes evaluation 5
# kill its worker process (SIGKILL, as the out-of-memory killer does), 7 raise, 9 come back as an "ok"
# result whose fitness is NaN, and 11 stop its worker (SIGSTOP: a process that never answers again).
FAULTS_VARIABLE = "EVENS_TEST_FAULTS"
FAULT_KINDS = ("kill", "raise", "nan", "hang")


def injected_faults(spec: str | None = None) -> dict[int, str]:
    """Evaluation id -> fault, from ``spec`` (default: the environment variable)."""
    spec = os.environ.get(FAULTS_VARIABLE, "") if spec is None else spec
    faults = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, ident = item.partition(":")
        if kind not in FAULT_KINDS or not ident.strip().isdigit():
            raise ValueError(f"{FAULTS_VARIABLE}: {item!r} is not KIND:ID with KIND one of {', '.join(FAULT_KINDS)}")
        faults[int(ident)] = kind
    return faults


def with_faults(evaluate: Callable[[Task], Evaluation], faults: dict[int, str]) -> Callable[[Task], Evaluation]:
    """``evaluate``, except that the evaluations named in ``faults`` fail as told."""
    if not faults:
        return evaluate

    def faulty(task: Task) -> Evaluation:
        fault = faults.get(task.id)
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


def trainer_for(data: DeviceData) -> Callable[[Task], Evaluation]:
    """The evaluation function of a worker whose data is ``data`` (with the test faults of
    :data:`FAULTS_VARIABLE`, if it is set)."""

    def evaluate(task: Task) -> Evaluation:
        network, training = task.specs()
        return train_and_evaluate(network, training, data, task.seed, keep=lambda fitness: clears(fitness, task.id, task.entry_bar),
                                  watch=Watch(**task.watch))

    return with_faults(evaluate, injected_faults())


def serve(channel: WorkerChannel, evaluate: Callable[[Task], Evaluation]) -> int:
    """Evaluate tasks until the master says stop; returns how many were done."""
    done = 0
    while (task := channel.next_task()) is not None:
        channel.send_result(Result(task.id, evaluate_safely(evaluate, task)))
        done += 1
    return done
