"""The report's summary, declared once: what ``evens report --json`` prints and ``summary.json`` holds.

:func:`evolve.app.presentation.report.summarize` builds a :class:`Summary`; the readers (report_text, status, plots, report) read its
fields, so a misspelt name is an AttributeError in the first test that reaches it. ``to_dict()`` is the JSON's dict, key
for key what the summary printed when it was a dict: a field marked :func:`omitted` is left out while it is None, and a
``metrics`` field's entries are keys of their own beside the fields. ``from_dict`` reads a dict of that JSON back, and
refuses a key its type does not declare; ``evens status`` reads its facts' parts of a summary back with it
(evolve.app.commands.status), and the tests read ``summary.json`` and ``evens report --json`` as the plain JSON users read.

What a summary carries from elsewhere stays a dict, its keys declared there: a network's metrics ("val_accuracy",
"test_rmse", "fold_std", "params": the problem's scores and the training's), its genes (the search space's), the run's
data and preset (RunInfo's), the ensemble's uncertainty (ensemble.combine.UNCERTAINTY) and calibration
(Problem.calibration).
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field, fields
from typing import Union, get_args, get_origin, get_type_hints

FACTS = dataclass(frozen=True, slots=True, kw_only=True)


def omitted():
    """A field the JSON leaves out while it is None (a fact that only some runs have)."""
    return field(default=None, metadata={"omit": True})


def flat():
    """A dict field whose entries are the JSON's keys, beside the fields (a network's metrics)."""
    return field(metadata={"flat": True})


class Facts:
    """``to_dict`` and ``from_dict`` by the fields of a dataclass of facts."""

    __slots__ = ()

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("flat"):
                out.update(value)
            elif value is not None or not f.metadata.get("omit"):
                out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, d: dict):
        hints = get_type_hints(cls)
        own = {f.name for f in fields(cls) if not f.metadata.get("flat")}
        rest = [f.name for f in fields(cls) if f.metadata.get("flat")]
        extra = {k: v for k, v in d.items() if k not in own}
        if extra and not rest:
            raise KeyError(f"{cls.__name__} has no field {', '.join(sorted(extra))}")
        values = {k: _typed(hints[k], v) for k, v in d.items() if k in own}
        values.update({name: extra for name in rest})
        return cls(**values)


def _plain(value):
    """A field's value as JSON holds it."""
    if isinstance(value, Facts):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _typed(hint, value):
    """A JSON value as the field typed ``hint`` holds it: facts, and lists and dicts of them, made again."""
    if value is None:
        return None
    origin, args = get_origin(hint), [a for a in get_args(hint) if a is not type(None)]
    if origin in (Union, types.UnionType):
        return _typed(args[0], value) if len(args) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Facts):
        return hint.from_dict(value)
    if origin is list:
        return [_typed(args[0], v) for v in value]
    if origin is dict:
        return {k: _typed(args[1], v) for k, v in value.items()}
    return value


@FACTS
class SearchMetric(Facts):
    name: str  # the metric the search optimised: "accuracy", "rmse", "balanced_accuracy", ..., or a user's "module:function"
    key: str  # its name among a network's metrics, after "val_" and "test_"
    higher_is_better: bool


@FACTS
class Hall(Facts):
    members: int  # networks the hall of fame keeps, with their weights
    capacity: int  # at most (ensemble.candidates)
    ids: list[int]  # their record ids, best first


@FACTS
class ChosenOn(Facts):
    rows: int  # the rows that decided which networks were kept and what the ensemble is
    folds: int  # data.folds (0: a validation split)
    split: str  # which rows, in words: "validation rows", or "training rows, out of fold"
    word: str  # what tables call them: "val", or "oof"
    accuracy_se_max: float | None = omitted()  # a classification's: the largest standard error of an accuracy on them


@FACTS
class EarlyStopping(Facts):
    stopped: int  # trainings stopped below the median of earlier ones
    epochs_saved: int  # the epochs they did not train
    epochs_trained: int  # the epochs trained, in all


@FACTS
class Rung(Facts):
    rung: int  # 0 is the first
    stages: int  # stages trained to it
    promoted: int  # of those, how many went on to the next


@FACTS
class Halving(Facts):
    eta: int  # search.eta: the best 1/eta of a rung go on
    min_budget: float  # search.min_budget: the first rung, as a share of a network's epochs
    rungs: list[Rung]
    stages: int  # stage records in all
    carried_on: int  # promotions that carried a paused training on
    trained_again: int  # promotions trained again from the start
    epochs_trained: int  # epochs trained, in all


@FACTS
class Curve(Facts):
    path: list[int]  # the record id picked at each step of the selection
    val: list[float]  # the metric on the rows chosen on after each pick
    test: list[float]  # ... and on the test split
    metric: str  # which metric: the search's key


@FACTS
class Scored(Facts):
    metrics: dict[str, float | None] = flat()  # "val_accuracy", "test_rmse", "fold_std", ...: None where R² is undefined

    def score(self, split: str, name: str) -> float | None:
        """``score("val", "accuracy")``: the metric ``val_accuracy``."""
        return self.metrics[f"{split}_{name}"]


@FACTS
class EnsembleFacts(Scored):
    method: str  # "greedy" or "top_k"
    size: int  # ensemble.size
    picks: int  # picks made (a network may be picked more than once)
    members: list[int]  # the networks' record ids
    weights: list[float]  # each one's share of the picks
    curve: Curve
    test_uncertainty: dict[str, float]  # the mean on test of each of ensemble.combine.UNCERTAINTY's
    test_calibration: dict[str, float] | None = omitted()  # a classification's: nll and ece on test (Problem.calibration)


@FACTS
class NetworkFacts(Scored):
    """A network's record as the report shows it: each of the record's one-value fields, and its metrics."""

    id: int  # its record id
    status: str  # how its training ended: "ok", for every network a summary shows
    fitness: float  # higher is better: the search metric, or minus it
    seconds: float  # training time on the worker
    epochs_done: int
    message: str  # why a training failed ("" for ok)
    operators: str  # what made it: "random", "crossover+mutation", "promotion", ...
    rung: int  # search.promotion: the rung it reached
    worker: int  # the MPI rank that trained it
    started: float  # wall-clock time it started (seconds since the epoch)
    finished: float  # ... and when its result arrived
    genome: dict  # its active genes, decoded (SearchSpace.decode)


@FACTS
class BestNetwork(NetworkFacts):
    network: int  # the record's network: the id of a promoted network's first stage (-1: this is it)
    test_calibration: dict[str, float] | None = omitted()  # a kept classification network's: nll and ece on test


@FACTS
class TopNetwork(NetworkFacts):
    network: str  # the network in a few words (report_text.describe)
    rank: int  # its place among the successful networks, 1 the best
    ensemble_weight: float  # its share of the ensemble's picks (0: not a member)


@FACTS
class ParetoMember(Facts):
    """A network on the Pareto front. The JSON names its cost by the objective: ``"params"`` or ``"latency_us"``."""

    id: int
    fitness: float
    objective: str  # the second objective's metric (evolve.search.pareto.OBJECTIVES): "params" or "latency_us"
    cost: float  # its value (lower is better)
    network: str  # the network in a few words
    genome: dict

    def to_dict(self) -> dict:
        return {"id": self.id, "fitness": self.fitness, self.objective: self.cost, "network": self.network, "genome": self.genome}

    @classmethod
    def from_dict(cls, d: dict) -> ParetoMember:
        (objective,) = set(d) - {"id", "fitness", "network", "genome"}
        return cls(id=d["id"], fitness=d["fitness"], objective=objective, cost=d[objective], network=d["network"], genome=d["genome"])


@FACTS
class Failure(Facts):
    count: int  # records of the kind
    example: str  # the first: "#12: its message"


@FACTS
class Summary(Facts):
    run_dir: str | None  # the run directory (None where none was named)
    problem: str  # "classification" or "regression"
    metric: str  # the headline of the tables and figures: "accuracy" or "rmse"
    search_metric: SearchMetric
    evaluations: int  # networks evaluated (with successive halving, a network's stages are one)
    budget: int  # search.evaluations
    status_counts: dict[str, int]  # records by status: "ok", "stopped", "timeout", "paused", ...
    pending: int  # individuals out at the checkpoint, not recorded
    wall_seconds: float  # time searched, over every session
    worker_utilization: float  # the workers' share of the time spent training, 0 to 1
    sessions: int  # jobs that ran the search
    space: dict | None  # the preset the search space was made from, and why (RunInfo.preset; None: the config's [space])
    data: dict  # the data file, its shapes, sizes and problem (RunInfo.data)
    hall_of_fame: Hall
    chosen_on: ChosenOn
    best: BestNetwork | None  # None: no network finished successfully
    ensemble: EnsembleFacts | None  # None: none chosen yet
    early_stopping: EarlyStopping | None = omitted()  # where a training was stopped below the median
    promotion: Halving | None = omitted()  # search.promotion's account
    pareto: list[ParetoMember] | None = omitted()  # a search of two objectives: its front, best fitness first
    top: list[TopNetwork] | None = omitted()  # evens report's: the best networks, and the ensemble's other members
    failures: dict[str, Failure] | None = omitted()  # evens report's: each status but ok, counted, with an example
