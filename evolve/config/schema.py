"""Run configuration: frozen dataclasses with defaults, read from TOML, overridden by ``--set``.

::

    cfg = load_config("examples/digits.toml", ["search.evaluations=40", "data.path=/x.h5"])
    cfg.search.evaluations   # 40

Overrides are dotted keys; the value is read as a TOML literal (``40``, ``1e-3``,
``true``, ``[16, 32]``) and otherwise taken as a plain string (``/x.h5``). An
unknown key or a value of the wrong type is a :class:`ConfigError` naming it.
Paths in a config file (``data.path``, ``model.path``) are relative to the file's
folder; paths given with ``--set`` are relative to the current directory.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field, fields

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from data_bcast.options import MODES as LOAD_MODES
from data_bcast.options import LoadOptions
from ensemble.problem import METRICS
from ensemble.references import is_reference
from ensemble.select import select_ensemble
from evolve.errors import ConfigError
from evolve.search import presets
from evolve.search.optuna_strategy import SAMPLERS
from evolve.search.registry import check as check_strategy
from evolve.search.registry import names as strategy_names
from evolve.search.space import DEFAULT_SPACE, TRAINING_GENES, SearchSpace
from evolve.search.space_config import parse_space


@dataclass(frozen=True)
class DataConfig:
    """Where the data is, and how it is split and sent to every rank."""

    # Besides the path, the fields of data_bcast's LoadOptions, whose defaults these are: passed whole to the broadcast.

    path: str = "data/digits.h5"  # the HDF5 data file (docs/data-format.md): in a config file, relative to its folder; stored absolute in the run
    val_fraction: float = LoadOptions.val_fraction  # held out of train when the file has no 'val'
    test_fraction: float = LoadOptions.test_fraction  # held out of train when the file has no 'test'
    split_seed: int = LoadOptions.split_seed  # seeds which rows of train are held out for val/test
    chunk_mb: int = LoadOptions.chunk_mb  # the broadcast sends the data in chunks of this many MiB
    read_threads: int = LoadOptions.read_threads  # threads rank 0 reads the file with (0: one per core it may run on, at most 8); they speed arrays stored contiguous and uncompressed
    shared_memory: bool = LoadOptions.shared_memory  # one host copy per node (a /dev/shm file the node's ranks map, unlinked at once)
    allow_external: bool = LoadOptions.allow_external  # read datasets whose data lives in other files (external links, virtual, external storage)
    mode: str = LoadOptions.mode  # "replicate": every node holds all of train; "shard": each node a disjoint 1/nodes of train, for data beyond a node's memory (val/test stay whole; docs/data-format.md)
    folds: int | str = "auto"  # cross-validation: each network trained k times, each without one fold of the training rows, chosen and ensembled on its out-of-fold predictions over all of them (docs/folds.md); 0: a val split instead; "auto": 5 folds on a file without its own val split and under 1,000 training rows, else 0


    @property
    def fold_count(self) -> int:
        """The folds as a number: 0 without cross-validation, and while ``"auto"`` waits for the data (evolve.app.run.prepare)."""
        return self.folds if isinstance(self.folds, int) else 0


@dataclass(frozen=True)
class SearchConfig:
    evaluations: int = 40  # total networks trained, across resumes
    metric: str = "auto"  # what the search optimises on the validation split: "auto" (accuracy; regression: rmse), accuracy, balanced_accuracy, macro_f1, log_loss; rmse, mae, r2; or "module:function" (docs/custom-models.md)
    mode: str = "async"  # the strategy: "async" (steady state, no worker waits), "generational" (a barrier per generation), "nsga2" (two objectives), or "optuna" (an Optuna sampler, search.sampler; needs evens[optuna])
    sampler: str = "tpe"  # search.mode = "optuna": Optuna's "tpe" (multivariate), "gp" (Gaussian process), "cmaes" or "random"
    second_objective: str = "params"  # nsga2's objective to minimise beside the fitness: "params" or "latency" (us per sample)
    population: int = 10  # individuals the GA breeds from (async: the steady-state pool; generational and nsga2: each generation)
    seed: int = 0  # seeds the search: the same seed and config propose the same networks
    tournament: int = 3  # individuals per tournament when choosing a parent
    crossover_prob: float = 0.7  # chance that a child is bred by crossover of two parents
    mutation_prob: float = 0.1  # chance that each gene of a child is mutated (small: children stay near their good parents)
    mutation_eta: float = 8.0  # polynomial mutation: larger is more local
    breeding: str = "blind"  # "blind" (each child as the operators draw it) or "model": async and generational send the most promising of `brood` bred candidates per child, by a surrogate (extra trees) of the results so far
    selection: str = "fitness"  # what parents and survivors are chosen by: "fitness", or "ensemble" (async and generational: each one's value to the run's current ensemble, its validation log-loss or RMSE with the network as one more pick)
    brood: int = 4  # model breeding: candidates bred and ranked per child sent (larger exploits the model harder)
    checkpoint_seconds: float = 10.0  # at most this long between checkpoint writes
    early_stopping: bool = True  # stop trainings below the median of earlier ones (async mode only; with promotion only if stage_early_stopping)
    promotion: bool = False  # successive halving: each network trains to its first rung, and on to the next only if it is in the best 1/eta there: as results come (async, optuna: ASHA), or at each generation's barrier (generational; nsga2 by Pareto rank)
    eta: int = 3  # promotion: the reduction factor between rungs (the best 1/eta go on, each rung eta times the one below)
    min_budget: float = 0.111  # promotion: the first rung, as a share of each network's planned epochs (rungs at min_budget x eta^i, then the whole training)
    stage_early_stopping: bool = False  # promotion with early_stopping: the median rule also stops a stage below the median of earlier networks at the same epoch (each network's epochs counted once); off: promotion replaces the rule
    early_stopping_warmup: int = 2  # never stop a training before this many epochs
    eval_timeout_seconds: float = 0.0  # stop a training after this many seconds (recorded as "timeout"); 0: no limit
    drain_seconds: float = 60.0  # after SIGUSR1 (Slurm's early warning) or SIGINT, wait this long for running trainings (recorded) before the checkpoint and exit 75; a second signal ends the wait
    term_drain_seconds: float = 20.0  # the same after SIGTERM (preemption, scancel, a time limit without warning): keep it under Slurm's KillWait (default 30 s), after which SIGKILL ends the job
    hang_seconds: float = 120.0  # a worker silent for eval_timeout_seconds plus this long is reported hung and the job ends (exit 69); 0, or no time limit: no hang detection
    prefetch: int = 1  # async mode over MPI: tasks queued on each worker behind the one it trains, started the moment it reports instead of after the master's answer (0: each task goes out when its worker is free)


@dataclass(frozen=True)
class EnsembleConfig:
    size: int = 5  # picks of one greedy pass (with replacement; bags pool up to bags x size) or members (top_k)
    candidates: int = 32  # the hall of fame: the best networks kept with their weights
    method: str = "greedy"  # "greedy" (Caruana's forward selection) or "top_k"
    criterion: str = "auto"  # what greedy selection maximises on the validation split: "accuracy" (ties: lower log-loss), "loss" (log-loss; regression: RMSE either way), "metric" (search.metric); "auto": metric if search.metric is set, else accuracy
    bags: int = 8  # greedy selection on this many random halves of the candidates, their picks pooled (0: once, on all); 8: measured best (docs/benchmarks.md)
    min_members: int = 1  # greedy: at least this many distinct networks, when they cost nothing in validation loss (log-loss; RMSE)
    refit: bool = False  # with data.folds: each network is also trained once on every training row (one more task), and that model, not its fold models averaged, is its member; it is chosen out of fold all the same


@dataclass(frozen=True)
class TrainConfig:
    device: str = "auto"  # "auto", "cpu" or "cuda"
    threads: int = 0  # torch CPU threads per worker; 0: `OMP_NUM_THREADS` where it is set (yours, or srun's from `--cpus-per-task`), else `SLURM_CPUS_PER_TASK`, else the cores the rank may run on divided among the training ranks that may run on them (all the node's where none is bound; one where srun binds each task to its own cores)
    precision: str = "fp32"  # "fp32", "tf32" (GPU matrix units) or "bf16" (autocast); see docs/gpu.md
    workers_per_gpu: int = 0  # 0: a node's workers share its GPUs round robin; k: k per GPU, more on one GPU is an error
    loss: str = "auto"  # the training loss: "auto" (cross_entropy; regression: mse), cross_entropy or focal; mse, mae or huber; or "module:function" (docs/custom-models.md)
    class_weights: str = "none"  # "balanced": a classifier's loss weighs each class by its inverse frequency in the training split
    max_host_memory_gb: float = 0.0  # with isolation "process": a training whose process holds more (anonymous resident memory, or data it asks for past this) is stopped and recorded "crashed" with "memory", before the node's OOM killer wakes; 0: no limit
    isolation: str = "process"  # "process": a worker rank trains in a process of its own, so a training that dies (a signal, the OOM killer) or passes its time limit (plus 5 s) is recorded and the job goes on; "none": in the rank itself (a training that dies ends the job)
    fork_server: str = "auto"  # with isolation "process": "on": a node's training processes are forked from one server process that imported torch once (no import per process, at the start or after a training dies: docs/architecture.md); "off": each is a fresh interpreter; "auto": on where no GPU is visible or the device is "cpu"


@dataclass(frozen=True)
class ModelConfig:
    """A user's own network instead of the built-in families (docs/custom-models.md)."""

    builder: str = ""  # "module:function" called with (genes, sample_shape, outputs) for a torch.nn.Module; "": the built-in families
    path: str = ""  # a folder added to sys.path on every rank, so that your modules (the builder's, a metric's) import from it: in a config file, relative to its folder; stored absolute in the run
    check_seconds: float = 60.0  # the master's check of your code (a builder's network for the middle genome, a metric, a loss), in a process of its own: longer is a hang, and the job ends in one line


@dataclass(frozen=True)
class TrackConfig:
    """Experiment trackers: what the master also sends them, into the run directory (README)."""

    tensorboard: bool = False  # every evaluation (its genes, metrics and curve) and the ensemble, for TensorBoard, in RUN_DIR/tensorboard/: tensorboard --logdir RUN_DIR/tensorboard (needs pip install tensorboard, or the extra evens[tensorboard])


@dataclass(frozen=True)
class Config:
    """A run's configuration. ``space`` is the search space, or None while a preset waits for the data:
    ``preset`` then says which ("auto" or a name) and ``space_table`` holds the genes that replace the
    preset's; :meth:`resolved` makes the space from the data."""

    data: DataConfig = field(default_factory=DataConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    ensemble: EnsembleConfig = field(default_factory=EnsembleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    space: SearchSpace | None = None
    preset: str = "auto"  # "" once the space is made
    space_table: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        d = {s: dataclasses.asdict(getattr(self, s)) for s in SECTIONS}
        d["space"] = self.space.to_config() if self.space is not None else {"preset": self.preset, **self.space_table}
        return d

    def choose_ensemble(self, members, problem, val_y, test_y=None, **ensemble):
        """The ensemble this config's ``[ensemble]`` asks for (keys in ``ensemble`` replace its own), chosen
        from ``members`` on the validation split (:func:`ensemble.select.select_ensemble`); None if there are none."""
        ens = dataclasses.replace(self.ensemble, **ensemble)
        criterion = ens.criterion if ens.criterion != "auto" else "metric" if self.search.metric != "auto" else "accuracy"
        return select_ensemble(list(members), problem, val_y, test_y, ens.method, ens.size, criterion=criterion, bags=ens.bags,
                               seed=self.search.seed, min_members=ens.min_members)

    def resolved(self, facts: presets.DataFacts) -> tuple[Config, dict | None]:
        """This config with its search space made for the data: a preset's table (the one ``auto`` chooses,
        or the one named) under the config's own genes. Also what was chosen and why, for the run's
        record (None for a config's own space)."""
        if self.space is not None:
            return self, None
        if self.model.builder:  # the user's genes as declared, the training genes the table leaves out scaled to the data
            space = parse_space({**presets.training(facts), **self.space_table}, self.model.builder)
            chosen = {"asked": "auto", "chosen": "builder", "why": f"{facts.fit_rows} rows per training", "overrides": sorted(self.space_table)}
            return dataclasses.replace(self, space=space, preset="", space_table={}), chosen
        name, why = presets.choose(facts) if self.preset == "auto" else (self.preset, "named in the config")
        space = parse_space({**presets.table(name, facts), **self.space_table})
        chosen = {"asked": self.preset, "chosen": name, "why": why, "overrides": sorted(self.space_table)}
        return dataclasses.replace(self, space=space, preset="", space_table={}), chosen

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def with_overrides(self, overrides: list[str]) -> Config:
        """This config with ``KEY=VALUE`` overrides applied and checked, as ``--set`` applies them."""
        return config_from_dict(apply_overrides(self.to_dict(), overrides))


SECTIONS = {"data": DataConfig, "search": SearchConfig, "ensemble": EnsembleConfig, "train": TrainConfig, "model": ModelConfig, "track": TrackConfig}

# (low, high) bounds, inclusive; None for open.
_BOUNDS = {
    "data.val_fraction": (0.0, 1.0),
    "data.test_fraction": (0.0, 1.0),
    "data.chunk_mb": (1, None),
    "data.read_threads": (0, 256),
    "data.split_seed": (0, None),
    "search.seed": (0, None),
    "search.evaluations": (1, None),
    "search.population": (2, None),
    "search.tournament": (1, None),
    "search.crossover_prob": (0.0, 1.0),
    "search.mutation_prob": (0.0, 1.0),
    "search.mutation_eta": (0.0, None),
    "search.checkpoint_seconds": (0.0, None),
    "search.early_stopping_warmup": (1, None),
    "search.eval_timeout_seconds": (0.0, None),
    "search.drain_seconds": (0.0, None),
    "search.term_drain_seconds": (0.0, None),
    "search.hang_seconds": (0.0, None),
    "model.check_seconds": (1.0, None),
    "search.prefetch": (0, 8),
    "search.brood": (1, 256),
    "search.eta": (2, 100),
    "search.min_budget": (1e-6, 1.0),
    "ensemble.size": (1, 1024),  # the ensemble's exact sums hold up to 1,024 members (ensemble.combine)
    "ensemble.candidates": (1, 1024),
    "ensemble.bags": (0, 64),
    "ensemble.min_members": (1, 1024),
    "train.threads": (0, None),
    "train.max_host_memory_gb": (0.0, None),
    "train.workers_per_gpu": (0, None),
}
_CHOICES = {"data.mode": LOAD_MODES, "train.device": ("auto", "cpu", "cuda"), "train.precision": ("fp32", "tf32", "bf16"), "train.class_weights": ("none", "balanced"), "train.isolation": ("process", "none"), "train.fork_server": ("auto", "on", "off"), "ensemble.method": ("greedy", "top_k"), "ensemble.criterion": ("auto", "accuracy", "loss", "metric"), "search.mode": strategy_names(), "search.sampler": SAMPLERS, "search.breeding": ("blind", "model"), "search.selection": ("fitness", "ensemble"),
            "search.second_objective": ("params", "latency")}


def _type_name(t: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[t]


MAX_FOLDS = 20


def _check_value(key: str, value, expected: type):
    if key == "data.folds":  # "auto" or a number of folds
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and (value == 0 or 2 <= value <= MAX_FOLDS)):
            return value
        raise ConfigError(f"data.folds must be \"auto\", 0 (a val split) or a number of folds from 2 to {MAX_FOLDS}, got {value!r}")
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ConfigError(f"{key} must be {_type_name(expected)}, got {value!r}")
    if expected is float and not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    low, high = _BOUNDS.get(key, (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"{key} must be {bounds}, got {value!r}")
    if key in _CHOICES and value not in _CHOICES[key]:
        raise ConfigError(f"{key} must be one of {', '.join(_CHOICES[key])}, got {value!r}")
    return value


def _build_section(name: str, cls: type, raw: dict):
    if not isinstance(raw, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown key '{name}.{key}' (known: {', '.join(known)})")
    kwargs = {k: _check_value(f"{name}.{k}", v, type(getattr(cls(), k))) for k, v in raw.items()}
    return cls(**kwargs)


def config_from_dict(raw: dict) -> Config:
    """Validate a nested dict (as read from TOML or JSON) into a :class:`Config`."""
    for key in raw:
        if key not in SECTIONS and key != "space":
            raise ConfigError(f"unknown section '{key}' (known: {', '.join([*SECTIONS, 'space'])})")
    sections = {name: _build_section(name, cls, raw.get(name, {})) for name, cls in SECTIONS.items()}
    ens = sections["ensemble"]
    if ens.candidates < ens.size:
        raise ConfigError(f"ensemble.candidates ({ens.candidates}) must be at least ensemble.size ({ens.size})")
    loss = sections["train"].loss
    if loss != "auto" and loss not in ("cross_entropy", "focal", "mse", "mae", "huber") and not is_reference(loss):
        raise ConfigError(f"train.loss must be auto, cross_entropy, focal, mse, mae, huber, or a function as 'module:function', got {loss!r}")
    metric = sections["search"].metric
    if metric != "auto" and metric not in {m for by_kind in METRICS.values() for m in by_kind} and not is_reference(metric):
        known = ", ".join(m for by_kind in METRICS.values() for m in by_kind)
        raise ConfigError(f"search.metric must be auto, {known}, or a function as 'module:function', got {metric!r}")
    builder = sections["model"].builder
    if builder and not is_reference(builder):
        raise ConfigError(f"model.builder must be 'module:function' (e.g. 'mynets.volumes:build'), got {builder!r}")
    if sections["model"].path and not builder and not is_reference(metric) and not is_reference(loss):
        raise ConfigError("model.path is where your code's modules lie (model.builder, a 'module:function' metric or loss); it names none")
    search = sections["search"]
    problem = check_strategy(search.mode, search)
    if problem:
        raise ConfigError(problem)
    if search.promotion and sections["ensemble"].refit:
        raise ConfigError("ensemble.refit does not work with search.promotion: a stage to a rung has no refit to pause")
    return Config(**_space(raw, sections["model"].builder), **sections)


def _space(raw: dict, builder: str = "") -> dict:
    """A config's search space: its own (a [space] table without ``preset``: the classic space under its
    genes) or a preset's, made later from the data (no [space] table, or ``space.preset``). With a model
    builder, the table's genes (none: the training genes alone), and never a preset."""
    table = raw.get("space", {})
    if not isinstance(table, dict):
        raise ConfigError("[space] must be a table")
    if builder:
        if table.get("preset", "auto") != "auto":
            raise ConfigError("space.preset: presets are for the built-in families; with model.builder, declare your genes in [space]")
        genes = {k: v for k, v in table.items() if k != "preset"}
        parse_space(genes, builder)  # the genes are checked either way
        if all(name in genes for name in TRAINING_GENES):
            return {"space": parse_space(genes, builder), "preset": ""}
        return {"space": None, "preset": "auto", "space_table": genes}  # training genes scaled to the data (resolved)
    if "space" not in raw:
        return {"space": None, "preset": "auto"}
    genes = {k: v for k, v in table.items() if k != "preset"}
    own = parse_space(genes)  # the genes are checked either way
    asked = table.get("preset", "classic")
    if asked not in presets.ASKS:
        raise ConfigError(f"space.preset must be one of {', '.join(presets.ASKS)}, got {asked!r}")
    if asked == "classic":
        return {"space": own, "preset": ""}
    return {"space": None, "preset": asked, "space_table": genes}


def parse_value(text: str):
    """A ``--set`` value: a TOML literal if it is one, else the text itself."""
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if list(parsed) != ["v"]:  # "1\nsearch.seed = 2": the rest would be dropped without a word
        raise ConfigError(f"--set value {text!r} holds more than one value; quote a text value")
    return parsed["v"]


OVERRIDE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_-]*)+")  # section.key, space.gene, space.gene.field


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``KEY=VALUE`` strings (dotted keys) to a nested dict, returning a new dict."""
    raw = json.loads(json.dumps(raw))  # a deep copy of plain data
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        if not OVERRIDE_KEY.fullmatch(key):
            raise ConfigError(f"--set {item!r}: {key!r} is not a dotted config key (section.key, as search.evaluations)")
        parts = key.split(".")
        section = parts[0]
        if section not in SECTIONS and section != "space":
            raise ConfigError(f"unknown key '{key}' (sections: {', '.join([*SECTIONS, 'space'])})")
        if len(parts) < 2 or (section in SECTIONS and len(parts) != 2):
            raise ConfigError(f"unknown key '{key}'")
        if section == "space" and len(parts) == 3 and isinstance(DEFAULT_SPACE.get(parts[1]), dict):
            raw.setdefault("space", {}).setdefault(parts[1], dict(DEFAULT_SPACE[parts[1]]))
        node = raw
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ConfigError(f"cannot set '{key}': '{p}' is {child!r}, not a table; set the whole value instead")
            node = child
        node[parts[-1]] = parse_value(text.strip())
    return raw


def load_config(path: str | None, overrides: list[str] = ()) -> Config:
    """Read ``path`` (TOML; None means defaults only) and apply ``overrides``."""
    raw: dict = {}
    if path is not None:
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: no such config file")
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read ({exc})") from None
    if path is not None:
        raw = _paths_beside(raw, os.path.dirname(os.path.abspath(path)))
    try:
        return config_from_dict(apply_overrides(raw, list(overrides)))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if path else str(exc)) from None


FILE_PATHS = (("data", "path"), ("model", "path"))  # paths a config may hold: read relative to the config file's folder


def _paths_beside(raw: dict, folder: str) -> dict:
    """``raw`` with the relative paths it holds (:data:`FILE_PATHS`) made relative to ``folder``, the
    config file's own, as users expect of a file; a ``--set`` value stays relative to where evens runs."""
    out = dict(raw)
    for section, key in FILE_PATHS:
        table = out.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str) and table[key] and not os.path.isabs(table[key]):
            out[section] = {**table, key: os.path.normpath(os.path.join(folder, os.path.expanduser(table[key])))}
    return out


__all__ = ["Config", "ConfigError", "DEFAULT_SPACE", "apply_overrides", "config_from_dict", "load_config", "parse_value"]
