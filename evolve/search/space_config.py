"""A config's ``[space]`` table read into a :class:`~evolve.search.space.SearchSpace`, with a one-line
:class:`~evolve.errors.ConfigError` for anything it cannot take.

The table declares what each gene of the :data:`~evolve.search.space.VOCABULARY` may take; a gene it
leaves out takes :data:`~evolve.search.space.DEFAULT_SPACE` (an optional gene, ``downsample``, is then not in
the space at all, and its default holds). Short forms::

    width = [16, 32, 64]                                  # choose one of these
    learning_rate = {low = 1e-4, high = 3e-2, log = true} # a range (int genes: integers)
    optimizer = "adam"                                    # fixed

and the full, typed form (every key but the type's own is optional)::

    [space.learning_rate]
    type = "float"              # float | int | categorical | bool
    low = 1e-4
    high = 3e-2
    log = true
    default = 1e-3              # the value while the gene is inactive
    when = { optimizer = ["sgd", "rmsprop"] }   # active only then

    [space.width]
    type = "categorical"
    choices = [16, 32, 64, 128]
    per_layer = true            # one gene per layer: width_1 ... width_<max depth>

The checks: types and bounds against the vocabulary, reversed bounds, empty or repeated choices,
unknown keys, types and genes, conditions on genes that do not exist, are per layer, or form a cycle.

With a model builder (``[model] builder``), every gene but the training genes is the user's own: any
name (a Python identifier), its type taken from its declaration (``type``, or what its choices or
bounds are), no built-in conditions, and none filled in from the default space; the training genes
left out take :data:`~evolve.search.space.DEFAULT_SPACE` as ever.
"""
from __future__ import annotations

import math
import re

from evolve.errors import ConfigError

from .space import DEFAULT_SPACE, TRAINING_GENES, VOCABULARY, Choice, Gene, Kind, Range, SearchSpace

TYPES = ("float", "int", "categorical", "bool")  # what a gene's ``type`` may say


def _where(name: str) -> str:
    return f"space.{name}"


def _legal_value(name: str, value, where: str | None = None, kind: Kind | None = None):
    """``value`` checked against ``kind``'s type and bounds (default: the vocabulary's, for gene ``name``); ints widen to floats."""
    kind, where = kind or VOCABULARY[name], where or _where(name)
    if kind.type == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind.type == "str":
        if not kind.legal and isinstance(value, str):
            return value  # a user's categorical gene: any strings
        if value not in kind.legal:
            raise ConfigError(f"{where}: unknown value {value!r} (known: {', '.join(kind.legal)})")
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind.type == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
        number = False
    if not number or not math.isfinite(value):
        raise ConfigError(f"{where}: expected {'an integer' if kind.type == 'int' else 'a finite number'}, got {value!r}")
    low, high = kind.bounds
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"{low} to {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{where}: {value!r} is out of range ({span})")
    return float(value) if kind.type == "float" else value


_KEYS = ("type", "low", "high", "log", "choices", "default", "when", "per_layer")


def _domain(name: str, spec, kind: Kind | None = None) -> tuple[Choice | Range, dict]:
    """The domain a declaration gives, and the declaration's other keys (default, when, per_layer)."""
    kind, where = kind or VOCABULARY[name], _where(name)
    spec = _full_form(spec)
    unknown = [k for k in spec if k not in _KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (a gene takes {', '.join(_KEYS)})")
    declared = spec.get("type")
    if declared is not None and declared not in TYPES:
        raise ConfigError(f"{where}.type: unknown type {declared!r} (known: {', '.join(TYPES)})")
    numeric = kind.type in ("int", "float")
    allowed = {"int": ("int", "categorical"), "float": ("float", "categorical"), "str": ("categorical",), "bool": ("bool", "categorical")}[kind.type]
    if declared is not None and declared not in allowed:
        raise ConfigError(f"{where}.type: {name} cannot be {declared}; it is {' or '.join(allowed)}")
    if declared == "categorical" and "choices" not in spec:
        raise ConfigError(f"{where}: a categorical gene needs choices = [...]")
    rest = {k: spec[k] for k in ("default", "when", "per_layer") if k in spec}
    if "choices" in spec:
        if any(k in spec for k in ("low", "high", "log")):
            raise ConfigError(f"{where}: give either choices or low/high, not both")
        options = spec["choices"]
        if not isinstance(options, list):
            options = [options]
        if not options:
            raise ConfigError(f"{where}: the list of choices is empty")
        checked = tuple(_legal_value(name, v, kind=kind) for v in options)
        if len(set(checked)) != len(checked):
            raise ConfigError(f"{where}: a choice is listed twice in {list(options)!r}")
        return Choice(checked), rest
    if declared == "bool" or (kind.type == "bool" and not any(k in spec for k in ("low", "high", "log"))):
        return Choice((False, True)), rest
    if not numeric:
        raise ConfigError(f"{where}: a range makes no sense here; give a list of choices")
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where}: a range needs low and high, as in {{low = ..., high = ..., log = false}}; or give choices")
    low, high = _legal_value(name, spec["low"], f"{where}.low", kind), _legal_value(name, spec["high"], f"{where}.high", kind)
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log must be true or false, got {log!r}")
    if low > high:
        raise ConfigError(f"{where}: low {low} is above high {high}")
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    return Range(low, high, log, kind.type == "int"), rest


def _conditions(name: str, raw, kinds: dict[str, Kind]) -> tuple:
    """A ``when`` table as ((gene, allowed values), ...), each gene one of ``kinds``; per-layer genes and
    cycles are checked by :func:`_check_conditions`."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{_where(name)}.when must be a table such as {{family = [\"cnn\"]}}, got {raw!r}")
    out = []
    for other, values in raw.items():
        if other not in kinds:
            raise ConfigError(f"{_where(name)}.when: no gene named {other!r} (known: {', '.join(kinds)})")
        if other == name:
            raise ConfigError(f"{_where(name)}.when: a gene cannot depend on itself")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{_where(name)}.when.{other}: the list of values is empty")
        if kinds[other].type == "float":
            raise ConfigError(f"{_where(name)}.when.{other}: a condition can test a categorical, int or bool gene, not a float one")
        out.append((other, tuple(_legal_value(other, v, f"{_where(name)}.when.{other}", kinds[other]) for v in values)))
    return tuple(sorted(out))


def _parse_gene(name: str, spec, kinds: dict[str, Kind], user: bool = False) -> list[Gene]:
    """One declared gene; ``kinds`` are every gene's of the space (its conditions may test them); ``user``:
    a user's own gene (a space with a model builder), whose kind comes from its declaration."""
    kind = kinds[name]
    domain, rest = _domain(name, spec, kind)
    default = _legal_value(name, rest["default"], f"{_where(name)}.default", kind) if "default" in rest else (
        domain.options[0] if isinstance(domain, Choice) and (len(domain.options) == 1 or user) else
        domain.decode(0.0) if user else kind.default
    )
    if user and isinstance(domain, Choice) and "default" in rest and default not in domain.options:
        raise ConfigError(f"{_where(name)}.default: {default!r} is not one of its choices")
    when = _conditions(name, rest["when"], kinds) if "when" in rest else ()
    per_layer = rest.get("per_layer", False)
    if not isinstance(per_layer, bool):
        raise ConfigError(f"{_where(name)}.per_layer must be true or false, got {per_layer!r}")
    if per_layer and not kind.per_layer:
        per = [n for n, k in VOCABULARY.items() if k.per_layer]
        raise ConfigError(f"{_where(name)}.per_layer: only {', '.join(per)} can differ per layer" + (" (not with a model builder)" if user else ""))
    return [Gene(name, domain, default, when, per_layer=per_layer, own=kind if user else None)]


def _full_form(spec) -> dict:
    """A declaration in its table form: a list is its choices, a single value its one choice."""
    return spec if isinstance(spec, dict) else {"choices": spec if isinstance(spec, list) else [spec]}


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def user_kind(name: str, spec) -> Kind:
    """The kind of a user's gene, from its declaration: ``type`` if given, else what its choices are (all
    bools: bool; all ints: int; numbers: float; else categorical strings) or its bounds (ints: int)."""
    where = _where(name)
    if not _IDENTIFIER.match(name):
        raise ConfigError(f"{where}: a gene's name must be a Python identifier (letters, digits, _)")
    spec = _full_form(spec)
    declared = spec.get("type")
    values = spec.get("choices") if "choices" in spec else [spec.get("low"), spec.get("high")]
    values = values if isinstance(values, list) else [values]
    plain = [v for v in values if v is not None]
    if declared == "bool" or (declared is None and plain and all(isinstance(v, bool) for v in plain)):
        return Kind("bool", default=False)
    if any(isinstance(v, bool) for v in plain) or any(not isinstance(v, (int, float, str)) for v in plain):
        raise ConfigError(f"{where}: its values must be all numbers, all strings or all true/false, got {values!r}")
    if declared == "int" or (declared is None and plain and all(isinstance(v, int) for v in plain)):
        return Kind("int")
    if declared == "float" or (declared is None and plain and all(isinstance(v, (int, float)) for v in plain)):
        return Kind("float")
    if declared not in (None, "categorical") or not all(isinstance(v, str) for v in plain):
        if declared == "categorical" and all(isinstance(v, (int, float)) for v in plain):
            return Kind("float") if any(isinstance(v, float) for v in plain) else Kind("int")
        raise ConfigError(f"{where}: its values must be all numbers, all strings or all true/false, got {values!r}")
    return Kind("str")


def _expand(genes: list[Gene], depth: Gene) -> list[Gene]:
    """Per-layer genes become one gene per layer (``width_1`` ... ``width_<max depth>``)."""
    deepest = max(depth.domain.values())  # depth is an int gene: its values are finite
    out = []
    for gene in genes:
        if not gene.per_layer:
            out.append(gene)
            continue
        for layer in range(1, deepest + 1):
            out.append(Gene(f"{gene.name}_{layer}", gene.domain, gene.default, gene.when, gene.name, layer == 1, layer))
    return out


def _check_conditions(genes: list[Gene]) -> None:
    """Conditions name genes of this space (not per-layer ones) and never form a cycle.

    A condition on a value its gene cannot take in this space is allowed (the gene is then never
    active): one config may serve data on which some families do not apply."""
    by_name = {g.name: g for g in genes}
    for gene in genes:
        for other, values in gene.when:
            target = by_name.get(other)
            if target is None:
                raise ConfigError(f"{_where(gene.base or gene.name)}.when: {other} is declared per layer; a condition cannot test it")
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(path[path.index(name):] + [name])
            raise ConfigError(f"space: conditions form a cycle ({cycle})")
        state[name] = 1
        for other, _ in by_name[name].conditions():
            visit(other, path + [name])
        state[name] = 2

    for gene in genes:
        visit(gene.name, [])


def parse_space(raw: dict, builder: str = "") -> SearchSpace:
    """Validate the ``[space]`` table; genes it leaves out take :data:`DEFAULT_SPACE` (an optional one is left out of
    the space: its default holds). With a model
    ``builder``, the genes other than the training genes are the user's own, and only those declared exist."""
    if not isinstance(raw, dict):
        raise ConfigError("[space] must be a table")
    if builder:
        return _parse_user_space(raw, builder)
    for name in raw:
        if name not in VOCABULARY:
            raise ConfigError(f"unknown gene 'space.{name}' (known: {', '.join(VOCABULARY)}; other names need a model builder, [model] builder)")
    genes = [g for name in VOCABULARY if name in raw or not VOCABULARY[name].optional
             for g in _parse_gene(name, raw[name] if name in raw else DEFAULT_SPACE[name], VOCABULARY)]
    depth = next(g for g in genes if g.name == "depth")
    genes = _expand(genes, depth)
    _check_conditions(genes)
    return SearchSpace(tuple(genes))


def _parse_user_space(raw: dict, builder: str) -> SearchSpace:
    """The space of a user's network: its declared genes by name (a run file's JSON keeps no order), then the training genes."""
    own = sorted(name for name in raw if name not in TRAINING_GENES)
    kinds = {**{name: user_kind(name, raw[name]) for name in own}, **{name: VOCABULARY[name] for name in TRAINING_GENES}}
    genes = [g for name in own for g in _parse_gene(name, raw[name], kinds, user=True)]
    genes += [g for name in TRAINING_GENES for g in _parse_gene(name, raw.get(name, DEFAULT_SPACE[name]), kinds)]
    _check_conditions(genes)
    return SearchSpace(tuple(genes), builder)
