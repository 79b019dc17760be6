import numpy as np
import pytest
from hypothesis import given
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
