"""`evens convert`: an .npz file to the evens format, with one-line errors for what it cannot take."""
import pickle

import h5py
import numpy as np
import pytest
from conftest import blobs

from data_bcast.convert import npz_to_h5
from data_bcast.h5file import DataError
from data_bcast.reader import load_dataset
from evolve.app.commands import cli


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
    for key in ("x_train", "train_x", "X_train", "x_val", "x_valid", "x_validation", "x_test", "classes", "--ignore-extra", "--force"):
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


def test_string_labels_become_class_indices_with_their_names_stored(tmp_path):
    names = np.array(["dog", "cat", "emu"])
    counts, said, dst = convert(save(tmp_path, x_train=X, y_train=names[Y], x_test=XV, y_test=names[YV]))
    assert counts == {"train": 30, "test": 10}
    assert len(said) == 2 and "cat=0, dog=1, emu=2" in said[0] and "classes" in said[0], said
    with h5py.File(dst) as f:
        assert [c.decode() for c in f["classes"][...]] == ["cat", "dog", "emu"]
        classes = np.array([c.decode() for c in f["classes"][...]])
        np.testing.assert_array_equal(classes[f["train/y"][...]], names[Y])
        np.testing.assert_array_equal(classes[f["test/y"][...]], names[YV])
    assert load_dataset(dst)[0].num_classes == 3


def test_integer_labels_other_than_0_to_c_minus_1_are_encoded(tmp_path):
    labels = np.array([3, 7, 9])
    _, said, dst = convert(save(tmp_path, x_train=X, y_train=labels[Y], x_val=XV, y_val=labels[YV]))
    assert "3=0, 7=1, 9=2" in said[0], said
    with h5py.File(dst) as f:
        np.testing.assert_array_equal(f["classes"][...], labels)
        np.testing.assert_array_equal(f["train/y"][...], Y)
        np.testing.assert_array_equal(f["val/y"][...], YV)


def test_labels_0_to_c_minus_1_are_kept_as_they_are(tmp_path):
    _, said, dst = convert(save(tmp_path, x_train=X, y_train=Y.astype(np.int32), x_val=XV, y_val=YV, x_test=XV, y_test=YV))
    assert said == []
    with h5py.File(dst) as f:
        assert "classes" not in f
        np.testing.assert_array_equal(f["train/y"][...], Y)


@pytest.mark.parametrize("labels", [np.array(["a", "b", "c"], dtype="<U4"), np.array([0, 1, 2])])
def test_a_label_that_train_never_has_is_named(tmp_path, labels):
    y_test = labels[YV].copy()
    y_test[4] = "bird" if labels.dtype.kind == "U" else 5
    message = error_of(save(tmp_path, x_train=X, y_train=labels[Y], x_test=XV, y_test=y_test))
    assert "y_test" in message and ("'bird'" if labels.dtype.kind == "U" else " 5 ") in message, message


def test_float_targets_stay_regression_targets_even_with_whole_values(tmp_path):
    _, said, dst = convert(save(tmp_path, x=X, y=Y.astype(np.float64)))
    assert any("regression" in line for line in said), said
    with h5py.File(dst) as f:
        assert f["train/y"].dtype == np.float32 and "classes" not in f
    assert load_dataset(dst)[0].kind == "regression"


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


@pytest.mark.parametrize("y_train,y_val,why", [
    (Y.astype(np.float32), YV, "integer"),
    (np.array(["0", "1", "2"])[Y], YV, "string class labels"),
    (Y[:, None], YV, "y.ravel()"),
    (Y.astype(np.complex64), YV, "complex64"),
    (np.where(Y == 1, np.nan, Y), YV.astype(np.float64), "NaN"),
])
def test_y_that_evens_cannot_take_is_a_one_line_error(tmp_path, y_train, y_val, why):
    assert why in error_of(save(tmp_path, x_train=X, y_train=y_train, x_val=XV, y_val=y_val))


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


def test_the_command_prints_what_it_did(tmp_path, capsys):
    src = save(tmp_path, x=X, y=np.array(["no", "yes", "maybe"])[Y])
    assert cli.main(["convert", src, str(tmp_path / "d.h5")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "maybe=0, no=1, yes=2" in out[0] and "held out" in out[1] and out[2].startswith("wrote"), out
    assert cli.main(["convert", src, str(tmp_path / "d.h5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evens: error:") and "--force" in err and len(err.splitlines()) == 1


# --- series: (N, C, L) kept as it is; ragged series refused with how to pad them ---------------------------

SERIES = np.random.default_rng(0).normal(size=(12, 6, 100))  # 6 channels of 100 steps


@pytest.mark.parametrize("channels", [6, 1])
def test_series_of_any_number_of_channels_are_kept_as_n_c_l(tmp_path, channels):
    x = SERIES[:, :channels]
    _, said, dst = convert(save(tmp_path, x=x, y=np.arange(12) % 3))
    with h5py.File(dst) as f:
        assert f["train/x"].shape == (12, channels, 100) and f["train/x"].dtype == np.float32
        np.testing.assert_array_equal(f["train/x"][...], x.astype(np.float32))
    assert load_dataset(dst)[0].sample_shape == (channels, 100)
    assert not any("transpose" in line for line in said), said


def test_series_with_more_channels_than_steps_get_a_note_on_channels_last(tmp_path):
    _, said, dst = convert(save(tmp_path, x=SERIES.transpose(0, 2, 1), y=np.arange(12) % 3))
    assert any("100 channels of 6 steps" in line and "x.transpose(0, 2, 1)" in line for line in said), said
    with h5py.File(dst) as f:
        assert f["train/x"].shape == (12, 100, 6)  # a note, not a change: the user decides


def ragged(two_d: bool) -> np.ndarray:
    """Series of lengths 90, 100 and 80 as numpy holds them: one object per series, or per series and channel."""
    lengths = (90, 100, 80)
    if two_d:
        x = np.empty((3, 6), dtype=object)
        for i, n in enumerate(lengths):
            for c in range(6):
                x[i, c] = SERIES[i, c, :n]
        return x
    x = np.empty(3, dtype=object)
    x[:] = [SERIES[i, :, :n] for i, n in enumerate(lengths)]
    return x


@pytest.mark.parametrize("two_d", [False, True])
def test_ragged_series_are_refused_in_one_line_that_says_how_to_pad(tmp_path, two_d):
    message = error_of(save(tmp_path, x_train=ragged(two_d), y_train=np.array([0, 1, 0])))
    shape = "(3, 6)" if two_d else "(3,)"
    assert f"cannot read x_train: it is an object array of shape {shape}" in message, message
    assert "pad every series to the longest length with zeros or its last value, or truncate" in message, message
    assert "(N, C, L)" in message and "never loads" in message and "astype(str)" not in message, message


def test_an_object_y_keeps_its_hint_on_string_labels(tmp_path):
    message = error_of(save(tmp_path, x=X, y=np.array(["cat", "dog"] * 15, dtype=object)))
    assert "of shape (30,)" in message and "astype(str)" in message and "pad" not in message, message


def test_series_padded_with_nan_are_told_to_pad_with_numbers(tmp_path):
    x = SERIES.copy()
    x[2, :, 80:] = np.nan  # one series 80 steps long
    x[5, 3, 95:] = np.nan  # one channel shorter than the others
    message = error_of(save(tmp_path, x=x, y=np.arange(12) % 3))
    assert "in 2 rows, first row 2" in message and "padded with NaN" in message and "zeros or each series' last value" in message
    x[5, 3, 10] = np.nan  # a gap inside a series is missing data, not padding
    message = error_of(save(tmp_path, x=x, y=np.arange(12) % 3))
    assert "fill in or drop those rows" in message and "padded with NaN" not in message, message


def test_the_command_refuses_ragged_series_in_one_line(tmp_path, capsys):
    src, dst = save(tmp_path, x=ragged(False), y=np.array([0, 1, 0])), tmp_path / "d.h5"
    assert cli.main(["convert", src, str(dst)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured
    assert captured.err.startswith(f"evens: error: {src}: cannot read x") and "pad every series" in captured.err
    assert not dst.exists()
