"""bench_small's data: the strict .ts reader on inline files, and the writing of a set, with no network and no wheel."""
import importlib
import os
import sys
import zipfile

import h5py
import numpy as np
import pytest
from conftest import ROOT

UNIVARIATE = """# a comment line
@problemName Tiny
@timeStamps false
@missing false
@univariate true
@equalLength true
@seriesLength 3
@classLabel true 1 2
@data
0.5,1,-2:1
3,4.25,5e-1:2
"""

MULTIVARIATE = """@problemName TinyMotions
@univariate false
@dimensions 2
@equalLength true
@seriesLength 2
@classlabel true Standing Running
@data
1,2:3,4:Running
5,6:7,8:Standing
"""


@pytest.fixture(scope="module")
def small_data():
    """scripts/bench/small_data.py, imported as the benchmark imports it (its folder first on the search path)."""
    saved = list(sys.path)
    sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
    try:
        return importlib.import_module("small_data")
    finally:
        sys.path[:] = saved


def refusal(small_data, text: str) -> str:
    with pytest.raises(small_data.TsFormatError) as info:
        small_data.parse_ts(text, "tiny.ts")
    message = str(info.value)
    assert "\n" not in message and message.startswith("tiny.ts: ")
    return message


def test_univariate_series_and_their_labels(small_data):
    x, y = small_data.parse_ts(UNIVARIATE)
    assert x.dtype == np.float32 and x.shape == (2, 1, 3)
    np.testing.assert_array_equal(x[:, 0], [[0.5, 1, -2], [3, 4.25, 0.5]])
    assert y.dtype.kind == "U" and y.tolist() == ["1", "2"]


def test_multivariate_series_keep_their_channels_in_order(small_data):
    x, y = small_data.parse_ts(MULTIVARIATE)
    assert x.shape == (2, 2, 2)
    np.testing.assert_array_equal(x[0], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(x[1], [[5, 6], [7, 8]])
    assert y.tolist() == ["Running", "Standing"]


@pytest.mark.parametrize("text", [
    UNIVARIATE.replace("3,4.25,5e-1:2", "3,4.25:2"),  # a case shorter than the first
    MULTIVARIATE.replace("1,2:3,4:Running", "1,2:3:Running"),  # dimensions of different lengths
    MULTIVARIATE.replace("1,2:3,4:Running", "1,2:Running"),  # fewer dimensions
    UNIVARIATE.replace("@equalLength true", "@equalLength false"),  # declared ragged
])
def test_ragged_series_are_refused(small_data, text):
    assert "ragged" in refusal(small_data, text)


@pytest.mark.parametrize("text", [
    UNIVARIATE.replace("0.5,1,-2:1", "0.5,?,-2:1"),
    UNIVARIATE.replace("0.5,1,-2:1", "0.5,NaN,-2:1"),
    UNIVARIATE.replace("@missing false", "@missing true"),
])
def test_missing_values_are_refused(small_data, text):
    assert "missing" in refusal(small_data, text)


@pytest.mark.parametrize("text, words", [
    (UNIVARIATE.replace("3,4.25,5e-1:2", "3,4.25,5e-1:3"), "class label '3'"),
    (UNIVARIATE.replace("@classLabel true 1 2", "@classLabel false"), "@classLabel"),
    (UNIVARIATE.replace("@data\n", ""), "line 9: expected an @tag or @data"),
    (UNIVARIATE.replace("@data\n0.5,1,-2:1\n3,4.25,5e-1:2\n", "@data\n"), "no series"),
    (UNIVARIATE.replace("0.5,1,-2:1", "0.5,one,-2:1"), "not a number"),
    (UNIVARIATE.replace("0.5,1,-2:1", "0.5,1,-2"), "no ':'"),
    (UNIVARIATE.replace("@seriesLength 3", "@seriesLength 4"), "@serieslength says 4"),
    (MULTIVARIATE.replace("@univariate false", "@univariate true"), "2 dimensions"),
    (UNIVARIATE.replace("@timeStamps false", "@timeStamps true"), "timeStamps"),
])
def test_what_else_is_refused_is_said_in_one_line(small_data, text, words):
    assert words in refusal(small_data, text)


def test_archive_sets_are_read_from_the_wheel_zip(small_data, tmp_path):
    wheel = str(tmp_path / "fake.whl")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{small_data.ARCHIVE_FOLDER}/Tiny/Tiny_TRAIN.ts", UNIVARIATE)
        z.writestr(f"{small_data.ARCHIVE_FOLDER}/Tiny/Tiny_TEST.ts", UNIVARIATE.replace("0.5,1,-2:1\n", ""))
    got = small_data.read_archive_set("Tiny/Tiny", wheel)
    assert got["x_train"].shape == (2, 1, 3) and got["x_test"].shape == (1, 1, 3) and got["y_test"].tolist() == ["2"]


def test_a_cached_wheel_with_another_hash_is_refused(small_data, tmp_path):
    (tmp_path / small_data.AEON_WHEEL).write_bytes(b"not the wheel")
    with pytest.raises(SystemExit, match="sha256"):
        small_data.aeon_wheel(str(tmp_path))


def test_a_table_is_written_through_the_converter(small_data, tmp_path):
    h5 = small_data.prepare("iris", str(tmp_path), say=lambda line: None)
    with np.load(tmp_path / "iris.npz") as npz:
        assert sorted(npz.files) == ["x_test", "x_train", "y_test", "y_train"]
        raw = npz["x_train"]
    x_train, y_train, x_test, y_test = small_data.read_splits(h5)
    np.testing.assert_array_equal(x_train, raw)  # raw features: standardising is the contenders' business
    assert x_train.shape == (75, 4) and x_test.shape == (75, 4)
    assert np.bincount(y_train).tolist() == [25, 25, 25] and np.bincount(y_test).tolist() == [25, 25, 25]
    with h5py.File(h5) as f:
        assert sorted(f) == ["test", "train"]  # labels 0..2 already: no /classes needed


def test_bench_small_takes_a_count_of_seeds_or_a_list():
    saved = list(sys.path)
    sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
    try:
        seed_list = importlib.import_module("bench_small").seed_list
    finally:
        sys.path[:] = saved
    assert seed_list("5") == [0, 1, 2, 3, 4]
    assert seed_list("3,4") == [3, 4] and seed_list("3,") == [3]
    for bad in ("0", "-1,2", "", ",", "two"):
        with pytest.raises(ValueError):
            seed_list(bad)
