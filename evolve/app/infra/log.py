"""Logging for ``evens run``: the standard logging module, one logger ("evens"), on standard error.

The master logs what the user should see (``evens: ...`` lines) at INFO; ``--quiet`` keeps
warnings and errors only, ``--verbose`` adds DEBUG lines (every evaluation, every worker's device).
Workers log warnings and errors only, unless ``--verbose``; their lines name the rank and host, so
that a message from one of 27,648 ranks says where it came from.
"""
from __future__ import annotations

import logging
import socket
import sys

LOG = logging.getLogger("evens")


def setup_logging(master: bool, rank: int, quiet: bool = False, verbose: bool = False, stream=None) -> None:
    """Configure the "evens" logger for the ``master`` or another ``rank`` (idempotent: replaces an earlier handler)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    prefix = "evens" if master else f"evens[rank {rank} on {socket.gethostname()}]"
    handler.setFormatter(logging.Formatter(prefix + ": %(message)s"))
    for old in list(LOG.handlers):
        LOG.removeHandler(old)
    LOG.addHandler(handler)
    LOG.propagate = False
    if verbose:
        LOG.setLevel(logging.DEBUG)
    elif quiet or not master:
        LOG.setLevel(logging.WARNING)
    else:
        LOG.setLevel(logging.INFO)
