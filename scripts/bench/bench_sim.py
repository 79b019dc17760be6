"""Simulated scale figures: utilization at 1,024, 18,688 and 27,648 workers (a model; nothing is trained).

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_sim.py --master-us 250        # all figures, a few minutes
    .venv/bin/python scripts/bench/bench_sim.py --quick                # 2 evaluations a worker, 4 bisection steps
    .venv/bin/python scripts/bench/bench_master.py --quick             # measures the master, then prints these at 27,648

Every figure comes from :func:`evolve.engine.simulator.simulate`: the real async (or generational) strategy and
master loop on simulated workers whose trainings take lognormal times (sigma 0.5), with the master
charged ``--master-us`` of CPU per result (take it from ``bench_master.py``; the default is its
latest figure at np=4 on the 2-core VM).

* ``sim_util_W_60s``: worker utilization with trainings of median 60 s (target >= 0.98 at 27,648);
* ``sim_min_task_s_95_W``: the smallest median training time that keeps utilization >= 0.95
  (bisection on a log scale around the master's saturation point, W x cost);
* ``async_vs_generational_W``: utilization of the async search over a generational one whose
  generations are as large as the machine (population W), both at 60 s.
"""
from __future__ import annotations

import math

import harness

from evolve.config.schema import Config, SearchConfig
from evolve.engine.simulator import simulate
from evolve.search.space_config import parse_space

WORKERS = (1024, 18688, 27648)
PREFETCH = SearchConfig().prefetch  # as evens run searches by default
SIGMA = 0.5
MASTER_US = 48.0  # bench_master.py's master_us_per_eval at np=4, the 2-core VM, 2026-11-23 (docs/benchmarks.md)


def searching(**search) -> Config:
    """The config of a search as evens run makes it by default, but ``search``, on 8x8 images."""
    return Config(search=SearchConfig(**search), space=parse_space({}).for_sample_shape((1, 8, 8)))


def min_task_seconds(config: Config, workers: int, master_seconds: float, per_worker: float, steps: int) -> float:
    """The smallest median training time with utilization >= 0.95, by bisection in log space."""
    saturation = workers * master_seconds / math.exp(SIGMA**2 / 2)  # where the master can just keep up, on average
    low, high = 0.5 * saturation, 2.0 * saturation
    for _ in range(steps):
        mid = math.sqrt(low * high)
        util = simulate(config, workers, mid, SIGMA, master_seconds, int(per_worker * workers)).utilization
        low, high = (low, mid) if util >= 0.95 else (mid, high)
    return high


def figures(master_us: float, workers=WORKERS, per_worker: float = 3.0, steps: int = 6, prefetch: int = PREFETCH) -> dict:
    config = searching(prefetch=prefetch)
    c = master_us * 1e-6
    out = {"master_us": master_us, "sigma": SIGMA, "evaluations_per_worker": per_worker, "prefetch": prefetch}
    for w in workers:
        n = int(per_worker * w)
        steady = simulate(config, w, 60.0, SIGMA, c, n)
        generational = simulate(searching(prefetch=prefetch, mode="generational", population=w), w, 60.0, SIGMA, c, n)
        out[f"sim_util_{w}_60s"] = steady.utilization
        out[f"sim_master_load_{w}_60s"] = steady.master_load
        out[f"sim_min_task_s_95_{w}"] = min_task_seconds(config, w, c, per_worker, steps)
        out[f"async_vs_generational_{w}"] = steady.utilization / generational.utilization
    return out


def main() -> None:
    parser = harness.parser(__doc__, quick="2 evaluations a worker and 4 bisection steps (as bench_master.py --quick)")
    parser.add_argument("--master-us", type=float, default=MASTER_US,
                        help=f"the master's CPU per result (bench_master.py; default {MASTER_US:g})")
    parser.add_argument("--per-worker", type=float, default=3.0, help="simulated evaluations per worker")
    parser.add_argument("--steps", type=int, default=6, help="bisection steps for the minimum training time")
    parser.add_argument("--prefetch", type=int, default=PREFETCH, help=f"search.prefetch (default {PREFETCH}, the config's)")
    args = parser.parse_args()
    if args.quick:
        args.per_worker, args.steps = 2.0, 4
    out = figures(args.master_us, per_worker=args.per_worker, steps=args.steps, prefetch=args.prefetch)
    print(harness.machine_line("bench_sim", f"master {args.master_us:g} us per result  prefetch {args.prefetch}  "
                               f"{args.per_worker:g} evaluations a worker  {args.steps} bisection steps"))
    print("# SIMULATION (no training): the real search loop on simulated workers; lognormal trainings, sigma 0.5")
    print(f"{'workers':>8} {'util at 60 s':>13} {'master load':>12} {'min median s for 95 %':>22} {'async/generational':>19}")
    for w in WORKERS:
        print(f"{w:>8} {out[f'sim_util_{w}_60s']:>13.5f} {out[f'sim_master_load_{w}_60s']:>12.3f} "
              f"{out[f'sim_min_task_s_95_{w}']:>22.2f} {out[f'async_vs_generational_{w}']:>19.2f}")
    harness.emit(out)


if __name__ == "__main__":
    main()
