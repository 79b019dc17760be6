"""How far can a search scale? The real strategy and master loop, on simulated workers and a virtual clock.

:func:`simulate` runs :func:`~evolve.engine.loop.run_search` unchanged over
:class:`SimulatedWorkers`, a transport of discrete events (nothing sleeps, nothing
trains): each task takes a lognormal time (median ``task_seconds``, shape
``sigma``) and ends with a made-up fitness of its decoded genes; the master
spends ``master_seconds`` of CPU on every result before it can hand out the
next task, so results queue when it cannot keep up, as they would on a real
machine. Worker utilization is the simulated workers' training time over their
capacity (workers x time), up to the last task handed out: time a finished
worker waits for the master, or for a generation's barrier, counts as idle.

This is a model, not a measurement: it leaves out message latency (microseconds,
against trainings of seconds) and the variance of the master's cost.
"""
from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass, replace

from ensemble.results import Evaluation
from evolve.config.schema import Config
from evolve.transport.protocol import Result, Task, Wants, want_all

from .loop import run_search
from .state import SearchState


def made_up_fitness(task: Task) -> float:
    """A smooth landscape over the decoded genes, for the strategy to climb (no network is trained)."""
    net, tr = task.network, task.training
    score = 0.5 + 0.1 * net["depth"] / 3 + 0.1 * min(net["width"], 128) / 128 - 0.05 * abs(math.log10(tr["learning_rate"]) + 2.5)
    return min(max(score, 0.0), 1.0)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimulatedWorkers:
    """A transport of ``workers`` simulated workers on a virtual clock, with a master that costs time."""

    queues = True  # a task sent to a worker still training starts when that training ends (search.prefetch)

    def __init__(self, workers: int, task_seconds: float, sigma: float, master_seconds: float, seed: int = 0):
        self.workers = list(range(1, workers + 1))
        self.clock = VirtualClock()
        self.mu, self.sigma = math.log(task_seconds), sigma
        self.master_seconds = master_seconds
        self.rng = random.Random(seed)
        self._running: list[tuple[float, int, int, Task]] = []  # (finish time, worker, order sent, task)
        self._sent = 0
        self._free_at: dict[int, float] = {}  # when each worker's last task ends: one sent before then waits in its queue
        self.trainings: list[tuple[float, float]] = []  # (start, finish) of every task
        self._reached: dict[int, tuple[int, int]] = {}  # search.promotion: the epoch each paused network reached, and where
        self.carried_on = self.trained_again = 0  # promotions sent to the worker holding their paused training, and not
        self.last_sent = self.last_new = 0.0
        self.last_finish = 0.0

    def send(self, worker: int, task: Task) -> None:
        start = max(self.clock.now, self._free_at.get(worker, 0.0))
        finish = self._free_at[worker] = start + self.rng.lognormvariate(self.mu, self.sigma) * self._share(task, worker)
        self.trainings.append((start, finish))
        self.last_sent = self.clock.now
        if task.watch.get("carry_on", -1) < 0:
            self.last_new = self.clock.now
        self._sent += 1  # (two of a worker's tasks may end at once: a stage of no epochs queued behind another)
        heapq.heappush(self._running, (finish, worker, self._sent, task))

    def _share(self, task: Task, worker: int) -> float:
        """The share of its network's whole training a task trains: all of it, or with successive halving its stage:
        from where its network paused on this worker, or from the start on another (as a real worker's memory)."""
        watch, epochs = task.watch, task.training["epochs"]
        if not watch.get("pause_after") and watch.get("carry_on", -1) < 0:
            return 1.0
        begin = 0
        if watch.get("carry_on", -1) >= 0:
            reached, holder = self._reached.get(watch["carry_on"], (0, None))
            begin = reached if holder == worker else 0
            self.carried_on += holder == worker
            self.trained_again += holder != worker
        return max(0.0, (watch.get("pause_after") or epochs) - begin) / epochs

    def utilization(self) -> float:
        """Training time over capacity, up to the last dispatch of a new network: the steady state, without the
        drain at the end of a simulated budget (a real search runs many more tasks per worker; with successive
        halving, the last networks' promotions are that drain). (A task queued behind another, with prefetch,
        may start after that: the time up to the last dispatch is what the master's pace decides.)"""
        until = self.last_new
        busy = sum(min(finish, until) - start for start, finish in self.trainings if start < until)
        return busy / (len(self.workers) * until) if until > 0 else 0.0

    def steady_per_hour(self) -> float:
        """Results an hour in the steady state: the workers busy as :meth:`utilization` says, each result taking the
        mean of the simulated tasks (stages, with successive halving). What a long campaign records, without a
        short simulation's ramp and drain (counting the results that end before the last dispatch would leave out
        the trainings under way then: a quarter of them at two tasks per worker)."""
        if not self.trainings:
            return 0.0
        mean = sum(finish - start for start, finish in self.trainings) / len(self.trainings)
        return self.utilization() * len(self.workers) * 3600.0 / mean if mean > 0 else 0.0

    def receive(self, timeout: float | None = None, wants: Wants = want_all) -> tuple[int, Result] | None:
        if not self._running:
            return None
        finish, worker, _, task = heapq.heappop(self._running)
        # The master takes the result when it is free, and is busy with it for master_seconds.
        self.clock.now = max(self.clock.now, finish) + self.master_seconds
        self.last_finish = max(self.last_finish, finish)
        epochs = task.training["epochs"]
        paused = task.watch.get("pause_after", 0) if task.watch.get("pause_after", 0) < epochs else 0  # (a pause at the end is none)
        reached = paused or epochs
        fitness = made_up_fitness(task) * (0.7 + 0.3 * reached / epochs)  # a stage short of the whole training scores lower
        size = float(task.network["depth"] * task.network["width"] ** 2)  # a made-up cost, for nsga2's second objective
        metrics = {"val_accuracy": fitness, "params": size, "latency_us": size / 1e3}
        if paused:
            self._reached[task.watch.get("carry_on", -1) if task.watch.get("carry_on", -1) >= 0 else task.id] = (paused, worker)
        return worker, Result(task.id, Evaluation(status="paused" if paused else "ok", fitness=fitness, metrics=metrics, epochs_done=reached))

    def stop(self) -> None:
        pass


@dataclass(frozen=True)
class Projection:
    workers: int
    evaluations: int
    makespan_seconds: float
    utilization: float  # workers' training time / their capacity, until the last task is handed out
    evaluations_per_hour: float
    master_load: float  # the master's busy time / makespan
    carried_on: float = 1.0  # search.promotion: the share of promotions sent to the worker holding their paused training
    steady_evaluations_per_hour: float = 0.0  # up to the last dispatch of a new network: a long campaign's rate


# What the master keeps and a resume reads as the history grows, measured by scripts/bench/bench_scale.py over the real
# loop and synthetic histories (docs/benchmarks.md, "The master's memory and a resume as the history grows"), for the
# default search (async, blind breeding, the median rule), whose resume reads the state file alone.
MASTER_BASE_BYTES = 107e6  # imports, the segment cache and the median rule's bounded arrays
MASTER_BYTES_PER_EVALUATION = 51  # the networks proposed as hashes, and what the allocator keeps
RUN_FILE_BYTES_PER_EVALUATION = 350
RESUME_START_SECONDS = 0.8  # imports, the state file, the strategy and rule built
RESUME_SECONDS_PER_EVALUATION = 3.3e-7  # the hashes of the networks proposed, read from checkpoint.proposed, checked and sorted (4.11 s at 10^7, loaded VM)


@dataclass(frozen=True)
class Campaign:
    """What a search of ``hours`` at ``evaluations_per_hour`` leaves: the master's memory, the run file, a resume."""

    hours: float
    evaluations: int
    master_gb: float
    run_file_gb: float
    resume_seconds: float


def campaign(evaluations_per_hour: float, hours: float) -> Campaign:
    n = int(evaluations_per_hour * hours)
    return Campaign(hours, n, (MASTER_BASE_BYTES + n * MASTER_BYTES_PER_EVALUATION) / 1e9, n * RUN_FILE_BYTES_PER_EVALUATION / 1e9,
                    RESUME_START_SECONDS + n * RESUME_SECONDS_PER_EVALUATION)


def simulate(config: Config, workers: int, task_seconds: float, sigma: float = 0.5, master_seconds: float = 250e-6,
             evaluations: int | None = None) -> Projection:
    """Project the worker utilization, throughput and master load of ``config``'s search (see the module docstring).

    ``evaluations`` defaults to five per worker. A generational search breeds ``search.population``
    children per generation; give it at least ``workers`` to keep them all busy.
    """
    transport = SimulatedWorkers(workers, task_seconds, sigma, master_seconds, config.search.seed)
    state = SearchState.fresh(config.search.seed, config.ensemble.candidates)
    # Simulated results carry no predictions to value an ensemble by: ensemble selection is projected as
    # selection by fitness (the same dispatch; the master's cost differs only by what bench_master measures).
    config = replace(config, search=replace(config.search, evaluations=evaluations or 5 * workers, selection="fitness"))
    run_search(state, transport, config.space, config, clock=transport.clock, wall_clock=transport.clock)
    makespan = transport.last_finish
    done = len(state.records)
    return Projection(
        workers=workers,
        evaluations=done,
        makespan_seconds=makespan,
        utilization=transport.utilization(),
        evaluations_per_hour=3600.0 * done / makespan if makespan > 0 else 0.0,
        master_load=done * master_seconds / makespan if makespan > 0 else 0.0,
        carried_on=transport.carried_on / max(1, transport.carried_on + transport.trained_again),
        steady_evaluations_per_hour=transport.steady_per_hour(),
    )


def master_cost(config: Config, evaluations: int = 3000) -> float:
    """The master's CPU seconds per evaluation of ``config``'s search, measured here on the real loop with
    instant workers (no MPI: the transport's share comes on top)."""
    transport = SimulatedWorkers(workers=64, task_seconds=1.0, sigma=0.5, master_seconds=0.0)
    state = SearchState.fresh(0, config.ensemble.candidates)
    config = replace(config, search=replace(config.search, evaluations=evaluations, seed=0, selection="fitness"))
    start = time.process_time()
    run_search(state, transport, config.space, config, clock=transport.clock, wall_clock=transport.clock)
    return (time.process_time() - start) / len(state.records)
