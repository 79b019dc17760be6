"""``evens simulate``: project a search's utilization on N workers before spending an allocation."""
from __future__ import annotations

import json
import math
from dataclasses import asdict

from data_bcast.h5file import DataError, inspect_file
from evolve.config.schema import load_config
from evolve.engine.simulator import campaign, master_cost, simulate
from evolve.errors import ConfigError
from evolve.search.presets import DataFacts


def _with_space(config):
    """The config with its search space made: a preset's from the data file's plan (its shapes, not its contents)."""
    if config.space is not None:
        return config
    options = config.data
    try:
        plan = inspect_file(options.path, options.val_fraction, options.test_fraction, options.split_seed, options.allow_external)
    except DataError as exc:
        raise ConfigError(f"the config's search space is a preset, made from its data, and {exc}") from None
    return config.resolved(DataFacts(tuple(plan.sample_shape), plan.kind, int(plan.spec("train/y").shape[0])))[0]


# Below a tenth of the workers, nearly every child is bred from the same few parents (10 at 27,648 workers).
POPULATION_PER_WORKERS = 0.1


def population_warnings(population: int, workers: int) -> list[str]:
    """What a population far below the workers means for the search, in one line (none for a sensible one)."""
    if population >= POPULATION_PER_WORKERS * workers:
        return []
    return [f"population {population:,} for {workers:,} workers: most children are bred from a tiny population, so the search "
            f"explores little beyond it; raise search.population (to {math.ceil(POPULATION_PER_WORKERS * workers):,} or more, a tenth of the workers)"]


BANNER = "SIMULATION: no network is trained; the real search loop on simulated workers and a virtual clock"


def simulate_command(args) -> str:
    config = load_config(args.config, args.overrides)
    for name, value, low in (("--workers", args.workers, 1), ("--task-seconds", args.task_seconds, 1e-9),
                             ("--sigma", args.sigma, 0.0), ("--evaluations", args.evaluations or 1, 1)):
        if not value >= low:
            raise ConfigError(f"{name} must be at least {low:g}, got {value}")
    config = _with_space(config)
    measured = args.master_us is None
    master_seconds = master_cost(config) if measured else args.master_us * 1e-6
    p = simulate(config, args.workers, args.task_seconds, args.sigma, master_seconds, args.evaluations)
    warnings = population_warnings(config.search.population, args.workers)
    campaigns = [campaign(p.steady_evaluations_per_hour, hours) for hours in args.hours]
    if args.json:
        return json.dumps({"simulation": True, "master_us": master_seconds * 1e6, **asdict(p), "warnings": warnings,
                           "campaigns": [asdict(c) for c in campaigns]})
    where = "measured here, without MPI messages" if measured else "given"
    return "\n".join([
        BANNER,
        f"search: {config.search.mode}, population {config.search.population}, prefetch {config.search.prefetch}; {p.workers:,} workers; trainings lognormal, "
        f"median {args.task_seconds:g} s, sigma {args.sigma:g}; master {master_seconds * 1e6:.0f} us per result ({where})",
        f"projected worker utilization {100 * p.utilization:.2f} %; {p.evaluations_per_hour:,.0f} evaluations per hour; "
        f"master load {100 * p.master_load:.1f} % ({p.evaluations:,} evaluations over {p.makespan_seconds:,.0f} simulated seconds)",
        *([f"successive halving: {100 * p.carried_on:.1f} % of promotions carried on by the worker holding their paused training "
           "(the rest trained again from the start)"] if config.search.promotion else []),
        f"steady state (up to the last new network): {p.steady_evaluations_per_hour:,.0f} evaluations per hour",
        *(f"a {c.hours:g}-hour campaign at that rate: {c.evaluations:,} evaluations; the master keeps about {c.master_gb:,.1f} GB, "
          f"the run file holds {c.run_file_gb:,.1f} GB, and a resume takes about {c.resume_seconds:,.1f} s "
          "(bench_scale.py's costs for the default search, whose resume reads the state file alone)" for c in campaigns),
        *(f"warning: {w}" for w in warnings),
    ])
