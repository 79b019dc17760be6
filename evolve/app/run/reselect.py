"""Choosing a run's ensemble from its hall of fame: during the run, and again afterwards (`evens select`)."""
from __future__ import annotations

import os
import sys

from ensemble.hall_of_fame import HallOfFame
from ensemble.problem import problem_from_dict, user_metric
from ensemble.references import add_model_path, is_reference
from ensemble.select import Selection
from evolve.app.infra.rundir import SUMMARY_NAME, checkpoint_path, write_json
from evolve.app.infra.runlock import RunLock
from evolve.app.presentation.report import summarize
from evolve.app.presentation.summary import Summary
from evolve.errors import ConfigError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo


def select_for_run(hall: HallOfFame, info: RunInfo, method: str | None = None, size: int | None = None) -> Selection | None:
    """The ensemble the run's config asks for (or ``method``/``size``), chosen on the validation split."""
    ens = info.config.ensemble
    problem = problem_from_dict(info.data["problem"])
    return info.config.choose_ensemble(hall, problem, info.val_y, info.test_y, method=method or ens.method, size=size or ens.size)


class SelectionCache:
    """:func:`select_for_run`, computed again only when the hall of fame has changed.

    The hall changes rarely once a search has found good networks, and choosing costs
    (picks x candidates) scorings of the validation split, so every checkpoint can carry
    a ready-to-use ensemble at almost no cost.
    """

    def __init__(self, info: RunInfo):
        self.info = info
        self._key: tuple | None = None
        self._selection: Selection | None = None

    def __call__(self, hall: HallOfFame) -> Selection | None:
        key = tuple(hall.ids)
        if key != self._key:
            self._selection = select_for_run(hall, self.info)
            self._key = key
        return self._selection


def reselect(run_dir: str, model_path: str | None = None, **settings) -> Summary:
    """``evens select``: choose the run's ensemble again from its hall of fame, without training.

    ``settings``: ``[ensemble]`` keys to change (``method``, ``size``, ``criterion``, ``bags``,
    ``min_members``; None leaves one as the run has it). Stores the new choice and the settings in
    the run's config (so a resume keeps them), rewrites ``summary.json``, and returns the new summary.

    A run whose ``search.metric`` is a user's function is scored with it, and that is code a run file
    names: it is imported only when the user gives ``model_path`` (``--model-path``), the folder to import
    it from, and the import is said first; without it, a ConfigError in one line.
    """
    path = checkpoint_path(run_dir)
    with RunLock.acquire(run_dir):  # never while a job writes the run: it would overwrite this choice
        return _reselect(run_dir, path, model_path, {k: v for k, v in settings.items() if v is not None})


def _warn(line: str) -> None:
    print(f"evens: {line}", file=sys.stderr, flush=True)


def _reselect(run_dir: str, path: str, model_path: str | None, settings: dict) -> Summary:
    """The choice needs the hall of fame alone, and the summary the run's account (and a Pareto front's members): the
    whole history is read only from a run file that has no account."""
    # a damaged member is left out, by name, and the rest chosen from; the memory is written back as it is
    state, info = checkpoint.load(path, say=_warn, history=False, proposed_hashes=False)
    if state.tally is None:
        state, info = checkpoint.load(path, say=_warn)
    _user_metric(run_dir, problem_from_dict(info.data["problem"]).metric, model_path)
    changes = [f"ensemble.{k}={v!r}" for k, v in settings.items()]
    try:
        info.config = info.config.with_overrides(changes)
    except ConfigError as exc:
        raise ConfigError(f"{run_dir}: {exc}") from None
    state.selection = select_for_run(state.hall_of_fame, info)
    checkpoint.save(path, state, info)
    summary = summarize(state, info, run_dir, state.tally)  # (without an account: from the records, all read then)
    write_json(os.path.join(run_dir, SUMMARY_NAME), summary.to_dict())
    return summary


def _user_metric(run_dir: str, metric: str, model_path: str | None) -> None:
    """Import the run's metric when it is a user's function and the user said where from; ConfigError if not."""
    if not is_reference(metric):
        return
    module = metric.split(":")[0]
    if model_path is None:
        raise ConfigError(f"{run_dir}: the run's search.metric {metric} is code of yours, and evens select imports no code that a "
                          f"run file names unless told where from: give --model-path DIR, the folder of {module}")
    add_model_path(model_path)
    _warn(f"importing {module} (the run's metric {metric})")
    user_metric(metric)
