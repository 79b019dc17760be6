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
import os
import sys
from typing import Callable

from evolve.errors import ConfigError


class SearchFailed(RuntimeError):
    """The search ended without finishing: ``status`` is ``evens run``'s exit status (docs/cluster.md);
    75 means stopped and resumable. Why was printed on rank 0."""

    def __init__(self, status: int):
        super().__init__(f"the search ended with exit status {status}" + (" (stopped; resume it)" if status == 75 else ""))
        self.status = status


def run_search_from(config: str | dict | None = None, *, builder: Callable | str | None = None, overrides: dict | None = None,
                    out: str | None = None, resume: str | None = None, quiet: bool = False) -> str | None:
    """Run (or with ``resume``, continue) a search on every rank of the job; collective.

    ``config`` is a TOML file, or the same tables as a dict built in code (``{"data": {"path": "d.h5"},
    "search": {"evaluations": 200}}``), or None with ``resume`` (the run's own); ``overrides`` maps dotted keys
    to values, as ``--set`` does (``{"search.evaluations": 200, "space.width": [32, 64]}``); ``builder`` is a
    model builder (a function in an importable module, or ``"module:function"``), which sets ``model.builder``.
    Returns the run directory on rank 0 and None on the other ranks once the search has finished; raises
    :class:`SearchFailed` on every rank if it ended otherwise (bad input, a signal, a failure: the reason is
    printed on rank 0, in one line). The process's signal handlers are as they were when it returns or raises.
    """
    from evolve.app.infra import process

    try:
        config_path, sets = search_arguments(config, builder, overrides)
    except ConfigError as exc:  # the same on every rank: each raises, rank 0 says why
        if process.launcher_rank() == 0:
            print(f"evens: error: {exc}", file=sys.stderr, flush=True)
        raise SearchFailed(2) from None
    stop = process.StopFlag()  # before MPI starts, so that a signal while the job starts up is kept (see StopFlag)
    try:
        from evolve.app.run import driver  # mpi4py and torch: imported when a search starts, not with evolve

        result: dict = {}

        def search() -> int:
            result["status"], result["run_dir"] = driver.run_search(config_path, sets, out=out, resume=resume, quiet=quiet, stop=stop)
            return result["status"]

        status = process.collective(search)  # an exception on one rank ends the whole job, never leaves it waiting
    finally:
        stop.close()  # the caller's handlers again (a worker rank's ignored signals too)
    if status != 0:
        raise SearchFailed(status)
    return result.get("run_dir")


def search_arguments(config: str | dict | None, builder: Callable | str | None, overrides: dict | None) -> tuple[str | None, list[str]]:
    """The config file and the ``--set`` strings that ``evens run`` would be given; ConfigError in one line."""
    from evolve.config.schema import OVERRIDE_KEY

    if config is not None and not isinstance(config, (str, os.PathLike, dict)):
        raise ConfigError(f"config: give a TOML file's path or a dict of its tables, not {type(config).__name__}")
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"overrides: give a dict of dotted keys and values, not {type(overrides).__name__}")
    sets = [f"{key}={toml_literal(value)}" for key, value in _dotted(config).items()] if isinstance(config, dict) else []
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not OVERRIDE_KEY.fullmatch(key):
            raise ConfigError(f"overrides: {key!r} is not a dotted config key (section.key, as search.evaluations)")
        sets.append(f"{key}={toml_literal(value)}")
    if builder is not None:
        sets.append(f"model.builder={toml_literal(builder_reference(builder))}")
    return (None if isinstance(config, dict) else config and os.fspath(config)), sets


def _dotted(tables: dict) -> dict:
    """A config's tables as dotted keys: ``{"search": {"evaluations": 9}}`` is ``{"search.evaluations": 9}``;
    a space gene's table (``{"space": {"width": {"type": "choice", ...}}}``) stays one value."""
    flat = {}
    for section, table in tables.items():
        if not isinstance(section, str) or not isinstance(table, dict):
            raise ConfigError(f"config: {section!r} must name a table of keys (a dict), as [search] in a TOML file")
        for key, value in table.items():
            flat[f"{section}.{key}"] = value
    return flat


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
