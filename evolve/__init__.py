"""Decide what to train next and keep the record.

``search`` decodes genomes into networks and breeds them (DEAP's operators,
the strategies, early stopping), ``engine`` runs the master's search loop over
a transport, ``transport`` carries tasks and results (over MPI, or in one
process), ``runfile`` stores and restores the run, ``config`` reads its
settings, and ``app`` is the ``evens`` command (``app.driver`` branches the
master and worker roles under MPI). ``run_search_from`` starts a search from Python
(see :mod:`evolve.app.api`).
"""
__version__ = "0.1.0"
__all__ = ["SearchFailed", "run_search_from"]


def __getattr__(name: str):
    """``run_search_from`` and ``SearchFailed`` (evolve.app.api), imported on first use: importing evolve stays light."""
    if name in __all__:
        from .app import api

        return getattr(api, name)
    raise AttributeError(f"module 'evolve' has no attribute {name!r}")
