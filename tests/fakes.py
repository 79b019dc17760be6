"""Test doubles for the master's loop: a fitness landscape and a transport on a virtual clock."""
from __future__ import annotations

import heapq
import math

import numpy as np

from ensemble.hall_of_fame import clears
from ensemble.problem import Classification
from ensemble.results import Evaluation, failed_evaluation
from evolve.engine.simulator import VirtualClock
from evolve.transport.protocol import SKIPPED, Result, Task, delivered, evaluate_safely, want_all

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
            return Evaluation(status="stopped", fitness=curve[e], metrics={"val_accuracy": curve[e]}, seconds=1.0, epochs_done=e + 1, curve=curve[: e + 1])
    ev = Evaluation(status="ok", fitness=score, metrics=metrics, seconds=1.0, epochs_done=tr["epochs"], curve=curve if bars else [])
    if clears(score, metrics["val_loss"], task.id, task.entry_bar):
        rng = np.random.default_rng(task.id)
        ev.val_pred = rng.dirichlet(np.ones(2), VAL_SHAPE[0]).astype(np.float32)
        ev.test_pred = rng.dirichlet(np.ones(2), TEST_SHAPE[0]).astype(np.float32)
        ev.weights = {"0.weight": rng.normal(size=(3, 2)).astype(np.float32), "1.num_batches_tracked": np.array(task.id, dtype=np.int64)}
    return ev


class SimulatedTransport:
    """Workers with fixed speeds on a virtual clock; ``receive`` jumps to the next finish. A worker holds
    up to ``depth`` tasks (``1 + search.prefetch``): one sent while it trains starts when that one ends.
    ``evaluate``: one function for every worker, or a dict of one per worker (each with its own memory)."""

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
        evaluate = self.evaluate[worker] if isinstance(self.evaluate, dict) else self.evaluate
        return worker, Result(task.id, delivered(evaluate_safely(evaluate, task), task.id, wants))

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


def search_config(evaluations: int, population: int = 10, candidates: int = 32, seed: int = 0, space=None, **search):
    """A run's Config for :func:`evolve.engine.loop.run_search` in tests: the config's own defaults, except
    that early stopping, prefetch, the drain and hang detection are off unless a test asks for them."""
    from evolve.config.schema import Config, EnsembleConfig, SearchConfig
    from evolve.search.space_config import parse_space

    fields = {"early_stopping": False, "prefetch": 0, "drain_seconds": 0.0, "hang_seconds": 0.0, **search}
    return Config(search=SearchConfig(evaluations=evaluations, population=population, seed=seed, **fields),
                  ensemble=EnsembleConfig(candidates=candidates, size=min(5, candidates)), space=space or parse_space({}))


def run_on(workers: int, state, space, config, **kwargs) -> SimulatedTransport | None:
    """``run_search`` on the landscape: one in-process worker, or ``workers`` simulated ones of uneven speeds
    (so results arrive out of order) on a virtual clock, which is returned. ``kwargs`` go to run_search."""
    from evolve.engine.loop import run_search
    from evolve.transport.protocol import InProcessTransport

    if workers == 1:
        run_search(state, InProcessTransport(landscape, 1), space, config, **kwargs)
        return None
    clock = VirtualClock()
    speeds = {w: 1.0 + 0.37 * (w % 3) + 0.11 * w for w in range(1, workers + 1)}
    transport = SimulatedTransport(speeds, clock=clock)
    run_search(state, transport, space, config, clock=clock, **kwargs)
    return transport


def trace(state) -> list[tuple]:
    """What a search computed, independent of timing and of resumes: every individual by id, "+redo" dropped."""
    return [(r.id, tuple(r.genome), r.parents, r.operators.removesuffix("+redo"), r.fitness) for r in sorted(state.records, key=lambda r: r.id)]
