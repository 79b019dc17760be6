"""The searchers bench_quality.py compares, each training its networks with evens' own worker function.

* :func:`run_evens`: the product's search loop (:func:`evolve.engine.loop.run_search`) in one process,
  over an :class:`~evolve.transport.protocol.InProcessTransport` whose worker is the real one
  (:func:`evolve.transport.worker.trainer_for`);
* :func:`run_random`: random genomes from ``random.Random(seed)``, decoded by the space;
* :func:`run_tpe`: Optuna's TPE, define-by-run over the same genes (:func:`suggest_key`);
* :func:`run_tpe_hyperband`: the same with Optuna's own multi-fidelity, its ``HyperbandPruner`` (each network
  trained epoch by epoch, in stages that carry on: ensemble.paused);
* :func:`run_top_k`: Egele et al.'s baseline: random networks trained for one epoch, then the best of them
  trained on to their whole epochs.

With a CPU budget (``budget``: seconds of this process, 0 for none) a searcher stops starting networks once
its trainings have spent it, instead of after ``search.evaluations`` networks.

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
from ensemble.results import Evaluation
from ensemble.train import DeviceData
from evolve.config.schema import Config
from evolve.engine.loop import run_search, task_seed
from evolve.engine.state import SearchState
from evolve.search.ga import random_genome
from evolve.search.optuna_strategy import suggest
from evolve.search.space import Choice, SearchSpace
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
        self.total = 0.0  # CPU seconds of every training so far (the budget's measure)

    def __call__(self, task: Task):
        began = time.process_time()
        ev = self.evaluate(task)
        self.cpu[task.id], self.family[task.id] = time.process_time() - began, task.network["family"]
        self.total += self.cpu[task.id]
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
    return {"id": ident, "status": outcome.status, "fitness": outcome.fitness, "loss": outcome.loss, "val": m.get(f"val_{metric}", math.nan),
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
              early_stopping: bool = True, prefetch: int | None = None, budget: float = 0.0) -> Outcome:
    """The product's search loop, in one process, on the config's search settings (with ``budget``: until its
    trainings have spent that many CPU seconds, as a stop request ends a run)."""
    search = replace(cfg.search, seed=seed, early_stopping=early_stopping and cfg.search.early_stopping,
                     prefetch=cfg.search.prefetch if prefetch is None else prefetch)
    if budget:
        search = replace(search, evaluations=10**9, drain_seconds=0.0)
    state = SearchState.fresh(seed, cfg.ensemble.candidates)
    capture = Capture(trainer_for(data))
    stop = (lambda: int(capture.total >= budget)) if budget else (lambda: 0)
    with Timer() as t:
        transport = InProcessTransport(capture, workers)
        transport.queues = workers > 1  # W > 1 workers stand for MPI's: a task queued behind each training (search.prefetch)
        run_search(state, transport, space, replace(cfg, search=search, space=space), should_stop=stop,
                   validation=(data.problem, data.y["val"]))
    rows = [network_row(r.id, r, data.problem.metric, capture) for r in state.records]
    return Outcome(rows, state.hall_of_fame, t.wall, t.cpu, capture.preds)


def networks(cfg: Config, capture: Capture, budget: float):
    """The ids of the networks a searcher may start: ``search.evaluations`` of them, or while the budget lasts."""
    ident = 0
    while (capture.total < budget) if budget else ident < cfg.search.evaluations:
        yield ident
        ident += 1


def run_random(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, budget: float = 0.0) -> Outcome:
    rng, capture = random.Random(seed), Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with Timer() as t:
        for ident in networks(cfg, capture, budget):
            ev = evaluate_one(capture, out.hall, seed, ident, *space.candidate(random_genome(rng, len(space))))
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def suggest_key(trial, space: SearchSpace) -> tuple:
    """Define-by-run, as the optuna strategy suggests (evolve.search.optuna_strategy.suggest): a key of the space,
    each inactive gene at its default."""
    values = suggest(trial, space)
    return tuple(values.get(g.name, g.default) for g in space.genes)


def check_suggestions(space: SearchSpace, n: int = 300) -> None:
    """The define-by-run space is the evens space: fed a genome's decoded values, it gives the genome's key."""
    rng = random.Random(1234)
    for _ in range(n):
        genome = random_genome(rng, len(space))
        decoded = space.decode(genome)
        got, want = suggest_key(optuna.trial.FixedTrial(decoded), space), space.key(genome)
        if got != want:
            raise SystemExit(f"bench_quality: the Optuna space disagrees with evens' on {decoded}: {got} != {want}")


def run_tpe(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, group: bool = False, budget: float = 0.0) -> Outcome:
    """Optuna's defaults (5.x: multivariate TPE over the genes every trial has; a conditional gene falls back
    to independent TPE) unless ``group``, which models each set of co-occurring genes jointly."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True) if group else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    capture = Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with Timer() as t:
        for ident in networks(cfg, capture, budget):
            trial = study.ask()
            ev = evaluate_one(capture, out.hall, seed, ident, *space.specs(suggest_key(trial, space)))
            if ev.status == "ok":
                study.tell(trial, ev.fitness)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def timed(capture: Capture, ident: int, network, call) -> Evaluation:
    """``call()``, a training of network ``ident`` run here rather than through ``capture``: its CPU seconds and
    family kept in ``capture`` as Capture keeps a task's."""
    began = time.process_time()
    ev = call()
    capture.cpu[ident], capture.family[ident] = time.process_time() - began, getattr(network, "family", "?")
    capture.total += capture.cpu[ident]
    return ev


def offer(capture: Capture, hall: HallOfFame, ident: int, ev: Evaluation) -> None:
    """A whole training with its payload, to the hall of fame if it qualifies (its predictions kept for the anytime ensemble)."""
    if ev.status == "ok" and ev.has_payload and hall.qualifies(ev.fitness, ident, ev.loss):
        capture.preds[ident] = (ev.val_pred, ev.test_pred)
        hall.offer(Member(ident, ev.fitness, {}, {}, ev.val_pred, ev.test_pred, {}, loss=ev.loss))


def staged(capture: Capture, hall: HallOfFame, seed: int, ident: int, network, training, data: DeviceData, report) -> Evaluation:
    """Train one network epoch by epoch, as an evens worker trains it (the same seed, the same network at the end),
    each epoch a stage that carries the last one on (ensemble.paused); ``report(epoch, fitness)`` after each but the
    last returns False to stop it there (status "stopped", its fitness then). CPU counted in ``capture``."""
    from ensemble.paused import Paused
    from ensemble.train import train_and_evaluate

    def stages() -> Evaluation:
        paused = None
        for epoch in range(1, training.epochs):
            ev = train_and_evaluate(network, training, data, task_seed(seed, ident), until=epoch, resume=paused)
            if ev.status != "paused":
                return ev
            paused = Paused.from_arrays(ev.paused)
            if not report(epoch, ev.fitness):
                return Evaluation(status="stopped", fitness=ev.fitness, metrics=ev.metrics, epochs_done=epoch)
        keep = lambda fitness, loss: hall.qualifies(fitness, ident, loss)  # noqa: E731
        ev = train_and_evaluate(network, training, data, task_seed(seed, ident), keep=keep, resume=paused)
        ev.epochs_done = training.epochs
        return ev

    ev = timed(capture, ident, network, stages)
    offer(capture, hall, ident, ev)
    return ev


def run_tpe_hyperband(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, budget: float = 0.0) -> Outcome:
    """Optuna's TPE with its ``HyperbandPruner`` (reduction factor 3, from one epoch to the space's most), the
    validation fitness reported after every epoch: Optuna's own multi-fidelity search."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    epochs = space.gene("epochs").domain
    most = max(epochs.values()) if epochs.values() else int(epochs.high)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=most, reduction_factor=3))
    capture = Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with Timer() as t:
        for ident in networks(cfg, capture, budget):
            trial = study.ask()
            network, training = space.specs(suggest_key(trial, space))

            def report(epoch: int, fitness: float) -> bool:
                trial.report(fitness, epoch)
                return not trial.should_prune()

            ev = staged(capture, out.hall, seed, ident, network, training, data, report)
            if ev.status == "ok":
                study.tell(trial, ev.fitness)
            elif ev.status == "stopped":
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def run_top_k(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, budget: float, share: float = 0.5) -> Outcome:
    """Egele et al. 2023's baseline: random networks, each trained for one epoch, until ``share`` of the budget is
    spent; then the best of them by that epoch's validation fitness, in order, each trained on to its whole epochs
    (carrying the first epoch on), while the budget lasts. A network's first epoch is one row (``stopped``), its
    training on another (its own CPU)."""
    from ensemble.paused import Paused
    from ensemble.train import train_and_evaluate

    rng, capture = random.Random(seed), Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    first: list[tuple[float, int, object, object, Paused]] = []

    def finished(ident: int, ev: Evaluation) -> None:
        offer(capture, out.hall, ident, ev)
        out.networks.append(network_row(ident, ev, data.problem.metric, capture))

    with Timer() as t:
        ident = 0
        while capture.total < share * budget:
            network, training = space.candidate(random_genome(rng, len(space)))
            ev = timed(capture, ident, network, lambda: train_and_evaluate(network, training, data, task_seed(seed, ident), until=1))
            if ev.status == "paused":
                first.append((ev.fitness, ident, network, training, Paused.from_arrays(ev.paused)))
                out.networks.append(network_row(ident, Evaluation(status="stopped", fitness=ev.fitness, metrics=ev.metrics, epochs_done=1),
                                                data.problem.metric, capture))
            else:  # a network of one epoch is whole already (or it failed)
                finished(ident, ev)
            ident += 1
        for fitness, ident, network, training, paused in sorted(first, key=lambda f: (-f[0], f[1])):
            if capture.total >= budget:
                break
            ev = timed(capture, ident, network, lambda: train_and_evaluate(network, training, data, task_seed(seed, ident), resume=paused))
            finished(ident, ev)
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def dehb_space(space: SearchSpace, seed: int):
    """The space as a ConfigSpace for DEHB, without the ``epochs`` gene (DEHB's fidelity) and the genes of one value;
    a categorical's values as their ``repr`` (ConfigSpace takes strings), with the map back. Conditions as evens
    declares them (an ``InCondition`` per condition, joined by ``AndConjunction``)."""
    import ConfigSpace as CS

    cs, back = CS.ConfigurationSpace(seed=seed), {}
    kept = {}
    for gene in space.genes:
        d = gene.domain
        if gene.name == "epochs" or (isinstance(d, Choice) and len(d.options) == 1) or (not isinstance(d, Choice) and d.low == d.high):
            continue
        if isinstance(d, Choice):
            back[gene.name] = {repr(v): v for v in d.options}
            kept[gene.name] = CS.Categorical(gene.name, [repr(v) for v in d.options])
        elif d.integer:
            kept[gene.name] = CS.Integer(gene.name, (int(d.low), int(d.high)), log=d.log)
        else:
            kept[gene.name] = CS.Float(gene.name, (d.low, d.high), log=d.log)
    # a gene whose conditions no value of its parents meets (cell when the family cannot be rnn) is never active: left out
    can_hold = {g.name: set(g.domain.options) if isinstance(g.domain, Choice) else None for g in space.genes}
    for gene in space.condition_order:  # parents first
        if any(can_hold[other] is not None and not can_hold[other] & set(allowed) for other, allowed in gene.conditions()):
            kept.pop(gene.name, None)
            can_hold[gene.name] = set()
    cs.add(list(kept.values()))
    for gene in space.genes:
        if gene.name not in kept:
            continue
        parts = [CS.InCondition(kept[gene.name], kept[other], [v if can_hold[other] is None else repr(v) for v in allowed
                                                               if can_hold[other] is None or v in can_hold[other]])
                 for other, allowed in gene.conditions() if other in kept]
        if parts:
            cs.add(parts[0] if len(parts) == 1 else CS.AndConjunction(*parts))
    return cs, back


def run_dehb(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, budget: float) -> Outcome:
    """DEHB (Awad et al. 2021: differential evolution in Hyperband's brackets; the ``dehb`` package), over the space
    with the epochs as its fidelity (from one to the space's most, eta 3); each evaluation a network trained from the
    start for that many epochs, as DEHB does: the first epochs of its whole training of the most epochs (the fidelity
    is not the epochs gene's value: a fidelity under the gene's range, every one where bench_quality fixes the epochs,
    would train the range's least). Only networks trained to the most epochs count as finished (the others are
    ``stopped``, as successive halving's lower rungs are)."""
    import tempfile

    from dehb import DEHB

    from ensemble.train import train_and_evaluate

    epochs = space.gene("epochs").domain
    most = max(epochs.values()) if epochs.values() else int(epochs.high)
    cs, back = dehb_space(space, seed)
    capture = Capture(trainer_for(data))
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates), preds=capture.preds)
    with tempfile.TemporaryDirectory() as folder, Timer() as t:
        opt = DEHB(cs=cs, min_fidelity=1, max_fidelity=most, eta=3, n_workers=1, seed=seed, output_path=folder, log_level="ERROR")
        for ident in networks(cfg, capture, budget):
            job = opt.ask()
            config = dict(job["config"])
            values = {name: back[name][v] if name in back else v for name, v in config.items()}
            fidelity = max(1, min(most, int(round(job["fidelity"]))))
            network, training = space.candidate(space.encode({**values, "epochs": most}))
            if fidelity < most:  # the first epochs of the whole training (its schedule planned for all of them), as a rung is
                ev = timed(capture, ident, network,
                           lambda: train_and_evaluate(network, training, data, task_seed(seed, ident), until=fidelity))
                if ev.status == "paused":
                    ev = Evaluation(status="stopped", fitness=ev.fitness, metrics=ev.metrics, epochs_done=fidelity)
            else:
                ev = evaluate_one(capture, out.hall, seed, ident, network, training)
            fitness = ev.fitness if math.isfinite(ev.fitness) else -1e9
            opt.tell(job, {"fitness": -fitness, "cost": capture.cpu.get(ident, 0.0)})
            out.networks.append(network_row(ident, ev, data.problem.metric, capture))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out
