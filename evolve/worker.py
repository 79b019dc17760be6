"""A worker's life: take a task, train, send the result, until told to stop."""
from __future__ import annotations

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


def trainer_for(data: DeviceData) -> Callable[[Task], Evaluation]:
    """The evaluation function of a worker whose data is ``data``."""

    def evaluate(task: Task) -> Evaluation:
        network, training = task.specs()
        return train_and_evaluate(network, training, data, task.seed, keep=lambda fitness: clears(fitness, task.id, task.entry_bar),
                                  watch=Watch(**task.watch))

    return evaluate


def serve(channel: WorkerChannel, evaluate: Callable[[Task], Evaluation]) -> int:
    """Evaluate tasks until the master says stop; returns how many were done."""
    done = 0
    while (task := channel.next_task()) is not None:
        channel.send_result(Result(task.id, evaluate_safely(evaluate, task)))
        done += 1
    return done
