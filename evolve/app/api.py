"""Start a search from Python: the same job as ``evens run``, for a config built in code or a builder passed as a function.

Run the script on every rank of the job (``mpiexec -n 8 python my_search.py``, or ``srun``); the roles
split inside the call, and without mpiexec it runs in one process::

    # my_search.py
    from evolve import run_search_from
    from mynets.volumes import build          # a builder must live in an importable module

    if __name__ == "__main__":               # ranks (and trainer processes) may import this script
        run_dir = run_search_from("my.toml", builder=build, overrides={"search.evaluations": 200})
        if run_dir is not None:               # rank 0
            print("the run is in", run_dir)
"""
from __future__ import annotations

import importlib
import json
import math
from typing import Callable

from evolve.errors import ConfigError


class SearchFailed(RuntimeError):
    """The search ended without finishing: ``status`` is ``evens run``'s exit status (docs/cluster.md);
    75 means stopped and resumable. Why was printed on rank 0."""

    def __init__(self, status: int):
        super().__init__(f"the search ended with exit status {status}" + (" (stopped; resume it)" if status == 75 else ""))
        self.status = status


def run_search_from(config: str | None = None, *, builder: Callable | str | None = None, overrides: dict | None = None,
                    out: str | None = None, resume: str | None = None, quiet: bool = False) -> str | None:
    """Run (or with ``resume``, continue) a search on every rank of the job; collective.

    ``config`` is a TOML file (None with ``resume``: the run's own); ``overrides`` maps dotted keys to
    values, as ``--set`` does (``{"search.evaluations": 200, "space.width": [32, 64]}``); ``builder`` is
    a model builder (a function in an importable module, or ``"module:function"``), which sets
    ``model.builder``. Returns the run directory on rank 0 and None on the other ranks once the search
    has finished; raises :class:`SearchFailed` on every rank if it ended otherwise (bad input, a
    signal, a failure: the reason is printed on rank 0).
    """
    from evolve.app import cli

    sets = [f"{key}={toml_literal(value)}" for key, value in (overrides or {}).items()]
    if builder is not None:
        sets.append(f"model.builder={toml_literal(builder_reference(builder))}")
    stop = cli.StopFlag()  # before MPI starts, so that a signal while the job starts up is kept (see StopFlag)
    from evolve.app import driver  # mpi4py and torch: imported when a search starts, not with evolve

    result: dict = {}

    def search() -> int:
        result["status"], result["run_dir"] = driver.run_search(config, sets, out=out, resume=resume, quiet=quiet, stop=stop)
        return result["status"]

    status = cli.collective(search)  # an exception on one rank ends the whole job, never leaves it waiting
    if status != 0:
        raise SearchFailed(status)
    return result.get("run_dir")


def builder_reference(builder: Callable | str) -> str:
    """``module:function`` for a builder function; ConfigError in one line for one that cannot be imported by name."""
    if isinstance(builder, str):
        return builder
    module, name = getattr(builder, "__module__", None), getattr(builder, "__qualname__", "")
    where = getattr(builder, "__name__", repr(builder))
    if module == "__main__":
        raise ConfigError(f"model builder {where} is defined in the launching script (__main__); every rank imports it by "
                          "name, and predict does later: move it into a module and import it from there")
    if not module or "." in name or "<" in name:
        raise ConfigError(f"model builder {where}: a builder must be a module-level function (found {module}:{name})")
    if getattr(importlib.import_module(module), name, None) is not builder:
        raise ConfigError(f"model builder {where}: {module}.{name} is not this function")
    return f"{module}:{name}"


def toml_literal(value) -> str:
    """``value`` as a TOML literal, for a ``--set`` override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"overrides: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_literal(v)}" for k, v in value.items()) + " }"
    raise ConfigError(f"overrides: cannot write {type(value).__name__} {value!r} as a config value")


__all__ = ["SearchFailed", "run_search_from"]
