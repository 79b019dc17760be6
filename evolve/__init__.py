"""Decide what to train next and keep the record.

``space`` decodes genomes into networks, ``ga`` breeds them with DEAP's
operators, ``master`` runs the asynchronous search over a transport,
``checkpoint`` stores and restores it, ``driver`` branches the master and
worker roles under MPI, and ``cli`` is the ``evens`` command.
"""
__version__ = "0.1.0"
