"""The search space: named genes, each decoded from a number in [0, 1].

A genome is a list of floats in [0, 1], one per gene, in :data:`GENE_NAMES`
order. Decoding maps each float onto its gene's values, so DEAP's real-valued
operators (uniform crossover, bounded polynomial mutation) work on every gene
alike, categorical ones included. In a config, a gene is written as

* a list: choose one of these values, ``width = [16, 32, 64]``;
* a table: a range, ``learning_rate = {low = 1e-4, high = 3e-2, log = true}``
  (integer genes give integer ranges);
* a single value: fixed, ``optimizer = "adam"``.

``cell`` and ``bidirectional`` shape only the ``rnn`` family, and ``activation``
only ``mlp`` and ``cnn``; a genome's inactive genes are set to their defaults
when it is decoded into a network (:meth:`SearchSpace.candidate`), so genomes
that differ only there count as the same network.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ensemble.specs import ACTIVATION_NAMES, CELLS, FAMILIES, OPTIMIZERS, NetworkSpec, TrainSpec, families_for

from .errors import ConfigError

GENE_TYPES: dict[str, type] = {
    "family": str,
    "depth": int,
    "width": int,
    "activation": str,
    "dropout": float,
    "cell": str,
    "bidirectional": bool,
    "learning_rate": float,
    "batch_size": int,
    "epochs": int,
    "optimizer": str,
    "weight_decay": float,
}
GENE_NAMES = tuple(GENE_TYPES)

DEFAULT_SPACE: dict = {
    "family": ["mlp", "cnn", "rnn"],
    "depth": {"low": 1, "high": 3},
    "width": [16, 32, 64, 128],
    "activation": ["relu", "gelu", "silu", "tanh"],
    "dropout": {"low": 0.0, "high": 0.5},
    "cell": ["gru", "lstm"],
    "bidirectional": [False, True],
    "learning_rate": {"low": 1e-4, "high": 3e-2, "log": True},
    "batch_size": [32, 64, 128, 256],
    "epochs": {"low": 2, "high": 12},
    "optimizer": ["adam", "adamw", "sgd", "rmsprop"],
    "weight_decay": {"low": 1e-6, "high": 1e-2, "log": True},
}

_ALLOWED = {"family": FAMILIES, "activation": ACTIVATION_NAMES, "cell": CELLS, "optimizer": OPTIMIZERS}
# Inclusive numeric bounds; dropout must stay below 1.
_NUMERIC = {
    "depth": (1, None),
    "width": (1, None),
    "dropout": (0.0, 0.99),
    "learning_rate": (1e-12, None),
    "batch_size": (1, None),
    "epochs": (1, None),
    "weight_decay": (0.0, None),
}


def _index(u: float, n: int) -> int:
    return min(int(u * n), n - 1)


@dataclass(frozen=True)
class Choice:
    options: tuple

    def decode(self, u: float):
        return self.options[_index(u, len(self.options))]

    def to_config(self):
        return list(self.options)


@dataclass(frozen=True)
class Range:
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

    def to_config(self):
        return {"low": self.low, "high": self.high, "log": self.log}


def _check_number(name: str, value, kind: type):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int and not (isinstance(value, int) and not isinstance(value, bool)):
        ok = False
    if ok and not math.isfinite(value):
        ok = False
    if not ok:
        raise ConfigError(f"space.{name}: expected {'an integer' if kind is int else 'a finite number'}, got {value!r}")
    low, high = _NUMERIC[name]
    if value < low or (high is not None and value > high):
        raise ConfigError(f"space.{name}: {value!r} is out of range" + (f" ({low} to {high})" if high else f" (>= {low})"))
    return float(value) if kind is float else value


def _parse_gene(name: str, spec):
    kind = GENE_TYPES[name]
    if isinstance(spec, dict):
        if kind in (str, bool):
            raise ConfigError(f"space.{name}: a range makes no sense here; give a list of choices")
        unknown = set(spec) - {"low", "high", "log"}
        if unknown or "low" not in spec or "high" not in spec:
            raise ConfigError(f"space.{name}: a range is {{low = ..., high = ..., log = false}}, got {spec!r}")
        low, high = _check_number(name, spec["low"], kind), _check_number(name, spec["high"], kind)
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise ConfigError(f"space.{name}.log must be true or false, got {log!r}")
        if low > high:
            raise ConfigError(f"space.{name}: low {low} is above high {high}")
        if log and low <= 0:
            raise ConfigError(f"space.{name}: a log range needs low > 0, got {low}")
        return Range(low, high, log, kind is int)
    options = spec if isinstance(spec, list) else [spec]
    if not options:
        raise ConfigError(f"space.{name}: the list of choices is empty")
    checked = []
    for value in options:
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"space.{name}: expected true or false, got {value!r}")
            checked.append(value)
        elif kind is str:
            if value not in _ALLOWED[name]:
                raise ConfigError(f"space.{name}: unknown value {value!r} (known: {', '.join(_ALLOWED[name])})")
            checked.append(value)
        else:
            checked.append(_check_number(name, value, kind))
    return Choice(tuple(checked))


@dataclass(frozen=True)
class SearchSpace:
    """Genes in :data:`GENE_NAMES` order; ``decode`` turns a genome into plain values."""

    genes: tuple

    @property
    def names(self) -> tuple[str, ...]:
        return GENE_NAMES

    def __len__(self) -> int:
        return len(self.genes)

    def decode(self, genome) -> dict:
        if len(genome) != len(self.genes):
            raise ValueError(f"genome has {len(genome)} genes, the space has {len(self.genes)}")
        return {name: gene.decode(0.0 if u < 0.0 else 1.0 if u > 1.0 else float(u)) for name, gene, u in zip(GENE_NAMES, self.genes, genome)}

    def key(self, genome) -> tuple:
        """The decoded values that make a network, inactive genes at their defaults: two genomes with
        the same key train the same network. Cheap (no specs built), for the search's duplicate check."""
        v = self.decode(genome)
        if v["family"] == "rnn":  # the genes this family ignores, at their defaults (NetworkSpec.canonical)
            v["activation"] = "relu"
        else:
            v["cell"], v["bidirectional"] = "gru", False
        return tuple(v[name] for name in GENE_NAMES)

    def specs(self, key: tuple) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings of a :meth:`key`."""
        v = dict(zip(GENE_NAMES, key))
        network = NetworkSpec(v["family"], v["depth"], v["width"], v["activation"], v["dropout"], v["cell"], v["bidirectional"])
        training = TrainSpec(v["learning_rate"], v["batch_size"], v["epochs"], v["optimizer"], v["weight_decay"])
        return network, training

    def candidate(self, genome) -> tuple[NetworkSpec, TrainSpec]:
        """The network and training settings a genome stands for."""
        return self.specs(self.key(genome))

    def to_config(self) -> dict:
        return {name: gene.to_config() for name, gene in zip(GENE_NAMES, self.genes)}

    def for_sample_shape(self, sample_shape: tuple[int, ...]) -> SearchSpace:
        """Drop the families that cannot apply to samples of this shape (a CNN on tabular data)."""
        family = self.genes[0]
        usable = tuple(f for f in family.options if f in families_for(tuple(sample_shape)))
        if not usable:
            raise ConfigError(
                f"space.family allows {', '.join(family.options)}, none of which applies to samples of shape {tuple(sample_shape)}"
            )
        return SearchSpace((Choice(usable),) + self.genes[1:])


def parse_space(raw: dict) -> SearchSpace:
    """Validate the ``[space]`` table; genes it leaves out take :data:`DEFAULT_SPACE`."""
    if not isinstance(raw, dict):
        raise ConfigError("[space] must be a table")
    for name in raw:
        if name not in GENE_TYPES:
            raise ConfigError(f"unknown gene 'space.{name}' (known: {', '.join(GENE_NAMES)})")
    return SearchSpace(tuple(_parse_gene(name, raw.get(name, DEFAULT_SPACE[name])) for name in GENE_NAMES))
