"""Writers for the evens format: from ``.npz`` files (:func:`npz_to_h5`), and the offline demo sets."""
from __future__ import annotations

import math
import os
import sys
import zipfile
from typing import Callable, Iterator

import h5py
import numpy as np

from .h5file import MAX_CLASSES, SPLITS, DataError, available_memory, first_line, physical_memory, write_dataset
from .npz_members import Member, human_size, read_member, read_whole, row_blocks

BLOCK_BYTES = 8 << 20  # x is read, checked and written this many stored bytes of rows at a time

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
    hold out, keys left out) is said, one line each, through ``say``, once the file is written. Object
    arrays are refused, never unpickled. Every array's header is checked before any data is read:
    against the archive's sizes, the memory available (y is read whole), the free disk and this
    machine's memory (the most evens run takes); x is then read, checked and written a block of rows
    at a time. Running out of memory all the same is a one-line :class:`DataError`. ``dst`` is never
    the input, replaces an existing file only with ``overwrite``, and is written under an exclusive
    temporary name (:func:`write_dataset`).

    >>> npz_to_h5("mine.npz", "mine.h5")  # doctest: +SKIP
    {'train': 800, 'test': 200}
    """
    notes: list[str] = []
    try:
        counts = _convert(src, dst, overwrite, ignore_extra, notes.append)
    except MemoryError:
        memory = available_memory()
        room = f" ({human_size(memory)} available)" if memory is not None else ""
        raise DataError(f"{src}: out of memory while converting it{room}; free memory, or convert it on a larger machine") from None
    for line in notes:  # said once the file is written, so that none stands beside an error
        say(line)
    return counts


def _convert(src: str, dst: str, overwrite: bool, ignore_extra: bool, say: Callable[[str], None]) -> dict[str, int]:
    """npz_to_h5's work: every array's header checked before any data is read, y read whole, x in blocks."""
    with _open_npz(src) as npz:
        _check_destination(src, dst, overwrite)
        pairs = assign_keys(src, npz.files, ignore_extra, say)
        members = {}
        for kx, ky in pairs.values():
            members[kx] = _x_member(src, kx, read_member(npz.zip, src, kx))
            members[ky] = _refuse_objects(src, read_member(npz.zip, src, ky))
        _check_splits(src, pairs, members)
        _check_room(src, dst, [members[kx] for kx, _ in pairs.values()], [members[ky] for _, ky in pairs.values()])
        train = members[pairs["train"][0]]
        _note_series_layout(src, train.key, train.shape[1:], say)
        ys = {split: read_whole(npz.zip, src, members[ky]) for split, (_, ky) in pairs.items()}
        ys, classes = _targets(src, dst, pairs, ys, say)
        missing = [split for split in ("val", "test") if split not in pairs]
        if missing:
            fractions = " and ".join(f"data.{split}_fraction" for split in missing)
            folds = (" (or, without val and under 1,000 training rows, cross-validates them: data.folds = \"auto\")"
                     if "val" in missing else "")
            say(f"{src}: no {' or '.join(missing)} split; evens run takes {'it' if len(missing) == 1 else 'them'} from train, "
                f"held out by {fractions} with data.split_seed{folds}")
        xs = {split: CheckedRows(npz.zip, src, members[kx]) for split, (kx, _) in pairs.items()}
        write_dataset(dst, {split: (xs[split], ys[split]) for split in pairs}, overwrite=overwrite, classes=classes)
    return {split: len(y) for split, y in ys.items()}


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


def _refuse_objects(src: str, member: Member) -> Member:
    """``member``, unless it is an object array, which evens never loads (loading it would unpickle)."""
    if member.dtype.hasobject:
        what = f"an object array of shape {member.shape}"
        if (key_meaning(member.key) or ("", ""))[1] == "x":
            hint = f"save x as numbers (x.astype(np.float32)); series of different lengths cannot be stacked: {PAD}"
        else:
            hint = "save string labels with y.astype(str) and features as numbers"
        raise DataError(f"{src}: cannot read {member.key}: it is {what}, which evens never loads (unpickling can run code); {hint}")
    return member


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


def _x_member(src: str, key: str, member: Member) -> Member:
    """``member`` if its header declares an x evens takes: a row per sample, some values, real numbers."""
    _refuse_objects(src, member)
    shape, dtype = member.shape, member.dtype
    if len(shape) < 2:
        hint = " (one feature: save x.reshape(-1, 1))" if len(shape) == 1 else ""
        raise DataError(f"{src}: {key} has shape {shape}; x needs a row per sample, (N, F) or more{hint}")
    if 0 in shape:
        raise DataError(f"{src}: {key} has shape {shape}, with no values in it")
    if dtype.kind not in "biuf":
        raise DataError(f"{src}: {key} holds {dtype}; x must hold real numbers (stored as float32, or uint8 kept as bytes)")
    return member


def _written_dtype(member: Member) -> np.dtype:
    """x as evens writes it: uint8 kept, other real numbers as float32."""
    return np.dtype(np.uint8) if member.dtype == np.uint8 else np.dtype(np.float32)


def _block_rows(member: Member) -> int:
    return max(1, min(member.shape[0], BLOCK_BYTES // max(1, member.row_bytes)))


class CheckedRows:
    """One split's x as :func:`write_dataset` takes it: its shape and dtype as written, and its rows in
    blocks, converted and checked as they are read, so that x is never whole in memory (unless it is in
    Fortran order, when it is read whole and converted a block at a time)."""

    def __init__(self, archive: zipfile.ZipFile, src: str, member: Member):
        self.archive, self.src, self.member = archive, src, member
        self.shape, self.dtype = member.shape, _written_dtype(member)

    def _stored_blocks(self) -> Iterator[np.ndarray]:
        rows = _block_rows(self.member)
        if self.member.in_rows:
            yield from row_blocks(self.archive, self.src, self.member, rows)
            return
        whole = read_whole(self.archive, self.src, self.member)
        for start in range(0, len(whole), rows):
            yield whole[start : start + rows]

    def blocks(self) -> Iterator[np.ndarray]:
        """Rows in C order as float32 (uint8 kept); NaN or infinite values are an error naming the rows, once all are read."""
        bad_rows, first_bad, start = 0, 0, 0
        ends_in_nan, padded = False, True  # over all bad rows: ragged series padded with NaN?
        for block in self._stored_blocks():
            with np.errstate(over="ignore"):
                x = np.ascontiguousarray(block, dtype=self.dtype)
            bad = np.zeros(len(x), bool) if self.dtype == np.uint8 else ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
            if bad.any():
                first_bad = first_bad if bad_rows else start + int(np.argmax(bad))
                bad_rows += int(np.count_nonzero(bad))
                ends, gaps = _nan_padding(x[bad])
                ends_in_nan, padded = ends_in_nan or ends, padded and not gaps
            elif not bad_rows:
                yield x
            start += len(block)
        if bad_rows:
            fix = ("series of different lengths padded with NaN? pad with zeros or each series' last value instead, "
                   "or truncate all to the shortest") if ends_in_nan and padded else "fill in or drop those rows"
            raise DataError(f"{self.src}: {self.member.key} holds NaN or infinite values (as float32) in {bad_rows} rows, "
                            f"first row {first_bad}; evens needs finite values: {fix}")


def _nan_padding(rows: np.ndarray) -> tuple[bool, bool]:
    """Of series ``rows`` (N, C, L): whether any ends in NaN, and whether any is not NaN-padded (a NaN
    before the end of a series that goes on, an infinity, or not a series at all)."""
    if rows.ndim != 3:
        return False, True
    nan = np.isnan(rows)
    gaps = not (np.isfinite(rows[~nan]).all() and (np.maximum.accumulate(nan, axis=-1) == nan).all())
    return bool(nan[..., -1].any()), gaps


def _note_series_layout(src: str, key: str, sample: tuple[int, ...], say: Callable[[str], None]) -> None:
    """Say how a series of more channels than steps is read: often it is channels last (Keras, tslearn), which evens would misread."""
    if len(sample) == 2 and sample[0] > sample[1]:
        say(f"{src}: {key} samples have shape {sample}, read as {sample[0]} channels of {sample[1]} steps; if they are "
            f"{sample[0]} steps of {sample[1]} channels (channels last), save x.transpose(0, 2, 1)")


def _check_splits(src: str, pairs: dict[str, tuple[str, str]], members: dict[str, Member]) -> None:
    """One row of y per row of x, and every split's samples like train's, as the headers declare them."""
    train = members[pairs["train"][0]]
    for kx, ky in pairs.values():
        x, y = members[kx], members[ky]
        if not y.shape or x.shape[0] != y.shape[0]:
            raise DataError(f"{src}: {kx} has {x.shape[0]} rows but {ky} has {y.shape[0] if y.shape else 'shape ()'}; "
                            "y needs one row per row of x")
        if x.shape[1:] != train.shape[1:]:
            raise DataError(f"{src}: {kx} samples have shape {x.shape[1:]} but {train.key} samples have {train.shape[1:]}")
        if _written_dtype(x) != _written_dtype(train):
            raise DataError(f"{src}: {kx} is stored as {_written_dtype(x)} but {train.key} as {_written_dtype(train)}; "
                            "give every split's x one dtype")


def _check_room(src: str, dst: str, xs: list[Member], ys: list[Member]) -> None:
    """Refuse, before inflating anything, a conversion that would not fit in the memory available, on the
    disk, or (as a dataset evens run takes) in this machine's memory.

    Every y is read whole, with room for its labels to be sorted and encoded; each x in turn a block of
    rows at a time (whole if it is in Fortran order), converted to float32 a block at a time."""
    def block(x: Member) -> int:  # stored rows, as float32, and their finiteness
        return _block_rows(x) * math.prod(x.shape[1:]) * (x.dtype.itemsize + 5)

    y_costs = [(y.nbytes + 4 * max(y.nbytes, y.count * 8), y, "is read whole") for y in ys]
    x_costs = [(block(x), x, "is read in blocks of rows") if x.in_rows else
               (block(x) + x.nbytes, x, f"is read whole, being in Fortran order: save np.ascontiguousarray({x.key}) "
                                        "and it is converted in blocks") for x in xs]
    x_most = max(x_costs, key=lambda c: c[0])  # one x at a time
    need = sum(c[0] for c in y_costs) + x_most[0]
    memory = available_memory()
    if memory is not None and need > memory:
        _, member, how = max(y_costs + [x_most], key=lambda c: c[0])
        raise DataError(f"{src}: converting it takes about {human_size(need)} of memory, more than the {human_size(memory)} "
                        f"available; {member.key} ({member.shape} {member.dtype}, {human_size(member.nbytes)} inflated) {how}")
    written = sum(x.count * _written_dtype(x).itemsize for x in xs) + sum(y.count * 8 for y in ys)
    folder = os.path.dirname(os.path.abspath(dst))
    free = _free_disk(folder)
    if free is not None and written > free:
        raise DataError(f"{dst}: the converted arrays take about {human_size(written)}, more than the {human_size(free)} free in {folder}")
    if written > physical_memory() > 0:  # the bound evens run holds a dataset to on the node that reads it
        raise DataError(f"{dst}: its arrays would take {human_size(written)}, more than this machine's {human_size(physical_memory())} "
                        "of memory, and evens run refuses a dataset larger than the memory of the node that reads it; "
                        "convert it on a node as large as those that will read it")


def _free_disk(folder: str) -> int | None:
    """Bytes an unprivileged user may still write in ``folder``'s file system; None if it cannot be told."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


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
