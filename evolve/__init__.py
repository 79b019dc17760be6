"""Decide what to train next and keep the record.

``search`` decodes genomes into networks and breeds them (DEAP's operators,
the strategies, early stopping), ``engine`` runs the master's search loop over
a transport, ``transport`` carries tasks and results (over MPI, or in one
process), ``runfile`` stores and restores the run, ``config`` reads its
settings, and ``app`` is the ``evens`` command (``app.driver`` branches the
master and worker roles under MPI).
"""
__version__ = "0.1.0"
