"""What the search remembers of each individual: a finished :class:`Record`, or a :class:`Pending` one."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One finished evaluation."""

    id: int
    genome: list[float]
    parents: tuple[int, int]
    status: str  # "ok", "diverged", "error", "stopped" (early), "timeout" or "crashed" (in flight at two job deaths)
    fitness: float  # higher is better (validation accuracy, or -RMSE); -inf unless ok
    metrics: dict[str, float]  # "val_accuracy", "test_loss", "val_rmse", ...: empty unless ok
    seconds: float  # training time on the worker
    epochs_done: int
    worker: int
    started: float  # wall-clock time (s since the epoch) when dispatched
    finished: float  # ... and when its result arrived
    message: str = ""
    operators: str = ""  # what made it: "random", "crossover", "mutation", "crossover+mutation", "copy"; "+redo" if re-sent
    curve: list[float] = field(default_factory=list)  # validation fitness after each epoch, when watched


@dataclass(slots=True)
class Pending:
    """An individual that was sent out but whose result never came back (the run stopped or died)."""

    id: int
    genome: list[float]
    parents: tuple[int, int]
    operators: str = "random"
    attempts: int = 0  # how many jobs ended (died, or gave up on a hung worker) while it was out; at 2 it is not sent again
