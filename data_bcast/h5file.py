"""The evens dataset format: one HDF5 file, read and validated on one rank.

Layout (see docs/data-format.md)::

    /train/x  (N, ...) float32 or uint8     /train/y  (N,) integer class labels,
                                                  or (N,) / (N, T) float regression targets
    /val/x, /val/y                           optional; else held out of train
    /test/x, /test/y                         optional; else held out of train
    /classes  (C,)                           optional: the label each class index stands for

The shape of ``x`` says what a sample is: (N, F) tabular, (N, C, L) a 1-D
signal, (N, C, H, W) an image. The dtype of ``y`` says what is learned:
integers are class labels (classification), floats are targets (regression). ``inspect_file`` validates the file and returns
a small, picklable :class:`DataPlan`; :mod:`data_bcast.reader` reads the arrays it plans.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import h5py
import numpy as np

from .exclusive import replacing
from .layout import ArraySpec

SPLITS = ("train", "val", "test")
# A signal that a command turns into an exception (evolve.app.infra.process.ending_signals) waits while this module
# runs: raised between h5py's calls here, it can leave an h5py object open past the file it writes through.
SIGNALS_WAIT_HERE = True
# What h5py raises on a damaged file, past a header that opened: checksums, filters and addresses
# that fail (OSError), corrupted object headers (RuntimeError, KeyError, ValueError, ...).
DAMAGE = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError)
MAX_CLASSES = 100_000  # beyond this, y is surely not class indices
_KIND_WORDS = {"classification": "integer class labels", "regression": "float regression targets"}


class DataError(ValueError):
    """The data file is missing or does not follow the evens format."""


@dataclass(frozen=True)
class DataPlan:
    """What the reader will produce: six arrays and where each split comes from.

    ``sources[split]`` is ``"file"`` or ``"holdout"``. Held-out rows are chosen
    by a permutation of the file's train rows seeded with ``seed``: the first
    ``holdout_sizes["test"]`` go to test, the next ``holdout_sizes["val"]`` to val.
    """

    path: str
    specs: tuple[ArraySpec, ...]
    sources: dict[str, str]
    holdout_sizes: dict[str, int]
    num_classes: int  # 0 for regression
    seed: int
    kind: str = "classification"  # or "regression"
    target_shape: tuple[int, ...] = ()  # regression: () for y of shape (N,), (T,) for (N, T)

    def to_dict(self) -> dict:
        """Plain Python types only, to send as metadata."""
        return {
            "path": self.path,
            "specs": [s.as_tuple() for s in self.specs],
            "sources": dict(self.sources),
            "holdout_sizes": dict(self.holdout_sizes),
            "num_classes": self.num_classes,
            "seed": self.seed,
            "kind": self.kind,
            "target_shape": list(self.target_shape),
        }

    @classmethod
    def from_dict(cls, d: dict) -> DataPlan:
        specs = tuple(ArraySpec(n, tuple(s), t) for n, s, t in d["specs"])
        return cls(
            d["path"], specs, dict(d["sources"]), dict(d["holdout_sizes"]), int(d["num_classes"]), int(d["seed"]),
            d["kind"], tuple(int(t) for t in d["target_shape"]),
        )

    def spec(self, name: str) -> ArraySpec:
        return next(s for s in self.specs if s.name == name)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.spec("train/x").shape[1:]


def _x_dtype(dtype: np.dtype, where: str) -> str:
    if dtype == np.uint8:
        return "uint8"
    if np.issubdtype(dtype, np.floating):
        return "float32"
    raise DataError(f"{where}: x must be float32 or uint8, found {dtype}")


def _read_targets(path: str, group: h5py.Group, split: str, n: int) -> tuple[str, np.ndarray]:
    """``y`` of a split, and what it makes of the run: ("classification", int64 labels) or ("regression", float32)."""
    if "y" not in group:
        raise DataError(f"{path}: group '{split}' has no dataset 'y'")
    y = group["y"]
    if not isinstance(y, h5py.Dataset):
        raise DataError(f"{path}: {split}/y must be a dataset, found a {type(y).__name__}")
    if np.issubdtype(y.dtype, np.integer):
        if y.ndim != 1 or y.shape[0] != n:
            raise DataError(f"{path}: {split}/y has shape {y.shape}, expected ({n},) to match {split}/x")
        labels = y[...].astype(np.int64)
        if labels.size and labels.min() < 0:
            raise DataError(f"{path}: {split}/y has a negative class label ({labels.min()})")
        return "classification", labels
    if np.issubdtype(y.dtype, np.floating):
        if y.ndim not in (1, 2) or y.shape[0] != n or (y.ndim == 2 and y.shape[1] == 0):
            raise DataError(f"{path}: {split}/y has shape {y.shape}, expected ({n},) or ({n}, T) to match {split}/x")
        with np.errstate(over="ignore"):
            values = y[...].astype(np.float32)
        if not np.isfinite(values).all():
            raise DataError(f"{path}: {split}/y holds NaN or infinite values (as float32)")
        return "regression", values
    raise DataError(f"{path}: {split}/y must hold integer class labels or float regression targets, found {y.dtype}")


def first_line(exc: BaseException) -> str:
    """An exception's message on one line (h5py's and MPI's run to several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def open_hdf5(path: str, what: str = "data file") -> h5py.File:
    """``path`` opened read-only, or a one-line :class:`DataError` saying why it cannot be.

    Only regular files are opened: a FIFO or a device would block the reader (and with it the job).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the {what} ({exc.strerror or first_line(exc)})") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a directory, not an HDF5 {what}")
    if not stat.S_ISREG(mode):
        kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"
        raise DataError(f"{path}: is a {kind}, not a regular HDF5 {what}")
    if not os.access(path, os.R_OK):
        raise DataError(f"{path}: cannot read the {what} (permission denied)")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if _is_npz(path):
            raise DataError(f"{path}: is a NumPy .npz archive, not an HDF5 {what}; convert it first: "
                            f"evens convert {path} {os.path.splitext(path)[0]}.h5") from None
        raise DataError(f"{path}: not a readable HDF5 file ({first_line(exc)})") from None


def _is_npz(path: str) -> bool:
    """A zip archive (what ``numpy.savez`` writes) or a file named .npz: the usual mistake for an HDF5 file."""
    try:
        with open(path, "rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06") or path.lower().endswith(".npz")
    except OSError:
        return False


def _check_local(f: h5py.File, path: str, name: str, allow_external: bool) -> None:
    """Refuse ``name`` (a group or dataset path) if reading it would read another file."""
    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        link = f.get("/".join(parts[:depth]), getlink=True)
        if isinstance(link, h5py.ExternalLink) and not allow_external:
            raise DataError(f"{path}: {'/'.join(parts[:depth])} is an external link to {link.filename}; "
                            "set data.allow_external = true to read other files")
    obj = f[name]
    if isinstance(obj, h5py.Dataset) and not allow_external:
        if obj.is_virtual:
            sources = sorted({m.file_name for m in obj.virtual_sources()})
            raise DataError(f"{path}: {name} is a virtual dataset over {', '.join(sources)}; "
                            "set data.allow_external = true to read other files")
        if obj.external:
            raise DataError(f"{path}: {name} keeps its data in external file {obj.external[0][0]!s}; "
                            "set data.allow_external = true to read other files")


def _check_labels(path: str, labels: dict[str, np.ndarray], train: np.ndarray) -> int:
    """The number of classes C, after checking that labels are 0..C-1 with every class in ``train``."""
    num_classes = max(int(y.max()) for y in labels.values() if y.size) + 1
    if num_classes > MAX_CLASSES:
        raise DataError(f"{path}: a label of {num_classes - 1} means more than {MAX_CLASSES} classes; y must hold class indices 0..C-1")
    counts = np.bincount(train, minlength=num_classes)
    present = int(np.count_nonzero(counts))
    if present < 2:
        raise DataError(f"{path}: train/y holds {present} class{'es' if present != 1 else ''}; classification needs at least two")
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        shown = ", ".join(str(c) for c in missing[:5]) + (f" and {missing.size - 5} more" if missing.size > 5 else "")
        raise DataError(f"{path}: labels run to {num_classes - 1} but train has no samples of class {shown}; "
                        "y must hold class indices 0..C-1 with every class in train")
    return num_classes


def _check_declared_size(f: h5py.File, path: str, present: list[str]) -> None:
    """Refuse splits whose declared shapes take more memory (as float32/uint8 x, 8-byte y) than the node has."""
    total = 0
    for split in present:
        group = f[split]
        if not isinstance(group, h5py.Group):
            continue
        for field in ("x", "y"):
            ds = group.get(field)
            if isinstance(ds, h5py.Dataset) and ds.shape:
                item = 1 if (field == "x" and ds.dtype == np.uint8) else 4 if field == "x" else 8
                total += int(np.prod(ds.shape, dtype=np.int64)) * item
    memory = physical_memory()
    if memory and total > memory:
        raise DataError(f"{path}: the splits take {total / 2**30:.1f} GiB in memory, more than this node's "
                        f"{memory / 2**30:.1f} GiB")


def physical_memory() -> int:
    """This machine's memory in bytes (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 0


def available_memory() -> int | None:
    """Bytes this process can still take without swapping: the kernel's MemAvailable, or less under a
    cgroup's memory limit (its usage less the page cache it can drop); None if nothing says."""
    room = []
    try:
        with open("/proc/meminfo") as f:
            room += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for _, controllers, where in (line.split(":", 2) for line in lines if line.count(":") >= 2):
        if controllers == "":  # cgroup v2: every ancestor's limit holds too
            folder = "/sys/fs/cgroup" + where.rstrip("/")
            while folder.startswith("/sys/fs/cgroup"):
                room.append(_cgroup_room(folder, "memory.max", "memory.current", "inactive_file"))
                folder = os.path.dirname(folder)
        elif "memory" in controllers.split(","):  # v1; in a container the path may be the host's, the mount its own
            for folder in {"/sys/fs/cgroup/memory" + where.rstrip("/"), "/sys/fs/cgroup/memory"}:
                room.append(_cgroup_room(folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    room = [r for r in room if r is not None]
    return min(room) if room else None


def _cgroup_room(folder: str, limit_file: str, usage_file: str, cache_field: str) -> int | None:
    try:
        with open(os.path.join(folder, limit_file)) as f:
            limit = f.read().strip()
        if limit == "max" or int(limit) >= 1 << 60:  # no limit here
            return None
        with open(os.path.join(folder, usage_file)) as f:
            usage = int(f.read())
        with open(os.path.join(folder, "memory.stat")) as f:
            cache = next((int(line.split()[1]) for line in f if line.startswith(cache_field + " ")), 0)
        return max(0, int(limit) - usage + cache)
    except (OSError, ValueError):
        return None


def inspect_file(path: str, val_fraction: float = 0.15, test_fraction: float = 0.15, seed: int = 0,
                 allow_external: bool = False) -> DataPlan:
    """Validate ``path`` and plan the arrays to read. Raises :class:`DataError` with a one-line message.

    ``val_fraction`` 0 for a file without a val split plans an empty one: every row not held out for test
    stays in train (a run that cross-validates them chooses on them out of fold).

    Datasets that would make the reader open other files (external links, virtual datasets,
    external raw storage) are refused unless ``allow_external``.
    """
    try:
        return _inspect(path, val_fraction, test_fraction, seed, allow_external)
    except DataError:
        raise
    except DAMAGE as exc:  # a damaged file can fail past its header
        raise DataError(f"{path}: read failed, the file looks damaged ({type(exc).__name__}: {first_line(exc)})") from None


def _inspect(path: str, val_fraction: float, test_fraction: float, seed: int, allow_external: bool) -> DataPlan:
    with open_hdf5(path) as f:
        if "train" not in f:
            raise DataError(f"{path}: no group 'train' (found: {', '.join(f.keys()) or 'nothing'})")
        present = [s for s in SPLITS if s in f]
        _check_declared_size(f, path, present)  # before reading any labels: a huge declared y would be read whole
        shapes, dtypes, kinds, target_shapes, labels = {}, {}, {}, {}, {}
        for split in present:
            _check_local(f, path, split, allow_external)
            group = f[split]
            if not isinstance(group, h5py.Group) or "x" not in group:
                raise DataError(f"{path}: '{split}' must be a group holding datasets 'x' and 'y'")
            _check_local(f, path, f"{split}/x", allow_external)
            if "y" in group:
                _check_local(f, path, f"{split}/y", allow_external)
            x = group["x"]
            if not isinstance(x, h5py.Dataset):
                raise DataError(f"{path}: {split}/x must be a dataset, found a {type(x).__name__}")
            if x.ndim < 2:
                raise DataError(f"{path}: {split}/x has shape {x.shape}; expected (N, ...): (N, F), (N, C, L), (N, C, H, W) or any sample shape")
            if x.shape[0] == 0:
                raise DataError(f"{path}: {split}/x has no samples")
            if 0 in x.shape[1:]:
                raise DataError(f"{path}: {split}/x has samples of shape {x.shape[1:]}, with no values in them")
            kinds[split], y = _read_targets(path, group, split, x.shape[0])
            target_shapes[split] = tuple(y.shape[1:])
            if kinds[split] == "classification":
                labels[split] = y
            shapes[split], dtypes[split] = tuple(x.shape), _x_dtype(x.dtype, f"{path}: {split}/x")
        sample = shapes["train"][1:]
        for split in present:
            if shapes[split][1:] != sample:
                raise DataError(f"{path}: {split}/x samples have shape {shapes[split][1:]}, train/x has {sample}")
            if dtypes[split] != dtypes["train"]:
                raise DataError(f"{path}: {split}/x is {dtypes[split]} but train/x is {dtypes['train']}")
            if kinds[split] != kinds["train"]:
                raise DataError(f"{path}: {split}/y holds {_KIND_WORDS[kinds[split]]} but train/y holds {_KIND_WORDS[kinds['train']]}")
            if target_shapes[split] != target_shapes["train"]:
                raise DataError(f"{path}: {split}/y targets have shape {target_shapes[split]}, train/y has {target_shapes['train']}")
    kind = kinds["train"]

    n_file = shapes["train"][0]
    sources = {s: ("file" if s in present else "holdout") for s in SPLITS}
    holdout = {}
    for split, fraction in (("test", test_fraction), ("val", val_fraction)):
        if sources[split] == "holdout" and split == "val" and fraction == 0.0:
            holdout[split] = 0  # no val split: the run cross-validates the training rows (evens' data.folds)
        elif sources[split] == "holdout":
            if not 0.0 < fraction < 1.0:
                raise DataError(f"{path}: no '{split}' group, and its holdout fraction {fraction} is not in (0, 1)")
            holdout[split] = max(1, int(round(fraction * n_file)))
    n_train = n_file - sum(holdout.values())
    if n_train < 2:
        held = f" after holding out {sum(holdout.values())} for {' and '.join(sorted(holdout))}" if holdout else ""
        raise DataError(f"{path}: train has {n_file} sample{'s' if n_file != 1 else ''}{held}; training needs at least 2")
    rows = {"train": n_train}
    for split in ("val", "test"):
        rows[split] = shapes[split][0] if split in present else holdout[split]
    dtype = dtypes["train"]
    y_dtype = "int64" if kind == "classification" else "float32"
    target_shape = target_shapes["train"]
    specs = []
    for split in SPLITS:
        specs.append(ArraySpec(f"{split}/x", (rows[split],) + sample, dtype))
        specs.append(ArraySpec(f"{split}/y", (rows[split],) + target_shape, y_dtype))
    num_classes = 0
    if kind == "classification":  # the classes that training will see, after any holdout
        train_labels = labels["train"]
        if holdout:
            train_labels = train_labels[np.sort(holdout_permutation(n_file, seed)[sum(holdout.values()):])]
        num_classes = _check_labels(path, labels, train_labels)
    return DataPlan(os.path.abspath(path), tuple(specs), sources, holdout, num_classes, seed, kind, target_shape)


def holdout_permutation(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


def write_dataset(path: str, splits: dict[str, tuple[np.ndarray, np.ndarray]], overwrite: bool = False,
                  classes: np.ndarray | None = None) -> None:
    """Write ``{"train": (x, y), ...}`` in the evens format, atomically; refuse to replace a file unless asked.

    ``classes``: what each class index stands for (the original labels, strings or integers), written as
    the dataset ``classes`` at the root. An ``x`` may also be given as its ``shape``, its ``dtype``
    (float32 or uint8) and its rows in ``blocks()``, written as they come, so that it is never whole in
    memory (what ``evens convert`` does). The file is written under an exclusive temporary name that
    no planted file or symlink can redirect, then renamed over ``path`` (:mod:`data_bcast.exclusive`)."""
    if os.path.lexists(path) and not overwrite:
        raise DataError(f"{path}: already exists; refusing to overwrite it")
    if "train" not in splits:
        raise DataError(f"{path}: a dataset needs a 'train' split")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise DataError(f"{path}: the folder {folder} does not exist")
    try:
        with replacing(path) as out, h5py.File(out, "w") as f:
            _write_splits(f, path, splits, classes)
    except OSError as exc:  # a full disk or a folder it may not write: the folder's problem, in one line
        raise DataError(f"{path}: cannot write it ({exc.strerror or first_line(exc)})") from None


def _write_splits(f: h5py.File, path: str, splits: dict[str, tuple[np.ndarray, np.ndarray]], classes: np.ndarray | None) -> None:
    """The format's attributes, ``classes`` and each split's x and y, checked as they are written."""
    f.attrs["format"] = "evens-dataset"
    f.attrs["format_version"] = 1
    if classes is not None:
        classes = np.asarray(classes)
        text = classes.dtype.kind == "U"
        f.create_dataset("classes", data=classes.astype(object) if text else classes, dtype=h5py.string_dtype() if text else None)
    for split, (x, y) in splits.items():
        if split not in SPLITS:
            raise DataError(f"{path}: unknown split '{split}' (expected {', '.join(SPLITS)})")
        if not hasattr(x, "blocks"):
            x = np.asarray(x)
            if x.dtype != np.uint8:
                x = x.astype(np.float32, copy=False)
        y = np.asarray(y)
        if np.issubdtype(y.dtype, np.integer):
            y, y_ndims = y.astype(np.int64), (1,)
        elif np.issubdtype(y.dtype, np.floating):
            y, y_ndims = y.astype(np.float32), (1, 2)
        else:
            raise DataError(f"{path}: {split} y must hold integer labels or float targets, found {y.dtype}")
        if y.ndim not in y_ndims or len(x.shape) < 2 or x.shape[0] != len(y):
            need = "(N,)" if y_ndims == (1,) else "(N,) or (N, T)"
            raise DataError(f"{path}: {split} has x of shape {x.shape} and y of shape {y.shape}; need (N, ...) and {need}")
        g = f.create_group(split)
        _write_x(g, x)
        g.create_dataset("y", data=y)


def _write_x(group: h5py.Group, x) -> None:
    """``x`` as the dataset ``x`` of ``group``: an array at once, or a source of ``blocks()`` a block at a time."""
    if not hasattr(x, "blocks"):
        group.create_dataset("x", data=x)
        return
    ds = group.create_dataset("x", shape=x.shape, dtype=x.dtype)
    start = 0
    for block in x.blocks():
        ds[start : start + len(block)] = block
        start += len(block)
    if start != x.shape[0]:  # pragma: no cover - a bug in the blocks' source
        raise RuntimeError(f"{x.shape[0]} rows of x declared, {start} given")
