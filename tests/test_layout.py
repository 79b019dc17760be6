import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_bcast.layout import ArraySpec, array_views, chunk_ranges, plan_layout


@given(st.integers(0, 10_000), st.integers(1, 4096))
def test_chunks_cover_every_byte_once(total, chunk):
    ranges = chunk_ranges(total, chunk)
    covered = [b for start, stop in ranges for b in range(start, stop)]
    assert covered == list(range(total))
    assert all(0 < stop - start <= chunk for start, stop in ranges)


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError):
        chunk_ranges(10, 0)


shapes = st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple)
dtypes = st.sampled_from(["uint8", "int64", "float32"])


@given(st.lists(st.tuples(shapes, dtypes), min_size=1, max_size=6))
def test_layout_is_aligned_and_disjoint(items):
    specs = [ArraySpec(f"a{i}", s, d) for i, (s, d) in enumerate(items)]
    layout = plan_layout(specs)
    spans = sorted((o, o + s.nbytes) for o, s in zip(layout.offsets, layout.specs))
    assert all(o % 64 == 0 for o in layout.offsets)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert spans[-1][1] <= layout.total_bytes


def test_views_write_through_to_the_buffer():
    specs = [ArraySpec("x", (3, 2), "float32"), ArraySpec("y", (3,), "int64")]
    layout = plan_layout(specs)
    buf = np.zeros(layout.total_bytes, dtype=np.uint8)
    views = array_views(layout, buf)
    views["x"][...] = 1.5
    views["y"][...] = [7, 8, 9]
    again = array_views(layout, buf)
    assert again["x"].sum() == 9.0 and list(again["y"]) == [7, 8, 9]
    assert np.shares_memory(views["x"], buf) and np.shares_memory(views["y"], buf)  # views, not copies


# Shards: round robin over the training rows, dealt chunk by chunk.
from data_bcast.layout import deal_chunk, plan_chunks, shard_members, shard_rows, shard_specs  # noqa: E402


@given(st.integers(0, 500), st.integers(1, 40))
def test_shards_are_disjoint_cover_the_rows_and_differ_by_at_most_one(rows, shards):
    members = [shard_members(rows, shards, s) for s in range(shards)]
    assert [len(m) for m in members] == [shard_rows(rows, shards, s) for s in range(shards)]
    assert sorted(np.concatenate(members).tolist()) == list(range(rows))  # disjoint and covering
    sizes = [len(m) for m in members]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert (shard_rows(rows, shards, np.arange(shards)) == sizes).all()  # the vector form agrees


@settings(deadline=None)  # a 1-byte chunk makes thousands of messages; the machine is shared
@given(st.integers(1, 200), st.integers(1, 12), st.integers(1, 9), st.integers(1, 200))
def test_dealing_every_chunk_builds_each_shard_from_its_rows(rows, shards, row_items, chunk_bytes):
    """Deal a whole array chunk by chunk, as the root does, and check that each shard gets exactly
    its rows in order, whatever the chunk size (rows bigger than a chunk included)."""
    whole = np.arange(rows * row_items, dtype=np.int32).reshape(rows, row_items)
    row_bytes = whole[:1].nbytes
    spec = ArraySpec("train/x", whole.shape, "int32")
    flat = whole.view(np.uint8).reshape(-1)
    received = [np.zeros(shard_rows(rows, shards, s) * row_bytes, dtype=np.uint8) for s in range(shards)]
    for chunk in plan_chunks(plan_layout([spec]), chunk_bytes):
        deal = deal_chunk(chunk, 0, row_bytes, shards)
        assert deal.counts.sum() == chunk.nbytes and (deal.counts >= 0).all()
        if deal.order is None:
            message = flat[chunk.offset : chunk.offset + chunk.nbytes]
        else:
            message = whole[chunk.rows[0] : chunk.rows[1]][deal.order].view(np.uint8).reshape(-1)
        for s in range(shards):
            piece = message[deal.displacements[s] : deal.displacements[s] + deal.counts[s]]
            received[s][deal.starts[s] : deal.starts[s] + deal.counts[s]] = piece
    for s in range(shards):
        assert np.array_equal(received[s].view(np.int32).reshape(-1, row_items), whole[s::shards])


def test_shard_specs_cut_only_the_training_arrays():
    specs = (ArraySpec("train/x", (10, 3), "float32"), ArraySpec("train/y", (10,), "int64"), ArraySpec("val/x", (4, 3), "float32"))
    cut = shard_specs(specs, 3)
    assert [s.shape for s in cut] == [(3, 3), (3,), (4, 3)] and [s.dtype for s in cut] == ["float32", "int64", "float32"]


@given(st.binary(max_size=5000), st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_the_data_planes_crc32_is_zlibs_whichever_library_computes_it(data, more, start):
    import zlib

    from data_bcast.checksum import crc32

    assert crc32(data) == zlib.crc32(data)
    assert crc32(more, crc32(data, start)) == zlib.crc32(more, zlib.crc32(data, start))  # chained, as per-array CRCs are
    view = np.frombuffer(data, dtype=np.uint8)  # the plane passes numpy views of its buffer
    assert crc32(view) == zlib.crc32(data)


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_crc32_combine_joins_pieces_as_one_pass_over_them_would(pieces, start):
    """A chunk is checksummed in pieces (by several threads) and its array's CRC is combined, not recomputed."""
    import zlib

    from data_bcast.checksum import crc32_combine, crc32_combine_python

    whole = b"".join(pieces)
    for combine in {crc32_combine, crc32_combine_python}:
        crc = start
        for piece in pieces:
            crc = combine(crc, zlib.crc32(piece), len(piece))
        assert crc == zlib.crc32(whole, start)
    assert crc32_combine_python(zlib.crc32(b"a"), zlib.crc32(b"b" * 7), 7) == zlib.crc32(b"a" + b"b" * 7)


def test_crc32_combine_over_long_lengths_matches_zlib():
    import zlib

    from data_bcast.checksum import crc32_combine_python

    rng = np.random.default_rng(3)
    a, b = rng.bytes(1000), rng.bytes((1 << 20) + 4093)  # many bits set in the length
    assert crc32_combine_python(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    with pytest.raises(ValueError):
        crc32_combine_python(0, 0, -1)
