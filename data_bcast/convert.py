"""Writers for the evens format: from ``.npz`` files (:func:`npz_to_h5`), and the offline demo sets."""
from __future__ import annotations

import os
import sys
import zipfile
from typing import Callable

import numpy as np

from .h5file import SPLITS, DataError, write_dataset

# An .npz key names a role, x or y, and a split, in either order and in any case: x_train, X_train,
# train_x, x_valid, ...; plain x and y are train.
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
               "test": "test", "testing": "test"}
ACCEPTED = "x and y (train), or x_train, x_val (x_valid, x_validation), x_test and the same for y, in any case, split first or last"


def key_meaning(key: str) -> tuple[str, str] | None:
    """The (split, role) an .npz key names, e.g. ``("val", "x")`` for ``X_valid``; None if it names none."""
    word = key.lower()
    if word in ("x", "y"):
        return "train", word
    first, _, last = word.partition("_")
    if first in ("x", "y") and last in SPLIT_WORDS:
        return SPLIT_WORDS[last], first
    if last in ("x", "y") and first in SPLIT_WORDS:
        return SPLIT_WORDS[first], last
    return None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def npz_to_h5(src: str, dst: str, overwrite: bool = False, ignore_extra: bool = False,
              say: Callable[[str], None] = _stderr) -> dict[str, int]:
    """Convert an .npz file to the evens format; returns the number of samples per split.

    Keys are read as :data:`ACCEPTED` says; any other key is an error unless ``ignore_extra``. What
    the conversion decides for the user (splits the run will hold out, keys left out) is said, one
    line each, through ``say``. The .npz is opened with ``allow_pickle=False``: object arrays are
    refused, never executed.

    >>> npz_to_h5("mine.npz", "mine.h5")  # doctest: +SKIP
    {'train': 800, 'test': 200}
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
        pairs = assign_keys(src, npz.files, ignore_extra, say)
        splits = {}
        for split, (kx, ky) in pairs.items():
            try:
                splits[split] = (npz[kx], npz[ky])
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise DataError(f"{src}: cannot read {kx}/{ky} ({exc})") from None
    missing = [split for split in ("val", "test") if split not in splits]
    if missing:
        fractions = " and ".join(f"data.{split}_fraction" for split in missing)
        say(f"{src}: no {' or '.join(missing)} split; evens run takes {'it' if len(missing) == 1 else 'them'} from train, "
            f"held out by {fractions} with data.split_seed")
    write_dataset(dst, splits, overwrite=overwrite)
    return {split: len(y) for split, (_, y) in splits.items()}


def assign_keys(src: str, keys: list[str], ignore_extra: bool, say: Callable[[str], None]) -> dict[str, tuple[str, str]]:
    """``{split: (x key, y key)}`` from the keys of ``src``; one-line errors for keys that are ambiguous,
    unknown (unless ``ignore_extra``, which says what it leaves out) or half a split."""
    named: dict[tuple[str, str], list[str]] = {}
    unknown = []
    for key in sorted(keys):
        meaning = key_meaning(key)
        if meaning is None:
            unknown.append(key)
        else:
            named.setdefault(meaning, []).append(key)
    if ("train", "x") not in named or ("train", "y") not in named:
        raise DataError(f"{src}: found keys {', '.join(sorted(keys)) or 'none'}; need x_train and y_train (or x and y); "
                        f"accepted: {ACCEPTED}")
    if unknown and not ignore_extra:
        raise DataError(f"{src}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; accepted: {ACCEPTED}; "
                        "rename, or leave out with --ignore-extra")
    if unknown:
        say(f"{src}: left out {', '.join(unknown)} (not keys evens reads)")
    for (split, role), names in named.items():
        if len(names) > 1:
            raise DataError(f"{src}: {' and '.join(names)} both name {split} {role}; keep one")
    pairs = {}
    for split in SPLITS:
        kx, ky = named.get((split, "x"), [None])[0], named.get((split, "y"), [None])[0]
        if kx and ky:
            pairs[split] = (kx, ky)
        elif kx or ky:
            have, role = (kx, "y") if kx else (ky, "x")
            raise DataError(f"{src}: {have} has no {role} beside it (such as {role}_{split})")
    return pairs


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
