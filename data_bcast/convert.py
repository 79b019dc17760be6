"""Writers for the evens format: from ``.npz`` files, and the offline digits demo set."""
from __future__ import annotations

import os
import zipfile

import numpy as np

from .h5file import SPLITS, DataError, write_dataset

# Key spellings accepted in an .npz file, per split: x_train/y_train, train_x/train_y;
# plain x/y count as train.
_ALIASES = {split: ((f"x_{split}", f"y_{split}"), (f"{split}_x", f"{split}_y")) for split in SPLITS}
_ALIASES["train"] += (("x", "y"),)


def npz_to_h5(src: str, dst: str, overwrite: bool = False) -> dict[str, int]:
    """Convert an .npz file to the evens format; returns the number of samples per split.

    The .npz is opened with ``allow_pickle=False``: object arrays are refused, never executed.
    """
    if not os.path.exists(src):
        raise DataError(f"{src}: no such file")
    try:
        npz = np.load(src, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{src}: not a readable .npz file ({exc})") from None
    with npz:
        keys = set(npz.files)
        splits = {}
        for split, aliases in _ALIASES.items():
            for kx, ky in aliases:
                if kx in keys and ky in keys:
                    try:
                        splits[split] = (npz[kx], npz[ky])
                    except (ValueError, OSError, zipfile.BadZipFile) as exc:
                        raise DataError(f"{src}: cannot read {kx}/{ky} ({exc})") from None
                    break
    if "train" not in splits:
        raise DataError(f"{src}: found keys {sorted(keys)}; need x_train and y_train (or x and y)")
    write_dataset(dst, splits, overwrite=overwrite)
    return {split: len(y) for split, (_, y) in splits.items()}


def write_digits(dst: str, seed: int = 0, overwrite: bool = False) -> dict[str, int]:
    """Write scikit-learn's bundled 8x8 digits (1,797 images, 10 classes) as (N, 1, 8, 8) float32 in [0, 1].

    The data ships inside scikit-learn, so nothing is downloaded. Split, seeded: 40 % test (718),
    20 % val (359), 40 % train (720). The large test split keeps the comparison of networks and
    ensembles above the noise of a few samples; the small train split keeps the task from
    saturating at 99.5 %, where everything is within two test samples of everything else.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("the digits demo data needs scikit-learn: pip install 'evens[demo]'") from None
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test, n_val = int(0.40 * len(y)), int(0.20 * len(y))
    parts = {
        "test": order[:n_test],
        "val": order[n_test : n_test + n_val],
        "train": order[n_test + n_val :],
    }
    write_dataset(dst, {split: (x[rows], y[rows]) for split, rows in parts.items()}, overwrite=overwrite)
    return {split: len(rows) for split, rows in parts.items()}
