"""How bench_quality.py scores one search: its best network, its ensemble (chosen as every contender's
is, and six other ways, to choose the [ensemble] defaults by measurement), and its anytime curves."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
from quality_contenders import Outcome

from ensemble.hall_of_fame import Member, standing
from ensemble.train import DeviceData
from evolve.config.schema import Config


def choose_ensemble(members: list[Member], cfg: Config, data: DeviceData):
    """Every contender's ensemble, chosen alike on the validation split (a ``Selection``, or None)."""
    return cfg.choose_ensemble(members, data.problem, data.y["val"], data.y["test"])


def _usable(n: dict) -> bool:
    return n["status"] == "ok" and math.isfinite(n["fitness"])


def _standing(n: dict) -> tuple[float, float, int]:
    """A network's rank as evens ranks it in its hall of fame and report (ensemble.hall_of_fame.standing: fitness, then
    validation loss, then id), so that the best single network here is the one evens names best."""
    return standing(n["fitness"], n["loss"], n["id"])


def ensemble_test(members: list[Member], cfg: Config, data: DeviceData) -> tuple[float, int]:
    selection = choose_ensemble(members, cfg, data)
    return (selection.curve_test[selection.picks - 1], len(selection.ids)) if selection else (math.nan, 0)


# Ways to choose the ensemble, each tried on every search's hall of fame (no training: selection only), to
# choose the [ensemble] defaults by measurement: the criterion, bagging, and a minimum of distinct members.
SELECTIONS = {
    "accuracy": {"criterion": "accuracy", "bags": 0, "min_members": 1},
    "accuracy-min2": {"criterion": "accuracy", "bags": 0, "min_members": 2},
    "loss": {"criterion": "loss", "bags": 0, "min_members": 1},
    "loss-min2": {"criterion": "loss", "bags": 0, "min_members": 2},
    "accuracy-bags8": {"criterion": "accuracy", "bags": 8, "min_members": 1},
    "loss-bags8": {"criterion": "loss", "bags": 8, "min_members": 1},
}


def selections(members: list[Member], cfg: Config, data: DeviceData) -> dict[str, tuple[float, int]]:
    """Each way of :data:`SELECTIONS`: the ensemble's test metric and its distinct members."""
    return {name: ensemble_test(members, replace(cfg, ensemble=replace(cfg.ensemble, **kw)), data) for name, kw in SELECTIONS.items()}


def score(out: Outcome, cfg: Config, data: DeviceData) -> dict:
    """Best single network by validation (its val and test metric), the ensemble's test metric, and the costs."""
    done = [n for n in out.networks if _usable(n)]
    best = min(done, key=_standing) if done else None
    oracle = min if data.problem.better(0.0, 1.0) else max  # the best test metric of any network (chosen on test)
    ensemble, members = ensemble_test(out.hall.members, cfg, data)
    statuses = [n["status"] for n in out.networks]
    return {
        "best_val": best["val"] if best else math.nan,
        "best_test": best["test"] if best else math.nan,
        "best_id": best["id"] if best else -1,
        "best_family": best["family"] if best else "",
        "families": dict(sorted(Counter(n["family"] for n in out.networks).items())),
        "oracle_test": oracle((n["test"] for n in done), default=math.nan),
        "ensemble_test": ensemble,
        "ensemble_members": members,
        "wall": out.seconds,
        "cpu": out.cpu_seconds,
        "net_seconds": float(np.mean([n["cpu"] for n in out.networks])) if out.networks else math.nan,  # CPU s per network
        "max_net_seconds": max((n["cpu"] for n in out.networks), default=math.nan),
        "evaluations": len(out.networks),
        "ok": statuses.count("ok"),
        "stopped": statuses.count("stopped"),
        "paused": statuses.count("paused"),  # successive halving: stages that stayed at their rung
        "failed": len(statuses) - statuses.count("ok") - statuses.count("stopped") - statuses.count("paused"),
        "epochs": sum(n["epochs"] for n in out.networks),
        "selections": selections(out.hall.members, cfg, data),
    }


def anytime(out: Outcome, cfg: Config, data: DeviceData, every: int) -> dict:
    """The best network so far (by validation; its test metric) after each network, and the ensemble
    of the networks so far every ``every`` networks: its hall rebuilt from the kept predictions (the best
    ``ensemble.candidates`` of those networks, as the hall held them then) and chosen as at the end."""
    best_curve, best = [], None
    for n in out.networks:
        if _usable(n) and (best is None or _standing(n) < _standing(best)):
            best = n
        best_curve.append(best["test"] if best else math.nan)
    total = len(out.networks)
    at = sorted({*range(every, total + 1, every), total}) if total else []
    curve = []
    for k in at:
        prefix = sorted((n for n in out.networks[:k] if _usable(n) and n["id"] in out.preds), key=_standing)
        members = [Member(n["id"], n["fitness"], {}, {}, *out.preds[n["id"]], loss=n["loss"]) for n in prefix[: cfg.ensemble.candidates]]
        curve.append(ensemble_test(members, cfg, data)[0])
    spent = np.cumsum([n["cpu"] if math.isfinite(n["cpu"]) else 0.0 for n in out.networks]).tolist()  # CPU after each network
    return {"anytime_best": best_curve, "anytime_at": at, "anytime_ensemble": curve, "anytime_cpu": spent}
