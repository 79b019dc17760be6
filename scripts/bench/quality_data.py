"""The datasets of bench_quality.py, each written to the evens format (docs/data-format.md) in a scratch folder.

Four come with scikit-learn (nothing is downloaded), four are read out of the aeon wheel (small_data.py); two are
generated (data_bcast.synthetic), deterministically from a seed, so that the architecture matters: what identifies a
class sits at a random place in the sample, among distractors, so that translation-invariant features (convolutions
with pooling or a global average) win over a flat MLP.

=================  ==============  =========  ==================  =================================
name               sample shape    classes    train / val / test  what
=================  ==============  =========  ==================  =================================
``digits``         (1, 8, 8)       10         720 / 359 / 718     scikit-learn's 8x8 digits
``breast_cancer``  (30,)           2          229 / 113 / 227     scikit-learn, standardised
``wine``           (13,)           3          72 / 35 / 71        scikit-learn, standardised
``diabetes``       (10,)           regression 266 / 88 / 88       scikit-learn; RMSE, lower is better
``signal``         (2, 128)        5          1000 / 500 / 1500   data_bcast.synthetic.make_signals
``image``          (1, 16, 16)     6          1000 / 500 / 1500   data_bcast.synthetic.make_shapes
GunPoint ...       (C, L)          2-9        80 % / 20 % / test  issue 32's archive series (small_data.py)
=================  ==============  =========  ==================  =================================

The archive series (GunPoint, ItalyPowerDemand, BasicMotions, JapaneseVowels: :data:`SERIES`) keep their archive's
test split and hold a stratified fifth of the archive's training rows out as the val split (GunPoint: 40 / 10 / 150).

The tables are standardised with the training split's mean and standard deviation, so that every
contender (the classic space has no ``standardize`` gene) starts from the same inputs; the
generated tasks need none (zero-mean noise, strokes in [0, 1]). Each generated split is drawn from
its own stream of the seed (``numpy.random.default_rng([seed, split])``), so that the test split
does not change when the training split's size does.
"""
from __future__ import annotations

import os

import harness
import numpy as np

from data_bcast import write_dataset
from data_bcast.convert import write_diabetes, write_digits
from data_bcast.synthetic import write_shapes, write_signals

# ------------------------------------------------------------------------------------ scikit-learn tables

def write_standardised(dst: str, x: np.ndarray, y: np.ndarray, seed: int = 0) -> None:
    """Shuffle with ``seed``; 40 % test, 20 % val, 40 % train (as digits); standardise with the training split's statistics."""
    order = np.random.default_rng(seed).permutation(len(y))
    n_test, n_val = int(0.40 * len(y)), int(0.20 * len(y))
    parts = {"test": order[:n_test], "val": order[n_test : n_test + n_val], "train": order[n_test + n_val :]}
    x = np.asarray(x, dtype=np.float64)
    mean, std = x[parts["train"]].mean(axis=0), x[parts["train"]].std(axis=0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    write_dataset(dst, {split: (x[rows], y[rows]) for split, rows in parts.items()})


def write_breast_cancer(dst: str, seed: int = 0) -> None:
    """scikit-learn's breast cancer data: 569 x 30 features, 2 classes (:func:`write_standardised`)."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    write_standardised(dst, d.data, d.target.astype(np.int64), seed)


def write_wine(dst: str, seed: int = 0) -> None:
    """scikit-learn's wine data: 178 x 13 features, 3 classes (:func:`write_standardised`)."""
    from sklearn.datasets import load_wine

    d = load_wine()
    write_standardised(dst, d.data, d.target.astype(np.int64), seed)


# ------------------------------------------------------------------------------- issue 32's archive series

SERIES = ("GunPoint", "ItalyPowerDemand", "BasicMotions", "JapaneseVowels")  # small_data.py's, read out of the aeon wheel
SERIES_VAL = 0.2  # of the archive's training rows, held out (stratified) as the val split every contender chooses on


def archive_series_writer(name: str):
    """A writer of archive set ``name`` (small_data.py: the UCR/UEA archives in the aeon wheel) with the archive's own
    test split and a stratified fifth of its training rows as the val split. bench_quality's protocol is the same for
    every contender (each chooses on a val split), so evens does not cross-validate here: its folds are measured
    against the published recipes in bench_small.py."""

    def write(dst: str) -> None:
        import small_data
        from sklearn.model_selection import train_test_split

        a = small_data.arrays(name)
        classes, y = np.unique(np.concatenate([a["y_train"], a["y_test"]]), return_inverse=True)
        y_train, y_test = y[: len(a["y_train"])].astype(np.int64), y[len(a["y_train"]) :].astype(np.int64)
        x_train, x_test = np.asarray(a["x_train"], np.float32), np.asarray(a["x_test"], np.float32)
        fit, val = train_test_split(np.arange(len(y_train)), test_size=SERIES_VAL, stratify=y_train, random_state=0)
        write_dataset(dst, {"train": (x_train[fit], y_train[fit]), "val": (x_train[val], y_train[val]), "test": (x_test, y_test)},
                      classes=classes)

    return write


# ----------------------------------------------------------------------------------------------- registry

WRITERS = {
    "digits": lambda dst: write_digits(dst, seed=0),  # what `evens make-digits data/digits.h5` writes
    "breast_cancer": write_breast_cancer,
    "wine": write_wine,
    "diabetes": lambda dst: write_diabetes(dst, seed=0),  # what `evens make-diabetes` writes
    "signal": write_signals,  # what `evens make-signals` writes
    "image": write_shapes,  # what `evens make-shapes` writes
    **{name: archive_series_writer(name) for name in SERIES},
}
DATASETS = tuple(WRITERS)


def dataset_path(name: str, scratch: str) -> str:
    """The evens file of dataset ``name``: data/digits.h5 if it is there, else written to ``scratch`` (once)."""
    if name not in WRITERS:
        raise SystemExit(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    if name == "digits":
        shipped = os.path.join(harness.ROOT, "data", "digits.h5")
        if os.path.exists(shipped):
            return shipped
    path = os.path.join(scratch, f"{name}.h5")
    if not os.path.exists(path):
        WRITERS[name](path)
    return path
