"""`evens convert`: an .npz file to the evens format, with one-line errors for what it cannot take."""
import pickle

import h5py
import numpy as np
import pytest
from conftest import blobs

from data_bcast.convert import npz_to_h5
from data_bcast.h5file import DataError
from data_bcast.reader import load_dataset
from evolve.app import cli


def save(tmp_path, **arrays) -> str:
    path = str(tmp_path / "d.npz")
    np.savez(path, **arrays)
    return path


def convert(src, **kwargs):
    """npz_to_h5 into d.h5 beside ``src``; returns (counts, the lines it said, the output path)."""
    said = []
    dst = src[: -len(".npz")] + ".h5"
    return npz_to_h5(src, dst, say=said.append, **kwargs), said, dst


def error_of(src, names=None, **kwargs) -> str:
    """The one-line error of converting ``src``, which names ``names`` (default: ``src``)."""
    with pytest.raises(DataError) as info:
        convert(src, **kwargs)
    message = str(info.value)
    assert "\n" not in message and (names or src) in message, message
    return message


X, Y = blobs(30, (4,))
XV, YV = blobs(10, (4,), seed=1)


def test_help_lists_the_keys_it_accepts(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["convert", "--help"])
    out = capsys.readouterr().out
    for key in ("x_train", "train_x", "X_train", "x_val", "x_valid", "x_validation", "x_test", "--ignore-extra", "--force"):
        assert key in out, key


@pytest.mark.parametrize("keys", [("X_train", "y_train"), ("X", "Y"), ("x", "y"), ("train_x", "train_y"), ("X_TRAIN", "Y_TRAIN")])
def test_usual_spellings_of_train(tmp_path, keys):
    counts, _, dst = convert(save(tmp_path, **{keys[0]: X, keys[1]: Y}))
    assert counts == {"train": 30}
    with h5py.File(dst) as f:
        np.testing.assert_array_equal(f["train/y"][...], Y)


@pytest.mark.parametrize("val", ["val", "valid", "validation", "VAL"])
def test_usual_spellings_of_val_and_test(tmp_path, val):
    counts, said, _ = convert(save(tmp_path, X_train=X, y_train=Y, **{f"X_{val}": XV, f"y_{val}": YV}, test_x=XV, test_y=YV))
    assert counts == {"train": 30, "val": 10, "test": 10} and said == []


@pytest.mark.parametrize("extra", [{"X_train": X}, {"x": X}, {"val_y": YV}])
def test_two_spellings_of_one_array_are_an_error_naming_both(tmp_path, extra):
    message = error_of(save(tmp_path, x_train=X, y_train=Y, x_val=XV, y_val=YV, **extra))
    twin = {"X_train": "x_train", "x": "x_train", "val_y": "y_val"}[next(iter(extra))]
    assert next(iter(extra)) in message and twin in message, message


def test_unknown_keys_are_an_error_unless_left_out_on_request(tmp_path):
    src = save(tmp_path, x=X, y=Y, x_te=XV, y_te=YV)
    message = error_of(src)
    assert "x_te, y_te" in message and "x_test" in message and "--ignore-extra" in message
    counts, said, _ = convert(src, ignore_extra=True)
    assert counts == {"train": 30} and any("x_te, y_te" in line for line in said), said


@pytest.mark.parametrize("present,missing", [("x_val", "y_val"), ("y_test", "x_test")])
def test_half_a_split_is_an_error(tmp_path, present, missing):
    message = error_of(save(tmp_path, x_train=X, y_train=Y, **{present: XV if present.startswith("x") else YV}))
    assert present in message and missing in message, message


def test_a_single_pair_is_train_and_the_run_holds_out_val_and_test(tmp_path):
    counts, said, dst = convert(save(tmp_path, x=X, y=Y))
    assert counts == {"train": 30}
    assert len(said) == 1 and "held out" in said[0] and "data.split_seed" in said[0], said
    plan, _ = load_dataset(dst)
    assert plan.sources == {"train": "file", "val": "holdout", "test": "holdout"}


def test_object_arrays_are_refused_with_a_hint_never_unpickled(tmp_path):
    src = save(tmp_path, x=X, y=np.array(["cat", "dog"] * 15, dtype=object))
    message = error_of(src)
    assert "cannot read y: it is an object array" in message and "astype(str)" in message, message


@pytest.mark.parametrize("x,why", [
    (np.where(np.arange(120).reshape(30, 4) == 9, np.nan, X), "row 2"),
    (np.full((30, 4), 1e39), "infinite"),
    (X[:, 0], "reshape(-1, 1)"),
    (X.astype(np.complex64), "complex64"),
    (np.full((30, 4), "a"), "<U1"),
    (X[:29], "29 rows"),
])
def test_x_that_evens_cannot_take_is_a_one_line_error(tmp_path, x, why):
    message = error_of(save(tmp_path, x_train=x, y_train=Y))
    assert why in message and "x_train" in message, message


def test_fortran_ordered_x_is_written_in_c_order(tmp_path):
    x = np.asfortranarray(X.astype(np.float64))
    _, _, dst = convert(save(tmp_path, x=x, y=Y))
    with h5py.File(dst) as f:
        np.testing.assert_array_equal(f["train/x"][...], X)


def test_splits_whose_samples_disagree_are_an_error(tmp_path):
    assert "(5,)" in error_of(save(tmp_path, x_train=X, y_train=Y, x_val=blobs(10, (5,))[0], y_val=YV))
    assert "uint8" in error_of(save(tmp_path, x_train=X, y_train=Y, x_val=XV.astype(np.uint8), y_val=YV))


@pytest.mark.parametrize("contents,hint", [
    (None, "already in the evens format"),
    (b"a,b,label\n1,2,cat\n", "numpy.savez"),
    (np.lib.format.MAGIC_PREFIX + b"\x01\x00", "numpy.savez"),
    (pickle.dumps({"x": [1]}), "pickle"),
])
def test_a_file_that_is_not_an_npz_gets_a_hint(tmp_path, contents, hint):
    src = str(tmp_path / "d.npz")
    if contents is None:
        npz_to_h5(save(tmp_path, x=X, y=Y), str(tmp_path / "mine.h5"))
        src = str(tmp_path / "mine.h5")
    else:
        (tmp_path / "d.npz").write_bytes(contents)
    with pytest.raises(DataError, match=hint) as info:
        npz_to_h5(src, str(tmp_path / "out.h5"))
    assert "\n" not in str(info.value)


def test_nothing_the_user_owns_is_replaced(tmp_path):
    src = save(tmp_path, x=X, y=Y)
    (tmp_path / "d.h5").write_text("mine")
    assert "--force" in error_of(src, names=str(tmp_path / "d.h5"))
    assert (tmp_path / "d.h5").read_text() == "mine"
    with pytest.raises(DataError, match="the input"):
        npz_to_h5(src, src, overwrite=True)
    assert np.load(src)["x"].shape == X.shape
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="a directory"):
        npz_to_h5(src, str(tmp_path / "folder"), overwrite=True)
    counts, _, _ = convert(src, overwrite=True)
    assert counts == {"train": 30}
