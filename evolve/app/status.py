"""``evens status RUN_DIR``: what a running or finished search is doing, from its run directory alone.

Safe while a job writes the run: it only reads. The checkpoint is replaced atomically, so a read
sees the old one or the new one whole (and is tried again if the job swapped its segment files
in between). It says:

- whether a job holds the run, and where;
- evaluations done, and the rate over the last ten minutes and overall;
- the best network, the ensemble and failures by kind;
- how many workers were busy at the last checkpoint;
- how long ago that checkpoint was written.

It never takes the run's lock, so it cannot stop a job from starting.
"""
from __future__ import annotations

import json
import os
import time

from data_bcast.h5file import DataError
from evolve.errors import EvensError, RunDirError
from evolve.runfile import checkpoint

from .report import counted, score_text, summarize
from .rundir import checkpoint_path
from .runlock import LOCK_NAME

RECENT_SECONDS = 600.0


def _holder(run_dir: str) -> dict[str, str]:
    try:
        with open(os.path.join(run_dir, LOCK_NAME), encoding="utf-8", errors="replace") as f:
            return dict(part.split("=", 1) for part in f.read().split() if "=" in part)
    except OSError:
        return {}


def _load(path: str, tries: int = 20):
    """The checkpoint, read again if a job replaced it (and removed the segments it no longer lists)
    between our reading its listing and its segments."""
    for attempt in range(tries):
        try:
            return checkpoint.load(path, weights=False)
        except (OSError, KeyError, ValueError, DataError, EvensError):
            if attempt == tries - 1:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def status(run_dir: str, now: float | None = None) -> dict:
    """The facts ``evens status --json`` prints."""
    path = checkpoint_path(run_dir)
    state, info = _load(path)
    now = time.time() if now is None else now
    summary = summarize(state, info, run_dir)
    holder = _holder(run_dir)
    age = now - os.stat(path).st_mtime
    finished = sorted(r.finished for r in state.records)
    recent = [t for t in finished if t >= now - RECENT_SECONDS]
    first = min((r.started for r in state.records), default=now)
    overall = len(finished) / ((finished[-1] - first) / 60) if len(finished) > 1 and finished[-1] > first else 0.0
    rate_recent = len(recent) / (RECENT_SECONDS / 60)
    left = max(0, summary["budget"] - summary["evaluations"])
    rate = rate_recent or overall
    workers = 0
    try:
        with open(os.path.join(run_dir, "devices.json")) as f:
            workers = len(json.load(f).get("workers", []))
    except (OSError, ValueError):
        pass
    failures = {k: n for k, n in summary["status_counts"].items() if k != "ok"}
    return {
        "run_dir": run_dir,
        "job": ({k: holder[k] for k in ("host", "pid", "started", "slurm_job") if k in holder} if holder else None),
        "checkpoint_age_seconds": age,
        "evaluations": summary["evaluations"],
        "budget": summary["budget"],
        "per_minute_recent": rate_recent,
        "per_minute_overall": overall,
        "eta_seconds": (left / rate * 60) if rate > 0 and left else (0.0 if not left else None),
        "best": summary["best"],
        "ensemble": summary["ensemble"],
        "metric": summary["metric"],
        "failures": failures,
        "busy_workers": summary["pending"],
        "workers": workers,
        "worker_utilization": summary["worker_utilization"],
        "sessions": summary["sessions"],
    }


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _scores(s: dict, metric: str) -> str:
    if metric == "accuracy":
        return f"val {score_text(s['val_accuracy'])}  test {score_text(s['test_accuracy'])}"
    return f"val rmse {score_text(s['val_rmse'], 'rmse')}  test rmse {score_text(s['test_rmse'], 'rmse')}"


def format_status(s: dict) -> str:
    metric = s["metric"]
    if s["job"]:
        job = s["job"]
        where = f"host {job.get('host', '?')}, process {job.get('pid', '?')}" + (f", Slurm job {job['slurm_job']}" if "slurm_job" in job else "")
        state = f"a job holds the run ({where}, since {job.get('started', '?')})"
    else:
        state = "no job holds the run"
    lines = [f"{s['run_dir']}: {state}; last checkpoint {_duration(s['checkpoint_age_seconds'])} ago"]
    done, budget = s["evaluations"], s["budget"]
    line = f"evaluations: {done} of {budget} ({100 * done / budget:.0f} %)" if budget else f"evaluations: {done}"
    line += f"; {s['per_minute_recent']:.1f} per minute over the last {RECENT_SECONDS / 60:.0f} minutes, {s['per_minute_overall']:.1f} overall"
    if s["eta_seconds"] is not None and done < budget:
        line += f"; about {_duration(s['eta_seconds'])} to go at that rate"
    lines.append(line)
    workers = f" of {s['workers']}" if s["workers"] else ""
    lines.append(f"workers: {s['busy_workers']}{workers} busy at the last checkpoint; utilization {100 * s['worker_utilization']:.1f} %"
                 f" over {s['sessions']} session(s)")
    best = s["best"]
    if best:
        lines.append(f"best network: #{best['id']} {_scores(best, metric)}")
    e = s["ensemble"]
    if e:
        lines.append(f"ensemble: {counted(len(set(e['members'])), 'network')} ({e['method']}), {_scores(e, metric)}")
    failures = ", ".join(f"{n} {k}" for k, n in sorted(s["failures"].items()))
    lines.append(f"not ok: {failures}" if failures else "not ok: none")
    return "\n".join(lines)


def status_command(run_dir: str, as_json: bool = False) -> str:
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory")
    s = status(run_dir)
    return json.dumps(s, indent=2, sort_keys=True, default=str) if as_json else format_status(s)
