"""Kill a search's master with SIGKILL at random moments, resume, and check that nothing is lost.

    .venv/bin/python scripts/tools/chaos_master.py --kills 20 --seed 1            # the figures in docs/reliability.md
    .venv/bin/python scripts/tools/chaos_master.py --kills 4 --json               # what tests/test_chaos.py runs

Each round starts the job (`mpiexec -n 3 evens run`, or `--resume` once a checkpoint exists), kills
rank 0 with SIGKILL after a random delay (during start-up, the broadcast, training or a checkpoint
write: wherever it falls), and waits for mpiexec to end the other ranks. Then it checks, from the run
directory alone:

* the checkpoint, if there is one, loads (evolve.runfile.checkpoint.load, and `evens status` as a user would);
* every evaluation of the previous round's checkpoint is still there, unchanged (id, status, fitness);
* which trainings the killed job had finished (its --verbose log names each one) but its last
  checkpoint does not hold: the work lost, at most what arrived since the last checkpoint write.
  (Individuals a resume records as `crashed` are not counted: they were not trained, and the next
  resume marks them again.) Each round's log is kept beside the run as round-N.log.

After the kills, one last resume runs to the end: it must finish the budget with nothing pending.
Prints a line per round and, with --json, one JSON line with everything.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

from evolve.errors import EvensError
from evolve.runfile import checkpoint

EVALUATION_LINE = re.compile(r"#(\d+) (\w+) fitness")
TINY = ["space.family=['mlp', 'cnn']", "space.width=[4, 8]", "space.depth={low = 1, high = 2}", "space.epochs={low = 1, high = 2}",
        "search.population=4", "train.threads=1", "ensemble.size=3"]


def write_data(path: str) -> None:
    """Three separable classes of 6x6 images: networks that train in a fraction of a second."""
    import numpy as np

    from data_bcast.h5file import write_dataset

    rng = np.random.default_rng(0)
    means = rng.normal(size=(3, 1, 6, 6))
    y = rng.integers(0, 3, size=150)
    x = (means[y] + 0.3 * rng.normal(size=(150, 1, 6, 6))).astype(np.float32)
    write_dataset(path, {"train": (x[:90], y[:90]), "val": (x[90:120], y[90:120]), "test": (x[120:], y[120:])})


def mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def rank0_pid(root_pid: int) -> int | None:
    """The process under mpiexec ``root_pid`` whose launcher rank is 0 (PMI_RANK=0)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    todo = list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if b"PMI_RANK=0\0" in fh.read() + b"\0":
                    return pid
        except OSError:
            pass
    return None


def recorded(run_dir: str) -> tuple[dict[int, tuple], int] | None:
    """The checkpoint's evaluations {id: (status, fitness)} and its pending count; None without a checkpoint.

    Raises EvensError if it does not load."""
    path = os.path.join(run_dir, checkpoint.CHECKPOINT_NAME)
    if not os.path.exists(path):
        return None
    state, _ = checkpoint.load(path, weights=True)
    return {r.id: (r.status, r.fitness) for r in state.records}, len(state.pending)


def temporaries(run_dir: str) -> list[str]:
    """Temporary files of interrupted writes anywhere in the run directory."""
    return [os.path.join(d, n) for d, _, names in os.walk(run_dir) for n in names if n.endswith(".tmp") or ".tmp-" in n]


def status_ok(run_dir: str) -> bool:
    out = subprocess.run([sys.executable, "-m", "evolve", "status", run_dir, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    return out.returncode == 0


def job(args: list[str], run_dir: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [mpiexec(), "-n", "3", sys.executable, "-m", "evolve", "run", *args, "--verbose", "--status-seconds", "3600"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def start_args(config: str, run_dir: str, budget: int) -> list[str]:
    """A resume if the run has a checkpoint, else a (re)start into the same directory."""
    sets = [a for s in TINY + [f"search.evaluations={budget}"] for a in ("--set", s)]
    if os.path.exists(os.path.join(run_dir, checkpoint.CHECKPOINT_NAME)):
        return ["--resume", run_dir, *sets]
    return [config, "--out", run_dir, *sets]


def log_index(run_dir: str) -> int:
    return len(glob.glob(os.path.join(os.path.dirname(run_dir), "round-*.log"))) + 1


def one_round(config: str, run_dir: str, budget: int, delay: float, before: dict[int, tuple]) -> dict:
    """Start (or resume) the job, SIGKILL rank 0 after ``delay`` s, and check the run directory.

    A kill that lands once the checkpoint holds the whole budget (the job was writing its last
    checkpoint, tearing down or already gone) is marked ``late``: it tested nothing, and the job may
    well have ended with 0."""
    proc = job(start_args(config, run_dir, budget), run_dir)
    deadline = time.monotonic() + delay
    pid = None
    while time.monotonic() < deadline and proc.poll() is None:
        pid = pid or rank0_pid(proc.pid)
        time.sleep(0.02)
    killed_at = time.monotonic()
    pid = pid or rank0_pid(proc.pid)
    killed = proc.poll() is None and pid is not None
    if killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # rank 0 ended on its own (its job was done) between the check and the kill
            killed = False
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return {"delay": delay, "killed": killed, "hung": True}
    with open(os.path.join(os.path.dirname(run_dir), f"round-{log_index(run_dir)}.log"), "w") as f:
        f.write(stderr)  # the killed job's own words, for whoever looks into a round
    row = {"delay": round(delay, 2), "killed": killed, "hung": False, "returncode": proc.returncode,
           "end_seconds": round(time.monotonic() - killed_at, 2)}
    # trained results only: an individual recorded `crashed` as a resume starts is marked again by the next one
    finished = {int(m.group(1)) for m in EVALUATION_LINE.finditer(stderr) if m.group(2) != "crashed"}
    try:
        found = recorded(run_dir)
        row["loads"] = True
    except EvensError as exc:
        row.update(loads=False, error=str(exc))
        return row
    row["status_ok"] = found is None or status_ok(run_dir)
    now = found[0] if found else {}
    row["checkpoint"] = found is not None
    row["evaluations"] = len(now)
    row["kept"] = all(now.get(i) == v for i, v in before.items())
    row["finished"] = len(finished)
    row["lost"] = len(finished - set(now))
    row["temporaries"] = len(temporaries(run_dir))  # a write cut by the kill; the next job removes them
    row["records"] = now
    row["late"] = killed and found is not None and len(now) >= budget and found[1] == 0
    return row


def chaos(kills: int, seed: int, budget: int, max_delay: float, work: str | None = None) -> dict:
    rng = random.Random(seed)
    work = work or tempfile.mkdtemp(prefix="evens_chaos_")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data.h5")
    write_data(data)
    config = os.path.join(work, "chaos.toml")
    with open(config, "w") as f:
        f.write(f'[data]\npath = "{data}"\n[search]\ncheckpoint_seconds = 0.0\n')
    run_dir = os.path.join(work, "run")
    rounds, before = [], {}
    for _ in range(kills):
        row = one_round(config, run_dir, budget, rng.uniform(0.3, max_delay), before)
        before = row.pop("records", before)
        rounds.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        if not row.get("loads", False) or row.get("hung"):
            break
        if (row.get("returncode") == 0 and not row["killed"]) or row.get("late"):
            break  # the budget was done before the kill came
    final = job(start_args(config, run_dir, budget), run_dir)
    try:
        _, stderr = final.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(final.pid, signal.SIGKILL)
        final.communicate()
        stderr = "the final resume hung"
    found = recorded(run_dir) if final.returncode == 0 else None
    records = found[0] if found else {}
    result = {
        "kills": sum(r.get("killed", False) and not r.get("late") for r in rounds),
        "rounds": rounds,
        "final_returncode": final.returncode,
        "final_error": stderr.strip().splitlines()[-1] if final.returncode else "",
        "final_evaluations": len(records),
        "final_pending": found[1] if found else None,
        "final_kept": all(records.get(i) == v for i, v in before.items()),
        "crashed": sum(1 for s, _ in records.values() if s == "crashed"),
        "stale_temp_files": len(temporaries(run_dir)),
        "budget": budget,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=40, help="evaluations the run must finish")
    parser.add_argument("--max-delay", type=float, default=8.0, help="kill after a delay drawn uniformly from [0.3, this] s")
    parser.add_argument("--work", help="folder for the data and the run (default: a new temporary one)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line holding every round")
    args = parser.parse_args()
    result = chaos(args.kills, args.seed, args.budget, args.max_delay, args.work)
    rounds = result["rounds"]
    killed = [r for r in rounds if r.get("killed") and not r.get("late")]
    print(f"{result['kills']} kills; every checkpoint loaded: {all(r.get('loads') for r in rounds)}; "
          f"none lost a checkpointed evaluation: {all(r.get('kept', False) for r in rounds if r.get('checkpoint'))}; "
          f"work lost per kill (finished, not in the checkpoint): max {max((r.get('lost', 0) for r in killed), default=0)}, "
          f"total {sum(r.get('lost', 0) for r in killed)}; job ended after the kill in max "
          f"{max((r.get('end_seconds', 0) for r in killed), default=0):.1f} s; final resume exit {result['final_returncode']} "
          f"with {result['final_evaluations']}/{result['budget']} evaluations, {result['crashed']} crashed, "
          f"{result['final_pending']} pending")
    if args.json:
        print(json.dumps(result))
    return 0 if result["final_returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
