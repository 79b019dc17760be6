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


def _sklearn_dataset(name: str):
    try:
        from sklearn import datasets
    except ImportError:
        raise DataError(f"the {name} demo data needs scikit-learn, a dependency of evens: pip install 'scikit-learn>=1.2'") from None
    return getattr(datasets, f"load_{name}")()


def _write_seeded_split(dst: str, x: np.ndarray, y: np.ndarray, test: float, val: float, seed: int, overwrite: bool) -> dict[str, int]:
    """Shuffle with ``seed``, cut ``test`` then ``val`` fractions off, keep the rest as train, and write."""
    order = np.random.default_rng(seed).permutation(len(y))
    n_test, n_val = int(test * len(y)), int(val * len(y))
    parts = {
        "test": order[:n_test],
        "val": order[n_test : n_test + n_val],
        "train": order[n_test + n_val :],
    }
    write_dataset(dst, {split: (x[rows], y[rows]) for split, rows in parts.items()}, overwrite=overwrite)
    return {split: len(rows) for split, rows in parts.items()}


def write_digits(dst: str, seed: int = 0, overwrite: bool = False) -> dict[str, int]:
    """Write scikit-learn's bundled 8x8 digits (1,797 images, 10 classes) as (N, 1, 8, 8) float32 in [0, 1].

    The data ships inside scikit-learn, so nothing is downloaded. Split, seeded: 40 % test (718),
    20 % val (359), 40 % train (720). The large test split keeps the comparison of networks and
    ensembles above the noise of a few samples; the small train split keeps the task from
    saturating, where everything is within two test samples of everything else.
    """
    digits = _sklearn_dataset("digits")
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    return _write_seeded_split(dst, x, digits.target.astype(np.int64), 0.40, 0.20, seed, overwrite)


def write_diabetes(dst: str, seed: int = 0, overwrite: bool = False) -> dict[str, int]:
    """Write scikit-learn's bundled diabetes data (442 patients, 10 features) as a regression set.

    The target is a measure of disease progression one year after baseline (25 to 346). The
    features, which scikit-learn ships centred and scaled to unit norm, are rescaled to unit
    variance; the targets are kept in their own units (evens standardises them for training and
    reports RMSE in these units). Split, seeded: 20 % test (88), 20 % val (88), 60 % train (266).
    """
    diabetes = _sklearn_dataset("diabetes")
    x = diabetes.data / diabetes.data.std(axis=0)
    return _write_seeded_split(dst, x.astype(np.float32), diabetes.target.astype(np.float32), 0.20, 0.20, seed, overwrite)
