"""Errors that mean "the user's input is wrong": printed as one line, never as a traceback
(unless ``--debug``, which also shows where it was raised)."""
import sys
import traceback

DEBUG = False  # set by the command line's --debug


def debug_traceback() -> None:
    """With ``--debug``, print the traceback of the exception being handled (a user error's origin)."""
    if DEBUG:
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()


class EvensError(Exception):
    """Base of the errors reported to the user as ``evens: error: <message>``."""


class ConfigError(EvensError):
    """A config file or a ``--set`` override is missing, malformed or out of range."""


class RunDirError(EvensError):
    """A run directory is missing, already used, or holds no usable checkpoint."""
