"""Benchmark: how good are evens' networks and ensembles against random search and Optuna's TPE, at equal cost?

Run from the repository root (after ./scripts/setup.sh, and ``.venv/bin/pip install 'optuna>=3'``,
a benchmark-only dependency: ``pip install -e '.[bench]'``)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_quality.py                 # 3 seeds, 30 networks each
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_quality.py --quick         # 2 seeds, 12 networks; a few minutes

Three contenders search the same space (``examples/digits.toml``'s ``[space]`` table, narrowed to
what fits each dataset's sample shape) and each trains the same number of networks:

* ``evens``: this project's search as ``evens run`` on one rank runs it: :func:`evolve.master.run_search`
  with the steady-state ``async`` strategy and the median early-stopping rule on, over an
  :class:`~evolve.protocol.InProcessTransport` whose worker is the real one
  (:func:`evolve.worker.trainer_for`), its workers holding ``search.prefetch`` tasks queued behind
  their training as MPI workers do when there are several (``--workers``; the order of results,
not the speed). A network stopped early counts as one of the budget.
* ``random``: random genomes from the search's rng (``random.Random(seed)``), decoded by the space; no
  early stopping.
* ``optuna-tpe``: Optuna's ``TPESampler(seed=seed)``, define-by-run over the same genes: each gene
  is suggested (categorical, float with its log flag, or int) only when its conditions hold given
  the genes suggested before it; otherwise it takes its default, as the space decodes an inactive
  gene. No pruning.
* ``evens-no-es`` (a diagnostic, not one of the three the targets speak of): evens' search with
  early stopping off (``--set search.early_stopping=false``), to tell the GA's part from the
  stopping rule's.
* ``evens-no-prefetch`` (a diagnostic too): evens' search with ``search.prefetch = 0`` (no task queued
  behind a worker's training: with ``--workers W``, W networks out at once instead of 2W), to tell
  what queueing costs the search (each child is bred with that much less feedback).

Every network is trained by the same worker function (``ensemble.train.train_and_evaluate``) with
the same seed scheme (:func:`evolve.master.task_seed` of the search seed and the evaluation's
index), on one CPU thread. For each dataset, contender and seed, the script reports the best single
network (by validation accuracy: its validation and test accuracy), the ensemble chosen the same
way for every contender (the best ``ensemble.candidates`` networks, then ``ensemble.method``
selection of ``ensemble.size`` picks on the validation split: greedy, 5 picks, by default), and the
wall time. Datasets: scikit-learn's digits (``data/digits.h5``, as ``evens make-digits`` writes it)
and breast cancer (569 samples, 30 features standardised with the training split's mean and
standard deviation, split like digits: 40 % test, 20 % val, 40 % train). Prints a table of
mean ± std over seeds and ends with one JSON line.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

try:
    import optuna
except ImportError:
    sys.exit("bench_quality.py needs Optuna (benchmark only): .venv/bin/pip install 'optuna>=3'  (or: pip install -e '.[bench]')")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from data_bcast import load_dataset, write_dataset  # noqa: E402
from ensemble.hall_of_fame import HallOfFame, Member  # noqa: E402
from ensemble.problem import problem_for  # noqa: E402
from ensemble.select import select_ensemble  # noqa: E402
from ensemble.train import DeviceData  # noqa: E402
from evolve.config import Config, load_config  # noqa: E402
from evolve.ga import GAParams, random_genome  # noqa: E402
from evolve.master import SearchSettings, SearchState, run_search, task_seed  # noqa: E402
from evolve.protocol import InProcessTransport, Task, evaluate_safely  # noqa: E402
from evolve.space import Choice, Gene, SearchSpace  # noqa: E402
from evolve.worker import trainer_for  # noqa: E402

CONTENDERS = ("evens", "random", "optuna-tpe", "evens-no-es", "evens-no-prefetch")
PEERS = ("evens", "random", "optuna-tpe")  # the contenders the targets speak of; evens-no-es and evens-no-prefetch are diagnostics
DATASETS = ("digits", "breast_cancer")


# ----------------------------------------------------------------------------------------------- data

def write_breast_cancer(dst: str, seed: int = 0) -> None:
    """scikit-learn's breast cancer data (569 x 30, 2 classes) in the evens format, split like digits.

    Seeded shuffle; 40 % test, 20 % val, 40 % train; features standardised with the training
    split's mean and standard deviation (docs/data-format.md: evens does not normalise).
    """
    from sklearn.datasets import load_breast_cancer

    bc = load_breast_cancer()
    x, y = bc.data.astype(np.float64), bc.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test, n_val = int(0.40 * len(y)), int(0.20 * len(y))
    parts = {"test": order[:n_test], "val": order[n_test : n_test + n_val], "train": order[n_test + n_val :]}
    mean, std = x[parts["train"]].mean(axis=0), x[parts["train"]].std(axis=0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    write_dataset(dst, {split: (x[rows], y[rows]) for split, rows in parts.items()})


def dataset_path(name: str, scratch: str) -> str:
    if name == "digits":
        path = os.path.join(ROOT, "data", "digits.h5")
        if not os.path.exists(path):  # what `evens make-digits data/digits.h5` writes, in the scratch folder
            from data_bcast.convert import write_digits

            path = os.path.join(scratch, "digits.h5")
            write_digits(path, seed=0)
        return path
    if name == "breast_cancer":
        path = os.path.join(scratch, "breast_cancer.h5")
        write_breast_cancer(path, seed=0)
        return path
    raise SystemExit(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")


def device_data(path: str) -> DeviceData:
    plan, arrays = load_dataset(path)
    problem = problem_for(plan.kind, arrays["train/y"], plan.num_classes)
    if problem.kind != "classification":
        raise SystemExit(f"{path}: this benchmark reports accuracy; a classification dataset is needed")
    return DeviceData.from_arrays(arrays, problem, "cpu")


# ------------------------------------------------------------------------------------------ one search

@dataclass
class Outcome:
    """One search: its networks (id, status, val fitness, test accuracy, epochs) and its hall of fame."""

    networks: list[dict] = field(default_factory=list)
    hall: HallOfFame | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: steadier than wall time on a shared machine


class Timer:
    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def evaluate_one(data: DeviceData, hall: HallOfFame, seed: int, ident: int, network, training) -> tuple[Task, object]:
    """Train one network exactly as an evens worker does (no early stopping); offer it to ``hall``."""
    task = Task.build(ident, network, training, task_seed(seed, ident), hall.entry_bar())
    ev = evaluate_safely(trainer_for(data), task)
    if ev.status == "ok" and ev.has_payload and hall.qualifies(ev.fitness, ident):
        hall.offer(Member(ident, ev.fitness, task.network, task.training, ev.val_pred, ev.test_pred, {}))
    return task, ev


def network_row(ident: int, status: str, fitness: float, metrics: dict, epochs: int) -> dict:
    return {"id": ident, "status": status, "val": fitness, "test": metrics.get("test_accuracy", math.nan), "epochs": epochs}


def run_evens(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, evaluations: int, workers: int,
              early_stopping: bool = True, prefetch: int = 1) -> Outcome:
    """The product's search loop, in one process: async steady-state GA with the median stopping rule (unless told not to)."""
    s = cfg.search
    settings = SearchSettings(
        budget=evaluations,
        ga=GAParams(population=s.population, tournament=s.tournament, crossover_prob=s.crossover_prob,
                    mutation_prob=s.mutation_prob, mutation_eta=s.mutation_eta),
        candidates=cfg.ensemble.candidates,
        seed=seed,
        checkpoint_seconds=s.checkpoint_seconds,
        mode="async",
        early_stopping=early_stopping,
        warmup=s.early_stopping_warmup,
        prefetch=prefetch,
    )
    state = SearchState.fresh(seed, cfg.ensemble.candidates)
    with Timer() as t:
        transport = InProcessTransport(trainer_for(data), workers)
        transport.queues = workers > 1  # W > 1 workers stand for MPI's: a task queued behind each training (search.prefetch)
        run_search(state, transport, space, settings)
    rows = [network_row(r.id, r.status, r.fitness, r.metrics, r.epochs_done) for r in state.records]
    return Outcome(rows, state.hall_of_fame, t.wall, t.cpu)


def run_random(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, evaluations: int) -> Outcome:
    rng = random.Random(seed)
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates))
    with Timer() as t:
        for ident in range(evaluations):
            network, training = space.candidate(random_genome(rng, len(space)))
            _, ev = evaluate_one(data, out.hall, seed, ident, network, training)
            out.networks.append(network_row(ident, ev.status, ev.fitness, ev.metrics, ev.epochs_done))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def condition_order(space: SearchSpace) -> list[Gene]:
    """The genes, each after the genes its conditions test (the space's order when it already is so)."""
    by_name, done, order = {g.name: g for g in space.genes}, set(), []

    def visit(gene: Gene) -> None:
        if gene.name in done:
            return
        done.add(gene.name)
        for other, _ in gene.conditions():
            visit(by_name[other])
        order.append(gene)

    for gene in space.genes:
        visit(gene)
    return order


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


def check_suggestions(space: SearchSpace, order: list[Gene], n: int = 300) -> None:
    """The define-by-run space is the evens space: fed a genome's decoded values, it gives the genome's key."""
    rng = random.Random(1234)
    for _ in range(n):
        genome = random_genome(rng, len(space))
        decoded = space.decode(genome)
        got = suggest_key(optuna.trial.FixedTrial(decoded), space, order)
        want = space.key(genome)
        if got != want:
            raise SystemExit(f"bench_quality: the Optuna space disagrees with evens' on {decoded}: {got} != {want}")


def run_tpe(cfg: Config, space: SearchSpace, data: DeviceData, seed: int, evaluations: int, group: bool = False) -> Outcome:
    """Optuna's defaults (5.x: multivariate TPE over the genes every trial has; a conditional gene falls back
    to independent TPE) unless ``group``, which models each set of co-occurring genes jointly."""
    order = condition_order(space)
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True) if group else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    out = Outcome(hall=HallOfFame(cfg.ensemble.candidates))
    with Timer() as t:
        for ident in range(evaluations):
            trial = study.ask()
            network, training = space.specs(suggest_key(trial, space, order))
            _, ev = evaluate_one(data, out.hall, seed, ident, network, training)
            if ev.status == "ok":
                study.tell(trial, ev.fitness)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            out.networks.append(network_row(ident, ev.status, ev.fitness, ev.metrics, ev.epochs_done))
    out.seconds, out.cpu_seconds = t.wall, t.cpu
    return out


def score(out: Outcome, cfg: Config, data: DeviceData) -> dict:
    """Best single network by validation (its val and test accuracy), the ensemble's, and the costs."""
    done = [n for n in out.networks if n["status"] == "ok" and math.isfinite(n["val"])]
    best = max(done, key=lambda n: (n["val"], -n["id"])) if done else None
    selection = select_ensemble(out.hall.members, data.problem, data.y["val"], data.y["test"], cfg.ensemble.method, cfg.ensemble.size)
    statuses = [n["status"] for n in out.networks]
    return {
        "best_val": best["val"] if best else math.nan,
        "best_test": best["test"] if best else math.nan,
        "best_id": best["id"] if best else -1,
        "max_test_any": max((n["test"] for n in done), default=math.nan),  # oracle: the best test accuracy of any network trained
        "ensemble_val": selection.curve_val[selection.picks - 1] if selection else math.nan,
        "ensemble_test": selection.curve_test[selection.picks - 1] if selection else math.nan,
        "ensemble_members": len(selection.ids) if selection else 0,
        "wall": out.seconds,
        "cpu": out.cpu_seconds,
        "evaluations": len(out.networks),
        "ok": statuses.count("ok"),
        "stopped": statuses.count("stopped"),
        "failed": len(statuses) - statuses.count("ok") - statuses.count("stopped"),
        "epochs": sum(n["epochs"] for n in out.networks),
    }


# ---------------------------------------------------------------------------------------------- report

def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def check_targets(ours: str, rows: dict[str, dict], runs: dict[str, list[dict]], seeds: int) -> dict:
    """The issue's targets for contender ``ours`` against the peers (``ours`` standing in for evens), on means over seeds:
    its ensemble beats the best single network (by validation) of every peer; its best single is at least random's."""
    peers = [ours] + [c for c in PEERS if c != "evens" and c in rows]
    singles = {c: rows[c]["best_test"][0] for c in peers}
    ens = rows[ours]["ensemble_test"][0]
    t = {
        "ensemble_test": ens,
        "best_single_tests": singles,
        "ensemble_beats_best_singles": all(ens > v for v in singles.values()),
        "ensemble_beats_best_single_seeds": {c: sum(e["ensemble_test"] > o["best_test"] for e, o in zip(runs[ours], runs[c])) for c in peers},
        # the literal reading: above the best test accuracy of any network any peer trained (chosen on test: an oracle)
        "ensemble_beats_any_network_oracle": all(ens > rows[c]["max_test_any"][0] for c in peers),
        "best_single_test": rows[ours]["best_test"][0],
    }
    if "random" in rows:
        t["random_best_single_test"] = rows["random"]["best_test"][0]
        t["best_single_at_least_random_test"] = rows[ours]["best_test"][0] >= rows["random"]["best_test"][0]
        t["best_single_at_least_random_val"] = rows[ours]["best_val"][0] >= rows["random"]["best_val"][0]
    return t


def finite(value):
    """``value`` with NaN and infinities as None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def space_table(config_path: str) -> str:
    """The config's [space] table as written (to paste beside the results)."""
    with open(config_path) as f:
        text = f.read()
    start = text.find("\n[space]")
    if start < 0:
        return "(no [space] table: DEFAULT_SPACE)"
    rest = text[start + 1 :]
    end = rest.find("\n[", 1)
    return (rest if end < 0 else rest[:end]).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=30, help="networks each contender trains (default 30)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1 (default 3)")
    parser.add_argument("--quick", action="store_true", help="12 networks, 2 seeds: a few minutes")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--config", default=os.path.join(ROOT, "examples", "digits.toml"), help="its [space], [search] and [ensemble] are used")
    parser.add_argument("--workers", type=int, default=1, help="evens' in-process workers (1: as `evens run` on one rank)")
    parser.add_argument("--tpe-group", action="store_true", help="TPESampler(multivariate=True, group=True) instead of its defaults")
    args = parser.parse_args()
    if args.quick:
        args.evaluations, args.seeds = 12, 2
    contenders = args.contenders.split(",")
    for c in contenders:
        if c not in CONTENDERS:
            parser.error(f"unknown contender {c!r} (known: {', '.join(CONTENDERS)})")
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = load_config(args.config)  # read once per run: its [space] is what every contender searches
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"# bench_quality  {started}  host={platform.node()}  cpus={os.cpu_count()}  torch={torch.__version__} "
          f"(threads {torch.get_num_threads()})  optuna={optuna.__version__}{' (TPE group=True)' if args.tpe_group else ''}  evaluations={args.evaluations}  seeds={args.seeds}  "
          f"ensemble={cfg.ensemble.method} size {cfg.ensemble.size} of the best {cfg.ensemble.candidates}")
    print(f"# space ({os.path.relpath(args.config, ROOT)}):")
    print("\n".join(f"#   {line}" for line in space_table(args.config).splitlines()))

    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for dataset in args.datasets.split(","):
            data = device_data(dataset_path(dataset, scratch))
            space = cfg.space.for_sample_shape(data.sample_shape)
            check_suggestions(space, condition_order(space))
            # One untimed training first, so that torch's first-call costs land on no contender.
            evaluate_one(data, HallOfFame(1), 0, 0, *space.candidate([0.5] * len(space)))
            print(f"# {dataset}: sample shape {data.sample_shape}, {data.problem.outputs} classes, train/val/test "
                  f"{'/'.join(str(len(data.y[s])) for s in ('train', 'val', 'test'))}, {len(space)} genes "
                  f"(families {', '.join(space.gene('family').domain.options)})", flush=True)
            results[dataset] = {c: [] for c in contenders}
            for seed in range(args.seeds):
                # Interleaved seed by seed, in an order that rotates, so a noisy machine hurts all alike.
                for c in contenders[seed % len(contenders):] + contenders[: seed % len(contenders)]:
                    if c in ("evens", "evens-no-es", "evens-no-prefetch"):
                        out = run_evens(cfg, space, data, seed, args.evaluations, args.workers, early_stopping=c != "evens-no-es",
                                        prefetch=0 if c == "evens-no-prefetch" else cfg.search.prefetch)
                    elif c == "random":
                        out = run_random(cfg, space, data, seed, args.evaluations)
                    else:
                        out = run_tpe(cfg, space, data, seed, args.evaluations, args.tpe_group)
                    row = {"seed": seed, **score(out, cfg, data)}
                    results[dataset][c].append(row)
                    print(f"{dataset} seed {seed} {c:10s} best val {row['best_val']:.4f} test {row['best_test']:.4f}  "
                          f"ensemble test {row['ensemble_test']:.4f} ({row['ensemble_members']} nets)  max test {row['max_test_any']:.4f}  "
                          f"wall {row['wall']:6.1f} s  cpu {row['cpu']:6.1f} s  epochs {row['epochs']}  stopped {row['stopped']}  failed {row['failed']}",
                          file=sys.stderr, flush=True)

    keys = ("best_val", "best_test", "ensemble_test", "max_test_any", "wall", "cpu", "epochs")
    table: dict[str, dict[str, dict]] = {}
    print()
    print(f"{'dataset':14s} {'contender':11s} {'best val':>15s} {'best test':>15s} {'ensemble test':>15s} {'max test (any)':>15s} "
          f"{'wall s':>12s} {'cpu s':>12s} {'wall/evens':>10s} {'cpu/evens':>9s} {'epochs':>7s} {'stopped':>7s}")
    for dataset, by_contender in results.items():
        table[dataset] = {}
        for c, rows in by_contender.items():
            table[dataset][c] = {k: mean_std([r[k] for r in rows]) for k in keys}
            table[dataset][c]["stopped"] = statistics.mean(r["stopped"] for r in rows)
        base = table[dataset].get("evens", {})
        for c, row in table[dataset].items():
            for k in ("wall", "cpu"):
                row[f"{k}_vs_evens"] = row[k][0] / base[k][0] if base else math.nan
            cells = " ".join(f"{row[k][0]:8.4f}±{row[k][1]:.4f}" for k in keys[:4])
            print(f"{dataset:14s} {c:11s} {cells} {row['wall'][0]:7.1f}±{row['wall'][1]:<4.1f} {row['cpu'][0]:7.1f}±{row['cpu'][1]:<4.1f} "
                  f"{row['wall_vs_evens']:10.2f} {row['cpu_vs_evens']:9.2f} {row['epochs'][0]:7.0f} {row['stopped']:7.1f}")

    targets: dict[str, dict] = {}
    for ours in ("evens", "evens-no-es"):
        if ours not in contenders:
            continue
        for dataset, rows in table.items():
            t = check_targets(ours, rows, results[dataset], args.seeds)
            targets.setdefault(ours, {})[dataset] = t
            print(f"# {ours} on {dataset}: ensemble test {t['ensemble_test']:.4f} > best single (by val) of "
                  + ", ".join(f"{c} {v:.4f}" for c, v in t["best_single_tests"].items())
                  + f": {'MET' if t['ensemble_beats_best_singles'] else 'NOT MET'} (seeds where it beats each: "
                  + ", ".join(f"{c} {n}/{args.seeds}" for c, n in t["ensemble_beats_best_single_seeds"].items()) + ")"
                  + (f"; best single test {t['best_single_test']:.4f} >= random's {t['random_best_single_test']:.4f}: "
                     f"{'MET' if t['best_single_at_least_random_test'] else 'NOT MET'}" if "random" in rows else ""))
    summary = {
        "date": started, "evaluations": args.evaluations, "seeds": args.seeds, "workers": args.workers, "optuna": optuna.__version__, "tpe_group": args.tpe_group,
        "torch": torch.__version__, "space": cfg.space.to_config(),
        "table": {d: {c: {k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()} for c, row in rows.items()}
                  for d, rows in table.items()},
        "targets": targets,
        "runs": results,
    }
    print(json.dumps(finite(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
