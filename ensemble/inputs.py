"""What ``evens predict`` checks of new inputs before anything is built: torch-free, so that bad input is refused on
every rank without importing torch (ensemble.predict applies the ensemble)."""
from __future__ import annotations

import numpy as np

from .store import EnsembleError

EVAL_BATCH = 4096  # rows a forward pass takes at once when a network is evaluated or applied


def check_inputs(shape: tuple[int, ...], dtype: np.dtype, sample_shape: tuple[int, ...], x_dtype: str, where: str = "x") -> None:
    """Raise :class:`EnsembleError` unless inputs of ``shape`` and ``dtype`` suit the ensemble."""
    if tuple(shape[1:]) != tuple(sample_shape) or len(shape) != len(sample_shape) + 1:
        want = "(N, " + ", ".join(str(s) for s in sample_shape) + ")"
        raise EnsembleError(f"{where} has shape {tuple(shape)}; the ensemble takes {want}")
    dtype = np.dtype(dtype)
    if x_dtype == "uint8" and dtype != np.uint8:
        raise EnsembleError(f"{where} is {dtype}; the ensemble was trained on uint8 inputs (scaled by 1/255)")
    if x_dtype == "float32" and not np.issubdtype(dtype, np.floating):
        raise EnsembleError(f"{where} is {dtype}; the ensemble takes floating-point inputs (it was trained on float32)")


def as_input(x: np.ndarray, x_dtype: str, where: str = "x") -> np.ndarray:
    """``x`` in the dtype the networks take, refusing NaN and infinities (also after a cast to float32)."""
    if x_dtype == "uint8":
        return np.ascontiguousarray(x)
    with np.errstate(over="ignore"):
        x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise EnsembleError(f"{where} holds NaN or infinite values (as float32)")
    return x
