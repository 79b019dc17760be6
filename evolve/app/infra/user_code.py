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

User code is a guest on the master. The master's checks run in a process of their own
(:func:`check_in_child`: a fresh interpreter, without the launcher's MPI variables, in a process group of its
own, with a time limit), so a builder that hangs, exits, calls MPI or starts processes of its own costs one
line and exit 2, not the job. What the master itself then imports (the metric it scores ensembles with, the
builder its space comes from) is imported :func:`as_guest`: without mpi4py in reach, and with evens' signal
handlers put back after.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import types

import numpy as np

from data_bcast.h5file import DataError, DataPlan, inspect_file
from ensemble.problem import check_metric, user_metric
from ensemble.references import USER_FAILURES, UserCodeError, add_model_path, find_by_name, first_line, import_by_name, is_reference
from evolve.app.infra.process import STOP_SIGNALS
from evolve.config.schema import Config
from evolve.search.space_config import parse_space
from evolve.transport.isolation import trainer_environment

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
    except USER_FAILURES as exc:  # the user's metric; its failure is one line
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
    except USER_FAILURES as exc:  # the user's loss; its failure is one line
        raise UserCodeError(f"loss {loss} raised {type(exc).__name__} on made-up outputs (4, {outputs}): {first_line(exc)}") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not torch.isfinite(value).all():
        raise UserCodeError(f"loss {loss} returned {value!r}; a loss returns a finite scalar tensor")


def user_code_problem(config: Config, check: bool, run: bool = True) -> str | None:
    """What is wrong with the user code the config names on this rank (``check``: the master's checks against the
    data too, in a process of their own; ``run`` False: its modules found, not imported), or None."""
    if check and any(is_reference(r) for r in (config.model.builder, config.search.metric, config.train.loss)):
        problem = check_in_child(config, config.model.check_seconds)
    elif check and (config.search.metric != "auto" or config.train.loss != "auto"):
        problem = checked_here(config)  # evens' own metric and loss: no user code to keep at arm's length
    else:
        problem = None
    if problem is not None:
        return problem
    try:
        with as_guest():
            load_user_code(config, run)
    except (UserCodeError, DataError) as exc:
        return str(exc)
    return None


def checked_here(config: Config) -> str | None:
    """The master's checks of the user's code, in this process (as a guest): what is wrong, or None."""
    try:
        with as_guest():
            load_user_code(config)
            options = config.data
            plan = inspect_file(options.path, options.val_fraction, options.test_fraction, options.split_seed, options.allow_external)
            check_metric_for(config, plan)
            check_loss_for(config, plan)
            if config.model.builder:
                check_builder(config, plan)
    except (UserCodeError, DataError) as exc:
        return str(exc)
    return None


def check_in_child(config: Config, seconds: float) -> str | None:
    """:func:`checked_here` in a fresh interpreter (``python -m evolve.app.infra.user_code``): no MPI of the job's (the
    launcher's variables left out), a process group of its own that is killed whole after (a builder's own
    processes too), at most ``seconds``. What is wrong, in one line, or None."""
    read_fd, write_fd = os.pipe()
    request = json.dumps({"config": config.to_dict(), "sys_path": list(sys.path)})
    # stderr goes to a file, not a pipe: a process the user's code started may hold it open long after the check
    with tempfile.TemporaryFile("w+") as err, os.fdopen(read_fd) as answer:
        try:
            proc = subprocess.Popen([sys.executable, "-m", "evolve.app.infra.user_code", str(write_fd)], stdin=subprocess.PIPE,
                                    stderr=err, pass_fds=(write_fd,), env=trainer_environment(), process_group=0, text=True)
        finally:
            os.close(write_fd)
        try:
            proc.stdin.write(request)
            proc.stdin.close()
            proc.wait(timeout=seconds)
        except (subprocess.TimeoutExpired, BrokenPipeError) as exc:
            if isinstance(exc, subprocess.TimeoutExpired):
                return f"{_named(config)}: the master's check did not finish in {seconds:.0f} s (code that waits for something " \
                       "that never comes? a builder must not call MPI or wait for other processes)"
        finally:
            _kill_group(proc.pid)  # what the user's code started, whatever became of the check
            proc.wait()
        result = answer.read()
        err.seek(0)
        said = err.read()
    if not result:
        last = next((line for line in reversed(said.splitlines()) if line.strip()), "")
        code = proc.returncode
        why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return f"{_named(config)}: the master's check ended ({why}) before it could say" + (f": {last.strip()}" if last else "")
    if said.strip():
        sys.stderr.write(said)  # what the user's code printed
    return json.loads(result)["error"]


def _named(config: Config) -> str:
    names = [f"{what} {ref}" for what, ref in (("model builder", config.model.builder), ("metric", config.search.metric),
                                                ("loss", config.train.loss)) if is_reference(ref)]
    return ", ".join(names) or "user code"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _NoMPI(types.ModuleType):
    """mpi4py as a user's code sees it on the master: any use is a one-line error (the job's MPI is evens')."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # what the import system and hasattr probe
            raise AttributeError(name)
        if name == "MPI" and self.__name__ == "mpi4py":  # `from mpi4py import MPI` alone is harmless; its use is not
            return sys.modules["mpi4py.MPI"]
        raise UserCodeError("user code may not use MPI on the master (mpi4py): the job's ranks are evens'; "
                            "a network's own code runs in a training process")


@contextlib.contextmanager
def as_guest():
    """Run a user's code on this rank: mpi4py out of its reach while it runs, evens' stop-signal handlers (and any
    other it changed among them) put back after, a SystemExit in it a failure of its own (see USER_FAILURES)."""
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    hidden = {name: module for name, module in sys.modules.items() if name == "mpi4py" or name.startswith("mpi4py.")}
    for name in hidden:
        del sys.modules[name]
    sys.modules["mpi4py"], sys.modules["mpi4py.MPI"] = _NoMPI("mpi4py"), _NoMPI("mpi4py.MPI")
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n == "mpi4py" or n.startswith("mpi4py.")]:
            del sys.modules[name]
        sys.modules.update(hidden)
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    """``python -m evolve.app.infra.user_code FD``: the master's checks (:func:`check_in_child`) of the config read from
    standard input; ``{"error": ... or null}`` written to the descriptor FD."""
    from evolve.config.schema import config_from_dict

    request = json.loads(sys.stdin.read())
    for folder in reversed(request["sys_path"]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    error = checked_here(config_from_dict(request["config"]))
    with os.fdopen(int(argv[0]), "w") as out:
        out.write(json.dumps({"error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
