"""Errors that mean "the user's input is wrong": printed as one line, never as a traceback."""


class EvensError(Exception):
    """Base of the errors reported to the user as ``evens: error: <message>``."""


class ConfigError(EvensError):
    """A config file or a ``--set`` override is missing, malformed or out of range."""


class RunDirError(EvensError):
    """A run directory is missing, already used, or holds no usable checkpoint."""
