"""Writers for the evens format: from ``.npz`` files (:func:`npz_to_h5`), and the offline demo sets."""
from __future__ import annotations

import os
import sys
import zipfile
from typing import Callable

import h5py
import numpy as np

from .h5file import MAX_CLASSES, SPLITS, DataError, first_line, write_dataset

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

    Keys are read as :data:`ACCEPTED` says; any other key is an error unless ``ignore_extra``. ``x`` keeps
    its shape: series are (N, C, L) with any C (a univariate one (N, 1, L): (N, L) is a table), all of one
    length; ragged series (object arrays, or NaN-padded) are refused with how to pad them. Class
    labels other than 0..C-1 (strings, say) are written as class indices, with the labels as the
    dataset ``classes``. What the conversion decides for the user (labels encoded, splits the run will
    hold out, keys left out) is said, one line each, through ``say``. The .npz is opened with
    ``allow_pickle=False``: object arrays are refused, never executed. ``dst`` is never the input, and
    replaces an existing file only with ``overwrite``.

    >>> npz_to_h5("mine.npz", "mine.h5")  # doctest: +SKIP
    {'train': 800, 'test': 200}
    """
    with _open_npz(src) as npz:
        _check_destination(src, dst, overwrite)
        pairs = assign_keys(src, npz.files, ignore_extra, say)
        splits = {split: (_features(src, kx, _load(npz, src, kx)), _load(npz, src, ky)) for split, (kx, ky) in pairs.items()}
    _check_splits(src, pairs, splits)
    _note_series_layout(src, pairs["train"][0], splits["train"][0].shape[1:], say)
    ys, classes = _targets(src, dst, pairs, {split: y for split, (_, y) in splits.items()}, say)
    splits = {split: (x, ys[split]) for split, (x, _) in splits.items()}
    missing = [split for split in ("val", "test") if split not in splits]
    if missing:
        fractions = " and ".join(f"data.{split}_fraction" for split in missing)
        folds = (" (or, without val and under 1,000 training rows, cross-validates them: data.folds = \"auto\")"
                 if "val" in missing else "")
        say(f"{src}: no {' or '.join(missing)} split; evens run takes {'it' if len(missing) == 1 else 'them'} from train, "
            f"held out by {fractions} with data.split_seed{folds}")
    try:
        write_dataset(dst, splits, overwrite=overwrite, classes=classes)
    except OSError as exc:
        raise DataError(f"{dst}: cannot write it ({exc.strerror or first_line(exc)})") from None
    return {split: len(y) for split, (_, y) in splits.items()}


def _check_destination(src: str, dst: str, overwrite: bool) -> None:
    """Refuse, before reading the arrays, to write over a folder, the input, or (without ``overwrite``) any file."""
    if os.path.isdir(dst):
        raise DataError(f"{dst}: is a directory; name the .h5 file to write")
    if os.path.lexists(dst):
        if os.path.exists(src) and os.path.exists(dst) and os.path.samefile(src, dst):
            raise DataError(f"{dst}: is the input; write the output to another file")
        if not overwrite:
            raise DataError(f"{dst}: already exists; refusing to overwrite it (--force replaces it)")


def _open_npz(src: str) -> np.lib.npyio.NpzFile:
    """``src`` opened as an .npz archive, never unpickling; or a one-line error that says what it is instead."""
    if not os.path.exists(src):
        raise DataError(f"{src}: no such file")
    if not os.path.isfile(src):
        raise DataError(f"{src}: is not a regular file")
    why = _not_npz(src)
    if why:
        raise DataError(f"{src}: {why}")
    try:
        npz = np.load(src, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{src}: not a readable .npz file ({first_line(exc)})") from None
    return npz


def _not_npz(src: str) -> str | None:
    """What ``src`` is if not a zip archive (what ``numpy.savez`` writes), and what to do instead."""
    try:
        with open(src, "rb") as f:
            head = f.read(1024)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or first_line(exc)})"
    save = f"numpy.savez('{os.path.splitext(src)[0]}.npz', x=x, y=y)"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return None
    if not head:
        return "is empty"
    if h5py.is_hdf5(src):
        try:
            with h5py.File(src, "r") as f:
                evens = isinstance(f.get("train"), h5py.Group) and "x" in f["train"]
        except (OSError, RuntimeError, KeyError, ValueError):
            evens = False
        if evens:
            return "is already in the evens format (HDF5 with train/x and train/y): use it as data.path, no conversion needed"
        return ("is an HDF5 file, not an .npz; evens reads HDF5 with groups train, val and test holding x and y "
                "(docs/data-format.md): write one with data_bcast.write_dataset")
    if head.startswith(np.lib.format.MAGIC_PREFIX):
        return f"is a single array (.npy), not an .npz; save x and y together: {save}"
    if head[:1] == b"\x80":
        return f"is a Python pickle, which evens never loads (unpickling can run code); save the arrays: {save}"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not a character cut at the end of what was read
            return f"is not an .npz archive (what numpy.savez writes): {save}"
    return f"is a text file (a CSV?), not an .npz; load it (numpy.loadtxt, pandas.read_csv) and save the arrays: {save}"


# Series of different lengths arrive as object arrays (numpy's only way to hold a ragged list) or
# NaN-padded (tslearn's to_time_series_dataset); evens takes one length, so the user pads.
PAD = ("pad every series to the longest length with zeros or its last value, or truncate, "
       "then save a float array of shape (N, C, L)")


def _load(npz: np.lib.npyio.NpzFile, src: str, key: str) -> np.ndarray:
    """One array of the archive; an object array is refused, as loading it would unpickle."""
    try:
        return npz[key]
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            shape = _stored_shape(npz, key)
            what = f"an object array{f' of shape {shape}' if shape is not None else ''}"
            if (key_meaning(key) or ("", ""))[1] == "x":
                hint = f"save x as numbers (x.astype(np.float32)); series of different lengths cannot be stacked: {PAD}"
            else:
                hint = "save string labels with y.astype(str) and features as numbers"
            raise DataError(f"{src}: cannot read {key}: it is {what}, which evens never loads (unpickling can run code); {hint}") from None
        raise DataError(f"{src}: cannot read {key} ({first_line(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{src}: cannot read {key} ({first_line(exc)})") from None


def _stored_shape(npz: np.lib.npyio.NpzFile, key: str) -> tuple[int, ...] | None:
    """The shape in ``key``'s .npy header, read without loading the array; None if the header is not a plain one."""
    try:
        with npz.zip.open(f"{key}.npy") as f:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}[version]
            return tuple(read(f)[0])
    except (KeyError, OSError, ValueError, zipfile.BadZipFile):
        return None


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


def _features(src: str, key: str, x: np.ndarray) -> np.ndarray:
    """``x`` as it will be written: uint8 kept, other real numbers as finite float32, in C order."""
    if x.ndim < 2:
        hint = " (one feature: save x.reshape(-1, 1))" if x.ndim == 1 else ""
        raise DataError(f"{src}: {key} has shape {x.shape}; x needs a row per sample, (N, F) or more{hint}")
    if 0 in x.shape:
        raise DataError(f"{src}: {key} has shape {x.shape}, with no values in it")
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    if x.dtype.kind not in "biuf":
        raise DataError(f"{src}: {key} holds {x.dtype}; x must hold real numbers (stored as float32, or uint8 kept as bytes)")
    with np.errstate(over="ignore"):
        x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if bad.any():
        fix = ("series of different lengths padded with NaN? pad with zeros or each series' last value instead, "
               "or truncate all to the shortest") if _nan_padded(x[bad]) else "fill in or drop those rows"
        raise DataError(f"{src}: {key} holds NaN or infinite values (as float32) in {np.count_nonzero(bad)} rows, "
                        f"first row {np.argmax(bad)}; evens needs finite values: {fix}")
    return x


def _nan_padded(rows: np.ndarray) -> bool:
    """Whether series ``rows`` (N, C, L) end in NaN and hold none before: ragged series padded with NaN."""
    if rows.ndim != 3:
        return False
    nan = np.isnan(rows)
    return bool(nan[..., -1].any() and np.isfinite(rows[~nan]).all() and (np.maximum.accumulate(nan, axis=-1) == nan).all())


def _note_series_layout(src: str, key: str, sample: tuple[int, ...], say: Callable[[str], None]) -> None:
    """Say how a series of more channels than steps is read: often it is channels last (Keras, tslearn), which evens would misread."""
    if len(sample) == 2 and sample[0] > sample[1]:
        say(f"{src}: {key} samples have shape {sample}, read as {sample[0]} channels of {sample[1]} steps; if they are "
            f"{sample[0]} steps of {sample[1]} channels (channels last), save x.transpose(0, 2, 1)")


def _check_splits(src: str, pairs: dict[str, tuple[str, str]], splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """One row of y per row of x, and every split's samples like train's."""
    train_x = pairs["train"][0]
    shape, dtype = splits["train"][0].shape[1:], splits["train"][0].dtype
    for split, (x, y) in splits.items():
        kx, ky = pairs[split]
        if y.ndim == 0 or len(x) != len(y):
            raise DataError(f"{src}: {kx} has {len(x)} rows but {ky} has {len(y) if y.ndim else 'shape ()'}; "
                            "y needs one row per row of x")
        if x.shape[1:] != shape:
            raise DataError(f"{src}: {kx} samples have shape {x.shape[1:]} but {train_x} samples have {shape}")
        if x.dtype != dtype:
            raise DataError(f"{src}: {kx} is stored as {x.dtype} but {train_x} as {dtype}; give every split's x one dtype")


def _targets(src: str, dst: str, pairs: dict[str, tuple[str, str]], ys: dict[str, np.ndarray],
             say: Callable[[str], None]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """y of every split as it will be written, and the original class labels if they were encoded.

    As everywhere in evens, the dtype says what is learned: integers (and booleans and strings) are
    class labels, floats are regression targets. Labels other than 0..C-1 are encoded as the index of
    each label among train's sorted labels, and those labels become /classes.
    """
    kinds = {split: _target_kind(src, pairs[split][1], y) for split, y in ys.items()}
    train_y = pairs["train"][1]
    for split, kind in kinds.items():
        if kind != kinds["train"]:
            raise DataError(f"{src}: {pairs[split][1]} holds {kind} but {train_y} holds {kinds['train']}; "
                            "every split needs the same kind of y")
    if kinds["train"] == _TARGETS:
        y = ys["train"]
        if y.size and np.array_equal(y, np.round(y)):
            say(f"{src}: {train_y} holds whole numbers stored as floats: evens learns floats as regression targets "
                "(save y.astype(int) for class labels)")
        return ys, None
    labels = {split: _as_labels(src, pairs[split][1], y) for split, y in ys.items()}
    classes = np.unique(labels["train"])
    for split, y in labels.items():
        unseen = np.setdiff1d(y, classes)
        if unseen.size:
            count = int(np.isin(y, unseen).sum())
            more = f" and {unseen.size - 1} more" if unseen.size > 1 else ""
            raise DataError(f"{src}: {pairs[split][1]} has label {_label(unseen[0])}{more} ({count} sample{'s' if count > 1 else ''}) "
                            f"that {train_y} never has; every class needs samples in train")
    if len(classes) < 2:
        raise DataError(f"{src}: {train_y} holds {len(classes)} class; classification needs at least two")
    if len(classes) > MAX_CLASSES:
        raise DataError(f"{src}: {train_y} holds {len(classes)} distinct labels, more than {MAX_CLASSES} classes; "
                        "store regression targets as floats")
    if classes.dtype.kind in "iu" and classes[0] == 0 and classes[-1] == len(classes) - 1:
        return labels, None
    shown = [f"{c}={i}" for i, c in enumerate(classes)]
    mapping = ", ".join(shown if len(shown) <= 6 else shown[:4] + ["...", shown[-1]])
    what = "string labels" if classes.dtype.kind == "U" else "labels other than 0..C-1"
    say(f"{src}: {train_y} holds {what}; wrote them as class indices 0..{len(classes) - 1} in sorted order ({mapping}), "
        f"and the labels as the dataset classes in {dst}")
    return {split: np.searchsorted(classes, y).astype(np.int64) for split, y in labels.items()}, classes


_INTEGERS, _STRINGS, _TARGETS = "integer class labels", "string class labels", "float regression targets"


def _target_kind(src: str, key: str, y: np.ndarray) -> str:
    """What ``y`` holds, after refusing what evens cannot learn from."""
    if y.dtype.kind == "f":
        if y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] == 0):
            raise DataError(f"{src}: {key} has shape {y.shape}; regression targets need shape (N,) or (N, T)")
        with np.errstate(over="ignore"):
            if not np.isfinite(y.astype(np.float32)).all():
                raise DataError(f"{src}: {key} holds NaN or infinite values (as float32)")
        return _TARGETS
    if y.dtype.kind not in "biuUS":
        raise DataError(f"{src}: {key} holds {y.dtype}; y must hold class labels (integers or strings) or regression targets (floats)")
    if y.ndim != 1:
        hint = " (save y.ravel())" if y.ndim == 2 and y.shape[1] == 1 else ""
        raise DataError(f"{src}: {key} has shape {y.shape}; class labels need one per row, shape (N,){hint}")
    return _STRINGS if y.dtype.kind in "US" else _INTEGERS


def _as_labels(src: str, key: str, y: np.ndarray) -> np.ndarray:
    """Class labels to sort and compare: bytes decoded as UTF-8, booleans as 0 and 1."""
    if y.dtype.kind == "b":
        return y.astype(np.int64)
    if y.dtype.kind == "S":
        try:
            return np.char.decode(y, "utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{src}: {key} holds bytes that are not UTF-8 text; save the labels as str") from None
    return y


def _label(value) -> str:
    """A class label as the user wrote it: 'cat' for a string, 7 for an integer."""
    return f"'{value}'" if isinstance(value, str) else str(value)


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
