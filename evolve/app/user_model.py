"""A user's network builder (``[model]``), checked on every rank before any data moves.

Every rank adds ``model.path`` to its module search path and imports the builder by name, so a
module that one node cannot import stops the job at once, not one evaluation at a time. The master
also builds the network of the genome in the middle of every gene's range for a sample of the
data's shape and passes one zero sample through it (:func:`ensemble.builders.check_network`): a
builder that raises, returns no module, or gives the wrong output shape is one line naming it.
"""
from __future__ import annotations

import math

from data_bcast.h5file import DataError, inspect_file
from ensemble.builders import BuilderError, add_model_path, check_network, import_builder
from evolve.config.schema import Config


def outputs_of(kind: str, num_classes: int, target_shape: tuple[int, ...]) -> int:
    """The network's outputs for a dataset: its classes, or its regression targets."""
    return num_classes if kind == "classification" else int(math.prod(target_shape)) if target_shape else 1


def load_builder(config: Config) -> None:
    """Make ``model.path`` importable and import the builder (any rank); BuilderError in one line."""
    if config.model.path:
        add_model_path(config.model.path)
    import_builder(config.model.builder)


def check_builder(config: Config) -> None:
    """The master's check: the builder's network for the middle genome takes a sample of the data and
    gives one output per class (or target); BuilderError or DataError in one line."""
    options = config.data
    plan = inspect_file(options.path, options.val_fraction, options.test_fraction, options.split_seed, options.allow_external)
    space = config.space
    network, _ = space.settings(space.key([0.5] * len(space)))
    check_network(network, plan.sample_shape, outputs_of(plan.kind, plan.num_classes, tuple(plan.target_shape)))


def user_model_problem(config: Config, check: bool) -> str | None:
    """What is wrong with the config's builder on this rank (``check``: the master's dry pass too), or None."""
    if not config.model.builder:
        return None
    try:
        load_builder(config)
        if check:
            check_builder(config)
    except (BuilderError, DataError) as exc:
        return str(exc)
    return None
