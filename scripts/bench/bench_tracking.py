"""Benchmark: what ``[track] tensorboard = true`` costs the master per evaluation, against torch's SummaryWriter.

Run from the repository root::

    .venv/bin/python scripts/bench/bench_tracking.py            # 20,000 evaluations each way
    .venv/bin/python scripts/bench/bench_tracking.py --quick    # 2,000

Both contenders write the same facts of N made-up records (11 scalars, a curve of 2-12 epochs and the
23 genes as HParams, one run per trial so that TensorBoard's HParams view lists every trial):

* ``evens``: :func:`evolve.app.run.tracking.open_tracker`, as the master calls it (the search loop's
  thread only queues a record; a writer thread builds and writes the events);
* ``summarywriter``: ``torch.utils.tensorboard.SummaryWriter`` (``add_scalar`` and ``add_hparams``),
  what a user would write.

Reported per evaluation: CPU of the caller's thread (what the search loop pays: its budget is 100 us
in all) and of the whole process, the files and bytes written; ``caller_ratio`` is the
SummaryWriter's caller CPU over evens'. Written under a temporary folder on /tmp (ext4 or tmpfs,
as the machine has it; a parallel file system costs more per file).
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import time

import harness

from ensemble.problem import Classification
from evolve.app.run.tracking import open_tracker
from evolve.config.schema import Config, TrackConfig
from evolve.engine.state import SearchState
from evolve.search.records import Record
from evolve.search.space_config import parse_space


def records(n: int, genes: int) -> list[Record]:
    rng, out = random.Random(0), []
    for i in range(n):
        ok, epochs = rng.random() < 0.9, rng.randint(2, 12)
        metrics = {k: rng.random() for k in ("val_accuracy", "val_loss", "test_accuracy", "test_loss")} | {"params": 12345.0}
        out.append(Record(id=i, genome=[rng.random() for _ in range(genes)], status="ok" if ok else "error",
                          fitness=rng.random() if ok else float("-inf"), metrics=metrics if ok else {}, seconds=60.0,
                          epochs_done=epochs, curve=[rng.random() for _ in range(epochs)] if ok else [],
                          started=time.time(), finished=time.time()))
    return out


def written(folder: str) -> tuple[int, int]:
    files = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs]
    return len(files), sum(os.path.getsize(f) for f in files)


def run_evens(recs: list[Record], folder: str) -> dict:
    space = parse_space({}).for_sample_shape((1, 8, 8))
    config = dataclasses.replace(Config(), track=TrackConfig(tensorboard=True))
    state = SearchState.fresh(0, 32)
    c0 = time.process_time()
    track = open_tracker(config, folder, space, Classification(10), state, print)
    on_result, caller = track.results(lambda r, s: None), 0.0
    for k, r in enumerate(recs, 1):
        state.records.append(r)
        t = time.thread_time()
        on_result(r, state)
        caller += time.thread_time() - t
        if k % 1000 == 0:
            time.sleep(0.001)  # a master waits on MPI between results; the writer thread runs meanwhile
    track.close()  # waits for the writer's backlog
    return {"caller_us": caller / len(recs) * 1e6, "process_us": (time.process_time() - c0) / len(recs) * 1e6}


def run_summarywriter(recs: list[Record], folder: str) -> dict:
    from torch.utils.tensorboard import SummaryWriter

    c0, caller = time.process_time(), 0.0
    writer = SummaryWriter(os.path.join(folder, "search"))
    for k, r in enumerate(recs, 1):
        t = time.thread_time()
        for name, value in [*r.metrics.items(), ("fitness", r.fitness), ("seconds", r.seconds), ("epochs", r.epochs_done)]:
            writer.add_scalar(f"evaluation/{name}", value, k)
        trial = SummaryWriter(os.path.join(folder, "trials", f"{r.id:06d}"))
        for epoch, value in enumerate(r.curve, 1):
            trial.add_scalar("curve/val", value, epoch)
        trial.add_hparams({f"g{i}": g for i, g in enumerate(r.genome)}, {"hparam/val_accuracy": r.metrics.get("val_accuracy", 0.0)},
                          run_name=".")
        trial.close()
        caller += time.thread_time() - t
    writer.close()
    return {"caller_us": caller / len(recs) * 1e6, "process_us": (time.process_time() - c0) / len(recs) * 1e6}


def main() -> None:
    parser = harness.parser(__doc__, quick="2,000 evaluations each way")
    parser.add_argument("--evaluations", type=int, default=20000)
    args = parser.parse_args()
    n = 2000 if args.quick else args.evaluations
    print(harness.machine_line("bench_tracking", f"evaluations={n}"))
    recs = records(n, len(parse_space({}).for_sample_shape((1, 8, 8)).names))
    results = {}
    for name, run in (("evens", run_evens), ("summarywriter", run_summarywriter)):
        folder = tempfile.mkdtemp(prefix=f"bench_tracking-{name}-", dir="/tmp")
        try:
            results[name] = run(recs, folder) | dict(zip(("files", "bytes"), written(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        r = results[name]
        print(f"{name:>14}: caller {r['caller_us']:7.1f} us/eval, process {r['process_us']:7.1f} us/eval, "
              f"{r['files']} files, {r['bytes'] / n:.0f} B/eval")
    ratio = results["summarywriter"]["caller_us"] / max(results["evens"]["caller_us"], 1e-9)
    print(f"# the search loop pays {results['evens']['caller_us']:.1f} us an evaluation with evens' hook, "
          f"{results['summarywriter']['caller_us']:.0f} with SummaryWriter ({ratio:.0f}x)")
    harness.emit({"evaluations": n, "caller_us": round(results["evens"]["caller_us"], 2),
                  "process_us": round(results["evens"]["process_us"], 1),
                  "summarywriter_caller_us": round(results["summarywriter"]["caller_us"], 1), "caller_ratio": round(ratio, 1)})


if __name__ == "__main__":
    main()
