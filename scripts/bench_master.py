"""Benchmark: what one completed evaluation costs the master, in CPU, against an mpi4py.futures loop.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench_master.py            # np=2 and np=4, 20,000 evaluations each
    .venv/bin/python scripts/bench_master.py --quick    # np=4 only, and the simulated figures at 27,648 workers:
                                                        # under a minute; ends with one JSON line

Each launch (`mpiexec -n NP`) runs two contenders over the same ranks, one after the other:

* ``futures``: an ``mpi4py.futures.MPICommExecutor`` on the world, rank 0 keeping every worker busy
  with a zero-work function (submit, wait for the first to finish, submit again): the cost of
  handing out tasks and taking results with the standard tool;
* ``evens``: the real search loop (``run_search`` over ``MPIMasterTransport``, async strategy with
  breeding, the hall of fame, early-stopping bars, and a checkpoint every second into a temporary
  run directory) with workers whose "training" returns at once.

Timed: rank 0's CPU time (``time.process_time``) per completed evaluation, so waiting for workers
does not count. ``growth_20k_vs_1k`` is the evens master's CPU per evaluation between the 19,000th
and the 20,000th evaluation over that between the 1,000th and the 2,000th: it must not grow with
the history. Then, with that cost, the simulated scale figures at 27,648 workers
(``scripts/bench_sim.py``): ``sim_util_27648_60s``, ``sim_min_task_s_95`` and
``async_vs_generational_27648``. Prints a table and one JSON line with ``master_us_per_eval`` (np=4),
``vs_futures``, ``growth_20k_vs_1k`` and those three.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def zero_work(task_id: int) -> dict:
    """The futures contender's task: nothing, and a result about the size of an evens header."""
    return {"task_id": task_id, "status": "ok", "fitness": 0.5, "metrics": {"val_accuracy": 0.5}, "seconds": 0.0}


def measure(evaluations: int) -> dict | None:
    """Collective: both contenders on this MPI world; rank 0 returns the figures."""
    import numpy as np
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor, wait, FIRST_COMPLETED

    from ensemble.hall_of_fame import clears
    from ensemble.problem import Classification
    from ensemble.results import Evaluation
    from evolve import checkpoint
    from evolve.checkpoint import RunInfo
    from evolve.ga import GAParams
    from evolve.master import SearchSettings, SearchState, run_search
    from evolve.mpi_transport import MPIMasterTransport, MPIWorkerChannel
    from evolve.space import GENE_NAMES, parse_space
    from evolve.worker import serve

    comm = MPI.COMM_WORLD
    workers = comm.size - 1
    figures = {}

    comm.Barrier()
    with MPICommExecutor(comm, root=0) as executor:
        if executor is not None:
            start = time.process_time()
            running = {executor.submit(zero_work, i) for i in range(min(workers, evaluations))}
            submitted, done = len(running), 0
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for f in finished:
                    f.result()
                    done += 1
                    if submitted < evaluations:
                        running.add(executor.submit(zero_work, submitted))
                        submitted += 1
            figures["futures_us"] = 1e6 * (time.process_time() - start) / done

    comm.Barrier()
    space = parse_space({}).for_sample_shape((1, 8, 8))
    problem = Classification(2)
    val_y, test_y = np.array([0, 1, 1, 0]), np.array([1, 0, 1, 1, 0, 0])

    def instant(task) -> Evaluation:
        """A 'training' that returns at once: a fitness from the decoded genes, a short curve."""
        net, tr = task.network, task.training
        score = min(max(0.5 + 0.1 * net["depth"] / 3 + 0.1 * net["width"] / 128 - 0.05 * abs(math.log10(tr["learning_rate"]) + 2.5), 0.0), 1.0)
        ev = Evaluation("ok", score, {"val_accuracy": score, "test_accuracy": score}, 0.0, 2, curve=[score / 2, score])
        if clears(score, task.id, task.entry_bar):
            ev.val_pred = np.full((4, 2), 0.5, np.float32)
            ev.test_pred = np.full((6, 2), 0.5, np.float32)
            ev.weights = {"w": np.zeros(16, np.float32)}
        return ev

    if comm.rank == 0:
        marks = {}

        def on_result(record, state):
            n = len(state.records)
            if n in (1000, 2000, evaluations - 1000, evaluations):
                marks[n] = time.process_time()

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "checkpoint.h5")
            data = {"problem": problem.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
            info = RunInfo({"search": {"evaluations": evaluations}, "ensemble": {"size": 5, "method": "greedy"}}, list(GENE_NAMES), data, val_y, test_y)
            state = SearchState.fresh(0, candidates=32)
            settings = SearchSettings(evaluations, GAParams(population=10), 32, 0, checkpoint_seconds=1.0, early_stopping=True, warmup=1)
            transport = MPIMasterTransport(comm)
            start = time.process_time()
            run_search(state, transport, space, settings, checkpoint=lambda s: checkpoint.save(path, s, info), on_result=on_result,
                       poll_seconds=0.05)
            total = time.process_time() - start
            transport.stop()
        figures["evens_us"] = 1e6 * total / len(state.records)
        if evaluations >= 4000:
            figures["evens_us_at_1k"] = 1e6 * (marks[2000] - marks[1000]) / 1000
            figures["evens_us_at_end"] = 1e6 * (marks[evaluations] - marks[evaluations - 1000]) / 1000
        figures["workers"] = workers
        figures["evaluations"] = len(state.records)
        return figures
    serve(MPIWorkerChannel(comm), instant)
    return None


def launch(np_: int, evaluations: int) -> dict:
    bindir = os.path.dirname(sys.executable)
    cmd = [os.path.join(bindir, "mpiexec"), "-n", str(np_), sys.executable, os.path.abspath(__file__), "--role", "measure",
           "--evaluations", str(evaluations)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise SystemExit(f"mpiexec -n {np_} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one launch per rank count, under a minute in all")
    parser.add_argument("--evaluations", type=int, default=20_000)
    parser.add_argument("--ranks", default="2,4", help="rank counts, comma separated")
    parser.add_argument("--role", default="lead", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "measure":
        figures = measure(args.evaluations)
        if figures is not None:
            print(json.dumps(figures), flush=True)
        return

    ranks = ["4"] if args.quick else args.ranks.split(",")
    rows = {int(np_): launch(int(np_), args.evaluations) for np_ in ranks}
    print(f"# bench_master  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}  host={platform.node()}  "
          f"cpus={os.cpu_count()}  evaluations={args.evaluations} per launch, zero-work trainings")
    print(f"{'np':>3} {'workers':>7} {'futures us/eval':>16} {'evens us/eval':>14} {'evens/futures':>14} {'evens at 1k':>12} {'at 20k':>8} {'growth':>7}")
    for np_, r in rows.items():
        growth = r["evens_us_at_end"] / r["evens_us_at_1k"] if "evens_us_at_1k" in r else float("nan")
        print(f"{np_:>3} {r['workers']:>7} {r['futures_us']:>16.1f} {r['evens_us']:>14.1f} {r['evens_us'] / r['futures_us']:>14.2f} "
              f"{r.get('evens_us_at_1k', float('nan')):>12.1f} {r.get('evens_us_at_end', float('nan')):>8.1f} {growth:>7.2f}")
    main_np = max(rows)
    r = rows[main_np]
    result = {
        "master_us_per_eval": r["evens_us"],
        "vs_futures": r["evens_us"] / r["futures_us"],
        "growth_20k_vs_1k": r["evens_us_at_end"] / r["evens_us_at_1k"] if "evens_us_at_1k" in r else None,
        "np": main_np,
        "rows": rows,
    }
    # The simulated scale figures, with the master's cost just measured (scripts/bench_sim.py has them all).
    from bench_sim import figures

    sim = figures(r["evens_us"], workers=(27648,), per_worker=2.0 if args.quick else 3.0, steps=4 if args.quick else 6)
    print(f"# SIMULATION at 27,648 workers (master {r['evens_us']:.0f} us per result, lognormal trainings, sigma 0.5): "
          f"utilization {sim['sim_util_27648_60s']:.5f} at a 60 s median; >= 0.95 down to a {sim['sim_min_task_s_95_27648']:.2f} s "
          f"median; async/generational {sim['async_vs_generational_27648']:.2f}")
    result.update(
        sim_util_27648_60s=sim["sim_util_27648_60s"],
        sim_min_task_s_95=sim["sim_min_task_s_95_27648"],
        async_vs_generational_27648=sim["async_vs_generational_27648"],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
