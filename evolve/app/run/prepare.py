"""What the master checks before any data moves: the config, the run directory, and, on a resume,
that the data and the search are the run's own."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from data_bcast.broadcast import SharedDataset
from data_bcast.h5file import DataError, inspect_file
from ensemble.problem import Problem
from evolve.app.infra.rundir import Claim, checkpoint_path, claim_default_run_dir, claim_run_dir
from evolve.app.infra.runlock import RunLock
from evolve.app.run.tracking import check_trackers
from evolve.config.schema import Config, load_config
from evolve.engine import memory
from evolve.engine.loop import uses_median_rule
from evolve.engine.state import SearchState
from evolve.errors import ConfigError, RunDirError
from evolve.runfile import checkpoint, genomes
from evolve.runfile.checkpoint import RunInfo
from evolve.runfile.tempfiles import remove_stale
from evolve.search.presets import DataFacts


@dataclass
class Prepared:
    """What the master decided before any data moved."""

    config: Config
    run_dir: str
    lock: RunLock  # held until the job ends: one job per run directory
    claim: Claim | None = None  # a new run's claim on its directory
    state: SearchState | None = None  # None for a new run
    info: RunInfo | None = None
    devices: list[dict] | None = None  # each worker's rank, host, device, name and UUID
    preset: dict | None = None  # the preset the search space was made from, and why (None: the config's own space)
    status_seconds: float = 60.0  # between status lines in batch output (evens run --status-seconds)

    def release(self) -> None:
        """Let the run directory go; a new run that never wrote a checkpoint leaves it as it was."""
        if self.claim is not None:
            self.claim.release()
        else:
            self.lock.release()


def prepare(config_path: str | None, overrides: list[str], out: str | None, resume: str | None) -> Prepared:
    """Validate the command line's config and run directory (master only).

    A new run claims its directory here (see :func:`claim_run_dir`), a resumed run locks its
    own; :func:`run` releases either when the job ends (a new run that never wrote a checkpoint
    leaves the directory as it found it).
    """
    if resume is None:
        if config_path is None and not overrides:  # (the Python API's config built in code comes as overrides)
            raise ConfigError("evens run needs a CONFIG file, or --resume RUN_DIR")
        config = resolve_folds(_absolute_data_path(load_config(config_path, overrides)))
        check_trackers(config)
        claim = claim_default_run_dir(config_path) if out is None else claim_run_dir(out)
        return Prepared(config, claim.path, claim.lock, claim)
    if out is not None and os.path.abspath(out) != os.path.abspath(resume):
        raise RunDirError("--out and --resume name different directories; a resumed run stays in its own")
    path = checkpoint_path(resume)
    lock = RunLock.acquire(resume)
    try:
        for folder in (resume, checkpoint.segments_folder(path)):  # what a killed writer left: ours to clear now
            if os.path.isdir(folder):
                remove_stale(folder)
        return _prepare_resume(config_path, overrides, resume, path, lock)
    except BaseException:
        lock.release()
        raise


AUTO_FOLDS = 5  # data.folds = "auto": this many folds ...
AUTO_FOLDS_UNDER = 1_000  # ... under this many training rows (study_folds.py: a gain of 0.7 points at 600 rows, one row at 1,198)


def resolve_folds(config: Config) -> Config:
    """The config with ``data.folds`` a number: "auto" is :data:`AUTO_FOLDS` for a file without its own val split
    and under :data:`AUTO_FOLDS_UNDER` training rows (those left after any test holdout), else 0. With folds no
    val split is carved (``data.val_fraction`` 0): every training row is chosen on, out of fold. ConfigError for
    folds the data cannot have; a file that cannot be read is left for the broadcast to describe."""
    data, folds = config.data, config.data.folds
    if folds == 0:
        return config
    try:
        plan = inspect_file(data.path, 0.0, data.test_fraction, data.split_seed, data.allow_external)
    except DataError:
        return replace(config, data=replace(data, folds=0)) if folds == "auto" else config  # the broadcast says what is wrong
    rows, own_val = plan.spec("train/y").shape[0], plan.sources["val"] == "file"
    if folds == "auto":
        folds = AUTO_FOLDS if not own_val and data.mode != "shard" and 2 * AUTO_FOLDS <= rows < AUTO_FOLDS_UNDER else 0
    elif own_val:
        raise ConfigError(f"data.folds = {folds} cross-validates the training rows, but {data.path} holds its own val split; "
                          "set data.folds = 0 to choose on that split, or write the file without it")
    elif data.mode == "shard":
        raise ConfigError(f"data.folds = {folds}: cross-validation needs every training row on every node, not data.mode = \"shard\"")
    elif rows < folds:
        raise ConfigError(f"data.folds = {folds} needs at least {folds} training rows; {data.path} has {rows}")
    return replace(config, data=replace(data, folds=folds, val_fraction=0.0 if folds else data.val_fraction))


def _absolute_data_path(config: Config) -> Config:
    """The config with absolute data and model paths, so that a resume from another directory finds the same files."""
    model = replace(config.model, path=os.path.abspath(config.model.path)) if config.model.path else config.model
    return replace(config, data=replace(config.data, path=os.path.abspath(config.data.path)), model=model)


def _prepare_resume(config_path: str | None, overrides: list[str], resume: str, path: str, lock: RunLock) -> Prepared:
    state, info = checkpoint.load(path, history=False)  # the state file alone; the history too only where the master needs it
    if config_path is not None:
        config = resolve_folds(_absolute_data_path(load_config(config_path, overrides)))
    else:
        try:
            config = info.config.with_overrides(overrides)
        except ConfigError as exc:
            raise ConfigError(f"{resume}: {exc}") from None
    stored = info.config
    facts = DataFacts(tuple(info.data["sample_shape"]), info.data["problem"]["kind"], info.data["sizes"]["train"], config.data.fold_count)
    config, _ = config.resolved(facts)
    if config.space != stored.space or list(info.gene_names) != list(config.space.names):
        raise ConfigError(f"{resume}: the search space differs from the run's; a resumed run keeps its space")
    for key in ("mode", "second_objective", "metric", "promotion", "eta", "min_budget"):  # (the rungs are the records')
        now, then = getattr(config.search, key), getattr(stored.search, key)
        if now != then:
            raise ConfigError(f"{resume}: search.{key} is {now!r}, but the run's is {then!r}; a resumed run keeps its {key.replace('_', ' ')}")
    for section, key in (("data", "folds"), ("ensemble", "refit")):
        now, then = getattr(getattr(config, section), key), getattr(getattr(stored, section), key)
        if now != then:
            raise ConfigError(f"{resume}: {section}.{key} is {now!r}, but the run's is {then!r}; a resumed run keeps its {key}")
    check_trackers(config)
    if not memory.resumable(state.memory, config.search, uses_median_rule(config.search)) or \
            not genomes.usable(genomes.genomes_path(path), memory.part(state.memory, "halving"), len(config.space.names)):
        # some part of this search carries on from the history (see evolve.engine.memory), or the paused networks' genomes
        # file is not the one the checkpoint counts on (gone, or changed): the history writes it again
        state, info = checkpoint.load(path)
    return Prepared(config, resume, lock, None, state, info, preset=info.preset)


def choice_labels(data: SharedDataset, config: Config) -> np.ndarray:
    """The labels of the rows networks and the ensemble are chosen on: the val split's, or with ``data.folds``
    the training split's (predicted out of fold). A run stores them as its ``val`` labels."""
    return data.arrays["train/y" if config.data.fold_count else "val/y"]


def data_facts(data: SharedDataset, problem: Problem) -> dict:
    plan = data.plan
    return {
        "path": plan.path,
        "sample_shape": list(plan.sample_shape),
        "x_dtype": plan.spec("train/x").dtype,
        "sizes": {s: plan.spec(f"{s}/y").shape[0] for s in ("train", "val", "test")},
        "problem": problem.to_dict(),
        "fingerprint": data.stats.get("fingerprint"),  # CRC-32s of every array sent (data_bcast.checksum.fingerprint)
    }


def check_same_data(info: RunInfo, data: SharedDataset, problem: Problem) -> None:
    facts = data_facts(data, problem)
    for key in ("sample_shape", "sizes"):
        if facts[key] != info.data[key]:
            raise DataError(f"{facts['path']}: {key} is {facts[key]}, but the run was made with {info.data[key]}")
    if facts["problem"]["kind"] != info.data["problem"]["kind"]:
        raise DataError(f"{facts['path']}: a {facts['problem']['kind']} dataset, but the run is {info.data['problem']['kind']}")
    then = info.data["fingerprint"]
    if facts["fingerprint"] != then:
        raise DataError(f"{facts['path']}: the data differs from the run's (fingerprint {facts['fingerprint']}, the run's {then}); "
                        "a resumed run trains on the same data (same file, split fractions and split seed)")
    if not (np.array_equal(choice_labels(data, info.config), info.val_y) and np.array_equal(data.arrays["test/y"], info.test_y)):
        raise DataError(f"{facts['path']}: the val/test labels differ from the run's; this is not the same data")
    if facts["problem"] != info.data["problem"]:
        raise DataError(f"{facts['path']}: the training targets differ from the run's ({facts['problem']} against {info.data['problem']})")


