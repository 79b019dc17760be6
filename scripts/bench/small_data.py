"""The datasets of bench_small.py: four UCR/UEA time-series sets and three scikit-learn tables, in the evens format.

====================  ============  =======  ============  =================================================
name                  sample shape  classes  train / test  source
====================  ============  =======  ============  =================================================
``GunPoint``          (1, 150)      2        50 / 150      UCR archive, the .ts files in aeon's wheel
``ItalyPowerDemand``  (1, 24)       2        67 / 1029     UCR archive, as above
``BasicMotions``      (6, 100)      4        40 / 40       UEA archive, as above
``JapaneseVowels``    (12, 25)      9        270 / 370     UEA archive's equal-length version (below)
``iris``              (4,)          3        75 / 75       scikit-learn, stratified 50 % / 50 % split
``wine``              (13,)         3        89 / 89       as above
``breast_cancer``     (30,)         2        284 / 285     as above
====================  ============  =======  ============  =================================================

The series come from the archives' own train/test splits, read straight out of the ``aeon`` wheel
(:data:`AEON_VERSION`, its hash pinned), which ``pip download`` fetches once into
``$EVENS_BENCH_CACHE`` (default ``~/.cache/evens-bench``); none of aeon's dependencies is needed.
JapaneseVowels' series are 7 to 29 steps long; the archive ships ``JapaneseVowels_eq``, every
series resampled to 25 steps by the Fourier method (``scipy.signal.resample``: checked to 5e-7
against the ragged files, labels and order identical), and that is what is used here. Fawaz et
al.'s published figures used cubic interpolation to 29 steps instead, so theirs are close, not
identical, comparisons. The tables keep their raw features (standardising is the contenders'
business); the split is ``train_test_split(test_size=0.5, stratify=y, random_state=0)``.

Each set is written as an .npz holding only ``x_train, y_train, x_test, y_test`` (labels as the
source has them: strings for the archives) and converted by the product's own
:func:`data_bcast.convert.npz_to_h5`, as ``evens convert`` does.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field

import h5py
import numpy as np

from data_bcast.convert import npz_to_h5

AEON_VERSION = "1.6.0"  # the version checked: its wheel holds aeon/datasets/data/<name>/<name>_TRAIN.ts
AEON_WHEEL = f"aeon-{AEON_VERSION}-py3-none-any.whl"
AEON_SHA256 = "d05227086706f80111ac5fee8de4d5d3115bb3bcfd1c786c8629393055816409"
ARCHIVE_FOLDER = "aeon/datasets/data"

# Test accuracies as published (means over runs): ResNet and FCN from hfawaz/dl-4-tsc results/results-ucr-128.csv
# (5 runs) and results/results-mts.csv (10 runs); InceptionTime (an ensemble of 5) from hfawaz/InceptionTime
# results-InceptionTime-128.csv; ROCKET (10 runs) from angus924/rocket results/results_ucr.csv.


@dataclass(frozen=True)
class SmallDataset:
    """What a benchmark set is: its source, sizes, shape, classes, and the published test accuracies."""

    name: str
    kind: str  # "series" (N, C, L) or "table" (N, F)
    n_train: int
    n_test: int
    classes: int
    sample_shape: tuple[int, ...]
    source: str  # the file stem in the wheel, or the scikit-learn loader
    published: dict[str, float] = field(default_factory=dict)


DATASETS = {d.name: d for d in (
    SmallDataset("GunPoint", "series", 50, 150, 2, (1, 150), "GunPoint/GunPoint",
                 {"ResNet": 0.991, "FCN": 1.000, "InceptionTime": 1.000, "ROCKET": 1.000}),
    SmallDataset("ItalyPowerDemand", "series", 67, 1029, 2, (1, 24), "ItalyPowerDemand/ItalyPowerDemand",
                 {"ResNet": 0.962, "FCN": 0.963, "InceptionTime": 0.965, "ROCKET": 0.970}),
    SmallDataset("BasicMotions", "series", 40, 40, 4, (6, 100), "BasicMotions/BasicMotions"),
    SmallDataset("JapaneseVowels", "series", 270, 370, 9, (12, 25), "JapaneseVowels/JapaneseVowels_eq",
                 {"ResNet": 0.992, "FCN": 0.993}),
    SmallDataset("iris", "table", 75, 75, 3, (4,), "load_iris"),
    SmallDataset("wine", "table", 89, 89, 3, (13,), "load_wine"),
    SmallDataset("breast_cancer", "table", 284, 285, 2, (30,), "load_breast_cancer"),
)}


class TsFormatError(ValueError):
    """A .ts file this reader refuses: its message is one line naming the file and the line."""


# ------------------------------------------------------------------------------------------ the .ts format

def _header(where: str, lines: list[tuple[int, str]]) -> tuple[dict[str, str], list[str], int]:
    """The @-tags before @data (lower-cased names), the declared class labels, and the index of @data's line."""
    tags: dict[str, str] = {}
    for i, (number, line) in enumerate(lines):
        if not line.startswith("@"):
            raise TsFormatError(f"{where}: line {number}: expected an @tag or @data before the series")
        name, _, value = line[1:].partition(" ")
        name, value = name.lower(), value.strip()
        if name == "data":
            labels = tags.get("classlabel", "").split()
            if not labels or labels[0].lower() != "true" or len(labels) < 2:
                raise TsFormatError(f"{where}: @classLabel must be 'true' followed by the class labels")
            return tags, labels[1:], i
        tags[name] = value
    raise TsFormatError(f"{where}: no @data line")


def _refuse_declared(where: str, tags: dict[str, str]) -> None:
    """Refuse what the header itself says this reader does not read: time stamps, missing values, ragged series."""
    if tags.get("timestamps", "false").lower() == "true":
        raise TsFormatError(f"{where}: @timeStamps true is not supported; only plain values")
    if tags.get("missing", "false").lower() == "true":
        raise TsFormatError(f"{where}: @missing true: series with missing values are not supported")
    if tags.get("equallength", "true").lower() == "false":
        raise TsFormatError(f"{where}: @equalLength false: ragged series are not supported; use an equal-length version")


def parse_ts(text: str, where: str = "<ts>") -> tuple[np.ndarray, np.ndarray]:
    """Read a classification .ts file (sktime/aeon format) of equal-length series: x (N, C, L) float32, y (N,) str.

    Strict: ragged series, missing values ('?', NaN), time stamps and labels the header does not
    declare are refused with one line naming ``where`` and the line.

    >>> parse_ts("@classLabel true a b\\n@data\\n1,2,3:4,5,6:a\\n")[0].shape
    (1, 2, 3)
    """
    lines = [(n, s.strip()) for n, s in enumerate(text.splitlines(), 1)]
    lines = [(n, s) for n, s in lines if s and not s.startswith("#")]
    tags, declared, start = _header(where, lines)
    _refuse_declared(where, tags)
    series, labels = [], []
    for number, line in lines[start + 1:]:
        *dims, label = line.split(":")
        if not dims:
            raise TsFormatError(f"{where}: line {number}: no ':' between the series and the class label")
        if label.strip() not in declared:
            raise TsFormatError(f"{where}: line {number}: class label {label.strip()!r} is not among @classLabel's {declared}")
        if "?" in line:
            raise TsFormatError(f"{where}: line {number}: a missing value '?'; series with missing values are not supported")
        try:
            rows = [np.array(d.split(","), dtype=np.float64) for d in dims]
        except ValueError:
            raise TsFormatError(f"{where}: line {number}: a value that is not a number") from None
        if len({len(r) for r in rows}) != 1 or (series and (len(rows), len(rows[0])) != series[0].shape):
            raise TsFormatError(f"{where}: line {number}: ragged series (dimensions or lengths differ); equal length only")
        if not all(np.isfinite(r).all() for r in rows):
            raise TsFormatError(f"{where}: line {number}: a NaN or infinite value; series with missing values are not supported")
        series.append(np.stack(rows))
        labels.append(label.strip())
    if not series:
        raise TsFormatError(f"{where}: no series after @data")
    x = np.stack(series).astype(np.float32)
    _check_declared_shape(where, tags, x.shape)
    return x, np.array(labels)


def _check_declared_shape(where: str, tags: dict[str, str], shape: tuple[int, ...]) -> None:
    """The series agree with @univariate, @dimensions and @seriesLength where the header gives them."""
    if tags.get("univariate", "").lower() == "true" and shape[1] != 1:
        raise TsFormatError(f"{where}: @univariate true, but the series have {shape[1]} dimensions")
    for tag, found in (("dimensions", shape[1]), ("serieslength", shape[2])):
        if tag in tags and tags[tag] != str(found):
            raise TsFormatError(f"{where}: @{tag} says {tags[tag]}, but the series have {found}")


# --------------------------------------------------------------------------------------- sources

def cache_dir() -> str:
    """Where the aeon wheel is kept: ``$EVENS_BENCH_CACHE``, else ``~/.cache/evens-bench``."""
    return os.environ.get("EVENS_BENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "evens-bench")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def aeon_wheel(cache: str | None = None) -> str:
    """The pinned aeon wheel's path, fetched once from the package registry with ``pip download`` and hash-checked."""
    cache = cache or cache_dir()
    path = os.path.join(cache, AEON_WHEEL)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:  # concurrent callers each move a whole file into place
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                   "-q", f"aeon=={AEON_VERSION}", "-d", tmp]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0 or not os.path.exists(os.path.join(tmp, AEON_WHEEL)):
                last = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
                raise SystemExit(f"cannot fetch {AEON_WHEEL} with pip download: {last}")
            os.replace(os.path.join(tmp, AEON_WHEEL), path)
    if _sha256(path) != AEON_SHA256:
        raise SystemExit(f"{path}: sha256 differs from the pinned {AEON_SHA256[:12]}...; delete it to fetch it again")
    return path


def read_archive_set(stem: str, wheel: str) -> dict[str, np.ndarray]:
    """``x_train, y_train, x_test, y_test`` of one archive set, from ``<stem>_TRAIN.ts`` and ``_TEST.ts`` in the wheel."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for split in ("train", "test"):
            member = f"{ARCHIVE_FOLDER}/{stem}_{split.upper()}.ts"
            out[f"x_{split}"], out[f"y_{split}"] = parse_ts(z.read(member).decode("utf-8"), f"{os.path.basename(wheel)}:{member}")
    return out


def read_table_set(loader: str, seed: int = 0) -> dict[str, np.ndarray]:
    """``x_train, y_train, x_test, y_test`` of a scikit-learn table: raw features, a stratified, seeded half/half split."""
    import sklearn.datasets
    from sklearn.model_selection import train_test_split

    d = getattr(sklearn.datasets, loader)()
    x_train, x_test, y_train, y_test = train_test_split(d.data.astype(np.float32), d.target.astype(np.int64), test_size=0.5,
                                                        stratify=d.target, random_state=seed)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def arrays(name: str, cache: str | None = None) -> dict[str, np.ndarray]:
    """The four arrays of dataset ``name``, checked against :data:`DATASETS`' facts."""
    if name not in DATASETS:
        raise SystemExit(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    d = DATASETS[name]
    out = read_archive_set(d.source, aeon_wheel(cache)) if d.kind == "series" else read_table_set(d.source)
    found = (len(out["y_train"]), len(out["y_test"]), len(np.unique(out["y_train"])), out["x_train"].shape[1:])
    if found != (d.n_train, d.n_test, d.classes, d.sample_shape):
        raise SystemExit(f"{name}: found train/test/classes/shape {found}, expected {(d.n_train, d.n_test, d.classes, d.sample_shape)}")
    return out


def prepare(name: str, folder: str, cache: str | None = None, say=None) -> str:
    """Write ``folder/<name>.npz`` and convert it to ``folder/<name>.h5`` as ``evens convert`` does; returns the .h5 path.

    ``say`` receives the converter's notes (labels encoded, val held out of train); stderr by default.

    >>> prepare("GunPoint", "/tmp/small")  # doctest: +SKIP
    '/tmp/small/GunPoint.h5'
    """
    os.makedirs(folder, exist_ok=True)
    npz, h5 = os.path.join(folder, f"{name}.npz"), os.path.join(folder, f"{name}.h5")
    np.savez(npz, **arrays(name, cache))
    npz_to_h5(npz, h5, overwrite=True, **({"say": say} if say else {}))
    return h5


def read_splits(h5: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x_train, y_train, x_test, y_test`` of an evens file as written by :func:`prepare` (y as class indices)."""
    with h5py.File(h5, "r") as f:
        return f["train/x"][()], f["train/y"][()], f["test/x"][()], f["test/y"][()]


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache_dir(), "data")
    for key in DATASETS:
        x_train, y_train, x_test, y_test = read_splits(prepare(key, where, say=lambda line: None))
        print(f"{key:18s} train {x_train.shape}  test {x_test.shape}  classes {len(np.unique(y_train))}")
