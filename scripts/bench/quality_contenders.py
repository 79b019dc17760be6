"""The searchers bench_quality.py compares, each training its networks with evens' own worker function.

* :func:`run_evens`: the product's search loop (:func:`evolve.engine.loop.run_search`) in one process,
  over an :class:`~evolve.transport.protocol.InProcessTransport` whose worker is the real one
  (:func:`evolve.transport.worker.trainer_for`);
* :func:`run_random`: random genomes from ``random.Random(seed)``, decoded by the space;
* :func:`run_tpe`: Optuna's TPE, define-by-run over the same genes (:func:`suggest_key`).

Random search and TPE train each network as an evens worker does (:func:`evaluate_one`: the same
seed scheme, the same hall of fame and its entry bar), without early stopping. Every contender's
evaluation function is wrapped in a :class:`Capture`, which keeps each network's CPU seconds and
the predictions of every network that could enter the hall of fame (for the anytime ensemble).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace

import numpy as np

try:
    import optuna
except ImportError:  # bench_quality checks, after --help
    optuna = None

from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.train import DeviceData
from evolve.config.schema import Config
from evolve.engine.loop import run_search, task_seed
from evolve.engine.state import SearchState
from evolve.search.ga import random_genome
from evolve.search.space import Choice, Gene, SearchSpace
from evolve.transport.protocol import InProcessTransport, Task, evaluate_safely
from evolve.transport.worker import trainer_for


@dataclass
class Outcome:
    """One search: its networks in the order they finished, its hall of fame, what it cost, and the
    predictions of every network that could enter the hall (for the anytime ensemble)."""

    networks: list[dict] = field(default_factory=list)
    hall: HallOfFame | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: steadier than wall time on a shared machine
    preds: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class Capture:
    """A worker's evaluation function that also keeps the predictions of each network returning them
    (those that cleared the hall of fame's bar when sent: every network the hall can hold)."""

    def __init__(self, evaluate):
        self.evaluate, self.preds, self.cpu, self.family = evaluate, {}, {}, {}

    def __call__(self, task: Task):
        began = time.process_time()
        ev = self.evaluate(task)
        self.cpu[task.id], self.family[task.id] = time.process_time() - began, task.network["family"]
        if ev.has_payload:
            self.preds[task.id] = (ev.val_pred, ev.test_pred)
        return ev


class Timer:
    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def network_row(ident: int, outcome, metric: str, capture: Capture) -> dict:
    """What the benchmark keeps of one network (``outcome``: a Record or an Evaluation); ``cpu``: its training's CPU seconds."""
    m = outcome.metrics
    return {"id": ident, "status": outcome.status, "fitness": outcome.fitness, "val": m.get(f"val_{metric}", math.nan),
            "test": m.get(f"test_{metric}", math.nan), "epochs": outcome.epochs_done, "cpu": capture.cpu.get(ident, math.nan),
            "family": capture.family.get(ident, "?")}


def evaluate_one(capture: Capture, hall: HallOfFame, seed: int, ident: int, network, training):
    """Train one network exactly as an evens worker does (no early stopping); offer it to ``hall``."""
    task = Task.build(ident, network, training, task_seed(seed, ident), hall.entry_bar())
    ev = evaluate_safely(capture, task)
    if ev.status == "ok" and ev.has_payload and hall.qualifies(ev.fitness, ident, ev.loss):
        hall.offer(Member(ident, ev.fitness, task.network, task.training, ev.val_pred, ev.test_pred, {}, loss=ev.loss))
    return ev


def run_evens(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, workers: int,
              early_stopping: bool = True, prefetch: int | None = None) -> Outcome:
    """The product's search loop, in one process, on the config's search settings."""
    search = replace(cfg.search, seed=seed, early_stopping=early_stopping and cfg.search.early_stopping,
                     prefetch=cfg.search.prefetch if prefetch is None else prefetch)
    state = SearchState.fresh(seed, cfg.ensemble.candidates)
    capture = Capture(trainer_for(data))
    with Timer() as t:
        transport = InProcessTransport(capture, workers)
        transport.queues = workers > 1  # W > 1 workers stand for MPI's: a task queued behind each training (search.prefetch)
        run_search(state, transport, space, replace(cfg, search=search, space=space), validation=(data.problem, data.y["val"]))
    rows = [network_row(r.id, r, data.problem.metric, capture) for r in state.records]
    return Outcome(rows, state.hall_of_fame, t.wall, t.cpu, capture.preds)


def run_random(cfg: Config, space: SearchSpace, data: DeviceData, seed: int) -> Outcome:
    rng, capture = random.Random(seed), Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with Timer() as t:
        for ident in range(cfg.search.evaluations):
            ev = evaluate_one(capture, out.hall, seed, ident, *space.candidate(random_genome(rng, len(space))))
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def condition_order(space: SearchSpace) -> list[Gene]:
    """The genes, each after the genes its conditions test."""
    return list(space.condition_order)


def suggest_key(trial, space: SearchSpace, order: list[Gene]) -> tuple:
    """Define-by-run: suggest each active gene natively; an inactive one takes its default. A key of the space."""
    values, active = {}, {}
    for gene in order:
        on = all(active[other] and values[other] in allowed for other, allowed in gene.conditions())
        active[gene.name] = on
        d = gene.domain
        if not on:
            values[gene.name] = gene.default
        elif isinstance(d, Choice):
            values[gene.name] = d.options[0] if len(d.options) == 1 else trial.suggest_categorical(gene.name, list(d.options))
        elif d.low == d.high:
            values[gene.name] = int(d.low) if d.integer else d.low
        elif d.integer:
            values[gene.name] = trial.suggest_int(gene.name, int(d.low), int(d.high), log=d.log)
        else:
            values[gene.name] = trial.suggest_float(gene.name, d.low, d.high, log=d.log)
    return tuple(values[n] for n in space.names)


def check_suggestions(space: SearchSpace, n: int = 300) -> None:
    """The define-by-run space is the evens space: fed a genome's decoded values, it gives the genome's key."""
    rng, order = random.Random(1234), condition_order(space)
    for _ in range(n):
        genome = random_genome(rng, len(space))
        decoded = space.decode(genome)
        got, want = suggest_key(optuna.trial.FixedTrial(decoded), space, order), space.key(genome)
        if got != want:
            raise SystemExit(f"bench_quality: the Optuna space disagrees with evens' on {decoded}: {got} != {want}")


def run_tpe(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, group: bool = False) -> Outcome:
    """Optuna's defaults (5.x: multivariate TPE over the genes every trial has; a conditional gene falls back
    to independent TPE) unless ``group``, which models each set of co-occurring genes jointly."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    order = condition_order(space)
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True) if group else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    capture = Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with Timer() as t:
        for ident in range(cfg.search.evaluations):
            trial = study.ask()
            ev = evaluate_one(capture, out.hall, seed, ident, *space.specs(suggest_key(trial, space, order)))
            if ev.status == "ok":
                study.tell(trial, ev.fitness)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out
