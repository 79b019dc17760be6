"""The search space: typed, conditional genes, each decoded from a number in [0, 1].

A genome is a list of floats in [0, 1], one per gene, in :attr:`SearchSpace.names`
order. Decoding maps each float onto its gene's values, so DEAP's real-valued
operators (uniform crossover, bounded polynomial mutation) work on every gene
alike, categorical ones included.

The genes a network and its training understand are the :data:`VOCABULARY`:
architecture genes (``family``, ``depth``, ``width``, ``activation``, ``dropout``,
``kernel_size``, ``pooling``, ``norm``, ``residual``, ``cell``, ``bidirectional``, ``downsample``)
and training genes (``optimizer``, ``learning_rate``, ``weight_decay``,
``schedule``, ``warmup``, ``batch_size``, ``epochs``). A config's ``[space]`` table
declares what each gene may take (:mod:`evolve.search.space_config` reads it, and shows its
forms); a gene it leaves out takes :data:`DEFAULT_SPACE`, but for an optional gene (``downsample``), which is
in a space only where declared.

A gene is *active* when every condition on it holds: its own ``when`` and the
built-in ones (``kernel_size``, ``pooling`` and ``downsample`` only for ``cnn``; ``cell`` and
``bidirectional`` only for ``rnn``; ``activation``, ``norm`` and ``residual`` not for
``rnn``; ``width_i`` only when ``depth >= i``). A condition on a gene that is itself
inactive is false. An inactive gene takes its default when a genome is decoded
(:meth:`SearchSpace.key`), so genomes that differ only in inactive genes count as
the same network.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

from ensemble.specs import (
    ACTIVATION_NAMES,
    AUGMENTS,
    BUILDER,
    CELLS,
    DILATIONS,
    FAMILIES,
    GENES,
    HEADS,
    NORMS,
    OPTIMIZERS,
    POOLINGS,
    SCHEDULES,
    NetworkSpec,
    TrainSpec,
    families_for,
    network_spec,
)
from evolve.errors import ConfigError


@dataclass(frozen=True)
class Kind:
    """What a gene of the vocabulary is: its value type, its legal values, its default, and when it matters."""

    type: str  # "float", "int", "str" or "bool": the type of its values
    legal: tuple = ()  # the values a str gene may take
    bounds: tuple = (None, None)  # inclusive bounds of a numeric gene
    default: object = None
    needs: tuple = ()  # built-in conditions: (gene, allowed values)
    per_layer: bool = False  # may be declared per layer
    problems: tuple = ("classification", "regression")  # the problems it matters for; fixed at its default for the others
    sample_dims: tuple = (1, 2, 3)  # the samples' dimensions it matters for (a table's, a signal's, an image's); likewise
    optional: bool = False  # in a space only where its [space] table declares it (else its default holds): a gene added
    # after run files existed, so that the spaces made before it, and their genomes, stay as they were


_NOT_RNN = (("family", ("mlp", "cnn")),)
_CNN = (("family", ("cnn",)),)
VOCABULARY: dict[str, Kind] = {
    "family": Kind("str", FAMILIES, default="mlp"),
    "depth": Kind("int", bounds=(1, 64), default=2),
    "width": Kind("int", bounds=(1, None), default=64, per_layer=True),
    "activation": Kind("str", ACTIVATION_NAMES, default="relu", needs=_NOT_RNN),
    "dropout": Kind("float", bounds=(0.0, 0.99), default=0.0),
    "kernel_size": Kind("int", bounds=(1, 15), default=3, needs=_CNN),
    "pooling": Kind("str", POOLINGS, default="max", needs=_CNN),
    "dilation": Kind("str", DILATIONS, default="none", needs=_CNN),
    "downsample": Kind("int", bounds=(1, None), default=1, needs=_CNN, optional=True),
    "head": Kind("str", HEADS, default="flatten", needs=(("family", ("cnn", "rnn")),)),
    "norm": Kind("str", NORMS, default="none", needs=_NOT_RNN),
    "residual": Kind("bool", default=False, needs=_NOT_RNN),
    "cell": Kind("str", CELLS, default="gru", needs=(("family", ("rnn",)),)),
    "bidirectional": Kind("bool", default=False, needs=(("family", ("rnn",)),)),
    "standardize": Kind("bool", default=False),
    "learning_rate": Kind("float", bounds=(1e-12, None), default=1e-3),
    "batch_size": Kind("int", bounds=(1, None), default=64),
    "epochs": Kind("int", bounds=(1, None), default=10),
    "optimizer": Kind("str", OPTIMIZERS, default="adam"),
    "weight_decay": Kind("float", bounds=(0.0, None), default=0.0),
    "schedule": Kind("str", SCHEDULES, default="constant"),
    "warmup": Kind("float", bounds=(0.0, 0.5), default=0.0),
    "label_smoothing": Kind("float", bounds=(0.0, 0.5), default=0.0, problems=("classification",)),
    "augment": Kind("str", AUGMENTS, default="none", sample_dims=(2, 3)),
}
GENE_NAMES = tuple(n for n, kind in VOCABULARY.items() if not kind.optional)  # the default space's genes, in the vocabulary's
# order (a per-layer gene expands in place)

DEFAULT_SPACE: dict = {
    "family": ["mlp", "cnn", "rnn"],
    "depth": {"low": 1, "high": 3},
    "width": [16, 32, 64, 128],
    "activation": ["relu", "gelu", "silu", "tanh"],
    "dropout": {"low": 0.0, "high": 0.5},
    # The genes beyond the classic space are fixed at the classic networks' values (3x3 kernels, max
    # pooling, batch norm in CNNs only, no residuals, a constant rate), so a config that leaves them
    # out searches the classic space; a config opts in by declaring them.
    "kernel_size": 3,
    "pooling": "max",
    "dilation": "none",
    "head": "flatten",
    "norm": {"choices": ["batch"], "default": "none", "when": {"family": ["cnn"]}},
    "residual": False,
    "cell": ["gru", "lstm"],
    "bidirectional": [False, True],
    "standardize": False,
    "learning_rate": {"low": 1e-4, "high": 3e-2, "log": True},
    "batch_size": [32, 64, 128, 256],
    "epochs": {"low": 2, "high": 12},
    "optimizer": ["adam", "adamw", "sgd", "rmsprop"],
    "weight_decay": {"low": 1e-6, "high": 1e-2, "log": True},
    "schedule": "constant",
    "warmup": 0.0,
    "label_smoothing": 0.0,
    "augment": "none",
}
assert tuple(DEFAULT_SPACE) == GENE_NAMES  # (an optional gene is not in it)
TRAINING_GENES = ("learning_rate", "batch_size", "epochs", "optimizer", "weight_decay", "schedule", "warmup", "label_smoothing", "augment")


def _options(domain) -> tuple:
    return domain.values() if isinstance(domain, Choice) else ()


def _text_hash(text: str) -> int:
    """A string's 64-bit hash, the same in every process (Python salts its own per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def _index(u: float, n: int) -> int:
    return min(int(u * n), n - 1)


@dataclass(frozen=True)
class Choice:
    """One of a few values (a categorical, bool or listed numeric gene)."""

    options: tuple

    def decode(self, u: float):
        return self.options[_index(u, len(self.options))]

    def encode(self, value) -> float:
        """The middle of ``value``'s interval of u (ValueError for a value not among the options)."""
        for i, option in enumerate(self.options):
            if option == value and type(option) is type(value):
                return (i + 0.5) / len(self.options)
        raise ValueError(f"{value!r} is not one of {list(self.options)}")

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

    def encode(self, value) -> float:
        """A u that decodes to ``value`` (a float: to within rounding), clamped into [0, 1]."""
        if self.low == self.high:
            return 0.5
        if self.integer and not self.log:
            u = (int(value) - int(self.low) + 0.5) / (int(self.high) - int(self.low) + 1)
        elif self.log:
            u = (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        else:
            u = (value - self.low) / (self.high - self.low)
        return min(max(u, 0.0), 1.0)

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
    own: Kind | None = None  # a user's gene (a space with a model builder): its kind, from its declaration

    @property
    def kind(self) -> Kind:
        return self.own if self.own is not None else VOCABULARY[self.base or self.name]

    def conditions(self) -> tuple:
        """Built-in and declared conditions together."""
        extra = (("depth", tuple(range(self.layer, VOCABULARY["depth"].bounds[1] + 1))),) if self.layer > 1 else ()
        return self.kind.needs + extra + self.when

    def type_name(self) -> str:
        if isinstance(self.domain, Range):
            return "int" if self.domain.integer else "float"
        return "bool" if self.kind.type == "bool" and set(self.domain.options) <= {False, True} else "categorical"

    def to_config(self) -> dict:
        out = {"type": self.type_name(), **self.domain.to_config(), "default": self.default}
        if self.when:
            out["when"] = {name: list(values) for name, values in self.when}
        if self.per_layer:
            out["per_layer"] = True
        return out


def _decoder(domain: Choice | Range):
    """``domain.decode`` for u in [0, 1], as a closure with no attribute lookups (a choice: one index)."""
    if isinstance(domain, Choice):
        options, n = domain.options, len(domain.options)
        last = options[-1]
        return lambda u: options[int(u * n)] if u < 1.0 else last
    return domain.decode


@dataclass(frozen=True)
class SearchSpace:
    """The genes in genome order; ``key`` turns a genome into the values that make its network.

    With a ``builder`` (``module:function``, ``[model]``), every gene but the training genes is the
    user's own and goes to that builder as it is (see :mod:`ensemble.builders`)."""

    genes: tuple
    builder: str = ""
    _plan: tuple = field(default=(), compare=False, repr=False)
    _decoders: tuple = field(default=(), compare=False, repr=False)
    _names: tuple = field(default=(), compare=False, repr=False)
    _order: tuple = field(default=(), compare=False, repr=False)
    _texts: dict = field(default_factory=dict, compare=False, repr=False)

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
        object.__setattr__(self, "_order", tuple(self.genes[i] for i in order))
        object.__setattr__(self, "_texts", {v: _text_hash(v) for g in self.genes  # every string a gene may hold, with its hash
                                            for v in (*_options(g.domain), g.default) if isinstance(v, str)})

    def key_hash(self, key: tuple) -> int:
        """A 64-bit hash of a :meth:`key` that is the same in every process of the same Python (Python hashes
        numbers and tuples alike everywhere, strings not: a string's stands in for it here), so that a run
        file can keep the hashes of the networks a search proposed (evolve.search.keyset)."""
        texts = self._texts
        return hash(tuple(map(texts.get, key, key))) if texts else hash(key)  # each string by its own hash, the rest as they are

    @property
    def condition_order(self) -> tuple[Gene, ...]:
        """The genes, each after the genes its conditions test (to suggest them define-by-run)."""
        return self._order

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

    def decoded(self, genome) -> list:
        """Every gene's value, active or not (its u clamped into [0, 1])."""
        if len(genome) != len(self.genes):
            raise ValueError(f"genome has {len(genome)} genes, the space has {len(self.genes)}")
        return [decode(0.0 if u < 0.0 else 1.0 if u > 1.0 else u) for decode, u in zip(self._decoders, genome)]

    def child_decoded(self, child: list[float], changes: list[tuple[int, int]], mother_values: list, father_values: list) -> list:
        """:meth:`decoded` of a child bred from two parents (their :meth:`decoded` given): the mother's values but for
        ``changes``, each a gene and where it came from (1: the father, 2 or 3: mutation, ga.Brood), the mutated ones
        decoded (a child is its mother's genes but a few crossed or mutated). On the master's path for every child
        bred, often several times a child."""
        if len(child) != len(self.genes) or len(mother_values) != len(self.genes):
            raise ValueError(f"genome has {len(child)} genes, the space has {len(self.genes)}")
        values = list(mother_values)
        decoders = self._decoders
        for i, source in changes:
            values[i] = father_values[i] if source == 1 else decoders[i](child[i])
        return values

    def _activity(self, values: list) -> list[bool]:
        """Whether each gene is active, given every gene's value (:meth:`decoded`): O(genes + conditions)."""
        active = [True] * len(values)
        for i, needs in self._plan:
            for j, allowed in needs:
                if not active[j] or values[j] not in allowed:
                    active[i] = False
                    break
        return active

    def active(self, genome) -> dict[str, bool]:
        """Which genes matter for this genome."""
        return dict(zip(self.names, self._activity(self.decoded(genome))))

    def decode(self, genome) -> dict:
        """The active genes' values (what a report shows of a genome)."""
        values = self.decoded(genome)
        return {g.name: v for g, v, a in zip(self.genes, values, self._activity(values)) if a}

    def key(self, genome) -> tuple:
        """Every gene's value, inactive genes at their defaults: two genomes with the same key train the
        same network. Cheap (no specs built), for the search's duplicate check."""
        return self.key_of(self.decoded(genome))

    def key_of(self, values: list) -> tuple:
        """:meth:`key` from every gene's value (:meth:`decoded`, :meth:`child_decoded`; the list is not kept)."""
        active = self._activity(values)
        genes = self.genes
        for i, _ in self._plan:
            if not active[i]:
                values[i] = genes[i].default
        return tuple(values)

    def encode(self, values: dict) -> list[float]:
        """A genome that decodes to ``values`` (gene name -> value; a gene left out, or inactive, takes its
        default): the inverse of :meth:`decode` for a strategy that proposes native values (an Optuna
        sampler). A float comes back to within rounding, everything else exactly."""
        genome = []
        for gene in self.genes:
            value = values.get(gene.name, gene.default)
            try:
                genome.append(gene.domain.encode(value))
            except ValueError:  # an inactive gene's default outside its own domain
                if gene.name in values:
                    raise ValueError(f"gene {gene.name}: {value!r} is outside its domain") from None
                genome.append(0.5)
        return genome

    def specs(self, key: tuple) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings of a :meth:`key`, the network in its canonical form
        (:meth:`NetworkSpec.canonical`): :meth:`settings` as the dataclasses."""
        network, training = self.settings(key)
        return network_spec(network), TrainSpec(**training)

    def settings(self, key: tuple) -> tuple[dict, dict]:
        """:meth:`specs` as plain dicts (their fields in order; per-layer widths a list), built directly,
        not through the dataclasses: every worker decodes each task's key with it, and the master each
        network entering the hall of fame."""
        v = dict(zip(self._names, key))
        if self.builder:
            return {BUILDER: self.builder, GENES: {n: v[n] for n in self._names if n not in TRAINING_GENES}}, {n: v[n] for n in TRAINING_GENES}
        family, depth = v["family"], v["depth"]
        widths = [v[f"width_{i}"] for i in range(1, depth + 1)] if "width_1" in v else [v["width"]] * depth
        cnn, rnn = family == "cnn", family == "rnn"
        uniform = rnn or widths.count(widths[0]) == depth
        network = {
            "family": family, "depth": depth, "width": widths[0], "activation": "relu" if rnn else v["activation"],
            "dropout": v["dropout"], "cell": v["cell"] if rnn else "gru", "bidirectional": v["bidirectional"] if rnn else False,
            "widths": [] if uniform else widths, "kernel_size": v["kernel_size"] if cnn else 3,
            "pooling": v["pooling"] if cnn else "max", "norm": "none" if rnn else v["norm"], "residual": False if rnn else v["residual"],
            "dilation": v["dilation"] if cnn else "none", "head": v["head"] if cnn or rnn else "flatten", "standardize": v["standardize"],
            "downsample": v.get("downsample", 1) if cnn else 1,
        }
        return network, {n: v[n] for n in TRAINING_GENES}

    def candidate(self, genome) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings a genome stands for."""
        return self.specs(self.key(genome))

    def to_config(self) -> dict:
        """The ``[space]`` table that parses back to this space (every gene in the typed form)."""
        return {g.base or g.name: g.to_config() for g in self.genes if g.layer <= 1}

    def for_data(self, sample_shape: tuple[int, ...], problem: str) -> SearchSpace:
        """:meth:`for_sample_shape`, with the genes that do not matter for ``problem`` ("classification" or
        "regression") or for samples of this shape fixed at their defaults (label smoothing in a
        regression, shifting a table's samples)."""
        narrowed = self.for_sample_shape(sample_shape)
        dims = len(sample_shape)
        genes = tuple(replace(g, domain=Choice((g.default,)))
                      if problem not in g.kind.problems or dims not in g.kind.sample_dims else g for g in narrowed.genes)
        return SearchSpace(genes, self.builder)

    def for_sample_shape(self, sample_shape: tuple[int, ...]) -> SearchSpace:
        """Drop the families that cannot apply to samples of this shape (a CNN on tabular data); a user's
        builder decides for itself."""
        if self.builder:
            return self
        family = self.gene("family")
        usable = tuple(f for f in family.domain.options if f in families_for(tuple(sample_shape)))
        if not usable:
            raise ConfigError(
                f"space.family allows {', '.join(family.domain.options)}, none of which applies to samples of shape {tuple(sample_shape)}"
            )
        narrowed = Gene(family.name, Choice(usable), family.default if family.default in usable else usable[0], family.when)
        return SearchSpace(tuple(narrowed if g.name == "family" else g for g in self.genes))
