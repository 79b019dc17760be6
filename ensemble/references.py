"""User code named ``module:function`` in a config (a model builder, a loss, a metric), imported by name.

No torch in here, so that the search and the scoring code can name user functions too. A module is
imported only from what is importable (``sys.path``, which ``model.path`` and ``--model-path``
extend): never from a path stored in a run file.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from typing import Callable

REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")  # "package.module:function"


class UserCodeError(Exception):
    """User code that cannot be used, in one line naming it and the problem."""


class ModuleMissing(UserCodeError):
    """User code whose module is not importable here; ``reference``, ``what`` and ``missing`` name it, so that
    a caller that knows where the code came from (a run's stored ``model.path``) can say so."""

    def __init__(self, reference: str, what: str, missing: str, hint: str = "install it, or give its folder as model.path or --model-path"):
        super().__init__(f"{what} {reference}: no module named {missing!r} ({hint})")
        self.reference, self.what, self.missing = reference, what, missing

    def hinted(self, hint: str) -> ModuleMissing:
        return ModuleMissing(self.reference, self.what, self.missing, hint)


# What a user's code may raise that is its own failure: SystemExit too (a module or a builder that calls
# sys.exit), which would otherwise end the rank with a traceback and an MPI_Abort; not KeyboardInterrupt.
USER_FAILURES = (Exception, SystemExit)


def is_reference(text: str) -> bool:
    return isinstance(text, str) and bool(REFERENCE.match(text))


def add_model_path(directory: str) -> None:
    """Make modules in ``directory`` importable (``model.path``, ``--model-path``); a missing folder is an error."""
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise UserCodeError(f"model path {directory}: no such directory")
    if directory not in sys.path:
        sys.path.insert(0, directory)


def _module_name(reference: str, what: str) -> str:
    """The module part of ``reference``; UserCodeError unless it is ``module:function``."""
    if not is_reference(reference):
        raise UserCodeError(f"{what} {reference!r}: expected 'module:function', e.g. 'mynets.volumes:build'")
    return reference.split(":")[0]


def _no_module(reference: str, what: str, missing: str) -> ModuleMissing:
    return ModuleMissing(reference, what, missing)


def import_by_name(reference: str, what: str = "model builder") -> Callable:
    """The function ``reference`` (``module:function``) names; UserCodeError in one line naming ``what`` it is."""
    module_name, function = _module_name(reference, what), reference.split(":")[1]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _no_module(reference, what, exc.name or module_name) from None
    except USER_FAILURES as exc:  # the user's module raised (or exited) while importing; say what, in one line
        raise UserCodeError(f"{what} {reference}: importing {module_name} raised {type(exc).__name__}: {first_line(exc)}") from None
    found = getattr(module, function, None)
    if found is None:
        raise UserCodeError(f"{what} {reference}: module {module_name} has no {function!r}")
    if not callable(found):
        raise UserCodeError(f"{what} {reference}: {function!r} is a {type(found).__name__}, not a function")
    return found


def find_by_name(reference: str, what: str = "model builder") -> None:
    """Check, without running it, that the module of ``reference`` can be imported here (a rank whose
    trainings run in a process of their own, which imports it); UserCodeError in one line as
    :func:`import_by_name`'s. (Finding a submodule imports its parent packages.)"""
    module_name = _module_name(reference, what)
    try:
        found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError as exc:
        raise _no_module(reference, what, exc.name or module_name) from None
    except USER_FAILURES as exc:  # a parent package raised (or exited) while importing
        raise UserCodeError(f"{what} {reference}: importing {module_name} raised {type(exc).__name__}: {first_line(exc)}") from None
    if found is None:
        raise _no_module(reference, what, module_name)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
