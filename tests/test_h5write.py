"""ensemble.h5write makes the very objects h5py's high-level calls make: the files come out byte for byte the same."""
import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ensemble import h5write

DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.uint32, np.bool_, "S1", "S7"])


def _same_files(tmp_path, by_h5py, by_h5write) -> None:
    a, b = tmp_path / "h5py.h5", tmp_path / "h5write.h5"
    with h5py.File(a, "w") as f:
        by_h5py(f)
    with h5py.File(b, "w") as f:
        by_h5write(f)
    assert a.read_bytes() == b.read_bytes()


@settings(max_examples=60, deadline=None)
@given(array=hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)), checksum=st.booleans())
def test_a_dataset_is_the_one_h5py_makes(tmp_path_factory, array, checksum):
    checksum = checksum and array.ndim > 0 and array.size > 0  # (h5py refuses to chunk the others too)
    _same_files(tmp_path_factory.mktemp("d"),
                lambda f: f.create_dataset("x", data=array, **({"fletcher32": True} if checksum else {})),
                lambda f: h5write.dataset(f, "x", array, fletcher32=checksum))


def test_large_arrays_are_chunked_as_h5py_chunks_them_and_strings_and_names_encode_alike(tmp_path):
    big = np.random.default_rng(0).random((300, 700)).astype(np.float32)
    words = np.empty(4, dtype=object)
    words[:] = ["", "ok", "a longer message", "é ünï"]

    def by_h5py(f):
        g = f.create_group("members").create_group("17")
        g.attrs.update(fitness=0.5, network='{"depth": 2}', training="é", n=3, flag=True, half=np.float32(1.5))
        g.create_dataset("big", data=big, fletcher32=True)
        g.create_group("weights").create_dataset("1.weight", data=big[:3], fletcher32=True)
        f.create_dataset("message", data=words, dtype=h5py.string_dtype())
        f.create_dataset("none", data=np.empty(0, dtype=object), dtype=h5py.string_dtype())
        f.create_group("ünï").attrs["ñame"] = "x"
        f["ünï"]["lätency"] = big[0]  # a name that is not ASCII: marked UTF-8, as this way marks it
        f["members"].attrs["n"] = 1
        f["members"].attrs["n"] = 2.5  # replaced

    def by_h5write(f):
        g = h5write.group(h5write.group(f, "members"), "17")
        h5write.attrs(g, fitness=0.5, network='{"depth": 2}', training="é", n=3, flag=True, half=np.float32(1.5))
        h5write.dataset(g, "big", big, fletcher32=True)
        h5write.dataset(h5write.group(g, "weights"), "1.weight", big[:3], fletcher32=True)
        h5write.dataset(f, "message", words)
        h5write.dataset(f, "none", np.empty(0, dtype=object))
        h5write.attrs(h5write.group(f, "ünï"), **{"ñame": "x"})
        h5write.dataset(f["ünï"], "lätency", big[0])
        h5write.attrs(f["members"], n=1)
        h5write.attrs(f["members"], n=2.5)

    _same_files(tmp_path, by_h5py, by_h5write)
    with h5py.File(tmp_path / "h5write.h5") as f:
        assert f["members/17/big"].fletcher32 and np.array_equal(f["members/17/big"][...], big)
        assert list(f["message"].asstr()[...]) == list(words) and f["members"].attrs["n"] == 2.5


def test_other_dtypes_and_paths_go_to_h5py_as_before(tmp_path):
    odd = {"c": np.arange(6, dtype=np.complex64).reshape(2, 3) * 1j, "r": np.array([(1, 2.5)], dtype=[("a", "i4"), ("b", "f8")]),
           "a/path/x": np.zeros(3)}

    def by_h5py(f):
        for k, a in odd.items():
            f.create_dataset(k, data=a, fletcher32=True)  # (closed at once: an open dataset moves what HDF5 writes where)

    def by_h5write(f):
        for k, a in odd.items():
            h5write.dataset(f, k, a, fletcher32=True)

    _same_files(tmp_path, by_h5py, by_h5write)


def test_what_it_does_not_write_it_refuses(tmp_path):
    with h5py.File(tmp_path / "x.h5", "w") as f:
        with pytest.raises(ValueError, match="cannot carry a checksum"):
            h5write.dataset(f, "e", np.zeros(0), fletcher32=True)
        with pytest.raises(TypeError, match="numbers, booleans and strings"):
            h5write.attrs(f, v=[1, 2])
        with pytest.raises(TypeError):
            h5write.dataset(f, "o", np.array([1, "a"], dtype=object))  # not all strings


def test_tagged_dtypes_keep_their_own_types(tmp_path):
    """numpy's dtype equality ignores h5py's tags (a string's encoding, an enum), so a type cached for
    one must never serve the other."""
    ascii7, utf7 = np.array([b"abc"], dtype="S7"), np.array(["é".encode()], dtype=h5py.string_dtype("utf-8", 7))
    flags = np.array([0, 1], dtype=h5py.enum_dtype({"off": 0, "on": 1}, basetype="i1"))

    def by_h5py(f):
        f["a"], f["u"], f["i"], f["e"] = ascii7, utf7, np.zeros(2, np.int8), flags

    def by_h5write(f):
        for name, array in (("a", ascii7), ("u", utf7), ("i", np.zeros(2, np.int8)), ("e", flags)):
            h5write.dataset(f, name, array)

    _same_files(tmp_path, by_h5py, by_h5write)
