"""A result's binary header (evolve.transport.wire): what goes in comes out, and a malformed message is a clear error."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.results import Evaluation
from evolve.transport.wire import WireError, long_marker, long_size, pack_result, unpack_result

floats = st.floats(allow_nan=False, width=64)
names = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    task_id=st.integers(-(2**63), 2**63 - 1),
    status=st.sampled_from(["ok", "diverged", "error", "stopped", "timeout", "é"]),
    fitness=st.one_of(floats, st.just(-math.inf)),
    metrics=st.dictionaries(names, floats, max_size=6),
    seconds=floats,
    epochs=st.integers(0, 10**6),
    message=st.text(st.characters(blacklist_categories=("Cs",)), max_size=300),
    curve=st.lists(st.one_of(floats, st.just(math.nan)), max_size=50),
    offer=st.one_of(st.none(), st.lists(st.tuples(names, st.lists(st.integers(0, 10**6), max_size=4).map(tuple),
                                                  st.sampled_from(["float32", "int64", "uint8"])), min_size=1, max_size=5)),
)
def test_a_result_comes_back_as_it_went(task_id, status, fitness, metrics, seconds, epochs, message, curve, offer):
    ev = Evaluation(status=status, fitness=fitness, metrics=metrics, seconds=seconds, epochs_done=epochs, message=message, curve=curve)
    raw = bytearray(pack_result(task_id, ev, offer)) + b"left over from a longer message"
    got_id, got, got_offer = unpack_result(raw, len(raw) - 31)
    assert got_id == task_id and got_offer == offer
    assert (got.status, got.fitness, got.metrics, got.seconds, got.epochs_done, got.message) == (status, fitness, metrics, seconds, epochs, message)
    assert len(got.curve) == len(curve) and all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got.curve, curve))
    assert all(type(v) is float for v in [got.fitness, got.seconds, *got.metrics.values(), *got.curve]) and type(got.epochs_done) is int
    assert not got.has_payload


def test_a_long_result_is_announced_by_its_length():
    marker = long_marker(123_456)
    assert long_size(marker, len(marker)) == 123_456
    ev = Evaluation(status="ok", fitness=0.5, metrics={}, seconds=0.0, epochs_done=1)
    raw = pack_result(1, ev, None)
    assert long_size(raw, len(raw)) is None


@pytest.mark.parametrize("damage, says", [
    (lambda raw: b"\x80" + raw[1:], "not a result message"),
    (lambda raw: raw[:10], "not a result message"),
    (lambda raw: raw[:-1], "does not add up"),
    (lambda raw: raw + b"x", "does not add up"),
    (lambda raw: raw[:-len("bad \xe9".encode())] + b"bad \xff\xff", "not UTF-8"),
])
def test_a_malformed_result_is_a_clear_error(damage, says):
    raw = damage(pack_result(7, Evaluation(status="error", fitness=-math.inf, metrics={"a": 1.0}, seconds=1.0, epochs_done=0, message="bad \xe9"), None))
    with pytest.raises(WireError, match=says):
        unpack_result(raw, len(raw))


@pytest.mark.parametrize("offer", [b"[1, 2]", b"not json", b'[["w", [-1], "float32"]]', b"[]", b'{"a": 1}'])
def test_an_offer_that_is_not_array_specs_is_a_clear_error(offer):
    ev = Evaluation(status="ok", fitness=0.5, metrics={}, seconds=0.0, epochs_done=1)
    raw = pack_result(3, ev, [("x", (1,), "float32")])
    good = b'[["x",[1],"float32"]]'
    assert raw.endswith(good)
    raw = raw[:-len(good)] + offer
    raw = raw[:9] + len(offer).to_bytes(4, "little") + raw[13:]  # the offer's length, after the marker and the task id
    with pytest.raises(WireError, match="offer"):
        unpack_result(raw, len(raw))
