"""Study: is the typed search space with early stopping at least as good as the classic one, and faster?

Runs the real job (``mpiexec -n RANKS evens run``) on the demo data for each contender and seed,
contenders interleaved seed by seed so that a noisy machine hurts them alike, and reads each run's
``summary.json``:

* ``classic``: the search as it was before typed genes: the demo's old space (family, depth, one
  width for all layers, activation, dropout, learning rate, batch size, epochs, optimizer, weight
  decay), the new genes pinned to what the networks were then (3x3 kernels, max pooling, batch norm
  in CNNs only, no residuals, a constant learning rate), and no early stopping;
* ``typed``: examples/digits-typed.toml (per-layer widths, kernel size, batch or layer norm in
  every family, weight decay only for AdamW) with early stopping on (the default: Vizier's median
  rule, evolve/search/early_stop.py);
* ``classic+es`` and ``typed-es``: the same spaces with early stopping switched the other way, to
  tell the space's part from early stopping's;
* ``typed2``: a second typed config (``--typed2``, default examples/digits-typed-lean.toml: the typed
  space with normalisation a gene of CNNs only and 3x3 kernels), early stopping on.

Same number of evaluations, same seeds. Prints a table (mean and spread of the best network's
validation and test accuracy, the ensemble's test accuracy, wall time, and the CPU seconds of the
whole job, all ranks: steadier than wall time on a shared machine) and one JSON line::

    .venv/bin/python scripts/bench/study_space.py --seeds 5 --evaluations 40 --ranks 4
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

CLASSIC_SPACE = """
[space]
family = ["mlp", "cnn"]
depth = { low = 1, high = 3 }
width = [16, 32, 64]
activation = ["relu", "gelu", "silu", "tanh"]
dropout = { low = 0.0, high = 0.4 }
learning_rate = { low = 3e-4, high = 3e-2, log = true }
batch_size = [32, 64, 128]
epochs = { low = 3, high = 12 }
optimizer = ["adam", "adamw", "sgd", "rmsprop"]
weight_decay = { low = 1e-6, high = 1e-3, log = true }
kernel_size = 3
pooling = "max"
norm = { choices = ["batch"], default = "none", when = { family = ["cnn"] } }
residual = false
schedule = "constant"
warmup = 0.0
"""


def classic_config(folder: str) -> str:
    """examples/digits.toml's sections with the classic space spelled out (the new genes pinned)."""
    with open(os.path.join(ROOT, "examples", "digits.toml")) as f:
        text = f.read().replace('"../data/', f'"{os.path.join(ROOT, "data")}/')  # its data path is relative to examples/
    path = os.path.join(folder, "classic.toml")
    with open(path, "w") as f:
        f.write(text[: text.index("[space]")].rsplit("\n#", 1)[0] + "\n" + CLASSIC_SPACE)
    return path


def run(config: str, seed: int, evaluations: int, ranks: int, out: str, extra: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [os.path.join(ROOT, ".venv", "bin", "mpiexec"), "-n", str(ranks), os.path.join(ROOT, ".venv", "bin", "evens"), "run",
           config, "--out", out, "--quiet", "--set", f"search.seed={seed}", "--set", f"search.evaluations={evaluations}",
           "--set", f"data.path={os.path.join(ROOT, 'data', 'digits.h5')}", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the job's ranks, once mpiexec has reaped them
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return {
        "best_val": s["best"]["val_accuracy"], "best_test": s["best"]["test_accuracy"],
        "ensemble_test": s["ensemble"]["test_accuracy"], "wall": s["wall_seconds"],
        "cpu": cpu, "stopped": s.get("status_counts", {}).get("stopped", 0),
        "epochs": s.get("early_stopping", {}).get("epochs_trained"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--evaluations", type=int, default=40)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--typed", default=os.path.join(ROOT, "examples", "digits-typed.toml"), help="the typed contender's config")
    parser.add_argument("--typed2", default=os.path.join(ROOT, "examples", "digits-typed-lean.toml"), help="the typed2 contender's config")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--contenders", default="classic,typed", help="from classic, typed, classic+es, typed-es, typed2")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(ROOT, "data", "digits.h5")):
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "evens"), "make-digits", os.path.join(ROOT, "data", "digits.h5")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        classic, typed = classic_config(tmp), args.typed
        every = {
            "classic": (classic, ["--set", "search.early_stopping=false"]),
            "typed": (typed, []),
            "classic+es": (classic, []),  # to tell the space's part from early stopping's
            "typed-es": (typed, ["--set", "search.early_stopping=false"]),
            "typed2": (args.typed2, []),
        }
        contenders = {name: every[name] for name in args.contenders.split(",")}
        results: dict[str, list[dict]] = {name: [] for name in contenders}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for name, (config, extra) in contenders.items():
                r = run(config, seed, args.evaluations, args.ranks, os.path.join(tmp, f"{name}-{seed}"), extra)
                results[name].append(r)
                print(f"seed {seed} {name:8s} best val {r['best_val']:.4f} test {r['best_test']:.4f}  "
                      f"ensemble test {r['ensemble_test']:.4f}  wall {r['wall']:.1f} s  cpu {r['cpu']:.1f} s  stopped {r['stopped']}", flush=True)
    table = {}
    print(f"\n{'':10s} {'best val':>16s} {'best test':>16s} {'ensemble test':>16s} {'wall s':>12s} {'cpu s':>12s}")
    for name, rs in results.items():
        row = {}
        for key in ("best_val", "best_test", "ensemble_test", "wall", "cpu"):
            values = [r[key] for r in rs]
            row[key] = (statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
        table[name] = row
        print(f"{name:10s} " + " ".join(f"{m:10.4f}±{s:<5.4f}" if k not in ("wall", "cpu") else f"{m:7.1f}±{s:<4.1f}" for k, (m, s) in row.items()))
    against_classic = {}
    for typed_name in ("typed", "typed2"):
        if "classic" in results and typed_name in results:
            ratio = table["classic"]["wall"][0] / table[typed_name]["wall"][0]
            cpu_ratio = table["classic"]["cpu"][0] / table[typed_name]["cpu"][0]
            wins = sum(t["ensemble_test"] >= c["ensemble_test"] for t, c in zip(results[typed_name], results["classic"]))
            faster = sum(t["wall"] < c["wall"] for t, c in zip(results[typed_name], results["classic"]))
            print(f"classic/{typed_name}: wall {ratio:.2f}x (faster in {faster} of {args.seeds} seeds), cpu {cpu_ratio:.2f}x; "
                  f"{typed_name} ensemble >= classic ensemble in {wins} of {args.seeds} seeds")
            against_classic[typed_name] = {"wall_ratio": ratio, "cpu_ratio": cpu_ratio, "faster_seeds": faster, "ensemble_wins": wins}
    print(json.dumps({"seeds": args.seeds, "evaluations": args.evaluations, "ranks": args.ranks, "against_classic": against_classic,
                      **{f"{n}_{k}": v[0] for n, row in table.items() for k, v in row.items()}, "runs": results}))


if __name__ == "__main__":
    sys.exit(main())
