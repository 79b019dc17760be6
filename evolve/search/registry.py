"""The search strategies, by name (``search.mode``), and what each one can do.

A strategy is a class with a ``name``, its :class:`Capabilities` and a classmethod ``create(context)`` that
builds it, new or carrying on from a run's state (:class:`Context`). It registers itself with
:func:`register` in its own module, and that module is listed in :data:`MODULES`; nothing else
changes to add one (docs/architecture.md, "Adding a strategy"). The engine, the config reader and the
report ask :func:`capabilities` instead of testing names. A strategy's module must import cheaply: an
optional dependency is imported in ``create``, so that every name is known to the config reader
whether or not the dependency is installed.
"""
from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from typing import Callable

from .records import Pending, Record
from .space import SearchSpace

# The modules whose strategies register themselves when first asked for (import order is listing order).
MODULES = ("evolve.search.strategy", "evolve.search.generational", "evolve.search.nsga2", "evolve.search.optuna_strategy")

Value = Callable[[list[int]], list[float]]  # ids -> each one's value to the ensemble, higher better


@dataclass(frozen=True)
class Capabilities:
    """What a strategy can do, which the engine, the config reader and the report go by.

    ``barrier``: ``ask`` may give None until a generation's results are all in (the engine then queues no
    task behind a busy worker: the generation's last children would wait while other workers idle).
    ``order_matters``: what it proposes depends on the order results arrive in. Only then may a result
    depend on arrival too (the median early-stopping rule); a strategy without it proposes the same
    networks for a seed on any number of workers. ``objectives``: 1, or 2 for (fitness,
    ``search.second_objective``) with a Pareto front. ``breeding``, ``selection``: the values of
    ``search.breeding`` and ``search.selection`` it supports. ``promotion``: it can promote a network to a
    longer training (successive halving)."""

    barrier: bool = False
    order_matters: bool = True
    objectives: int = 1
    breeding: tuple[str, ...] = ("blind",)
    selection: tuple[str, ...] = ("fitness",)
    promotion: bool = False
    needs: str = ""  # an optional dependency's extra (``pip install evens[<needs>]``), "" for none


@dataclass
class Context:
    """What a strategy is built from: the space and the search's settings (``params``: ``SearchConfig``, or
    ``GAParams`` in tests), the search's rng, the records and pending individuals so far, the strategy's
    own saved state (``{}`` for a new search), the second objective, ``value`` (what ensemble
    selection ranks by; None: fitness), and on a resume that read no history, the strategy's ``memory()``."""

    space: SearchSpace
    params: object
    rng: random.Random
    records: list[Record] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    objective: str = "params"
    value: Value | None = None
    # a resume from the state file alone (no records): what the strategy's memory() gave at the checkpoint
    memory: dict = field(default_factory=dict)


_STRATEGIES: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` the strategy ``cls.name``."""
    if not isinstance(getattr(cls, "capabilities", None), Capabilities) or not callable(getattr(cls, "create", None)):
        raise TypeError(f"{cls.__name__}: a strategy needs a Capabilities 'capabilities' and a classmethod 'create(context)'")
    if cls.name in _STRATEGIES and _STRATEGIES[cls.name] is not cls:
        raise ValueError(f"two strategies are named {cls.name!r}: {_STRATEGIES[cls.name].__name__} and {cls.__name__}")
    _STRATEGIES[cls.name] = cls
    return cls


def _loaded() -> dict[str, type]:
    """Every strategy, those of :data:`MODULES` in its order first, then any registered from elsewhere."""
    for module in MODULES:
        importlib.import_module(module)
    rank = {m: i for i, m in enumerate(MODULES)}
    return dict(sorted(_STRATEGIES.items(), key=lambda item: rank.get(item[1].__module__, len(MODULES))))


def names() -> tuple[str, ...]:
    """Every strategy's name, in registration order."""
    return tuple(_loaded())


def strategy_class(name: str) -> type:
    strategies = _loaded()
    if name not in strategies:
        raise ValueError(f"unknown search mode {name!r} (known: {', '.join(strategies)})")
    return strategies[name]


def capabilities(name: str) -> Capabilities:
    return strategy_class(name).capabilities


def check(name: str, params) -> str | None:
    """Why strategy ``name`` cannot run with ``params`` here (an unknown name, a missing optional dependency, a
    setting it does not support), or None: what the config reader asks before a search starts."""
    try:
        cls = strategy_class(name)
    except ValueError as exc:
        return str(exc)
    caps = cls.capabilities
    problem = _unsupported(name, caps, getattr(params, "breeding", "blind"), getattr(params, "selection", "fitness"))
    if problem:
        return problem
    if getattr(params, "promotion", False) and not caps.promotion:
        supported = [n for n, c in _loaded().items() if c.capabilities.promotion]
        return f"search.promotion works with search.mode {', '.join(supported)}, not \"{name}\""
    own = getattr(cls, "check", None)
    return own(params) if own is not None else None


def make_strategy(name: str, context: Context):
    """The strategy ``name``, new or carrying on from ``context.state``: checked against what it supports
    (ValueError naming the problem), then built."""
    cls = strategy_class(name)
    state, params, caps = context.state, context.params, cls.capabilities
    if state and state.get("mode") != name:
        raise ValueError(f"the run's strategy is {state.get('mode')!r}, not {name!r}")
    problem = _unsupported(name, caps, getattr(params, "breeding", "blind"), "ensemble" if context.value is not None else "fitness")
    if problem:
        raise ValueError(problem)
    return cls.create(context)


def _unsupported(name: str, caps: Capabilities, breeding: str, selection: str) -> str | None:
    """The line that says a breeding or selection is not one strategy ``name`` supports, or None."""
    for key, value, supported in (("breeding", breeding, caps.breeding), ("selection", selection, caps.selection)):
        if value not in supported:
            return f"search.{key} = \"{value}\" does not work with search.mode \"{name}\" (it supports {', '.join(supported)})"
    return None
