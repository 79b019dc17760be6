"""The search space: typed, conditional genes, each decoded from a number in [0, 1].

A genome is a list of floats in [0, 1], one per gene, in :attr:`SearchSpace.names`
order. Decoding maps each float onto its gene's values, so DEAP's real-valued
operators (uniform crossover, bounded polynomial mutation) work on every gene
alike, categorical ones included.

The genes a network and its training understand are the :data:`VOCABULARY`:
architecture genes (``family``, ``depth``, ``width``, ``activation``, ``dropout``,
``kernel_size``, ``pooling``, ``norm``, ``residual``, ``cell``, ``bidirectional``)
and training genes (``optimizer``, ``learning_rate``, ``weight_decay``,
``schedule``, ``warmup``, ``batch_size``, ``epochs``). A config's ``[space]`` table
declares what each gene may take; a gene it leaves out takes :data:`DEFAULT_SPACE`.
Short forms::

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

A gene is *active* when every condition on it holds: its own ``when`` and the
built-in ones (``kernel_size`` and ``pooling`` only for ``cnn``; ``cell`` and
``bidirectional`` only for ``rnn``; ``activation``, ``norm`` and ``residual`` not for
``rnn``; ``width_i`` only when ``depth >= i``). A condition on a gene that is itself
inactive is false. An inactive gene takes its default when a genome is decoded
(:meth:`SearchSpace.key`), so genomes that differ only in inactive genes count as
the same network.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ensemble.specs import (
    ACTIVATION_NAMES, CELLS, FAMILIES, NORMS, OPTIMIZERS, POOLINGS, SCHEDULES, NetworkSpec, TrainSpec, families_for,
)

from .errors import ConfigError

TYPES = ("float", "int", "categorical", "bool")


@dataclass(frozen=True)
class Kind:
    """What a gene of the vocabulary is: its value type, its legal values, its default, and when it matters."""

    type: str  # "float", "int", "str" or "bool": the type of its values
    legal: tuple = ()  # the values a str gene may take
    bounds: tuple = (None, None)  # inclusive bounds of a numeric gene
    default: object = None
    needs: tuple = ()  # built-in conditions: (gene, allowed values)
    per_layer: bool = False  # may be declared per layer


_NOT_RNN = (("family", ("mlp", "cnn")),)
VOCABULARY: dict[str, Kind] = {
    "family": Kind("str", FAMILIES, default="mlp"),
    "depth": Kind("int", bounds=(1, 64), default=2),
    "width": Kind("int", bounds=(1, None), default=64, per_layer=True),
    "activation": Kind("str", ACTIVATION_NAMES, default="relu", needs=_NOT_RNN),
    "dropout": Kind("float", bounds=(0.0, 0.99), default=0.0),
    "kernel_size": Kind("int", bounds=(1, 15), default=3, needs=(("family", ("cnn",)),)),
    "pooling": Kind("str", POOLINGS, default="max", needs=(("family", ("cnn",)),)),
    "norm": Kind("str", NORMS, default="none", needs=_NOT_RNN),
    "residual": Kind("bool", default=False, needs=_NOT_RNN),
    "cell": Kind("str", CELLS, default="gru", needs=(("family", ("rnn",)),)),
    "bidirectional": Kind("bool", default=False, needs=(("family", ("rnn",)),)),
    "learning_rate": Kind("float", bounds=(1e-12, None), default=1e-3),
    "batch_size": Kind("int", bounds=(1, None), default=64),
    "epochs": Kind("int", bounds=(1, None), default=10),
    "optimizer": Kind("str", OPTIMIZERS, default="adam"),
    "weight_decay": Kind("float", bounds=(0.0, None), default=0.0),
    "schedule": Kind("str", SCHEDULES, default="constant"),
    "warmup": Kind("float", bounds=(0.0, 0.5), default=0.0),
}
GENE_NAMES = tuple(VOCABULARY)  # the vocabulary's order; a per-layer gene expands in place

DEFAULT_SPACE: dict = {
    "family": ["mlp", "cnn", "rnn"],
    "depth": {"low": 1, "high": 3},
    "width": [16, 32, 64, 128],
    "activation": ["relu", "gelu", "silu", "tanh"],
    "dropout": {"low": 0.0, "high": 0.5},
    # The genes added with typed spaces are fixed at what the networks were before them (3x3 kernels,
    # max pooling, batch norm in CNNs only, no residuals, a constant rate), so a config that leaves
    # them out searches what it always did; a config opts in by declaring them.
    "kernel_size": 3,
    "pooling": "max",
    "norm": {"choices": ["batch"], "default": "none", "when": {"family": ["cnn"]}},
    "residual": False,
    "cell": ["gru", "lstm"],
    "bidirectional": [False, True],
    "learning_rate": {"low": 1e-4, "high": 3e-2, "log": True},
    "batch_size": [32, 64, 128, 256],
    "epochs": {"low": 2, "high": 12},
    "optimizer": ["adam", "adamw", "sgd", "rmsprop"],
    "weight_decay": {"low": 1e-6, "high": 1e-2, "log": True},
    "schedule": "constant",
    "warmup": 0.0,
}
assert tuple(DEFAULT_SPACE) == GENE_NAMES
_NETWORK = ("family", "depth", "activation", "dropout", "kernel_size", "pooling", "norm", "residual", "cell", "bidirectional")
_TRAINING = ("learning_rate", "batch_size", "epochs", "optimizer", "weight_decay", "schedule", "warmup")


def _index(u: float, n: int) -> int:
    return min(int(u * n), n - 1)


@dataclass(frozen=True)
class Choice:
    """One of a few values (a categorical, bool or listed numeric gene)."""

    options: tuple

    def decode(self, u: float):
        return self.options[_index(u, len(self.options))]

    def values(self) -> tuple:
        return self.options

    def to_config(self) -> dict:
        return {"choices": list(self.options)}


@dataclass(frozen=True)
class Range:
    """A number between ``low`` and ``high`` (inclusive), uniform or log-uniform; integer or not."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    def decode(self, u: float):
        if self.integer and not self.log:
            return int(self.low) + _index(u, int(self.high) - int(self.low) + 1)
        if self.log:
            value = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            value = self.low + u * (self.high - self.low)
        return min(max(int(round(value)), int(self.low)), int(self.high)) if self.integer else value

    def values(self) -> tuple | None:
        """Every value, for an integer range; None for a continuous one."""
        return tuple(range(int(self.low), int(self.high) + 1)) if self.integer else None

    def to_config(self) -> dict:
        return {"low": self.low, "high": self.high, "log": self.log}


@dataclass(frozen=True)
class Gene:
    """One position of the genome: its name, domain, default, and the conditions under which it is active."""

    name: str
    domain: Choice | Range
    default: object
    when: tuple = ()  # ((gene name, allowed values), ...): the declared conditions
    base: str = ""  # the vocabulary gene ("width" for "width_2"); "" for the gene itself
    per_layer: bool = False  # declared per layer (the first of the expanded genes carries the declaration)
    layer: int = 0  # 1, 2, ... for an expanded per-layer gene

    @property
    def kind(self) -> Kind:
        return VOCABULARY[self.base or self.name]

    def conditions(self) -> tuple:
        """Built-in and declared conditions together."""
        extra = (("depth", tuple(range(self.layer, VOCABULARY["depth"].bounds[1] + 1))),) if self.layer > 1 else ()
        return self.kind.needs + extra + self.when

    def type_name(self) -> str:
        if isinstance(self.domain, Range):
            return "int" if self.domain.integer else "float"
        return "bool" if self.kind.type == "bool" else "categorical"

    def to_config(self) -> dict:
        out = {"type": self.type_name(), **self.domain.to_config(), "default": self.default}
        if self.when:
            out["when"] = {name: list(values) for name, values in self.when}
        if self.per_layer:
            out["per_layer"] = True
        return out


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


def _decoder(domain: Choice | Range):
    """``domain.decode`` for u in [0, 1], as a closure with no attribute lookups (a choice: one index)."""
    if isinstance(domain, Choice):
        options, n = domain.options, len(domain.options)
        last = options[-1]
        return lambda u: options[int(u * n)] if u < 1.0 else last
    return domain.decode


@dataclass(frozen=True)
class SearchSpace:
    """The genes in genome order; ``key`` turns a genome into the values that make its network."""

    genes: tuple
    _plan: tuple = field(default=(), compare=False, repr=False)
    _decoders: tuple = field(default=(), compare=False, repr=False)
    _names: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [g.name for g in self.genes]
        position = {n: i for i, n in enumerate(names)}
        order: list[int] = []
        seen: set[int] = set()

        def visit(i: int) -> None:  # conditions first (the space was checked for cycles)
            if i in seen:
                return
            seen.add(i)
            for other, _ in self.genes[i].conditions():
                visit(position[other])
            order.append(i)

        for i in range(len(self.genes)):
            visit(i)
        plan = tuple(
            (i, tuple((position[other], frozenset(values)) for other, values in self.genes[i].conditions())) for i in order
        )
        object.__setattr__(self, "_plan", tuple((i, needs) for i, needs in plan if needs))  # conditional genes, in order
        object.__setattr__(self, "_decoders", tuple(_decoder(g.domain) for g in self.genes))
        object.__setattr__(self, "_names", tuple(names))

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def __len__(self) -> int:
        return len(self.genes)

    def gene(self, name: str) -> Gene:
        for g in self.genes:
            if g.name == name:
                return g
        raise KeyError(name)

    def _values(self, genome) -> tuple[list, list[bool]]:
        """Each gene's decoded value, and whether it is active. On the master's path for every
        child bred (the duplicate check), so kept lean: O(genes + conditions)."""
        if len(genome) != len(self.genes):
            raise ValueError(f"genome has {len(genome)} genes, the space has {len(self.genes)}")
        values = [decode(0.0 if u < 0.0 else 1.0 if u > 1.0 else u) for decode, u in zip(self._decoders, genome)]
        active = [True] * len(values)
        for i, needs in self._plan:
            for j, allowed in needs:
                if not active[j] or values[j] not in allowed:
                    active[i] = False
                    break
        return values, active

    def active(self, genome) -> dict[str, bool]:
        """Which genes matter for this genome."""
        _, active = self._values(genome)
        return dict(zip(self.names, active))

    def decode(self, genome) -> dict:
        """The active genes' values (what a report shows of a genome)."""
        values, active = self._values(genome)
        return {g.name: v for g, v, a in zip(self.genes, values, active) if a}

    def key(self, genome) -> tuple:
        """Every gene's value, inactive genes at their defaults: two genomes with the same key train the
        same network. Cheap (no specs built), for the search's duplicate check."""
        values, active = self._values(genome)
        for i, _ in self._plan:
            if not active[i]:
                values[i] = self.genes[i].default
        return tuple(values)

    def specs(self, key: tuple) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings of a :meth:`key`, the network in its canonical form
        (:meth:`NetworkSpec.canonical`, built directly: this is on the master's path for every task)."""
        v = dict(zip(self._names, key))
        family, depth = v["family"], v["depth"]
        widths = tuple(v[f"width_{i}"] for i in range(1, depth + 1)) if "width_1" in v else (v["width"],) * depth
        cnn, rnn = family == "cnn", family == "rnn"
        uniform = rnn or widths.count(widths[0]) == depth
        network = NetworkSpec(
            family, depth, widths[0], "relu" if rnn else v["activation"], v["dropout"],
            v["cell"] if rnn else "gru", v["bidirectional"] if rnn else False, () if uniform else widths,
            v["kernel_size"] if cnn else 3, v["pooling"] if cnn else "max", "none" if rnn else v["norm"],
            False if rnn else v["residual"],
        )
        training = TrainSpec(**{n: v[n] for n in _TRAINING})
        return network, training

    def candidate(self, genome) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings a genome stands for."""
        return self.specs(self.key(genome))

    def to_config(self) -> dict:
        """The ``[space]`` table that parses back to this space (every gene in the typed form)."""
        return {g.base or g.name: g.to_config() for g in self.genes if g.layer <= 1}

    def for_sample_shape(self, sample_shape: tuple[int, ...]) -> SearchSpace:
        """Drop the families that cannot apply to samples of this shape (a CNN on tabular data)."""
        family = self.gene("family")
        usable = tuple(f for f in family.domain.options if f in families_for(tuple(sample_shape)))
        if not usable:
            raise ConfigError(
                f"space.family allows {', '.join(family.domain.options)}, none of which applies to samples of shape {tuple(sample_shape)}"
            )
        narrowed = Gene(family.name, Choice(usable), family.default if family.default in usable else usable[0], family.when)
        return SearchSpace(tuple(narrowed if g.name == "family" else g for g in self.genes))


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
