"""Summaries of a run, from its checkpoint alone: the best network and the ensemble."""
from __future__ import annotations

import json

import numpy as np

from ensemble.combine import accuracy, average_probabilities, uncertainty

from .. import checkpoint
from ..checkpoint import RunInfo
from ..master import SearchState
from ..space import parse_space
from .rundir import checkpoint_path


def summarize(state: SearchState, info: RunInfo, run_dir: str | None = None) -> dict:
    """The facts ``evens report --json`` prints: counts, best member, ensemble, time, utilization."""
    ok = [r for r in state.records if r.status == "ok"]
    statuses = {}
    for r in state.records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    summary = {
        "run_dir": run_dir,
        "evaluations": len(state.records),
        "budget": int(info.config["search"]["evaluations"]),
        "status_counts": statuses,
        "pending": len(state.pending),
        "wall_seconds": info.wall_seconds,
        "worker_utilization": state.utilization,
        "sessions": info.sessions,
        "data": info.data,
        "best": None,
        "ensemble": None,
    }
    if ok:
        best = max(ok, key=lambda r: (r.val_accuracy, -r.id))
        space = parse_space(info.config["space"]).for_sample_shape(tuple(info.data["sample_shape"]))
        summary["best"] = {
            "id": best.id,
            "val_accuracy": best.val_accuracy,
            "test_accuracy": best.test_accuracy,
            "seconds": best.seconds,
            "worker": best.worker,
            "genome": space.decode(best.genome),
        }
    members = state.members[: int(info.config["ensemble"]["size"])]
    if members:
        val = np.stack([m.val_probs for m in members])
        test = np.stack([m.test_probs for m in members])
        summary["ensemble"] = {
            "members": [m.id for m in members],
            "size": len(members),
            "val_accuracy": accuracy(average_probabilities(val), info.val_labels),
            "test_accuracy": accuracy(average_probabilities(test), info.test_labels),
            "test_uncertainty": uncertainty(test).means(),
        }
    return summary


def format_summary(s: dict) -> str:
    """A few human-readable lines."""
    lines = [
        f"evaluations: {s['evaluations']} of {s['budget']}"
        + "".join(f", {n} {k}" for k, n in sorted(s["status_counts"].items()) if k != "ok"),
        f"wall time: {s['wall_seconds']:.1f} s over {s['sessions']} session(s); worker utilization {100 * s['worker_utilization']:.1f} %",
    ]
    if s["best"]:
        b = s["best"]
        g = b["genome"]
        lines.append(
            f"best network #{b['id']}: val {b['val_accuracy']:.4f}  test {b['test_accuracy']:.4f}  "
            f"({g['family']} depth {g['depth']} width {g['width']} {g['activation']}, "
            f"{g['optimizer']} lr {g['learning_rate']:.2g}, {g['epochs']} epochs)"
        )
    if s["ensemble"]:
        e = s["ensemble"]
        u = e["test_uncertainty"]
        lines.append(
            f"ensemble of {e['size']} {e['members']}: val {e['val_accuracy']:.4f}  test {e['test_accuracy']:.4f}  "
            f"(test uncertainty: total {u['total']:.3f}, epistemic {u['epistemic']:.3f} nats)"
        )
    else:
        lines.append("no network finished successfully yet")
    if s["run_dir"]:
        lines.append(f"run directory: {s['run_dir']}")
    return "\n".join(lines)


def report(run_dir: str, as_json: bool = False) -> str:
    state, info = checkpoint.load(checkpoint_path(run_dir))
    summary = summarize(state, info, run_dir)
    return json.dumps(summary, indent=2, sort_keys=True) if as_json else format_summary(summary)
