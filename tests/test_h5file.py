import os

import h5py
import numpy as np
import pytest
from conftest import blobs, write_blobs, write_regression

from data_bcast.convert import npz_to_h5, write_diabetes
from data_bcast.h5file import DataError, inspect_file, write_dataset
from data_bcast.reader import load_dataset


def test_reads_all_three_splits(image_file):
    plan, arrays = load_dataset(image_file)
    assert plan.sources == {"train": "file", "val": "file", "test": "file"}
    assert plan.num_classes == 3 and plan.sample_shape == (1, 8, 8)
    with h5py.File(image_file) as f:
        for split in ("train", "val", "test"):
            np.testing.assert_array_equal(arrays[f"{split}/x"], f[split]["x"][...])
            np.testing.assert_array_equal(arrays[f"{split}/y"], f[split]["y"][...])


def test_holdout_is_seeded_and_partitions_train(tmp_path):
    path = write_blobs(tmp_path / "t.h5", sample_shape=(5,), n=(100,), splits=("train",))
    plan, a = load_dataset(path, val_fraction=0.2, test_fraction=0.1, seed=3)
    assert plan.sources == {"train": "file", "val": "holdout", "test": "holdout"}
    assert [a[f"{s}/y"].shape[0] for s in ("train", "val", "test")] == [70, 20, 10]
    rows = np.concatenate([a["train/x"], a["val/x"], a["test/x"]])
    with h5py.File(path) as f:
        original = f["train"]["x"][...]
    # every file row lands in exactly one split
    assert sorted(map(bytes, rows)) == sorted(map(bytes, original))
    _, again = load_dataset(path, val_fraction=0.2, test_fraction=0.1, seed=3)
    np.testing.assert_array_equal(again["val/x"], a["val/x"])
    _, other = load_dataset(path, val_fraction=0.2, test_fraction=0.1, seed=4)
    assert not np.array_equal(other["val/x"], a["val/x"])


def test_samples_of_any_rank_load_volumes_included(tmp_path):
    rng = np.random.default_rng(0)
    splits = {split: (rng.standard_normal((n, 2, 3, 4, 5)).astype(np.float32), rng.integers(0, 3, n)) for split, n in (("train", 30), ("val", 10), ("test", 10))}
    write_dataset(str(tmp_path / "volumes.h5"), splits)
    plan, arrays = load_dataset(str(tmp_path / "volumes.h5"))
    assert plan.spec("train/x").shape == (30, 2, 3, 4, 5)
    np.testing.assert_array_equal(arrays["val/x"], splits["val"][0])


def test_uint8_is_kept_as_uint8(tmp_path):
    path = write_blobs(tmp_path / "u.h5", dtype=np.uint8)
    plan, arrays = load_dataset(path)
    assert arrays["train/x"].dtype == np.uint8 and plan.spec("train/x").dtype == "uint8"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f.__delitem__("train"), "no group 'train'"),
        (lambda f: f["train"].__delitem__("y"), "has no dataset 'y'"),
        (lambda f: (f["val"].__delitem__("y"), f["val"].create_dataset("y", data=np.zeros(3, np.int64))), "val/y has shape"),
        (lambda f: (f["test"].__delitem__("y"), f["test"].create_dataset("y", data=np.zeros(40, np.float32))), "test/y holds float regression targets but train/y holds integer class labels"),
        (lambda f: (f["test"].__delitem__("y"), f["test"].create_dataset("y", data=np.zeros(40, bool))), "integer class labels or float regression targets"),
        (lambda f: (f["test"].__delitem__("x"), f["test"].create_dataset("x", data=np.zeros((40, 1, 4, 4), np.float32))), "samples have shape"),
        (lambda f: (f["train"].__delitem__("x"), f["train"].create_dataset("x", data=np.zeros(120, np.float32))), "expected (N, ...)"),
        (lambda f: (f["train"].__delitem__("x"), f["train"].create_dataset("x", data=np.zeros((120, 64), np.int32))), "float32 or uint8"),
        (lambda f: (f["val"].__delitem__("x"), f["val"].create_group("x")), "val/x must be a dataset"),
        (lambda f: (f["test"].__delitem__("y"), f["test"].create_group("y")), "test/y must be a dataset"),
        (lambda f: f["test"]["y"].__setitem__(0, 2_000_000_000), "more than 100000 classes"),
        (lambda f: f["test"]["y"].__setitem__(0, -1), "negative class label"),
    ],
)
def test_malformed_files_are_one_line_errors(image_file, mutate, message):
    with h5py.File(image_file, "a") as f:
        mutate(f)
    with pytest.raises(DataError) as info:
        inspect_file(image_file)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_and_non_hdf5_files(tmp_path):
    with pytest.raises(DataError, match="no such data file"):
        inspect_file(str(tmp_path / "absent.h5"))
    junk = tmp_path / "junk.h5"
    junk.write_text("not hdf5")
    with pytest.raises(DataError, match="not a readable HDF5 file"):
        inspect_file(str(junk))


def test_nan_in_x_is_rejected(image_file):
    with h5py.File(image_file, "a") as f:
        f["train"]["x"][5, 0, 0, 0] = np.nan
    with pytest.raises(DataError, match="NaN"):
        load_dataset(image_file)


def test_float64_beyond_float32_range_counts_as_infinite(tmp_path):
    x, y = blobs(20, (4,))
    x = x.astype(np.float64)
    x[3, 1] = 1e300
    with h5py.File(tmp_path / "big.h5", "w") as f:  # by hand: write_dataset would cast to float32
        f["train/x"] = x
        f["train/y"] = y
    with pytest.raises(DataError, match="infinite"):
        load_dataset(str(tmp_path / "big.h5"))


def test_write_checks_shapes(tmp_path):
    x, y = blobs(10, (4,))
    with pytest.raises(DataError, match="need \\(N, ...\\) and \\(N,\\)"):
        write_dataset(str(tmp_path / "d.h5"), {"train": (x, y[:7])})
    with pytest.raises(DataError, match="need"):
        write_dataset(str(tmp_path / "d.h5"), {"train": (x, np.int64(3))})
    assert not (tmp_path / "d.h5").exists()


def test_corrupt_npz_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 definitely not a zip archive")
    with pytest.raises(DataError, match="not a readable .npz"):
        npz_to_h5(str(tmp_path / "bad.npz"), str(tmp_path / "bad.h5"))


def test_write_refuses_to_overwrite(tmp_path):
    path = tmp_path / "d.h5"
    path.write_text("the user's own file")
    with pytest.raises(DataError, match="refusing to overwrite"):
        write_dataset(str(path), {"train": blobs(10, (4,))})
    assert path.read_text() == "the user's own file"


def test_npz_conversion_round_trip(tmp_path):
    xt, yt = blobs(30, (2, 16))
    xv, yv = blobs(10, (2, 16), seed=1)
    np.savez(tmp_path / "d.npz", x_train=xt, y_train=yt, x_val=xv, y_val=yv)
    counts = npz_to_h5(str(tmp_path / "d.npz"), str(tmp_path / "d.h5"))
    assert counts == {"train": 30, "val": 10}
    plan, arrays = load_dataset(str(tmp_path / "d.h5"))
    assert plan.sources["test"] == "holdout"
    np.testing.assert_array_equal(arrays["val/x"], xv)


def test_npz_with_objects_is_refused_not_unpickled(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.array([{"a": 1}] * 4, dtype=object), y=np.arange(4))
    with pytest.raises(DataError, match="cannot read"):
        npz_to_h5(str(tmp_path / "bad.npz"), str(tmp_path / "bad.h5"))
    assert not (tmp_path / "bad.h5").exists()


def test_npz_without_train_keys(tmp_path):
    np.savez(tmp_path / "d.npz", features=np.zeros((3, 2)))
    with pytest.raises(DataError, match="need x_train and y_train"):
        npz_to_h5(str(tmp_path / "d.npz"), str(tmp_path / "d.h5"))


@pytest.mark.parametrize("targets", [(), (3,)])
def test_float_targets_make_a_regression_plan(tmp_path, targets):
    path = write_regression(tmp_path / "r.h5", targets=targets)
    plan, arrays = load_dataset(path)
    assert plan.kind == "regression" and plan.target_shape == targets and plan.num_classes == 0
    assert arrays["train/y"].dtype == np.float32 and arrays["val/y"].shape == (40,) + targets


def test_regression_holdout_and_bad_targets(tmp_path):
    path = write_regression(tmp_path / "r.h5", n=(100,))  # a train split only
    plan, arrays = load_dataset(path, val_fraction=0.2, test_fraction=0.1)
    assert plan.sources["val"] == "holdout" and arrays["val/y"].shape == (20,) and arrays["train/y"].shape == (70,)
    with h5py.File(path, "a") as f:
        f["train"]["y"][4] = np.inf
    with pytest.raises(DataError, match="train/y holds NaN or infinite"):
        inspect_file(path)
    with h5py.File(path, "a") as f:
        del f["train"]["y"]
        f["train"]["y"] = np.zeros((100, 2, 2), np.float32)
    with pytest.raises(DataError, match=r"expected \(100,\) or \(100, T\)"):
        inspect_file(path)


def test_diabetes_demo_set_is_a_regression_set(tmp_path):
    counts = write_diabetes(str(tmp_path / "d.h5"))
    assert counts == {"test": 88, "val": 88, "train": 266}
    plan, arrays = load_dataset(str(tmp_path / "d.h5"))
    assert plan.kind == "regression" and plan.sample_shape == (10,)
    assert 25 <= arrays["test/y"].min() and arrays["test/y"].max() <= 346


@pytest.mark.parametrize("targets", [(1,), (3,)])
def test_holding_out_two_dimensional_targets_keeps_each_row_whole(tmp_path, targets):
    path = write_regression(tmp_path / "r.h5", n=(100,), targets=targets)
    plan, arrays = load_dataset(path, val_fraction=0.2, test_fraction=0.1)
    assert [arrays[f"{s}/y"].shape for s in ("train", "val", "test")] == [(70,) + targets, (20,) + targets, (10,) + targets]
    with h5py.File(path) as f:
        pairs = {xr.tobytes() + yr.tobytes() for xr, yr in zip(f["train/x"][...], f["train/y"][...])}
    for split in ("train", "val", "test"):
        assert all(xr.tobytes() + yr.tobytes() in pairs for xr, yr in zip(arrays[f"{split}/x"], arrays[f"{split}/y"]))


def test_a_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match="is a directory") as info:
        inspect_file(str(tmp_path))
    assert "\n" not in str(info.value)


def test_writing_into_a_missing_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        write_dataset(str(tmp_path / "nowhere" / "d.h5"), {"train": blobs(10, (4,))})


def _replace(f, name, data):
    del f[name]
    f[name] = data


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: _replace(f, "train/x", np.zeros((120, 0), np.float32)), "train/x has samples of shape (0,), with no values"),
        (lambda f: (_replace(f, "train/x", np.zeros((1, 1, 8, 8), np.float32)), _replace(f, "train/y", np.zeros(1, np.int64))),
         "train has 1 sample; training needs at least 2"),
        (lambda f: _replace(f, "train/y", np.ones(120, np.int64)), "train/y holds 1 class; classification needs at least two"),
        (lambda f: f["val/y"].__setitem__(0, 99_999), "labels run to 99999 but train has no samples of class 3, 4, 5, 6, 7 and 99992 more"),
        (lambda f: f["test/y"].__setitem__(0, 3), "train has no samples of class 3;"),
        (lambda f: _replace(f, "train/y", np.where(f["train/y"][()] == 1, 2, f["train/y"][()])), "train has no samples of class 1;"),
    ],
    ids=["zero-size samples", "one training sample", "one class", "label 99999", "class only in test", "class missing from train"],
)
def test_data_that_cannot_train_is_refused_in_one_line(image_file, mutate, message):
    with h5py.File(image_file, "a") as f:
        mutate(f)
    with pytest.raises(DataError) as info:
        inspect_file(image_file)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_class_held_out_of_train_entirely_is_refused(tmp_path):
    x, y = blobs(100, (4,))
    y[:] = np.arange(100) % 2
    y[7] = 2  # one sample of class 2: it goes to val or test or train, depending on the seed
    path = str(tmp_path / "d.h5")
    write_dataset(path, {"train": (x, y)})
    outcomes = set()
    for seed in range(20):
        try:
            inspect_file(path, 0.2, 0.2, seed)
            outcomes.add("ok")
        except DataError as exc:
            assert "train has no samples of class 2" in str(exc)
            outcomes.add("refused")
    assert outcomes == {"ok", "refused"}  # the check looks at train after the holdout, not the file's train


def other_file(tmp_path, n=120):
    x, y = blobs(n, (1, 8, 8))
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"], f["y"] = x, y
    return str(path), x


def test_external_links_virtual_datasets_and_external_storage_are_refused_unless_allowed(tmp_path, image_file):
    other, x = other_file(tmp_path)
    with h5py.File(image_file, "a") as f:
        del f["train/x"]
        f["train/x"] = h5py.ExternalLink(other, "x")
    with pytest.raises(DataError, match=r"train/x is an external link to .*other.h5; set data.allow_external = true"):
        inspect_file(image_file)
    assert inspect_file(image_file, allow_external=True).spec("train/x").shape[0] == 120

    with h5py.File(image_file, "a") as f:  # a virtual dataset whose source is missing reads as zeros: refused
        del f["train/x"]
        layout = h5py.VirtualLayout(shape=(120, 1, 8, 8), dtype=np.float32)
        layout[:] = h5py.VirtualSource(str(tmp_path / "gone.h5"), "x", shape=(120, 1, 8, 8))
        f.create_virtual_dataset("train/x", layout)
    with pytest.raises(DataError, match=r"train/x is a virtual dataset over .*gone.h5"):
        inspect_file(image_file)

    raw = tmp_path / "raw.bin"
    raw.write_bytes(x.astype(np.float32).tobytes())
    with h5py.File(image_file, "a") as f:  # raw storage in another file: that file's bytes become data
        del f["train/x"]
        f.create_dataset("train/x", shape=(120, 1, 8, 8), dtype=np.float32, external=[(str(raw), 0, h5py.h5f.UNLIMITED)])
    with pytest.raises(DataError, match=r"train/x keeps its data in external file .*raw.bin"):
        inspect_file(image_file)


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "data.h5"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="is a FIFO, not a regular HDF5 data file"):
        inspect_file(str(fifo))  # opening it would block forever


def test_an_absurd_declared_shape_is_refused_before_allocating(tmp_path):
    path = str(tmp_path / "huge.h5")
    with h5py.File(path, "w") as f:  # declared, never written: the file stays small
        f.create_dataset("train/x", shape=(10**8, 1, 64, 64), dtype=np.float32, chunks=(1, 1, 64, 64))
        f.create_dataset("train/y", shape=(10**8,), dtype=np.int64, chunks=(1 << 20,))
        f["train/y"][:2] = [0, 1]
    with pytest.raises(DataError, match=r"GiB in memory, more than this node's"):
        inspect_file(path)


def test_damaged_bytes_give_a_one_line_error_or_the_file_still_loads(tmp_path):
    """Flip 4 bytes at many places: loading either works or fails with one line, never a traceback."""
    path = write_blobs(tmp_path / "d.h5")
    good = open(path, "rb").read()
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for offset in rng.integers(0, len(good) - 4, size=60):
        bad = bytearray(good)
        bad[offset : offset + 4] = rng.integers(0, 256, size=4, dtype=np.uint8).tobytes()
        damaged = tmp_path / "damaged.h5"
        damaged.write_bytes(bytes(bad))
        try:
            load_dataset(str(damaged))
            outcomes["loaded"] += 1
        except DataError as exc:
            assert "\n" not in str(exc) and str(damaged) in str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes


# ---- the root's raw reads: the file's own bytes, in pieces, by threads (data_bcast.broadcast uses them)

def _raw_read(path, name, monkeypatch, piece=4096):
    """(what read_raw gives, its CRC, what h5py gives) for all rows of ``name``, in pieces of ``piece`` bytes."""
    import zlib
    from concurrent.futures import ThreadPoolExecutor

    import data_bcast.reader as reading

    monkeypatch.setattr(reading, "PIECE_BYTES", piece)
    plan = inspect_file(path)
    spec = plan.spec(name)
    with reading.RowReader(plan) as reader, ThreadPoolExecutor(3) as pool:
        assert reader.raw_offset(name) is not None
        raw, through_h5py = np.empty(spec.shape, spec.dtype), np.empty(spec.shape, spec.dtype)
        crc = reader.read_raw(name, 0, spec.shape[0], raw, pool)
        reader.read_into(name, 0, spec.shape[0], through_h5py)
    assert crc == zlib.crc32(raw.tobytes())
    return raw, through_h5py


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_raw_reads_give_what_h5py_gives(tmp_path, monkeypatch, dtype):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 7, 5), n=(300, 20, 20), dtype=dtype)  # 105 B rows: pieces cut rows
    for name in ("train/x", "train/y", "val/x"):
        raw, through_h5py = _raw_read(path, name, monkeypatch)
        assert raw.dtype == through_h5py.dtype and np.array_equal(raw, through_h5py), name
    with h5py.File(path) as f:
        assert np.array_equal(raw, f["val/x"][()])


def test_raw_reads_refuse_nan_and_inf_naming_the_row_but_not_a_large_finite_sum(tmp_path, monkeypatch):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(16,), n=(400, 20, 20))
    with h5py.File(path, "a") as f:
        f["train/x"][7:9] = 3e38  # finite, but their sum overflows float32: the exact check clears them
    raw, _ = _raw_read(path, "train/x", monkeypatch, piece=256)
    assert raw[8, 0] == np.float32(3e38)
    for bad in (np.nan, np.inf):
        with h5py.File(path, "a") as f:
            f["train/x"][123, 5] = bad
        with pytest.raises(DataError, match=r"train/x holds NaN or infinite values \(as float32\), first in row 123"):
            _raw_read(path, "train/x", monkeypatch, piece=256)


def test_raw_reads_are_only_for_bytes_that_are_the_arrays_themselves(tmp_path, monkeypatch):
    """Compressed, chunked, byte-swapped, held-out or user-block files are read through h5py."""
    from data_bcast.reader import RowReader

    x, y = blobs(60, (4,))
    cases = {
        "gzip": dict(compression="gzip"),
        "chunked": dict(chunks=(10, 4)),
        "big_endian": dict(dtype=">f4"),
    }
    for label, options in cases.items():
        path = str(tmp_path / f"{label}.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("train/x", data=x, **options)
            f["train/y"] = y
        with RowReader(inspect_file(path)) as reader:
            assert reader.raw_offset("train/x") is None, label
            assert reader.raw_offset("train/y") is None  # held out of train: rows in a shuffled order
            assert reader.raw_offset("val/x") is None
    path = str(tmp_path / "userblock.h5")
    with h5py.File(path, "w", userblock_size=512) as f:
        f["train/x"], f["train/y"], f["val/x"], f["val/y"], f["test/x"], f["test/y"] = x, y, x, y, x, y
    with RowReader(inspect_file(path)) as reader:
        assert reader.raw_offset("train/x") is None
    path = write_blobs(tmp_path / "plain.h5", sample_shape=(4,), n=(60, 20, 20))
    with RowReader(inspect_file(path)) as reader:
        assert all(reader.raw_offset(f"{s}/{a}") is not None for s in ("train", "val", "test") for a in "xy")
