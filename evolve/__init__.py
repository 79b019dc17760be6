"""Decide what to train next and keep the record.

``search`` decodes genomes into networks and breeds them (DEAP's operators,
the strategies, early stopping), ``engine`` runs the master's search loop over
a transport, ``transport`` carries tasks and results (over MPI, or in one
process), ``runfile`` stores and restores the run, ``config`` reads its
settings, and ``app`` is the ``evens`` command (``app.driver`` branches the
master and worker roles under MPI). ``run_search_from`` starts a search from Python
(see :mod:`evolve.app.commands.api`).
"""
import os as _os
import sys as _sys

__version__ = "0.1.0"
__all__ = ["SearchFailed", "run_search_from"]


def _no_launch_folder() -> None:
    """``python -m evolve ...`` (and the processes evens starts that way) import as the ``evens`` command does: not
    from the current folder, which Python puts first on sys.path for ``-m``, so that a module there that a run file
    names (a metric, a builder) is not run unasked; ``--model-path .`` asks for it. Kept where evens itself was
    found there (run from a source checkout that is not installed)."""
    if _sys.argv[:1] != ["-m"] or _sys.flags.safe_path or not _sys.path:
        return  # (argv[0] is "-m" while -m looks for the module: only then)
    try:
        here = _os.getcwd()
    except OSError:
        return
    if _sys.path[0] in ("", here) and _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))) != here:
        del _sys.path[0]


_no_launch_folder()


def __getattr__(name: str):
    """``run_search_from`` and ``SearchFailed`` (evolve.app.commands.api), imported on first use: importing evolve stays light."""
    if name in __all__:
        from .app.commands import api

        return getattr(api, name)
    raise AttributeError(f"module 'evolve' has no attribute {name!r}")
