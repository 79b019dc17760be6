"""Test doubles for the master's loop: a fitness landscape and a transport on a virtual clock."""
from __future__ import annotations

import heapq
import math

import numpy as np

from ensemble.hall_of_fame import clears
from ensemble.problem import Classification
from ensemble.results import Evaluation, failed_evaluation
from evolve.protocol import SKIPPED, Result, Task, delivered, evaluate_safely, want_all
from evolve.simulate import VirtualClock

VAL_SHAPE, TEST_SHAPE = (4, 2), (6, 2)
PROBLEM = Classification(2)
VAL_Y, TEST_Y = np.array([0, 1, 1, 0]), np.array([1, 0, 1, 1, 0, 0])


def landscape(task: Task) -> Evaluation:
    """A smooth fitness over the decoded genes: prefers lr near 3e-3 and a deep, wide network (whose
    ``params``, a made-up size, the nsga2 strategy minimises).

    Like a real worker, it attaches predictions and (small, made-up) weights only when the
    score clears the task's hall-of-fame entry bar.
    """
    net, tr = task.network, task.training
    score = 0.5 + 0.1 * net["depth"] / 3 + 0.1 * net["width"] / 128 - 0.05 * abs(math.log10(tr["learning_rate"]) + 2.5)
    score = min(max(score, 0.0), 1.0)
    metrics = {"val_accuracy": score, "val_loss": -math.log(max(score, 1e-9)), "test_accuracy": score, "test_loss": 0.0,
               "params": float(net["depth"] * net["width"] ** 2)}  # a cost that grows with what the score prefers (nsga2)
    bars = task.watch.get("stop_below", ())
    curve = [score * (1 - 0.6 ** (e + 1)) for e in range(tr["epochs"])]  # rises towards the final score
    for e, bar in enumerate(bars[: tr["epochs"] - 1]):  # the median rule, as a worker applies it
        if e + 1 >= task.watch.get("warmup", 0) and math.isfinite(bar) and curve[e] < bar:
            return Evaluation("stopped", curve[e], {"val_accuracy": curve[e]}, 1.0, e + 1, curve=curve[: e + 1])
    ev = Evaluation("ok", score, metrics, 1.0, tr["epochs"], curve=curve if bars else [])
    if clears(score, task.id, task.entry_bar):
        rng = np.random.default_rng(task.id)
        ev.val_pred = rng.dirichlet(np.ones(2), VAL_SHAPE[0]).astype(np.float32)
        ev.test_pred = rng.dirichlet(np.ones(2), TEST_SHAPE[0]).astype(np.float32)
        ev.weights = {"0.weight": rng.normal(size=(3, 2)).astype(np.float32), "1.num_batches_tracked": np.array(task.id, dtype=np.int64)}
    return ev


class SimulatedTransport:
    """Workers with fixed speeds on a virtual clock; ``receive`` jumps to the next finish. A worker holds
    up to ``depth`` tasks (``1 + search.prefetch``): one sent while it trains starts when that one ends."""

    def __init__(self, seconds_per_task: dict[int, float], evaluate=landscape, clock: VirtualClock | None = None, depth: int = 1):
        self.workers = sorted(seconds_per_task)
        self.depth = depth
        self.queues = depth > 1
        self._free_at: dict[int, float] = {}  # when each worker's last task ends
        self.starts: list[tuple[float, int, int]] = []  # (time, worker, task id): when each training began
        self.skipped: set[int] = set()  # tasks dropped from a queue at a drain
        self.speed = seconds_per_task
        self.evaluate = evaluate
        self.clock = clock or VirtualClock()
        self._running: list[tuple[float, int, int, Task]] = []
        self.sends: list[tuple[float, int, int]] = []  # (time, worker, task id)
        self.results: list[tuple[float, int, int]] = []
        self._n = 0

    def send(self, worker: int, task: Task) -> None:
        held = sum(w == worker for _, _, w, _ in self._running)
        assert held < self.depth, f"task sent to a worker holding {held} already"
        self.sends.append((self.clock.now, worker, task.id))
        self._n += 1
        start = max(self.clock.now, self._free_at.get(worker, -math.inf))
        self._free_at[worker] = start + self.speed[worker]
        self.starts.append((start, worker, task.id))
        heapq.heappush(self._running, (start + self.speed[worker], self._n, worker, task))

    def receive(self, timeout=None, wants=want_all):
        if not self._running:
            return None
        finish, _, worker, task = heapq.heappop(self._running)
        self.clock.now = finish
        self.results.append((finish, worker, task.id))
        if task.id in self.skipped:
            return worker, Result(task.id, failed_evaluation("dropped from the queue at a drain", SKIPPED))
        return worker, Result(task.id, delivered(evaluate_safely(self.evaluate, task), task.id, wants))

    def drain(self) -> None:
        """Every task queued behind a training comes back ``skipped`` when that training ends."""
        now, kept = self.clock.now, []
        for finish, n, worker, task in self._running:
            if finish - self.speed[worker] > now:  # not started
                self.skipped.add(task.id)
                finish -= self.speed[worker]
            kept.append((finish, n, worker, task))
        self._running = kept
        heapq.heapify(self._running)

    def stop(self) -> None:
        pass
