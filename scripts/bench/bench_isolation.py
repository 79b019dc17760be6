"""Benchmark: what isolating trainings from their rank costs (train.isolation = "process" against "none").

Two measures, each with both contenders in one launch, alternated so that a noisy machine hurts both alike:

* **Latency per task**: the same short trainings (a small MLP, 1 epoch, on 600 samples of 8x8) evaluated
  in this process (``trainer_for``, as a rank does with ``"none"``) and through a training process
  (:class:`evolve.transport.isolation.TrainerProcess`: the task as JSON down a pipe, the result and its
  predictions and weights back). The difference of the medians is what isolation adds to a task
  (issue 24's target: under 5 ms). The process's start (once per worker) is reported apart.
* **The fork server** (``train.fork_server``): a training process's start forked from the node's server against a
  fresh interpreter, and whole runs (``evens run examples/digits.toml`` at ``--ranks``) each way, alternated: their
  wall time and the CPU they took (the machine's, from /proc/stat: run it on an otherwise quiet machine).
* **Worker utilization of a real run** (``evens run examples/digits.toml`` at ``--ranks``: the demo's
  short trainings on the built-in digits): ``worker_utilization`` from ``evens report --json``, ``--launches`` alternated launches
  each way (target: no worse than "none" by more than 2 points).

    .venv/bin/python scripts/bench/bench_isolation.py                 # 40 tasks each way, 3 launches each way at np=4
    .venv/bin/python scripts/bench/bench_isolation.py --quick         # 10 tasks, 1 launch each way
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import harness
import numpy as np
import torch

from data_bcast.layout import pack_arrays
from data_bcast.memory import NodeMemory
from ensemble.problem import problem_for
from ensemble.train import DeviceData
from evolve.transport import forkserver
from evolve.transport.isolation import TrainerProcess, trainer_environment
from evolve.transport.protocol import Task
from evolve.transport.worker import trainer_for


def small_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 600), ("val", 200), ("test", 200)):
        y = rng.integers(0, 10, n).astype(np.int64)
        arrays[f"{split}/x"] = (rng.normal(size=(n, 1, 8, 8)) + y[:, None, None, None] / 3).astype(np.float32)
        arrays[f"{split}/y"] = y
    return arrays


def tasks(n: int) -> list[Task]:
    network = {"family": "mlp", "depth": 2, "width": 64, "activation": "relu", "dropout": 0.1}
    training = {"learning_rate": 0.003, "batch_size": 64, "epochs": 1}
    return [Task(i, network, training, seed=i) for i in range(n)]


def latency(n: int) -> dict:
    arrays = small_data()
    problem = problem_for("classification", arrays["train/y"], 10)
    torch.set_num_threads(1)
    in_rank = trainer_for(DeviceData.from_arrays(arrays, problem, torch.device("cpu")))
    specs, buffer = pack_arrays(arrays)
    memory = NodeMemory.private(buffer.size)
    memory.buffer[:] = buffer
    setup = {"sys_path": [], "data": {"size": memory.size, "specs": specs}, "problem": problem.to_dict(),
             "device": {"prefer": "cpu", "local_index": 0, "threads": 1, "workers_per_gpu": 0},
             "train": {"precision": "fp32", "loss": "auto", "class_weights": "none", "split_seed": 0}}
    process = TrainerProcess(setup, memory.fd)
    t0 = time.perf_counter()
    process.start()
    start_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    server = forkserver.connect(os.urandom(6).hex(), trainer_environment())
    server_seconds = time.perf_counter() - t0
    forked = TrainerProcess(setup, memory.fd, server)
    t0 = time.perf_counter()
    forked.start()
    forked_seconds = time.perf_counter() - t0
    forked.close()
    server.close()
    times: dict[str, list[float]] = {"none": [], "process": []}
    try:
        for task in tasks(n):
            for name, evaluate in (("none", in_rank), ("process", process.evaluate)) if task.id % 2 else (("process", process.evaluate), ("none", in_rank)):
                t = time.perf_counter()
                ev = evaluate(task)
                times[name].append(time.perf_counter() - t)
                assert ev.status == "ok" and ev.has_payload, ev.message
    finally:
        process.close()
        memory.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"start_seconds": start_seconds, "server_seconds": server_seconds, "forked_seconds": forked_seconds,
            "median_ms": {k: 1e3 * v for k, v in med.items()},
            "added_ms": 1e3 * (med["process"] - med["none"]), "ratio": med["process"] / med["none"]}


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy (user, nice, system, irq, softirq: /proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")


def fork_server_runs(ranks: int, launches: int, evaluations: int) -> dict:
    """Runs with train.fork_server "on" and "off", alternated: wall seconds and machine CPU seconds of each."""
    found: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in ("on", "off")}
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "digits.h5")
        subprocess.run([sys.executable, "-m", "evolve", "make-digits", data], check=True, capture_output=True, cwd=harness.ROOT)
        for launch in range(launches):
            for mode in ("off", "on") if launch % 2 == 0 else ("on", "off"):
                cmd = [harness.mpiexec(), "-n", str(ranks), sys.executable, "-m", "evolve", "run", "examples/digits.toml", "--quiet",
                       "--out", os.path.join(scratch, f"run-{mode}-{launch}"), "--set", f"data.path={data}",
                       "--set", f"search.evaluations={evaluations}", "--set", "train.threads=1", "--set", f"train.fork_server={mode}"]
                cpu, wall = busy_seconds(), time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True, cwd=harness.ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900)
                time.sleep(0.5)  # (the fork server ends a moment after the last rank)
                found[mode]["wall"].append(time.perf_counter() - wall - 0.5)
                found[mode]["cpu"].append(busy_seconds() - cpu)
    med = {m: {k: statistics.median(v) for k, v in found[m].items()} for m in found}
    return {"runs": found, "median": med, "cpu_ratio": med["on"]["cpu"] / med["off"]["cpu"], "wall_ratio": med["on"]["wall"] / med["off"]["wall"]}


def utilization(ranks: int, launches: int, evaluations: int) -> dict:
    found: dict[str, list[float]] = {"none": [], "process": []}
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "digits.h5")
        subprocess.run([sys.executable, "-m", "evolve", "make-digits", data], check=True, capture_output=True, cwd=harness.ROOT)
        for launch in range(launches):
            for mode in ("none", "process") if launch % 2 == 0 else ("process", "none"):
                out = os.path.join(scratch, f"run-{mode}-{launch}")
                cmd = [harness.mpiexec(), "-n", str(ranks), sys.executable, "-m", "evolve", "run", "examples/digits.toml", "--out", out,
                       "--quiet", "--set", f"data.path={data}", "--set", f"search.evaluations={evaluations}", "--set", "train.threads=1",
                       "--set", f"train.isolation={mode}"]
                env = dict(os.environ, OMP_NUM_THREADS="1")
                subprocess.run(cmd, check=True, capture_output=True, cwd=harness.ROOT, env=env, timeout=900)
                report = subprocess.run([sys.executable, "-m", "evolve", "report", out, "--json"], check=True, capture_output=True,
                                        text=True, cwd=harness.ROOT)
                found[mode].append(json.loads(report.stdout)["worker_utilization"])
    return {"utilization": found, "median": {k: statistics.median(v) for k, v in found.items()},
            "points_lost": 100 * (statistics.median(found["none"]) - statistics.median(found["process"]))}


def main() -> int:
    parser = harness.parser(__doc__, quick="10 tasks each way, 1 launch each way at np=3")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=40)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.ranks, args.launches, args.evaluations = 10, 3, 1, 12
    print(harness.machine_line("bench_isolation", f"tasks={args.tasks} ranks={args.ranks} launches={args.launches} evaluations={args.evaluations}"))
    lat = latency(args.tasks)
    print(f"latency per task: in the rank {lat['median_ms']['none']:.1f} ms, in a training process {lat['median_ms']['process']:.1f} ms: "
          f"+{lat['added_ms']:.2f} ms (x{lat['ratio']:.3f}); the process started in {lat['start_seconds']:.2f} s (once per worker)")
    print(f"a training process's start: a fresh interpreter {lat['start_seconds']:.2f} s, forked {lat['forked_seconds']:.3f} s "
          f"(the node's fork server started once in {lat['server_seconds']:.2f} s)")
    forks = fork_server_runs(args.ranks, args.launches, args.evaluations)
    on, off = forks["median"]["on"], forks["median"]["off"]
    print(f"runs at np={args.ranks} ({args.evaluations} networks), medians: fork server off {off['wall']:.2f} s wall, {off['cpu']:.2f} s CPU; "
          f"on {on['wall']:.2f} s wall, {on['cpu']:.2f} s CPU: x{forks['wall_ratio']:.2f} wall, x{forks['cpu_ratio']:.2f} CPU")
    use = utilization(args.ranks, args.launches, args.evaluations)
    print(f"worker utilization at np={args.ranks}: none {use['utilization']['none']}, process {use['utilization']['process']}; "
          f"medians {use['median']['none']:.3f} and {use['median']['process']:.3f}: {use['points_lost']:+.1f} points lost")
    harness.emit({"added_ms_per_task": round(lat["added_ms"], 3), "process_start_seconds": round(lat["start_seconds"], 2),
                  "utilization_none": use["median"]["none"], "utilization_process": use["median"]["process"],
                  "utilization_points_lost": round(use["points_lost"], 2), "forked_start_seconds": round(lat["forked_seconds"], 3),
                  "fork_server_cpu_ratio": round(forks["cpu_ratio"], 3), "fork_server_wall_ratio": round(forks["wall_ratio"], 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
