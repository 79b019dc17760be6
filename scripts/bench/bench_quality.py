"""Benchmark: how good are evens' networks and ensembles against random search and Optuna's TPE, at equal budgets?

Run from the repository root (after ./scripts/setup.sh, and ``.venv/bin/pip install 'optuna>=3'``,
a benchmark-only dependency: ``pip install -e '.[bench]'``)::

    B="OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/bench_quality.py"
    $B --quick                                                    # digits and signal, 2 seeds, 16 networks: a minute
    $B --jobs 2 --plot docs/figures                               # 30 networks x 8 seeds, every dataset
    $B --jobs 2 --evaluations 120 --seeds 4 --datasets digits,signal,image --plot docs/figures
    $B ... --rows rows.jsonl                                      # each search's row kept as it finishes; the same
                                                                  # command again runs only the searches not in it
    $B --tables-from rows.jsonl                                   # the tables of a run cut short (seeds every contender finished)

Issue 22's section 3. Every contender trains the same number of networks (``--evaluations``) on the
same seeds (``--seeds``), each network by the same worker function (``ensemble.train.train_and_evaluate``)
with the same seed scheme (:func:`evolve.engine.loop.task_seed` of the search seed and the
evaluation's index), on one CPU thread. Contenders (``--contenders``):

* ``evens``: the search as ``evens run`` on one rank runs it (:func:`evolve.engine.loop.run_search` on
  the config's ``[search]`` settings, early stopping included) over an
  :class:`~evolve.transport.protocol.InProcessTransport` whose worker is the real one
  (:func:`evolve.transport.worker.trainer_for`), on the space :func:`contender_space` gives for the
  config (``--config``, ``--set``) and the dataset: the config's ``[space]``, or the preset the data fits
  (``--config none``: the built-in defaults, no ``[space]``). A network stopped early counts as one of the budget.
* ``evens-classic``: the same search on the classic space, :data:`CLASSIC_SPACE`, examples/digits.toml's
  ``[space]`` table before presets. Not run on a dataset where it is the very space ``evens`` searches
  (while the config has that table), which the output says.
* ``random``: random genomes from ``random.Random(seed)``, decoded by ``evens``' space; no early stopping.
* ``optuna-tpe``: Optuna's ``TPESampler(seed=seed)``, define-by-run over ``evens``' genes: each gene is
  suggested (categorical, float with its log flag, or int) only when its conditions hold given the
  genes suggested before it, else it takes its default, as the space decodes an inactive gene
  (checked on 300 genomes per dataset). No pruning.
* ``evens-model``, ``evens-blind``: evens with ``search.breeding`` set to ``model`` (children ranked by a
  surrogate) or ``blind``, whatever the config says; ``evens-ensemble``, ``evens-fitness``: with
  ``search.selection`` set to ``ensemble`` (parents and survivors by their value to the ensemble) or ``fitness``;
  ``evens-no-augment``: evens with the ``augment`` gene fixed at ``none`` (is the presets' shift augmentation worth keeping?).
* ``evens-no-es``, ``evens-no-prefetch`` (diagnostics): evens with early stopping off, or with no task
  queued behind a worker's training (``search.prefetch = 0``; matters with ``--workers`` above 1).
* Issue 33's, for quality at equal compute (``--budget-cpu``): ``evens-promotion`` and ``evens-no-promotion``
  (``search.promotion`` on or off, whatever the config says); ``evens-promotion-median`` (promotion with the median
  rule inside each stage: ``search.stage_early_stopping``); ``random-asha`` (random search with asynchronous
  successive halving: Optuna's random sampler through evens' loop with promotion); ``optuna-tpe-hyperband``
  (TPE with Optuna's ``HyperbandPruner``, each network trained epoch by epoch in stages that carry on, its
  validation fitness reported after each); ``top-k-1epoch`` (Egele et al. 2023: random networks trained one
  epoch each for half the budget, then the best of them trained on to the end; needs ``--budget-cpu``); ``dehb``
  (Awad et al. 2021, the ``dehb`` package: differential evolution in Hyperband's brackets; it pins numpy < 2 but
  runs with numpy 2, so install it as ``.venv/bin/pip install --no-deps dehb && .venv/bin/pip install ConfigSpace
  loguru dask distributed pandas pyarrow``;
  epochs its fidelity, each evaluation trained from the start; needs ``--budget-cpu``); ``evens-promotion-first-rung``
  (EXPERIMENT: promotion with the GA's population ranked by each network's first-stage result instead of rung first:
  :func:`first_rung_parents`); ``evens-promotion-random-third`` (EXPERIMENT: promotion with a third of the proposals
  random genomes: :func:`random_third`); ``evens-promotion-wide`` (EXPERIMENT: promotion with a population three
  times as large, 30 for the examples' 10: promotion makes about three times as many networks in the same CPU, and a
  population of 10 converged on one family); ``evens-promotion-crowding`` and ``evens-no-promotion-crowding``
  (EXPERIMENT: the GA replaces the member nearest a better newcomer instead of the worst: :func:`crowding`);
  ``evens-promotion-random-until-promoted`` (EXPERIMENT: promotion with random proposals until every member of the
  population has been promoted once: :func:`random_until_promoted`).

``--budget-cpu S`` gives every search S CPU seconds of training instead of ``--evaluations`` networks: each
stops starting networks once its trainings have spent them (evens as a stop request ends a run). The rows
then also hold ``anytime_cpu``, the CPU spent after each network, for the anytime figures against CPU.

``--max-epochs N`` caps the epochs gene of every contender's space alike, so that one network trains
in a few seconds on one core. Every contender's ensemble is chosen the same way, from its best
``ensemble.candidates`` networks on the validation split (:func:`quality_scoring.choose_ensemble`).

For each dataset (quality_data.py: digits, breast_cancer, wine, diabetes, and the generated signal
and image tasks), contender and seed it reports the best single network (chosen on validation: its
test metric), the ensemble's test metric, CPU seconds and seconds per network (quality_scoring.py);
then mean ± std over seeds, the paired differences between evens and each other contender with
their standard errors, and issue 22's targets (quality_stats.py). The metric is accuracy, or RMSE
(lower is better) for a regression. ``--plot DIR`` draws each dataset's anytime figure
(quality_plots.py): best so far and the ensemble against networks trained, the ensemble recomputed
every ``--every`` networks from the networks trained so far. The output ends with one JSON line.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import json
import math
import multiprocessing
import os
import sys
import tempfile
from dataclasses import dataclass, replace

import harness
import quality_data
import quality_experiments
import quality_scoring
import quality_stats
import torch
from quality_contenders import (Capture, check_suggestions, evaluate_one, optuna, run_dehb, run_evens, run_random, run_top_k, run_tpe,
                                run_tpe_hyperband)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from data_bcast import load_dataset
from ensemble.hall_of_fame import HallOfFame
from ensemble.problem import problem_for
from ensemble.train import DeviceData
from evolve.config.schema import Config, apply_overrides, config_from_dict
from evolve.errors import ConfigError
from evolve.search.presets import DataFacts
from evolve.search.space import Choice, Gene, Range, SearchSpace
from evolve.transport.worker import trainer_for

CONTENDERS = ("evens", "evens-classic", "random", "optuna-tpe", "evens-model", "evens-blind", "evens-ensemble", "evens-fitness", "evens-no-augment",
              "evens-no-es", "evens-no-prefetch", "evens-promotion", "evens-no-promotion", "evens-promotion-median", "random-asha", "optuna-tpe-hyperband", "top-k-1epoch",
              "dehb", "evens-promotion-first-rung", "evens-promotion-random-third", "evens-promotion-wide",
              "evens-promotion-crowding", "evens-no-promotion-crowding", "evens-promotion-random-until-promoted")
BUDGETED = ("top-k-1epoch", "dehb")  # contenders that need --budget-cpu (they have no number of networks to stop at)
PEERS = ("evens", "evens-classic", "random", "optuna-tpe")  # the default; the others are diagnostics
# examples/digits.toml's [space] table before presets (issue 22): the classic space, kept here so that
# evens-classic keeps its meaning when the example moves to a preset.
CLASSIC_SPACE = {
    "family": ["mlp", "cnn"],
    "depth": {"low": 1, "high": 3},
    "width": [16, 32, 64],
    "activation": ["relu", "gelu", "silu", "tanh"],
    "dropout": {"low": 0.0, "high": 0.4},
    "learning_rate": {"low": 3e-4, "high": 3e-2, "log": True},
    "batch_size": [32, 64, 128],
    "epochs": {"low": 3, "high": 12},
    "optimizer": ["adam", "adamw", "sgd", "rmsprop"],
    "weight_decay": {"low": 1e-6, "high": 1e-3, "log": True},
}


# ----------------------------------------------------------------------------------- what is searched

@dataclass(frozen=True)
class Settings:
    """What every search of one benchmark run shares (plain values: it goes to the worker processes)."""

    config: str
    overrides: tuple[str, ...] = ()
    evaluations: int = 30
    max_epochs: int | None = None
    workers: int = 1
    tpe_group: bool = False
    every: int = 5  # anytime: the ensemble is recomputed every this many networks
    budget_cpu: float = 0.0  # each search's budget in CPU seconds of its trainings (0: --evaluations networks)


def configs(settings: Settings) -> dict[str, Config]:
    """``evens``: the config (``none``: the built-in defaults, whose space is the preset the data fits) with
    its overrides; ``classic``: the same with :data:`CLASSIC_SPACE` as its whole ``[space]`` table. Both with
    ``search.evaluations`` at the budget."""
    raw = {}
    if settings.config != "none":
        with open(settings.config, "rb") as f:
            raw = tomllib.load(f)
    raw = apply_overrides(raw, list(settings.overrides))
    out = {"evens": config_from_dict(raw), "classic": config_from_dict({**raw, "space": CLASSIC_SPACE})}
    return {k: replace(cfg, search=replace(cfg.search, evaluations=settings.evaluations)) for k, cfg in out.items()}


def data_facts(data: DeviceData) -> DataFacts:
    return DataFacts(data.sample_shape, data.problem.kind, len(data.y["train"]))


def contender_space(cfg: Config, data: DeviceData, max_epochs: int | None = None) -> SearchSpace:
    """The space every contender searches on ``data`` for config ``cfg``: the one place it is chosen.

    As ``evens run`` makes it: the config's ``[space]``, or the preset the data fits (``Config.resolved``),
    narrowed to the sample shape and the problem (``SearchSpace.for_data``). ``max_epochs`` caps the epochs
    gene (:func:`cap_epochs`), for every contender alike.
    """
    resolved, _ = cfg.resolved(data_facts(data))
    return cap_epochs(resolved.space.for_data(data.sample_shape, data.problem.kind), max_epochs)


def cap_epochs(space: SearchSpace, max_epochs: int | None) -> SearchSpace:
    """``space`` with the epochs gene's values clamped to at most ``max_epochs`` (None: unchanged)."""
    if max_epochs is None:
        return space

    def capped(gene: Gene) -> Gene:
        d = gene.domain
        if isinstance(d, Range):
            d = replace(d, low=min(d.low, max_epochs), high=min(d.high, max_epochs))
        else:
            d = Choice(tuple(dict.fromkeys(min(v, max_epochs) for v in d.options)))
        return replace(gene, domain=d, default=min(gene.default, max_epochs))

    return SearchSpace(tuple(capped(g) if g.name == "epochs" else g for g in space.genes))


def fix_gene(space: SearchSpace, name: str, value) -> SearchSpace:
    """``space`` with gene ``name`` fixed at ``value``."""
    return SearchSpace(tuple(replace(g, domain=Choice((value,)), default=value) if g.name == name else g for g in space.genes))


def device_data(path: str) -> DeviceData:
    plan, arrays = load_dataset(path)
    return DeviceData.from_arrays(arrays, problem_for(plan.kind, arrays["train/y"], plan.num_classes), "cpu")


@functools.cache
def prepared(settings: Settings, path: str) -> tuple[DeviceData, dict[str, Config], dict[str, SearchSpace]]:
    """A dataset's data, configs and spaces, once per process; one untimed training first, so that
    torch's first-call costs land on no contender."""
    data, cfgs = device_data(path), configs(settings)
    spaces = {k: contender_space(cfg, data, settings.max_epochs) for k, cfg in cfgs.items()}
    network, training = spaces["evens"].candidate([0.5] * len(spaces["evens"]))
    evaluate_one(Capture(trainer_for(data)), HallOfFame(1), 0, 0, network, replace(training, epochs=1))
    return data, cfgs, spaces


def run_contender(settings: Settings, path: str, contender: str, seed: int) -> dict:
    """One search of ``contender`` on the dataset at ``path``, scored (what a worker process returns)."""
    torch.set_num_threads(1)
    data, cfgs, spaces = prepared(settings, path)
    cfg, space = cfgs["evens"], spaces["evens"]
    if contender == "evens-classic":
        out = run_evens(cfgs["classic"], spaces["classic"], data, seed, settings.workers)
        cfg = cfgs["classic"]
    elif contender == "evens-no-augment":
        out = run_evens(cfg, fix_gene(space, "augment", "none"), data, seed, settings.workers)
    elif contender in ("evens-model", "evens-blind", "evens-ensemble", "evens-fitness"):
        setting = "breeding" if contender in ("evens-model", "evens-blind") else "selection"
        search = replace(cfg.search, **{setting: contender.removeprefix("evens-")})
        out = run_evens(replace(cfg, search=search), space, data, seed, settings.workers)
    elif contender in ("evens-promotion", "evens-no-promotion", "evens-promotion-median", "random-asha", "evens-promotion-first-rung",
                       "evens-promotion-random-third", "evens-promotion-wide", "evens-promotion-crowding", "evens-no-promotion-crowding",
                       "evens-promotion-random-until-promoted"):
        search = replace(cfg.search, promotion=not contender.startswith("evens-no-promotion"))
        if contender == "evens-promotion-wide":  # EXPERIMENT (issue 33): a population as much wider as promotion makes more networks
            search = replace(search, population=3 * search.population)
        if contender == "evens-promotion-median":  # the median rule inside each stage too
            search = replace(search, early_stopping=True, stage_early_stopping=True)
        if contender == "random-asha":  # random search with ASHA: Optuna's random sampler through evens' loop
            search = replace(search, mode="optuna", sampler="random", breeding="blind", selection="fitness")
        with quality_experiments.patch(contender):
            out = run_evens(replace(cfg, search=search), space, data, seed, settings.workers, budget=settings.budget_cpu)
    elif contender.startswith("evens"):
        with quality_experiments.patch(contender):
            out = run_evens(cfg, space, data, seed, settings.workers, early_stopping=contender != "evens-no-es",
                            prefetch=0 if contender == "evens-no-prefetch" else None, budget=settings.budget_cpu)
    elif contender == "random":
        out = run_random(cfg, space, data, seed, settings.budget_cpu)
    elif contender == "optuna-tpe-hyperband":
        out = run_tpe_hyperband(cfg, space, data, seed, settings.budget_cpu)
    elif contender == "top-k-1epoch":
        out = run_top_k(cfg, space, data, seed, settings.budget_cpu)
    elif contender == "dehb":
        out = run_dehb(cfg, space, data, seed, settings.budget_cpu)
    else:
        out = run_tpe(cfg, space, data, seed, settings.tpe_group, settings.budget_cpu)
    row = {"seed": seed, "metric": data.problem.metric, **quality_scoring.score(out, cfg, data),
           **quality_scoring.anytime(out, cfg, data, settings.every)}
    ends = row["anytime_ensemble"][-1] if row["anytime_ensemble"] else math.nan
    if math.isfinite(row["ensemble_test"]) and not math.isclose(ends, row["ensemble_test"], rel_tol=1e-9, abs_tol=1e-12):
        print(f"# warning: {contender} seed {seed}: the anytime ensemble ends at {ends}, the search's at {row['ensemble_test']}",
              file=sys.stderr)
    return row


# ------------------------------------------------------------------------------------------------ main

def describe(dataset: str, data: DeviceData, cfg: Config, space: SearchSpace) -> str:
    sizes = "/".join(str(len(data.y[s])) for s in ("train", "val", "test"))
    kind = f"{data.problem.outputs} classes" if data.problem.kind == "classification" else "regression"
    chosen = cfg.resolved(data_facts(data))[1]
    where = f"preset {chosen['chosen']} ({chosen['why']})" if chosen else "the config's [space]"
    epochs = space.gene("epochs").domain
    return (f"# {dataset}: sample shape {data.sample_shape}, {kind}, train/val/test {sizes}; evens searches {where}: {len(space)} genes, "
            f"families {', '.join(space.gene('family').domain.options)}, epochs {min(epochs.values() or (epochs.low,))}-{max(epochs.values() or (epochs.high,))}")


def shown(config: str) -> str:
    return config if config == "none" else os.path.relpath(config, harness.ROOT)


def rows_done(rows_file: str | None, settings: Settings) -> dict:
    """The rows an earlier launch of the same benchmark (same ``settings``) appended to ``rows_file``, as
    results[dataset][contender][seed]; a row of other settings ends the run, so that one table never mixes two."""
    results: dict = {}
    if not rows_file or not os.path.exists(rows_file):
        return results
    with open(rows_file) as f:
        for number, line in enumerate(f, 1):
            item = json.loads(line)
            if {**dataclasses.asdict(Settings("")), **item.get("settings", {})} != json.loads(json.dumps(dataclasses.asdict(settings))):
                sys.exit(f"bench_quality: {rows_file} line {number} is a search of other settings "
                         f"({item.get('settings')}); give another --rows file")
            results.setdefault(item["dataset"], {}).setdefault(item["contender"], {})[item["seed"]] = quality_stats.nan_for_none(item["row"])
    return results


def run_all(tasks: list[tuple[str, str, str, int]], settings: Settings, jobs: int, rows_file: str | None = None) -> dict:
    """Run ``(dataset, path, contender, seed)`` tasks, ``jobs`` at a time; results[dataset][contender][seed].
    Each search's row is also appended to ``rows_file`` as one JSON line as it finishes (``--rows``); the
    searches already there (of the same settings) are not run again."""
    results = rows_done(rows_file, settings)
    tasks = [t for t in tasks if t[3] not in results.get(t[0], {}).get(t[2], {})]
    if rows_file and results:
        print(f"# {rows_file}: {sum(len(s) for c in results.values() for s in c.values())} searches done before, {len(tasks)} to run", flush=True)

    commit = harness.git_commit()  # (a long pass continued later may mix commits: each row says which ran it)

    def done(task, row) -> None:
        dataset, _, c, seed = task
        results.setdefault(dataset, {}).setdefault(c, {})[seed] = row
        if rows_file:
            line = {"dataset": dataset, "contender": c, "seed": seed, "settings": dataclasses.asdict(settings), "commit": commit, "row": row}
            with open(rows_file, "a") as f:
                f.write(json.dumps(quality_stats.finite(line)) + "\n")
        print(f"{dataset} seed {seed} {c:13s} best val {row['best_val']:.4f} test {row['best_test']:.4f}  "
              f"ensemble test {row['ensemble_test']:.4f} ({row['ensemble_members']} nets)  oracle {row['oracle_test']:.4f}  "
              f"cpu {row['cpu']:6.1f} s  wall {row['wall']:6.1f} s  s/net {row['net_seconds']:.2f} (max {row['max_net_seconds']:.1f})  "
              f"epochs {row['epochs']}  stopped {row['stopped']}  failed {row['failed']}  "
              f"families {' '.join(f'{k} {v}' for k, v in row['families'].items())} (best {row['best_family']})", file=sys.stderr, flush=True)

    if jobs == 1:
        for task in tasks:
            done(task, run_contender(settings, *task[1:]))
        return results
    # spawn, not fork: a forked child of a process that has run torch's thread pools may hang
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_contender, settings, *task[1:]): task for task in tasks}
        for future in concurrent.futures.as_completed(futures):
            done(futures[future], future.result())
    return results


def main() -> int:
    parser = harness.parser(__doc__, quick="digits and signal, 16 networks, 2 seeds, epochs capped at 6: minutes", whole_doc=True)
    parser.add_argument("--evaluations", type=int, default=30, help="networks each contender trains (default 30)")
    parser.add_argument("--seeds", type=int, default=8, help="seeds 0..S-1 (default 8)")
    parser.add_argument("--datasets", default=",".join(quality_data.DATASETS), help=f"of {', '.join(quality_data.DATASETS)}")
    parser.add_argument("--contenders", default=",".join(PEERS), help=f"of {', '.join(CONTENDERS)} (default: {', '.join(PEERS)})")
    parser.add_argument("--config", default=os.path.join(harness.ROOT, "examples", "digits.toml"), help="evens' config: its [search], [ensemble] and space; none: the built-in defaults (the preset the data fits)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a key of --config (repeatable)")
    parser.add_argument("--max-epochs", type=int, default=None, help="cap the epochs gene of every contender's space (default: no cap)")
    parser.add_argument("--every", type=int, default=5, help="anytime: recompute the ensemble every this many networks (default 5)")
    parser.add_argument("--plot", metavar="DIR", help="write anytime-<dataset>.png figures to DIR (needs matplotlib)")
    parser.add_argument("--jobs", type=int, default=1, help="searches run at once, one process and one CPU thread each (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="evens' in-process workers (1: as `evens run` on one rank)")
    parser.add_argument("--budget-cpu", type=float, default=0.0, metavar="SECONDS",
                        help="each search stops starting networks once its trainings have spent this much CPU (default: --evaluations networks)")
    parser.add_argument("--tpe-group", action="store_true", help="TPESampler(multivariate=True, group=True) instead of its defaults")
    parser.add_argument("--rows", metavar="FILE", help="append each finished search's row to FILE as a JSON line (a long run cut short keeps them); searches already in FILE are not run again")
    parser.add_argument("--tables-from", metavar="FILE", nargs="+", help="no searches: the tables of the rows in these --rows files")
    args = parser.parse_args()
    if args.tables_from:
        return tables_from(args.tables_from, args.plot)
    if args.quick:
        args.evaluations, args.seeds, args.every = 16, 2, 4
        args.max_epochs = min(args.max_epochs or 6, 6)
        if args.datasets == ",".join(quality_data.DATASETS):
            args.datasets = "digits,signal"
    contenders, datasets = args.contenders.split(","), args.datasets.split(",")
    for c in contenders:
        if c not in CONTENDERS:
            parser.error(f"unknown contender {c!r} (known: {', '.join(CONTENDERS)})")
    if any(c in BUDGETED for c in contenders) and not args.budget_cpu:
        parser.error(f"{', '.join(c for c in contenders if c in BUDGETED)} needs --budget-cpu")
    if any(c.startswith("optuna") or c == "random-asha" for c in contenders) and optuna is None:
        sys.exit("bench_quality.py: optuna-tpe needs Optuna (benchmark only): .venv/bin/pip install 'optuna>=3'  (or: pip install -e '.[bench]')")
    for d in datasets:
        if d not in quality_data.DATASETS:
            parser.error(f"unknown dataset {d!r} (known: {', '.join(quality_data.DATASETS)})")
    if args.evaluations < 1 or args.seeds < 1 or args.every < 1 or args.jobs < 1 or (args.max_epochs is not None and args.max_epochs < 1):
        parser.error("--evaluations, --seeds, --every, --jobs and --max-epochs must be at least 1")
    torch.set_num_threads(1)
    settings = Settings(args.config if args.config == "none" else os.path.abspath(args.config), tuple(args.overrides), args.evaluations, args.max_epochs,
                        args.workers, args.tpe_group, args.every, args.budget_cpu)
    try:
        cfg = configs(settings)["evens"]
    except (ConfigError, OSError) as exc:
        sys.exit(f"bench_quality: {exc}")
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    print(harness.machine_line("bench_quality", f"torch={torch.__version__} (threads {torch.get_num_threads()})  optuna={optuna.__version__ if optuna else '-'}"
                               f"{' (TPE group=True)' if args.tpe_group else ''}  evaluations={args.evaluations}  seeds={args.seeds}  "
                               f"max_epochs={args.max_epochs}  jobs={args.jobs}  search={cfg.search.mode}  "
                               f"ensemble={cfg.ensemble.method} size {cfg.ensemble.size} of the best {cfg.ensemble.candidates}"))
    print(f"# config {shown(settings.config)}{''.join(f' --set {o}' for o in args.overrides)}")

    plan: dict[str, list[str]] = {}
    spaces: dict[str, dict] = {}
    metrics: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        paths = {d: quality_data.dataset_path(d, scratch) for d in datasets}
        for d in datasets:
            data, cfgs, space = prepared(settings, paths[d])
            if any(c.startswith("optuna-tpe") for c in contenders):
                check_suggestions(space["evens"])
            print(describe(d, data, cfgs["evens"], space["evens"]), flush=True)
            metrics[d] = data.problem.metric
            spaces[d] = space["evens"].to_config()
            plan[d] = [c for c in contenders if not (c == "evens-classic" and space["classic"] == space["evens"])]
            if plan[d] != contenders:
                print(f"#   evens-classic not run on {d}: it is the space evens searches", flush=True)
        # Interleaved seed by seed, in an order that rotates, so a noisy machine hurts all alike.
        tasks = [(d, paths[d], c, seed) for seed in range(args.seeds) for d in datasets
                 for c in plan[d][seed % len(plan[d]):] + plan[d][: seed % len(plan[d])]]
        by_seed = run_all(tasks, settings, args.jobs, args.rows)
    runs = {d: {c: [by_seed[d][c][s] for s in range(args.seeds)] for c in plan[d]} for d in datasets}
    summary = {
        "date": started, "evaluations": args.evaluations, "seeds": args.seeds, "max_epochs": args.max_epochs, "jobs": args.jobs,
        "workers": args.workers, "optuna": optuna.__version__ if optuna else None, "tpe_group": args.tpe_group, "torch": torch.__version__,
        "config": shown(settings.config), "overrides": list(args.overrides), "spaces": spaces,
    }
    harness.emit(quality_stats.finite({**summary, **report(runs, metrics, args.plot, against_cpu=args.budget_cpu > 0)}))
    return 0


def report(runs: dict[str, dict[str, list[dict]]], metrics: dict[str, str], plot: str | None = None, against_cpu: bool = False) -> dict:
    """Print the tables (and draw the figures) of ``runs[dataset][contender]`` (rows by seed); the JSON summary's figures."""
    datasets = list(runs)
    higher = {d: metrics[d] != "rmse" for d in datasets}
    summaries = {d: quality_stats.summarise(runs[d]) for d in datasets}
    diffs = {d: quality_stats.paired_differences(runs[d], higher[d]) for d in datasets}
    targets = {d: quality_stats.check_targets(summaries[d], diffs[d], higher[d]) for d in datasets}
    print()
    print(quality_stats.summary_table(summaries, metrics))
    print()
    print(quality_stats.paired_table(diffs, metrics))
    print()
    # issue 33's runs have no plain "evens": each evens variant against every other contender
    variants = sorted({c for d in datasets for c in runs[d] if c.startswith("evens-")}) if not any("evens" in runs[d] for d in datasets) else []
    by_variant = {v: {d: quality_stats.paired_differences(runs[d], higher[d], ours=v) for d in datasets} for v in variants}
    for variant, variant_diffs in by_variant.items():
        print(quality_stats.paired_table(variant_diffs, metrics, ours=variant))
        print()
    print(quality_stats.selection_table(runs, metrics, higher))
    print()
    print("\n".join(quality_stats.target_lines(targets, summaries, diffs)))
    if plot:
        from quality_plots import plot_anytime

        for d in datasets:
            print(f"# figure: {plot_anytime(d, runs[d], metrics[d], plot, against_cpu)}")
    return {
        "metrics": metrics,
        "table": {d: {c: {k: list(v) for k, v in s.items()} for c, s in summaries[d].items()} for d in datasets},
        "paired": {d: {c: {k: p.to_dict() for k, p in by.items()} for c, by in diffs[d].items()} for d in datasets},
        "paired_by_variant": {v: {d: {c: {k: p.to_dict() for k, p in by.items()} for c, by in vd[d].items()} for d in datasets}
                              for v, vd in by_variant.items()},
        "targets": targets,
        "runs": runs,
    }


def tables_from(paths: list[str], plot: str | None) -> int:
    """``--tables-from``: the tables of searches already run (``--rows`` files), over the seeds that every
    contender of a dataset has finished, so that a long run cut short still gives paired figures."""
    rows: dict = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                item = json.loads(line)
                rows.setdefault(item["dataset"], {}).setdefault(item["contender"], {})[item["seed"]] = quality_stats.nan_for_none(item["row"])
    runs, metrics = {}, {}
    for d, by_contender in rows.items():
        seeds = sorted(set.intersection(*(set(by_seed) for by_seed in by_contender.values())))
        print(f"# {d}: seeds {seeds} finished by every contender ({', '.join(by_contender)})")
        if seeds:
            runs[d] = {c: [by_seed[s] for s in seeds] for c, by_seed in by_contender.items()}
            metrics[d] = next(iter(runs[d].values()))[0]["metric"]
    against_cpu = bool(runs) and all("anytime_cpu" in r for d in runs for c in runs[d] for r in runs[d][c])  # a --budget-cpu run's rows
    harness.emit(quality_stats.finite(report(runs, metrics, plot, against_cpu=against_cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
