"""Benchmark: what one completed evaluation costs the master, in CPU, against an mpi4py.futures loop.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_master.py            # np=2 and np=4, three launches each, 24,608 evaluations each
    .venv/bin/python scripts/bench/bench_master.py --quick    # np=4 only (medians of 3 launches), and the simulated
                                                              # figures at 27,648 workers: under a minute; ends with one JSON line
    .venv/bin/python scripts/bench/bench_master.py --in-process --repeats 5   # the master alone, no MPI (see below)
    .venv/bin/python scripts/bench/bench_master.py --in-process --population 2800   # ... with a population of thousands
    .venv/bin/python scripts/bench/bench_master.py --strategies                # each search.mode (and Optuna sampler), in process

Each launch (`mpiexec -n NP`) runs two contenders over the same ranks, one after the other:

* ``futures``: an ``mpi4py.futures.MPICommExecutor`` on the world, rank 0 keeping every worker busy
  with a zero-work function (submit, wait for the first to finish, submit again): the cost of
  handing out tasks and taking results with the standard tool;
* ``evens``: the real search loop as ``evens run`` runs it (``run_search`` over
  ``MPIMasterTransport``, async strategy with breeding, the hall of fame, early-stopping bars, the
  in-flight log, a batch job's status lines, and checkpoints with the ensemble chosen again into a
  temporary run directory) with workers whose "training" returns at once; run twice, with blind
  breeding (the default) and with model breeding (``search.breeding = "model"``: a surrogate fitted
  to the results so far ranks ``search.brood`` bred candidates per child; issue 22's budget for it is
  300 us per evaluation at 20,000 evaluations, reported as ``master_us_per_eval_model``); and a third
  time with successive halving (``search.promotion = true``: every network a first stage to its
  rung and the best third promoted, each stage a result; issue 33's budget is 100 us per result,
  reported as ``master_us_per_eval_promotion``).

Timed: rank 0's CPU time (``time.process_time``) per completed evaluation, so waiting for workers
counts only as the CPU it takes (yields and naps between tests of the receive), not as time.
``master_us_per_eval`` is all of the evens master's CPU over the whole search (start-up, the hall
of fame filling, every checkpoint) divided by its evaluations.

Checkpoints are written every :data:`CHECKPOINT_EVERY` evaluations (4,608: what the default
10-second interval gives a search of 27,648 workers whose trainings take 60 s), counted, not timed:
run_search's clock is the number of evaluations recorded. With zero-work trainings a 1-second
interval would fall anywhere from every 2,000 to every 20,000 evaluations depending on the load, and
a window of evaluations would hold 0, 1 or 2 checkpoints by chance. Each checkpoint's CPU is
reported too (``checkpoint_ms``).

``growth_20k_vs_1k``: the master's CPU per evaluation over the :data:`CHECKPOINT_EVERY` evaluations
after the 20,000th, over that after the 1,000th. Each window holds exactly one checkpoint, and
everything else the master does per result; it must not grow with the history (target <= 1.5).
With several launches (``--repeats``) every figure is the median over launches. ``--quick`` makes
three launches at np=4 (about 10 s each on the 2-core VM): one launch on a shared 2-core machine can
come out 20 % off its neighbours (47.4 against 59.1 us, a minute apart, on 2026-11-23), and
the median of three is the figure the full run reports too.

``--in-process`` runs the evens contender alone, ``--repeats`` times, over :class:`Loopback`: no MPI,
the messages packed and unpacked as the wire does, the workers' side counted apart. The master's own
cost, with none of the noise of four ranks sharing two cores (and none of their costs either).

``--strategies`` runs every registered strategy (``search.mode``: evolve.search.registry) over the same loopback, one
run each, and with ``optuna`` each of Optuna's samplers (``search.sampler``): the master's CPU per evaluation of
each. Optuna's samplers cost more as the trials grow (TPE's a sampling over every trial so far, the Gaussian
process a fit to them), so each runs at its own count (:data:`STRATEGY_EVALUATIONS`), named in the table.

Then, with the measured cost, the simulated scale figures at 27,648 workers
(``bench_sim.py``, beside this script): ``sim_util_27648_60s``, ``sim_min_task_s_95`` and
``async_vs_generational_27648``. Prints a table and one JSON line with ``master_us_per_eval`` (np=4),
``vs_futures``, ``growth_20k_vs_1k`` and those three.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time

import harness
import numpy as np
from bench_sim import figures as sim_figures

from data_bcast.layout import array_specs, pack_arrays, unpack_arrays
from evolve.config.schema import SearchConfig
from evolve.transport.protocol import Result, Task
from evolve.transport.wire import pack_result, unpack_result

CHECKPOINT_EVERY = 4608  # evaluations: the default 10 s at 27,648 workers with 60 s trainings (27,648 / 60 x 10)
WINDOW_STARTS = (1000, 20_000)  # growth_20k_vs_1k compares the CHECKPOINT_EVERY evaluations after these two
EVALUATIONS = WINDOW_STARTS[-1] + CHECKPOINT_EVERY
FUTURES_TASKS = 10_000  # the futures loop's cost per task does not depend on how many
QUICK_LAUNCHES = 3  # --quick: np=4 only, the median of this many launches
PREFETCH = SearchConfig().prefetch  # tasks queued behind each worker's training, as evens run queues them by default
# The evens contender runs once with each: blind breeding, model breeding (a surrogate ranks the children), and
# blind breeding with successive halving (promotion). The settings each one changes:
VARIANTS = {"blind": {}, "model": {"breeding": "model"}, "promotion": {"promotion": True}}
# --strategies: evaluations per strategy (search.mode, or optuna's sampler); a sampler's cost per trial grows with the trials
STRATEGY_EVALUATIONS = {"async": 4608, "generational": 4608, "nsga2": 4608, "random": 1000, "tpe": 1000, "cmaes": 1000, "gp": 100}


def zero_work(task_id: int) -> dict:
    """The futures contender's task: nothing, and a result about the size of an evens header."""
    return {"task_id": task_id, "status": "ok", "fitness": 0.5, "metrics": {"val_accuracy": 0.5}, "seconds": 0.0}


def instant_training(curve_epochs: int):
    """The workers' "training": returns at once, a fitness from the decoded genes, a curve of ``curve_epochs`` epochs."""
    from ensemble.hall_of_fame import clears
    from ensemble.results import Evaluation

    def instant(task) -> Evaluation:
        net, tr = task.network, task.training
        score = min(max(0.5 + 0.1 * net["depth"] / 3 + 0.1 * net["width"] / 128 - 0.05 * abs(math.log10(tr["learning_rate"]) + 2.5), 0.0), 1.0)
        curve = [score * (e + 1) / curve_epochs for e in range(curve_epochs)]
        params = float(net["depth"] * net["width"] ** 2)  # nsga2's second objective (a cost that grows with what the score prefers)
        if task.watch.get("pause_after"):  # a stage to a rung (search.promotion): its scores, no payload
            score *= 0.9
            return Evaluation(status="paused", fitness=score, metrics={"val_accuracy": score, "params": params}, epochs_done=1)
        ev = Evaluation(status="ok", fitness=score, metrics={"val_accuracy": score, "test_accuracy": score, "params": params}, seconds=0.0,
                        epochs_done=curve_epochs, curve=curve)
        if clears(score, ev.loss, task.id, task.entry_bar):
            ev.val_pred = np.full((4, 2), 0.5, np.float32)
            ev.test_pred = np.full((6, 2), 0.5, np.float32)
            ev.weights = {"w": np.zeros(16, np.float32)}
        return ev

    return instant


def search(transport, evaluations: int, workers_cpu=lambda: 0.0, prefetch: int = PREFETCH, variant: str = "blind",
           folder: str | None = None, after_save=None, settings: dict | None = None) -> dict:
    """The evens contender on rank 0 (or in one process): figures of the master's CPU over the whole search.
    ``workers_cpu()`` is CPU this process spent as the workers (the loopback's), taken out of the figures.
    ``folder``: the run directory to keep (default: a temporary one, removed); ``after_save(evaluations)``: called
    after each checkpoint (bench_scale.py samples the master's memory there). ``settings``: the [search] settings
    the variant changes (default: :data:`VARIANTS`' ``variant``)."""
    settings = VARIANTS[variant] if settings is None else settings
    from ensemble.problem import Classification
    from evolve.app.presentation.progress import Progress
    from evolve.app.run.reselect import SelectionCache
    from evolve.config.schema import config_from_dict
    from evolve.engine.loop import run_search
    from evolve.engine.state import SearchState
    from evolve.runfile import checkpoint
    from evolve.runfile.checkpoint import InFlightLog, RunInfo
    from evolve.runfile.genomes import GenomeFile, genomes_path
    from evolve.runfile.proposed import ProposedLog, proposed_path
    from evolve.search.space import GENE_NAMES

    space = parse_bench_space()
    problem = Classification(2)
    val_y, test_y = np.array([0, 1, 1, 0]), np.array([1, 0, 1, 1, 0, 0])
    workers = len(transport.workers)
    marks, saves, figures = {}, [], {}
    windows = [(start, start + CHECKPOINT_EVERY) for start in WINDOW_STARTS if start + CHECKPOINT_EVERY <= evaluations]
    wanted = {n for window in windows for n in window}
    mine = lambda: time.process_time() - workers_cpu()

    with tempfile.TemporaryDirectory() as scratch:
        folder = folder or scratch
        path = os.path.join(folder, "checkpoint.h5")
        data = {"problem": problem.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
        # run_search's clock counts evaluations, so a checkpoint falls every CHECKPOINT_EVERY of them
        config = config_from_dict({"search": {"evaluations": evaluations, "population": 10, "seed": 0, "checkpoint_seconds": CHECKPOINT_EVERY,
                                              "early_stopping": True, "early_stopping_warmup": 1, "prefetch": prefetch,
                                              **settings},
                                   "ensemble": {"size": 5, "candidates": 32, "method": "greedy"}, "space": {}})
        info = RunInfo(config, list(GENE_NAMES), data, val_y, test_y)
        state = SearchState.fresh(0, candidates=32)

        choose = SelectionCache(info)
        journal = InFlightLog(path)
        # with promotion, the paused networks' genomes in the run's file, as evens run keeps them (evolve.runfile.genomes)
        genomes = GenomeFile(genomes_path(path), len(space)) if settings.get("promotion") else None
        proposed = ProposedLog(proposed_path(path))  # the networks proposed, appended at each checkpoint (evolve.runfile.proposed)
        progress = Progress(evaluations, 0, workers=workers, stream=io.StringIO())  # a batch job's status lines

        def save(s) -> None:  # as evens run saves: the ensemble chosen again if the hall changed, the records let go, the log emptied
            began = mine()
            s.selection = choose(s.hall_of_fame)
            for side in (genomes, proposed):
                if side is not None:
                    side.sync()
            checkpoint.save(path, s, info)
            s.let_go()
            journal.reset()
            saves.append((s.recorded, 1e3 * (mine() - began)))
            if after_save is not None:
                after_save(s.recorded)

        def on_result(record, state):
            progress(record, state)
            if state.recorded in wanted:
                marks[state.recorded] = mine()

        start = mine()
        run_search(state, transport, space, config, checkpoint=save, on_result=on_result, journal=journal,
                   clock=lambda: float(state.recorded), genomes=genomes, proposed=proposed)
        total = mine() - start
        transport.stop()
        journal.close()
        for side in (genomes, proposed):
            if side is not None:
                side.close()
    figures["evens_us"] = 1e6 * total / state.recorded
    figures["windows"] = {str(a): 1e6 * (marks[b] - marks[a]) / (b - a) for a, b in windows}
    if WINDOW_STARTS[0] in marks:  # the start: the hall of fame fills (every network's payload is wanted)
        figures["first_us"] = 1e6 * (marks[WINDOW_STARTS[0]] - start) / WINDOW_STARTS[0]
    figures["checkpoint_ms"] = saves
    figures["workers"] = workers
    figures["evaluations"] = state.recorded
    return figures


def parse_bench_space():
    from evolve.search.space_config import parse_space

    return parse_space({}).for_sample_shape((1, 8, 8))


def measure(evaluations: int, curve_epochs: int = 2, prefetch: int = PREFETCH, variants=tuple(VARIANTS)) -> dict | None:
    """Collective: the contenders on this MPI world (evens once per variant); rank 0 returns the figures
    (those of a variant but blind breeding under its name)."""
    from mpi4py import MPI
    from mpi4py.futures import FIRST_COMPLETED, MPICommExecutor, wait

    from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel
    from evolve.transport.worker import serve

    comm = MPI.COMM_WORLD
    workers = comm.size - 1
    figures = {}

    comm.Barrier()
    with MPICommExecutor(comm, root=0) as executor:
        if executor is not None:
            start = time.process_time()
            running = {executor.submit(zero_work, i) for i in range(min(workers, FUTURES_TASKS))}
            submitted, done = len(running), 0
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for f in finished:
                    f.result()
                    done += 1
                    if submitted < FUTURES_TASKS:
                        running.add(executor.submit(zero_work, submitted))
                        submitted += 1
            figures["futures_us"] = 1e6 * (time.process_time() - start) / done

    for variant in variants:  # one search each; the workers serve until its master stops them
        comm.Barrier()
        if comm.rank == 0:
            found = search(MPIMasterTransport(comm), evaluations, prefetch=prefetch, variant=variant)
            figures.update(found) if variant == "blind" else figures.update({variant: found})
        else:
            serve(MPIWorkerChannel(comm), instant_training(curve_epochs))
    return figures if comm.rank == 0 else None


class Loopback:
    """``--in-process``: the master's loop over no MPI, its messages made as the wire makes them.

    A task is pickled as MPIMasterTransport sends it (the key: the space travels); a worker decodes
    it, trains (``instant_training``), packs its result (evolve.transport.wire) and, if the master wants it,
    its payload; the master unpacks both. Tasks are answered in the order sent, up to 3 results a
    loop turn (``poll``), about what a turn takes at np=4. The workers' side runs in this process
    and its CPU is counted apart (``cpu``), so the figures are the master's alone. No MPI, no
    waiting, no other process on the core: the master's own cost, with less noise than a launch.
    """

    def __init__(self, workers: int, curve_epochs: int):
        from collections import deque

        self.workers = list(range(1, workers + 1))
        self.cpu = 0.0
        self._queue = deque()
        self._train = instant_training(curve_epochs)
        self._space = parse_bench_space()

    def send(self, worker, task) -> None:
        self._queue.append((worker, pickle.dumps((task.id, task.seed, task.entry_bar, task.watch, task.key))))

    def poll(self, wants):
        if not self._queue:
            return None
        worker, message = self._queue.popleft()
        began = time.process_time()  # the worker's side
        ident, seed, bar, watch, key = pickle.loads(message)
        ev = self._train(Task.from_key(ident, self._space, key, seed, bar, watch))
        arrays = ev.payload()
        offer = array_specs(arrays) if arrays else None
        header = bytearray(pack_result(ident, ev, offer))
        payload = pack_arrays(arrays)[1] if arrays else None
        self.cpu += time.process_time() - began
        task_id, ev, offer = unpack_result(header, len(header))
        if offer and wants(task_id, ev.fitness, ev.loss):
            ev.take_payload(unpack_arrays(offer, payload.copy()))
        return worker, Result(task_id, ev)

    def receive(self, timeout=None, wants=None):
        return self.poll(wants)

    def stop(self) -> None:
        pass


def launch(np_: int, evaluations: int, curve_epochs: int, worker_spins: int | None = None, prefetch: int = PREFETCH) -> dict:
    cmd = [harness.mpiexec(), "-n", str(np_), sys.executable, os.path.abspath(__file__), "--role", "measure",
           "--evaluations", str(evaluations), "--curve-epochs", str(curve_epochs), "--prefetch", str(prefetch)]
    if worker_spins is not None:
        cmd += ["--worker-spins", str(worker_spins)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=harness.ROOT, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise SystemExit(f"mpiexec -n {np_} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_row(launches: list[dict]) -> dict:
    """One row from several launches at the same rank count: the median of each figure."""
    med = lambda values: float(np.median(values))
    row = {key: med([r[key] for r in launches]) for key in ("futures_us", "evens_us", "first_us") if key in launches[0]}
    row["windows"] = {w: med([r["windows"][w] for r in launches]) for w in launches[0]["windows"]}
    ends, starts = row["windows"].get(str(WINDOW_STARTS[-1])), row["windows"].get(str(WINDOW_STARTS[0]))
    row["growth"] = med([r["windows"][str(WINDOW_STARTS[-1])] / r["windows"][str(WINDOW_STARTS[0])] for r in launches]) \
        if ends is not None and starts is not None else None
    row["vs_futures"] = med([r["evens_us"] / r["futures_us"] for r in launches])
    row["checkpoint_ms"] = [[round(ms, 1) for _, ms in r["checkpoint_ms"]] for r in launches]
    row["workers"], row["evaluations"], row["launches"] = launches[0]["workers"], launches[0]["evaluations"], len(launches)
    for variant in ("model", "promotion"):
        if variant in launches[0]:
            found = [r[variant] for r in launches]
            row[f"{variant}_us"] = med([m["evens_us"] for m in found])
            row[f"{variant}_growth"] = med([m["windows"][str(WINDOW_STARTS[-1])] / m["windows"][str(WINDOW_STARTS[0])] for m in found]) \
                if str(WINDOW_STARTS[-1]) in found[0]["windows"] and str(WINDOW_STARTS[0]) in found[0]["windows"] else None
    return row


def in_process(evaluations: int, curve_epochs: int, repeats: int, prefetch: int = PREFETCH, population: int | None = None) -> None:
    runs, model, promotion = [], [], []
    for _ in range(repeats):  # alternated, so a change of load touches them alike
        for variant, into in (("blind", runs), ("model", model), ("promotion", promotion)):
            loopback = Loopback(3, curve_epochs)
            settings = {**VARIANTS[variant], **({"population": population} if population else {})}
            into.append(search(loopback, evaluations, lambda: loopback.cpu, prefetch, variant, settings=settings))
    med = lambda values: float(np.median(values))
    row = {"master_us_per_eval": med([r["evens_us"] for r in runs]),
           "master_us_per_eval_model": med([r["evens_us"] for r in model]),
           "master_us_per_eval_promotion": med([r["evens_us"] for r in promotion]),
           "windows": {w: med([r["windows"][w] for r in runs]) for w in runs[0]["windows"]},
           "checkpoint_us_per_eval": med([1e3 * sum(ms for _, ms in r["checkpoint_ms"]) / r["evaluations"] for r in runs]),
           "runs": [round(r["evens_us"], 1) for r in runs], "evaluations": runs[0]["evaluations"], "curve_epochs": curve_epochs}
    print(harness.machine_line("bench_master --in-process", f"{evaluations} evaluations, {curve_epochs}-epoch curves, "
                               f"loopback transport (3 workers, their CPU taken out), population {population or 10}; medians of {repeats}"))
    print(f"master {row['master_us_per_eval']:.1f} us per evaluation (runs: {row['runs']}), of which checkpoints "
          f"{row['checkpoint_us_per_eval']:.1f}; windows {({w: round(v, 1) for w, v in row['windows'].items()})}")
    print(f"model breeding: {row['master_us_per_eval_model']:.1f} us per evaluation (runs: {[round(r['evens_us'], 1) for r in model]})")
    print(f"successive halving: {row['master_us_per_eval_promotion']:.1f} us per result (runs: {[round(r['evens_us'], 1) for r in promotion]})")
    harness.emit(row)


def strategies() -> None:
    """``--strategies``: every registered strategy's master CPU per evaluation over the loopback (each Optuna sampler apart)."""
    from evolve.search.optuna_strategy import SAMPLERS
    from evolve.search.registry import capabilities, names

    runs = []
    for mode in names():
        # (the median rule is a strategy's only where results' order matters: evolve.search.registry.Capabilities)
        settings = {"mode": mode, "early_stopping": capabilities(mode).order_matters}
        for sampler in SAMPLERS if mode == "optuna" else ("",):
            name = sampler or mode
            loopback = Loopback(3, 2)
            try:
                found = search(loopback, STRATEGY_EVALUATIONS.get(name, 1000), lambda: loopback.cpu, PREFETCH, name,
                               settings={**settings, **({"sampler": sampler} if sampler else {})})
            except ImportError as exc:  # an optional extra not installed (pip install evens[optuna])
                print(f"{mode:>12} {sampler:>7}  not measured: {exc}")
                continue
            runs.append({"mode": mode, "sampler": sampler, "evaluations": found["evaluations"], "us_per_eval": found["evens_us"]})
    print(harness.machine_line("bench_master --strategies", "loopback transport (3 workers, their CPU taken out), one run each"))
    print(f"{'search.mode':>12} {'sampler':>7} {'evaluations':>11} {'master us/eval':>15}")
    for r in runs:
        print(f"{r['mode']:>12} {r['sampler'] or '-':>7} {r['evaluations']:>11} {r['us_per_eval']:>15.1f}")
    harness.emit({"strategies": runs})


def main() -> None:
    parser = harness.parser(__doc__, quick=f"np=4 only, {QUICK_LAUNCHES} launches: under a minute in all")
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS)
    parser.add_argument("--ranks", default="2,4", help="rank counts, comma separated")
    parser.add_argument("--repeats", type=int, default=3, help=f"launches per rank count, alternated (default 3; --quick: {QUICK_LAUNCHES})")
    parser.add_argument("--curve-epochs", type=int, default=2,
                        help="epochs in each result's curve (default 2): the median rule takes in every one")
    parser.add_argument("--worker-spins", type=int, default=None,
                        help="EXPERIMENT: how many times a waiting worker yields before it naps (evens' WORKER_SPINS)")
    parser.add_argument("--prefetch", type=int, default=PREFETCH,
                        help=f"tasks queued on each worker behind its training (search.prefetch; default {PREFETCH}, the config's)")
    parser.add_argument("--in-process", action="store_true",
                        help="the evens master alone over a loopback transport (no MPI): --repeats runs, medians")
    parser.add_argument("--population", type=int, default=None,
                        help="--in-process: the GA's search.population (default 10, the examples'; docs/cluster.md's campaign: 2800)")
    parser.add_argument("--strategies", action="store_true",
                        help="each strategy (search.mode, and each Optuna sampler) over the loopback: its master CPU per evaluation")
    parser.add_argument("--role", default="lead", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.strategies:
        strategies()
        return
    if args.in_process:
        in_process(args.evaluations, args.curve_epochs, args.repeats, args.prefetch, args.population)
        return
    if args.role == "measure":
        if args.worker_spins is not None:
            import evolve.transport.mpi_transport

            evolve.transport.mpi_transport.WORKER_SPINS = args.worker_spins
        figures = measure(args.evaluations, args.curve_epochs, args.prefetch)
        if figures is not None:
            print(json.dumps(figures), flush=True)
        return

    ranks = [4] if args.quick else [int(n) for n in args.ranks.split(",")]
    repeats = QUICK_LAUNCHES if args.quick else args.repeats
    launches: dict[int, list[dict]] = {n: [] for n in ranks}
    for _ in range(repeats):  # alternated, so a change of load touches every rank count alike
        for n in ranks:
            launches[n].append(launch(n, args.evaluations, args.curve_epochs, args.worker_spins, args.prefetch))
    rows = {n: median_row(launches[n]) for n in ranks}
    first, last = (str(w) for w in WINDOW_STARTS)
    print(harness.machine_line("bench_master", f"{args.evaluations} evaluations per launch, zero-work trainings with "
                               f"{args.curve_epochs}-epoch curves, a checkpoint every {CHECKPOINT_EVERY}, prefetch {args.prefetch}; "
                               f"medians over {repeats} launch(es)"))
    print(f"{'np':>3} {'workers':>7} {'futures us/eval':>16} {'evens us/eval':>14} {'evens/futures':>14} "
          f"{'first ' + first:>11} {'evens after ' + first:>17} {'after ' + last:>12} {'growth':>7}  checkpoint ms (each launch)")
    for n, r in rows.items():
        growth = r["growth"] if r["growth"] is not None else float("nan")
        print(f"{n:>3} {r['workers']:>7} {r['futures_us']:>16.1f} {r['evens_us']:>14.1f} {r['vs_futures']:>14.2f} "
              f"{r.get('first_us', float('nan')):>11.1f} {r['windows'].get(first, float('nan')):>17.1f} {r['windows'].get(last, float('nan')):>12.1f} {growth:>7.2f}  "
              f"{r['checkpoint_ms']}")
    for n, r in rows.items():
        for variant, what in (("model", 'model breeding (search.breeding = "model")'), ("promotion", "successive halving (search.promotion)")):
            if f"{variant}_us" in r:
                growth = r[f"{variant}_growth"] if r[f"{variant}_growth"] is not None else float("nan")
                print(f"{n:>3} {what}: {r[f'{variant}_us']:.1f} us/result, {r[f'{variant}_us'] / r['evens_us']:.2f}x blind, growth {growth:.2f}")
    main_np = max(rows)
    r = rows[main_np]
    result = {
        "master_us_per_eval": r["evens_us"],
        "master_us_per_eval_model": r.get("model_us"),
        "master_us_per_eval_promotion": r.get("promotion_us"),
        "vs_futures": r["vs_futures"],
        "growth_20k_vs_1k": r["growth"],
        "growth_20k_vs_1k_model": r.get("model_growth"),
        "growth_20k_vs_1k_promotion": r.get("promotion_growth"),
        "np": main_np,
        "prefetch": args.prefetch,
        "rows": rows,
    }
    # The simulated scale figures, with the master's cost just measured (bench_sim.py has them all).
    sim = sim_figures(r["evens_us"], workers=(27648,), per_worker=2.0 if args.quick else 3.0, steps=4 if args.quick else 6, prefetch=args.prefetch)
    print(f"# SIMULATION at 27,648 workers (master {r['evens_us']:.0f} us per result, lognormal trainings, sigma 0.5): "
          f"utilization {sim['sim_util_27648_60s']:.5f} at a 60 s median; >= 0.95 down to a {sim['sim_min_task_s_95_27648']:.2f} s "
          f"median; async/generational {sim['async_vs_generational_27648']:.2f}")
    result.update(
        sim_util_27648_60s=sim["sim_util_27648_60s"],
        sim_min_task_s_95=sim["sim_min_task_s_95_27648"],
        async_vs_generational_27648=sim["async_vs_generational_27648"],
    )
    harness.emit(result)


if __name__ == "__main__":
    main()
