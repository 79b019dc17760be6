"""The in-flight log (evolve.runfile.inflight): binary frames, one write per flush, torn ends ignored, old JSON logs read."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.runfile.inflight import InFlightLog, inflight_path, read_log
from evolve.search.records import Pending

GENES = 4


def _pending(ident: int, attempts: int = 1) -> Pending:
    return Pending(id=ident, genome=[ident + 0.25 * g for g in range(GENES)], parents=(ident - 2, ident - 1), operators="crossover+mutation", attempts=attempts)


def _log_bytes(tmp_path, events) -> bytes:
    path = str(tmp_path / "checkpoint.h5")
    if os.path.exists(inflight_path(path)):
        os.remove(inflight_path(path))
    log = InFlightLog(path)
    for kind, ident in events:
        if kind == "sent":
            log.sent(_pending(ident))
        elif kind == "done":
            log.done(ident)
        else:
            log.flush()
    log.close()
    with open(inflight_path(path), "rb") as fh:
        return fh.read()


def _expected(events) -> dict[int, Pending]:
    out: dict[int, Pending] = {}
    for kind, ident in events:
        if kind == "sent":
            out[ident] = _pending(ident)
        elif kind == "done":
            out.pop(ident, None)
    return out


events = st.lists(st.tuples(st.sampled_from(["sent", "done", "flush"]), st.integers(0, 20)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(events)
def test_what_is_read_is_what_was_sent_and_not_done(tmp_path_factory, evs):
    data = _log_bytes(tmp_path_factory.mktemp("log"), evs)
    assert read_log(data, GENES) == _expected(evs)


@settings(max_examples=60, deadline=None)
@given(events, st.data())
def test_a_log_cut_anywhere_reads_as_a_prefix_of_its_writes(tmp_path_factory, evs, data):
    """A machine that dies mid-write leaves a prefix of the file: it reads as the state after some
    earlier write, never as garbage or an error."""
    whole = _log_bytes(tmp_path_factory.mktemp("log"), evs)
    cut = data.draw(st.integers(0, len(whole)))
    got = read_log(whole[:cut], GENES)
    prefixes = [_expected(evs[:i]) for i in range(len(evs) + 1)]
    assert got in prefixes


def test_entries_are_held_until_a_flush_writes_them_in_one_frame(tmp_path):
    path = str(tmp_path / "checkpoint.h5")
    log = InFlightLog(path)
    read = lambda: read_log(open(inflight_path(path), "rb").read(), GENES)  # noqa: E731
    log.sent(_pending(5))
    assert os.path.getsize(inflight_path(path)) == 0  # held ...
    log.flush()  # ... until the master is about to send it
    assert read() == {5: _pending(5)}
    size = os.path.getsize(inflight_path(path))
    log.done(5)
    log.sent(_pending(6), 3)  # out at one more death than the individual says
    log.sent(_pending(7))
    assert os.path.getsize(inflight_path(path)) == size
    log.flush()  # one write: one frame header more, however many entries
    assert read() == {6: _pending(6, 3), 7: _pending(7)}
    frames, at, data = 0, 0, open(inflight_path(path), "rb").read()
    while at < len(data):
        frames += 1
        at += 8 + int.from_bytes(data[at:at + 4], "little")
    assert frames == 2
    log.done(6)
    log.reset()  # a checkpoint holds everything: nothing held survives it
    log.close()
    assert os.path.getsize(inflight_path(path)) == 0


def test_garbage_and_flipped_bytes_end_the_log_without_an_error(tmp_path):
    whole = _log_bytes(tmp_path, [("sent", 1), ("sent", 2), ("done", 1), ("sent", 3)])
    assert read_log(whole, GENES) == {2: _pending(2), 3: _pending(3)}
    for at in range(len(whole)):
        flipped = bytearray(whole)
        flipped[at] ^= 0x40
        got = read_log(bytes(flipped), GENES)
        assert got in ({}, {1: _pending(1)}, {1: _pending(1), 2: _pending(2)})  # the log ends before the damaged write
    assert isinstance(read_log(os.urandom(4096), GENES), dict)  # random bytes: no error
    assert read_log(b"\x00" * 64, GENES) == {}


def test_entries_for_another_number_of_genes_are_skipped(tmp_path):
    data = _log_bytes(tmp_path, [("sent", 1)])
    assert read_log(data, GENES + 1) == {}


def test_results_that_came_back_after_the_checkpoint_are_redone_not_lost(tmp_path):
    """A master killed between checkpoints: what came back since the last one died with it. Before, the log's 'done'
    entries dropped those evaluations from the resumed run altogether ('0 evaluations done, 1 to redo' after 11
    finished trainings); now they are pending again, with no attempt counted against them (they finished)."""
    from types import SimpleNamespace

    from evolve.runfile.inflight import merge_into

    path = str(tmp_path / "checkpoint.h5")
    log = InFlightLog(path)
    for ident in (1, 2, 3):
        log.sent(_pending(ident, attempts=0), 1)  # (it starts training: this job counts as one it is out at)
    log.done(1)
    log.done(3)
    log.close()
    returned = {}
    assert read_log(open(inflight_path(path), "rb").read(), GENES, returned) == {2: _pending(2, 1)}
    assert returned == {1: _pending(1, 0), 3: _pending(3, 0)}
    state = SimpleNamespace(records=[SimpleNamespace(id=3)], recent_ids=[], pending=[], next_id=0)  # 3 was checkpointed
    merge_into(path, state, GENES)
    assert sorted((p.id, p.attempts) for p in state.pending) == [(1, 0), (2, 1)]
    assert state.next_id == 3
