"""Where every network comes from: the built-in families, or a user's builder named ``module:function``.

A network's settings are plain values (they travel in tasks and live in the run file). The built-in
families' settings are a :class:`~ensemble.specs.NetworkSpec`'s fields; a user's network is named
by its builder and carries its own genes::

    {"builder": "mynets.volumes:build", "genes": {"channels": 32, "blocks": 4}}

:func:`network_from_settings` builds either kind, so training, prediction and export go through one
seam. A builder is a plain function, imported by name from what is importable (``sys.path``, which
``model.path`` or ``--model-path`` extend); nothing is ever imported from a path stored in a file::

    def build(genes: dict, sample_shape: tuple[int, ...], outputs: int) -> torch.nn.Module: ...

It receives the decoded genes of its network (the training genes stay evens'), the shape of one
sample without the batch dimension, and the number of outputs (classes, or regression targets), and
returns a module that maps a batch ``(B, *sample_shape)`` to ``(B, outputs)``.
"""
from __future__ import annotations

import sys
from typing import Callable

import torch
from torch import nn

from .models import NetworkSpec, build_network
from .references import USER_FAILURES, ModuleMissing, UserCodeError, add_model_path, first_line, import_by_name
from .specs import BUILDER, GENES, is_user_network

__all__ = ["BuilderError", "add_model_path", "check_network", "import_builder", "import_builders", "network_from_settings"]
Builder = Callable[[dict, tuple, int], nn.Module]
BuilderError = UserCodeError  # a builder that cannot be used, in one line naming it and the problem


def import_builder(reference: str) -> Builder:
    """The builder ``reference`` (``module:function``) names, imported by name; BuilderError in one line."""
    return import_by_name(reference, "model builder")


def import_builders(networks, say: Callable[[str], None] = lambda line: print(line, file=sys.stderr), made_with: str = "") -> None:
    """Import the builders that these network settings name, saying each module's name first (loading a
    run made with a builder runs the builder's code); BuilderError in one line for one that cannot be.
    ``made_with``: the folder the run's search imported them from (its ``model.path``), named in the error
    when a module is not importable here; nothing is imported from it unless the caller added it."""
    for reference in sorted({n[BUILDER] for n in networks if is_user_network(n)}):
        say(f"evens: importing {reference.split(':')[0]} (the run's model builder {reference})")
        try:
            import_builder(reference)
        except ModuleMissing as exc:
            if not made_with:
                raise
            raise exc.hinted(f"the run was made with model.path = {made_with}: give that folder as --model-path, "
                             "or model_path= to load_ensemble") from None


def network_from_settings(network: dict, sample_shape: tuple[int, ...], outputs: int) -> nn.Module:
    """A fresh network from its settings: a built-in family's spec, or a user's builder called with its genes.

    A user's builder that raises, or returns something other than a module, is a BuilderError naming it.
    """
    sample_shape = tuple(int(s) for s in sample_shape)
    if not is_user_network(network):
        return build_network(NetworkSpec(**network), sample_shape, outputs)
    reference = network[BUILDER]
    builder = import_builder(reference)
    try:
        model = builder(dict(network.get(GENES, {})), sample_shape, int(outputs))
    except USER_FAILURES as exc:  # the user's code; its failure (sys.exit too) is this network's, in one line
        raise BuilderError(f"model builder {reference} raised {type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise BuilderError(f"model builder {reference} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def check_network(network: dict, sample_shape: tuple[int, ...], outputs: int) -> None:
    """Build ``network`` and pass one zero sample through it: BuilderError unless it gives ``(1, outputs)``."""
    model = network_from_settings(network, sample_shape, outputs).eval()
    name = network.get(BUILDER, network.get("family", "network"))
    try:
        with torch.no_grad():
            out = model(torch.zeros((1, *tuple(sample_shape))))
    except USER_FAILURES as exc:  # the user's forward pass
        raise BuilderError(f"model builder {name}: a forward pass on one sample of shape {tuple(sample_shape)} raised "
                           f"{type(exc).__name__}: {first_line(exc)}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, int(outputs)):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BuilderError(f"model builder {name}: one sample of shape {tuple(sample_shape)} gave output {got}; "
                           f"the problem needs (1, {int(outputs)})")
