"""``evens status RUN_DIR``: what a running or finished search is doing, from its run directory alone.

Safe while a job writes the run: it only reads. The checkpoint is replaced atomically, so a read
sees the old one or the new one whole (see :mod:`evolve.runfile.version`). Everything but the job's lock comes from the last checkpoint, and says so:

- whether a job holds the run (its host, process, Slurm job and start), or whether the run
  finished or stopped short of its budget;
- evaluations done, and while a job holds the run the rate over the last ten minutes of its
  session up to the checkpoint (or the session's age, if shorter) and the time left at that rate;
  overall, evaluations per minute of searching over all sessions;
- what the workers were doing: how many were training and how many tasks were queued behind
  them, and the longest training (the run file holds the dispatcher's view, see
  :meth:`evolve.engine.dispatch.Dispatcher.view`);
- the best network, the ensemble and failures by kind;
- how long ago the checkpoint was written;
- or, where a job has claimed the run and written no checkpoint yet, that it is starting (and which job).

It never takes the run's lock, so it cannot stop a job from starting.

:func:`status` reads the run's summary (evolve.app.presentation.summary.Summary) by its fields, and returns plain facts, the JSON
that ``--json`` prints: the summary's parts in them as their ``to_dict()``. :func:`format_status` reads those facts by
key, and the summary's parts back as their types (``from_dict``).
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime

from evolve.app.infra.rundir import checkpoint_path
from evolve.app.infra.runlock import lock_holder
from evolve.app.presentation.report import summarize, tally_of
from evolve.app.presentation.report_text import counted, format_halving, score_text
from evolve.app.presentation.summary import BestNetwork, ChosenOn, EnsembleFacts, Halving, Scored
from evolve.errors import RunDirError
from evolve.runfile.checkpoint import CHECKPOINT_NAME
from evolve.runfile.version import read_run

RECENT_SECONDS = 600.0


def _since(stamp: str | None) -> float | None:
    """A lock's ``started=`` stamp as wall-clock seconds; None if absent or unreadable."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp() if stamp else None
    except ValueError:
        return None


def status(run_dir: str, now: float | None = None) -> dict:
    """The facts ``evens status --json`` prints."""
    now = time.time() if now is None else now
    holder, gone = lock_holder(run_dir, now)
    if holder and not os.path.isfile(os.path.join(run_dir, CHECKPOINT_NAME)):
        return _starting(run_dir, holder)
    path = checkpoint_path(run_dir)
    state, info = read_run(path, history=False, memory=False)  # the state file alone: its account of the history (evolve.search.tally)
    if state.tally is None:  # a job's first checkpoint, written before its first result, or a run file from before the account was kept
        state, info = read_run(path)
        state.tally = tally_of(state.records, info)
    summary = summarize(state, info, run_dir, state.tally, pareto=False)  # (status shows no Pareto front)
    view = state.dispatch
    saved_at = float(view.get("saved_at") or os.stat(path).st_mtime)
    done, budget = summary.evaluations, summary.budget
    left = max(0, budget - done)
    searched = info.wall_seconds
    facts = {
        "run_dir": run_dir,
        "job": _job_facts(holder),
        "ended_job": _job_facts(gone),
        "state": "running" if holder else "finished" if not left else "stopped",
        "checkpoint_age_seconds": max(0.0, now - saved_at),
        "evaluations": done,
        "budget": budget,
        "per_minute_overall": done / (searched / 60) if searched > 0 else None,
        "per_minute_recent": None,  # while a job holds the run: over recent_seconds before the checkpoint
        "recent_seconds": None,
        "eta_seconds": None,
        "best": _as_json(summary.best),
        "ensemble": _as_json(summary.ensemble),
        "metric": summary.metric,
        "failures": {k: n for k, n in summary.status_counts.items() if k not in ("ok", "paused")},
        "promotion": _as_json(summary.promotion),  # successive halving: each rung's stages and promotions
        "workers": len(view["workers"]) if "workers" in view else _devices(run_dir),
        "workers_training": len(view["training"]) if "training" in view else None,
        "tasks_queued": len(view["queued"]) if "queued" in view else None,
        "longest_training": None,
        "worker_utilization": summary.worker_utilization,
        "sessions": summary.sessions,
        "chosen_on": summary.chosen_on.to_dict(),
        "folds": info.config.data.fold_count,  # with cross-validation: networks begun, and their fold trainings back
        "networks_open": len(state.pending) if info.config.data.fold_count else None,
        "folds_back": sum(len(parts) for parts in state.folding.values()) if info.config.data.fold_count else None,
    }
    if view.get("training"):
        rank, ident, started = min(view["training"], key=lambda t: t[2])
        facts["longest_training"] = {"id": ident, "rank": rank, "seconds": max(0.0, saved_at - started)}
    job_started = _since(holder.get("started"))
    if holder and (job_started is None or job_started <= saved_at):  # (else this job has not checkpointed yet)
        since = max(saved_at - RECENT_SECONDS, float(view.get("session_started", job_started or 0.0)))
        window = saved_at - since
        if window > 0:
            rate = state.tally.recent_networks(since, saved_at) / (window / 60)  # networks
            facts["per_minute_recent"], facts["recent_seconds"] = rate, window
            if not left:
                facts["eta_seconds"] = 0.0
            elif rate > 0:
                facts["eta_seconds"] = max(0.0, left / rate * 60 - (now - saved_at))
    return facts


def _as_json(facts) -> dict | None:
    """A part of the summary as the JSON holds it (None as None)."""
    return None if facts is None else facts.to_dict()


def _starting(run_dir: str, holder: dict[str, str]) -> dict:
    """The facts of a run that a job has claimed and not yet checkpointed: the job, and nothing of a search yet."""
    return {"run_dir": run_dir, "job": _job_facts(holder), "ended_job": None, "state": "starting", "checkpoint_age_seconds": None,
            "evaluations": 0, "budget": None, "per_minute_overall": None, "per_minute_recent": None, "recent_seconds": None,
            "eta_seconds": None, "best": None, "ensemble": None, "metric": None, "failures": {}, "promotion": None,
            "workers": _devices(run_dir), "workers_training": None, "tasks_queued": None, "longest_training": None,
            "worker_utilization": None, "sessions": None, "chosen_on": None, "folds": None, "networks_open": None, "folds_back": None}


def _devices(run_dir: str) -> int | None:
    """How many workers the last session had, from its devices.json (a run file without the dispatcher's view)."""
    try:
        with open(os.path.join(run_dir, "devices.json")) as f:
            return len(json.load(f).get("workers", [])) or None
    except (OSError, ValueError):
        return None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _scores(s: Scored, metric: str, val: str = "val") -> str:
    if metric == "accuracy":
        return f"{val} {score_text(s.score('val', 'accuracy'))}  test {score_text(s.score('test', 'accuracy'))}"
    return f"{val} rmse {score_text(s.score('val', 'rmse'), 'rmse')}  test rmse {score_text(s.score('test', 'rmse'), 'rmse')}"


def _folds_line(s: dict) -> str:
    """Cross-validation: the folds, the rows chosen on, and the networks begun with their fold trainings back."""
    return (f"cross-validation: {s['folds']} folds of {ChosenOn.from_dict(s['chosen_on']).rows} training rows; at the last checkpoint "
            f"{counted(s['networks_open'], 'network')} begun and not recorded, with {counted(s['folds_back'], 'fold training')} back")


def _evaluations_line(s: dict) -> str:
    done, budget = s["evaluations"], s["budget"]
    line = f"evaluations: {done} of {budget} ({100 * done / budget:.0f} %)" if budget else f"evaluations: {done}"
    if s["state"] == "finished":
        line += "; finished"
    elif s["state"] == "stopped":
        line += "; stopped short of its budget (evens run --resume RUN_DIR goes on)"
    elif s["per_minute_recent"] is None:
        line += "; this job has not written a checkpoint yet"
    else:
        line += f"; {s['per_minute_recent']:.1f} per minute over the last {_duration(s['recent_seconds'])}"
        if s["eta_seconds"] is not None and done < budget:
            line += f", about {_duration(s['eta_seconds'])} to go at that rate"
        elif done < budget:
            line += ", so no estimate of the time to go"
    if s["per_minute_overall"] is not None:
        line += f"; {s['per_minute_overall']:.1f} per minute of searching overall"
    return line


def _workers_line(s: dict) -> str:
    of = f" of {s['workers']}" if s["workers"] else ""
    if s["workers_training"] is None:
        doing = f"{s['workers']} worker(s)" if s["workers"] else "workers unknown"
    elif s["state"] == "running":
        doing = f"{s['workers_training']}{of} training, {s['tasks_queued']} task(s) queued behind them"
        longest = s["longest_training"]
        if longest:
            doing += f"; the longest, #{longest['id']} on rank {longest['rank']}, for {_duration(longest['seconds'])}"
    elif s["workers_training"]:
        doing = f"{s['workers_training']} training(s) were out when the last job ended (they are redone on resume)"
    else:
        doing = "none training"
    return f"workers (at the last checkpoint): {doing}; utilization {100 * s['worker_utilization']:.1f} % over {s['sessions']} session(s)"


def _job_facts(holder: dict[str, str]) -> dict[str, str] | None:
    """What status shows of a lock file's holder, or None for no holder."""
    return {k: holder[k] for k in ("host", "pid", "started", "slurm_job") if k in holder} if holder else None


def _where(job: dict[str, str]) -> str:
    return f"host {job.get('host', '?')}, process {job.get('pid', '?')}" + (f", Slurm job {job['slurm_job']}" if "slurm_job" in job else "")


def format_status(s: dict) -> str:
    if s["state"] == "starting":
        return (f"{s['run_dir']}: a job holds the run ({_where(s['job'])}, since {s['job'].get('started', '?')}); it is starting "
                "and has written no checkpoint yet")
    metric = s["metric"]
    if s["job"]:
        held = f"a job holds the run ({_where(s['job'])}, since {s['job'].get('started', '?')})"
    elif s.get("ended_job"):
        held = f"no job holds the run (the last, {_where(s['ended_job'])}, ended without letting it go: killed?)"
    else:
        held = "no job holds the run"
    lines = [f"{s['run_dir']}: {held}; last checkpoint {_duration(s['checkpoint_age_seconds'])} ago",
             _evaluations_line(s), _workers_line(s)]
    if s.get("folds"):
        lines.append(_folds_line(s))
    if s.get("promotion"):
        lines.append(format_halving(Halving.from_dict(s["promotion"])))
    word = ChosenOn.from_dict(s["chosen_on"]).word if s.get("chosen_on") else "val"
    if s["best"]:
        best = BestNetwork.from_dict(s["best"])
        lines.append(f"best network: #{best.id} {_scores(best, metric, word)}")
    if s["ensemble"]:
        e = EnsembleFacts.from_dict(s["ensemble"])
        lines.append(f"ensemble: {counted(len(set(e.members)), 'network')} ({e.method}), {_scores(e, metric, word)}")
    failures = ", ".join(f"{n} {k}" for k, n in sorted(s["failures"].items()))
    lines.append(f"not ok: {failures}" if failures else "not ok: none")
    return "\n".join(lines)


def status_command(run_dir: str, as_json: bool = False) -> str:
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory")
    s = status(run_dir)
    return json.dumps(s, indent=2, sort_keys=True, default=str) if as_json else format_status(s)
