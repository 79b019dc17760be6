"""A config's ``[space]`` table read into a :class:`~evolve.search.space.SearchSpace`, with a one-line
:class:`~evolve.errors.ConfigError` for anything it cannot take.

The table declares what each gene of the :data:`~evolve.search.space.VOCABULARY` may take; a gene it
leaves out takes :data:`~evolve.search.space.DEFAULT_SPACE`. Short forms::

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
"""
from __future__ import annotations

import math

from evolve.errors import ConfigError

from .space import DEFAULT_SPACE, GENE_NAMES, VOCABULARY, Choice, Gene, Range, SearchSpace

TYPES = ("float", "int", "categorical", "bool")  # what a gene's ``type`` may say


def _where(name: str) -> str:
    return f"space.{name}"


def _legal_value(name: str, value, where: str | None = None):
    """``value`` checked against the vocabulary's type and bounds for gene ``name``; ints widen to floats."""
    kind, where = VOCABULARY[name], where or _where(name)
    if kind.type == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind.type == "str":
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


def _domain(name: str, spec) -> tuple[Choice | Range, dict]:
    """The domain a declaration gives, and the declaration's other keys (default, when, per_layer)."""
    kind, where = VOCABULARY[name], _where(name)
    if not isinstance(spec, dict):
        spec = {"choices": spec if isinstance(spec, list) else [spec]}
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
        checked = tuple(_legal_value(name, v) for v in options)
        if len(set(checked)) != len(checked):
            raise ConfigError(f"{where}: a choice is listed twice in {list(options)!r}")
        return Choice(checked), rest
    if declared == "bool" or (kind.type == "bool" and not any(k in spec for k in ("low", "high", "log"))):
        return Choice((False, True)), rest
    if not numeric:
        raise ConfigError(f"{where}: a range makes no sense here; give a list of choices")
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where}: a range needs low and high, as in {{low = ..., high = ..., log = false}}; or give choices")
    low, high = _legal_value(name, spec["low"], f"{where}.low"), _legal_value(name, spec["high"], f"{where}.high")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log must be true or false, got {log!r}")
    if low > high:
        raise ConfigError(f"{where}: low {low} is above high {high}")
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    return Range(low, high, log, kind.type == "int"), rest


def _conditions(name: str, raw) -> tuple:
    """A ``when`` table as ((gene, allowed values), ...); the genes and values are checked by :func:`_check_conditions`."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{_where(name)}.when must be a table such as {{family = [\"cnn\"]}}, got {raw!r}")
    out = []
    for other, values in raw.items():
        if other not in VOCABULARY:
            raise ConfigError(f"{_where(name)}.when: no gene named {other!r} (known: {', '.join(GENE_NAMES)})")
        if other == name:
            raise ConfigError(f"{_where(name)}.when: a gene cannot depend on itself")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(f"{_where(name)}.when.{other}: the list of values is empty")
        if VOCABULARY[other].type == "float":
            raise ConfigError(f"{_where(name)}.when.{other}: a condition can test a categorical, int or bool gene, not a float one")
        out.append((other, tuple(_legal_value(other, v, f"{_where(name)}.when.{other}") for v in values)))
    return tuple(sorted(out))


def _parse_gene(name: str, spec) -> list[Gene]:
    domain, rest = _domain(name, spec)
    kind = VOCABULARY[name]
    default = _legal_value(name, rest["default"], f"{_where(name)}.default") if "default" in rest else (
        domain.options[0] if isinstance(domain, Choice) and len(domain.options) == 1 else kind.default
    )
    when = _conditions(name, rest["when"]) if "when" in rest else ()
    per_layer = rest.get("per_layer", False)
    if not isinstance(per_layer, bool):
        raise ConfigError(f"{_where(name)}.per_layer must be true or false, got {per_layer!r}")
    if per_layer and not kind.per_layer:
        per = [n for n, k in VOCABULARY.items() if k.per_layer]
        raise ConfigError(f"{_where(name)}.per_layer: only {', '.join(per)} can differ per layer")
    return [Gene(name, domain, default, when, per_layer=per_layer)]


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


def parse_space(raw: dict) -> SearchSpace:
    """Validate the ``[space]`` table; genes it leaves out take :data:`DEFAULT_SPACE`."""
    if not isinstance(raw, dict):
        raise ConfigError("[space] must be a table")
    for name in raw:
        if name not in VOCABULARY:
            raise ConfigError(f"unknown gene 'space.{name}' (known: {', '.join(GENE_NAMES)})")
    genes = [g for name in GENE_NAMES for g in _parse_gene(name, raw.get(name, DEFAULT_SPACE[name]))]
    depth = next(g for g in genes if g.name == "depth")
    genes = _expand(genes, depth)
    _check_conditions(genes)
    return SearchSpace(tuple(genes))
