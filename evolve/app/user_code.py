"""A user's code named in the config (the ``[model]`` builder, a ``search.metric`` or ``train.loss``
function), and the choice of metric and loss, checked on every rank before any data moves.

Every rank adds ``model.path`` to its module search path and imports what the config names (a
worker rank whose trainings run in a process of their own only finds its modules), so a module that
one node cannot import stops the job at once, not one evaluation at a time. The master
also builds the network of the genome in the middle of every gene's range for a sample of the
data's shape and passes one zero sample through it (:func:`ensemble.builders.check_network`): a
builder that raises, returns no module, or gives the wrong output shape is one line naming it. It
checks that the metric and the loss fit the data's problem, and calls a user's metric (loss) once on
a few made-up targets and predictions (outputs) of the right shapes: it must return a finite number
(a finite scalar tensor).
"""
from __future__ import annotations

import math

import numpy as np

from data_bcast.h5file import DataError, DataPlan, inspect_file
from ensemble.problem import check_metric, user_metric
from ensemble.references import UserCodeError, add_model_path, find_by_name, first_line, import_by_name, is_reference
from evolve.config.schema import Config
from evolve.search.space_config import parse_space

# torch, and ensemble's modules that import it, are imported where a check needs them: a worker rank
# whose trainings run in a process of their own, with no user code to check, imports no torch.


def outputs_of(kind: str, num_classes: int, target_shape: tuple[int, ...]) -> int:
    """The network's outputs for a dataset: its classes, or its regression targets."""
    return num_classes if kind == "classification" else int(math.prod(target_shape)) if target_shape else 1


def load_user_code(config: Config, run: bool = True) -> None:
    """Make ``model.path`` importable and import the builder, the metric and the loss the config names (any
    rank); with ``run`` False only find their modules, running none of their code (a worker rank whose
    trainings run in a process of their own: that process imports them)."""
    if config.model.path:
        add_model_path(config.model.path)
    if not run:
        for reference, what in ((config.model.builder, "model builder"), (config.search.metric, "metric"), (config.train.loss, "loss")):
            if is_reference(reference):
                find_by_name(reference, what)
        return
    if config.model.builder:
        from ensemble.builders import import_builder

        import_builder(config.model.builder)
    if is_reference(config.search.metric):
        user_metric(config.search.metric)
    if is_reference(config.train.loss):
        import_by_name(config.train.loss, "loss")


def check_builder(config: Config, plan: DataPlan) -> None:
    """The builder's network for the middle genome takes a sample of the data and gives one output per
    class (or target); UserCodeError in one line."""
    from ensemble.builders import check_network

    space = config.space if config.space is not None else parse_space(config.space_table, config.model.builder)  # (before the data scales its training genes)
    network, _ = space.settings(space.key([0.5] * len(space)))
    check_network(network, plan.sample_shape, outputs_of(plan.kind, plan.num_classes, tuple(plan.target_shape)))


def check_metric_for(config: Config, plan: DataPlan) -> None:
    """The metric is one the data's problem can optimise; a user's returns a finite number for made-up
    targets and predictions of the data's shapes. UserCodeError in one line."""
    metric = config.search.metric
    if metric == "auto":
        return
    if not is_reference(metric):
        try:
            check_metric(plan.kind, metric)
        except ValueError as exc:
            raise UserCodeError(str(exc)) from None
        return
    if plan.kind == "classification":
        c = plan.num_classes
        y, pred = np.arange(2 * c) % c, np.full((2 * c, c), 1.0 / c)
    else:
        shape = tuple(plan.target_shape)
        y, pred = np.zeros((4, *shape)), np.ones((4, *shape))
    try:
        value = user_metric(metric)(y, pred)
    except Exception as exc:  # noqa: BLE001 -- the user's metric; its failure is one line
        raise UserCodeError(f"metric {metric} raised {type(exc).__name__} on made-up targets {y.shape} and predictions {pred.shape}: "
                            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else '(no message)'}") from None
    if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(float(value)):
        raise UserCodeError(f"metric {metric} returned {value!r}; a metric returns a finite number")


def check_loss_for(config: Config, plan: DataPlan) -> None:
    """The loss suits the data's problem; a user's gives a finite scalar tensor for made-up outputs and
    targets of the data's shapes (labels; standardised targets). UserCodeError in one line."""
    loss = config.train.loss
    import torch

    from ensemble.train import check_loss

    try:
        check_loss(plan.kind, loss)
    except ValueError as exc:
        raise UserCodeError(str(exc)) from None
    if not is_reference(loss):
        return
    outputs = outputs_of(plan.kind, plan.num_classes, tuple(plan.target_shape))
    out = torch.zeros((4, outputs), requires_grad=True)
    target = torch.arange(4) % outputs if plan.kind == "classification" else torch.zeros((4, outputs))
    try:
        value = import_by_name(loss, "loss")(out, target)
    except Exception as exc:  # noqa: BLE001 -- the user's loss; its failure is one line
        raise UserCodeError(f"loss {loss} raised {type(exc).__name__} on made-up outputs (4, {outputs}): {first_line(exc)}") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not torch.isfinite(value).all():
        raise UserCodeError(f"loss {loss} returned {value!r}; a loss returns a finite scalar tensor")


def user_code_problem(config: Config, check: bool, run: bool = True) -> str | None:
    """What is wrong with the user code the config names on this rank (``check``: the master's checks
    against the data too; ``run`` False: its modules found, not imported), or None."""
    try:
        load_user_code(config, run)
        if check and (config.model.builder or config.search.metric != "auto" or config.train.loss != "auto"):
            options = config.data
            plan = inspect_file(options.path, options.val_fraction, options.test_fraction, options.split_seed, options.allow_external)
            check_metric_for(config, plan)
            check_loss_for(config, plan)
            if config.model.builder:
                check_builder(config, plan)
    except (UserCodeError, DataError) as exc:
        return str(exc)
    return None
