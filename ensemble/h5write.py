"""HDF5 objects made through h5py's low-level API: what h5py's high-level calls make, in half the time.

A checkpoint makes hundreds of small objects: a hall-of-fame member alone is two groups, three
attributes and a dataset per array, and a segment of evaluations a dataset per column. h5py's
high-level ``create_group``, ``create_dataset`` and ``attrs[...] =`` spend more time in Python
(validating options, guessing types and chunks, copying property lists, wrapping every new
object) than HDF5 spends making the object. These functions make the very same objects (the same
types, dataspaces, chunk shapes, filters, link and name encodings, and no timestamps, as h5py
gives them by default; the dataset creation properties come from h5py's own ``fill_dcpl``, so they
follow the h5py installed): a file written with them is byte for byte the file h5py's calls write,
which tests/test_h5write.py checks, for the few kinds evens writes:

* :func:`group`: ``parent.create_group(name)``;
* :func:`dataset`: ``parent[name] = array``, and with ``fletcher32=True``
  ``parent.create_dataset(name, data=array, fletcher32=True)``, the checksummed, chunked kind (HDF5
  verifies Fletcher-32 on every read). A name that is not ASCII is marked UTF-8 in both, as
  ``parent[name] = array`` marks it (h5py's create_dataset marks it ASCII);
* :func:`attrs`: ``obj.attrs[name] = value`` for numbers, booleans and strings.

Measured on the 2-core VM (HDF5 2.0, h5py 3.16; ``scripts/bench_checkpoint.py``, docs/benchmarks.md):
a hall-of-fame member of three small arrays costs 0.54 ms against 1.06, one of a small CNN (20
tensors) 2.75 ms against 5.40. Anything else goes through h5py as before.
"""
from __future__ import annotations

import h5py
import numpy as np
from h5py import h5a, h5d, h5g, h5p, h5s, h5t
from h5py._hl.filters import fill_dcpl
from h5py._objects import ObjectID

_STRING = h5py.string_dtype()  # a Python str: variable-length UTF-8, as h5py stores it
_STRING_TYPE = h5t.py_create(_STRING, logical=True)
_SCALAR = h5s.create(h5s.SCALAR)


def _untimed(plist):
    plist.set_obj_track_times(False)  # h5py's default: no timestamps, so the same content is the same bytes
    return plist


def _group_lcpl(encoding: int):
    lcpl = h5p.create(h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    lcpl.set_char_encoding(encoding)
    return lcpl


def _dcpl(shape: tuple, itemsize: int, fletcher32: bool):
    """The dataset creation property list h5py's create_dataset makes (its own ``fill_dcpl``: the chunk
    shape it guesses, and whatever else this h5py version sets, such as the fill time before 3.12)."""
    return _untimed(fill_dcpl(h5p.create(h5p.DATASET_CREATE), shape, np.dtype(f"V{itemsize}"), None, None, None, None, fletcher32,
                              None, None, None))


_GCPL = _untimed(h5p.create(h5p.GROUP_CREATE))
_LCPL = {h5t.CSET_ASCII: _group_lcpl(h5t.CSET_ASCII), h5t.CSET_UTF8: _group_lcpl(h5t.CSET_UTF8)}
_CONTIGUOUS = _dcpl((1,), 1, False)
_checksummed: dict[tuple, object] = {}  # (shape, itemsize) -> a chunked, Fletcher-32 creation property list
_types: dict[np.dtype, tuple] = {}  # dtype (with no metadata: numpy's == ignores it) -> (file type, memory type)


def _name(name: str) -> tuple[bytes, int]:
    """A name as h5py encodes it: ASCII if it can be, else UTF-8."""
    try:
        return name.encode("ascii"), h5t.CSET_ASCII
    except UnicodeEncodeError:
        return name.encode("utf-8"), h5t.CSET_UTF8


def _id(obj):
    return obj if isinstance(obj, ObjectID) else obj.id


def group(parent, name: str) -> h5py.Group:
    """``parent.create_group(name)``."""
    encoded, encoding = _name(name)
    return h5py.Group(h5g.create(_id(parent), encoded, lcpl=_LCPL[encoding], gcpl=_GCPL))


def _type(dtype: np.dtype) -> tuple:
    if dtype.metadata is not None:  # h5py's tagged dtypes (a string's encoding, an enum): never from the cache
        return h5t.py_create(dtype, logical=True), h5t.py_create(dtype)
    types = _types.get(dtype)
    if types is None:
        types = _types[dtype] = (h5t.py_create(dtype, logical=True), h5t.py_create(dtype))
    return types


def dataset(parent, name: str, array: np.ndarray, fletcher32: bool = False) -> None:
    """``parent[name] = array``, or ``parent.create_dataset(name, data=array, fletcher32=True)``: made here
    for a numpy array of numbers, booleans or fixed-width bytes, or ``dtype=h5py.string_dtype()`` for an array of ``str``
    objects (an empty or 0-d array cannot be checksummed: h5py refuses it too); any other dtype
    (complex, structured), or a name that is a path, is handed to h5py."""
    array = np.asarray(array, order="C")
    if array.dtype.kind == "O":
        if array.dtype.metadata is None:
            array = array.astype(_STRING)  # str objects: variable-length UTF-8 strings, as h5py's dtype=string_dtype()
        elif h5t.check_string_dtype(array.dtype) != h5t.check_string_dtype(_STRING):
            raise TypeError(f"h5write.dataset writes str objects as UTF-8 strings, not {array.dtype.metadata}")
    if array.dtype.kind not in "biufSO" or "/" in name:  # complex, structured; a path: h5py's own way, as before
        group = parent if isinstance(parent, h5py.Group) else h5py.Group(_id(parent))
        group.create_dataset(name, data=array, **({"fletcher32": True} if fletcher32 else {}))
        return
    shape = array.shape
    if fletcher32:
        if not array.ndim or not array.size:
            raise ValueError(f"a dataset of shape {shape} cannot be chunked, so cannot carry a checksum")
        key = (shape, array.dtype.itemsize)
        dcpl = _checksummed.get(key)
        if dcpl is None:
            dcpl = _dcpl(shape, array.dtype.itemsize, True)
            if len(_checksummed) < 4096:
                _checksummed[key] = dcpl
    else:
        dcpl = _CONTIGUOUS
    space = h5s.create_simple(shape) if array.ndim else _SCALAR
    encoded, encoding = _name(name)
    dset = h5d.create(_id(parent), encoded, _type(array.dtype)[0], space, dcpl=dcpl, lcpl=_LCPL[encoding])
    if array.size:
        dset.write(h5s.ALL, h5s.ALL, array)


def attrs(obj, **values) -> None:
    """``obj.attrs[name] = value`` for each: numbers and booleans (Python's or numpy's, 0-d) and
    strings; an attribute of that name is replaced."""
    oid = _id(obj)
    for name, value in values.items():
        encoded, _ = _name(name)
        if isinstance(value, str):
            data = np.array(value, dtype=_STRING)
            file_type, memory_type = _STRING_TYPE, None
        else:
            data = np.asarray(value)
            if data.ndim or data.dtype.kind not in "biuf":
                raise TypeError(f"h5write.attrs writes numbers, booleans and strings, not {type(value).__name__} ({name})")
            file_type, memory_type = _type(data.dtype)
        if h5a.exists(oid, encoded):
            h5a.delete(oid, encoded)
        attr = h5a.create(oid, encoded, file_type, _SCALAR)
        try:
            attr.write(data, mtype=memory_type)
        finally:
            attr.close()
