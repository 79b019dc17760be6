"""The appendable checkpoint: a log of segments and a state file that commits them."""
import math
import os
import subprocess
import sys
from dataclasses import replace

import h5py
import numpy as np
import pytest
from checkpoint_fixture import SPACE, STEPS, full_state, growing_saves, info, record_keys
from conftest import MPI_PROGRAMS, ROOT, seals_again
from fakes import landscape, search_config

from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint, segments
from evolve.runfile.checkpoint import segments_folder
from evolve.transport.protocol import InProcessTransport


def test_an_appended_checkpoint_loads_to_the_same_state_as_one_written_whole(tmp_path):
    appended = str(tmp_path / "a" / "c.h5")
    os.makedirs(os.path.dirname(appended))
    assert list(growing_saves(appended)) == list(STEPS)
    a, _ = checkpoint.load(appended)
    whole = str(tmp_path / "w.h5")
    checkpoint.save(whole, a, info())  # the same state, written whole into a fresh file
    w, _ = checkpoint.load(whole)
    assert a.records == w.records  # every field, times included
    assert (a.strategy, a.next_id, a.hall_of_fame.ids, a.selection) == (w.strategy, w.next_id, w.hall_of_fame.ids, w.selection)
    assert a.rng.getstate() == w.rng.getstate()
    assert record_keys(a.records) == record_keys(full_state().records)  # and what an unbroken search computes


def test_each_checkpoint_writes_what_is_new_and_segments_stay_few(tmp_path, monkeypatch):
    written = []  # the rows of each segment file written
    real = segments._new_segment

    def spy(folder, rows, fill):
        written.append(rows)
        return real(folder, rows, fill)

    monkeypatch.setattr(segments, "_new_segment", spy)
    path = str(tmp_path / "c.h5")
    list(growing_saves(path))
    n = STEPS[-1]
    new_rows = [b - a for a, b in zip((0,) + STEPS, STEPS)]
    assert written[: 1] == new_rows[:1] and sum(written) <= n * (math.log2(n) + 1)  # appends, and merges bounded
    assert len(written) == len(STEPS)  # one file a checkpoint: the new records with the segments they merge with
    listed, _ = checkpoint._listed(path)
    assert len(listed) <= math.log2(n) + 1 and sum(s.rows for s in listed) == n
    assert sorted(os.listdir(segments_folder(path))) == sorted(s.name for s in listed)  # nothing else is left


def test_a_state_saved_again_without_new_records_writes_no_segment(tmp_path, monkeypatch):
    path = str(tmp_path / "c.h5")
    state = full_state()
    checkpoint.save(path, state, info())
    calls = []
    monkeypatch.setattr(segments, "_new_segment", lambda *a: calls.append(a))
    checkpoint.save(path, state, info())
    assert calls == [] and checkpoint.load(path)[0].records == state.records


def test_a_state_that_lets_go_of_what_each_checkpoint_committed_saves_the_same_run(tmp_path):
    """A master lets go of the records each checkpoint committed (SearchState.let_go, as evens run does): the next
    checkpoints append only what came since, and the run file is the one a master keeping everything writes. Saved
    anywhere else, where the first records are not, such a state is refused in one line: they are gone."""
    def search(path, let_go):
        state, held = SearchState.fresh(0, candidates=3), []

        def save(s):
            checkpoint.save(path, s, info())
            if let_go:
                s.let_go()
            held.append((s.recorded, len(s.records)))

        run_search(state, InProcessTransport(landscape, 2), SPACE, search_config(30, 4, 3, 0, checkpoint_seconds=4), checkpoint=save,
                   clock=lambda: float(state.recorded))
        save(state)
        return state, held

    state, held = search(str(tmp_path / "let_go.h5"), True)
    kept, held_all = search(str(tmp_path / "kept.h5"), False)
    assert len(held) >= 6 and all(n == 0 for _, n in held) and [r for r, _ in held] == [r for r, _ in held_all]
    assert record_keys(checkpoint.load(str(tmp_path / "let_go.h5"))[0].records) == record_keys(kept.records)
    assert state.recorded == len(kept.records) == 30
    with pytest.raises(RunDirError, match="not the first 30 of this search's"):
        checkpoint.save(str(tmp_path / "elsewhere.h5"), state, info())


def test_a_load_holds_the_segments_its_state_file_lists_while_a_job_merges_and_removes_them(tmp_path, monkeypatch):
    """A reader beside a job (evens status, report) opens the state file; the job then checkpoints, merging
    the segments that file lists into one and removing them. The reader still loads the state it opened,
    whole: it opened every listed segment before reading the rest."""
    path = str(tmp_path / "c.h5")
    saves = growing_saves(path)
    assert [next(saves), next(saves)] == [3, 4]
    before = checkpoint._listed(path)[0]
    read_ensemble, merged = checkpoint.read_ensemble, []

    def job_checkpoints_meanwhile(*args):
        if not merged:
            merged.append(next(saves))  # 9 records: the two listed segments and the new rows merge into one file
        return read_ensemble(*args)

    monkeypatch.setattr(checkpoint, "read_ensemble", job_checkpoints_meanwhile)
    state, _ = checkpoint.load(path)
    assert merged == [9] and not set(os.listdir(segments_folder(path))) & {s.name for s in before}  # they are gone
    assert record_keys(state.records) == record_keys(full_state().records)[:4]  # and the load has all four
    assert len(checkpoint.load(path)[0].records) == 9


def crash_server() -> subprocess.Popen:
    """prog_crash_save.py --serve: one interpreter that imports the checkpoint code once and forks a child for each crash."""
    return subprocess.Popen([sys.executable, os.path.join(MPI_PROGRAMS, "prog_crash_save.py"), "--serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join((ROOT, os.path.join(ROOT, "tests")))))


@pytest.mark.slow
def test_a_kill_at_any_step_of_a_checkpoint_leaves_one_that_loads(tmp_path):
    """Die (os._exit, as kill -9) at every durable step in turn: the checkpoint always loads, holding
    every record up to the last checkpoint that completed, and never a record it did not commit."""
    whole = record_keys(full_state().records)
    k, crashed, finished = 1, 0, False
    server = crash_server()
    try:
        while not finished:
            paths = [str(tmp_path / f"k{at}" / "c.h5") for at in (k, k + 1)]  # two crashes at a time
            for path in paths:
                os.makedirs(os.path.dirname(path))
            server.stdin.write(";".join(f"{path} {at}" for at, path in zip((k, k + 1), paths)) + "\n")
            server.stdin.flush()
            codes = server.stdout.readline().split()
            assert len(codes) == 2, "the crash server ended"
            k += 2
            for path, code in zip(paths, map(int, codes)):
                with open(path + ".out") as f:
                    out = f.read()
                if "done" in out:
                    finished = True  # past the last step
                    continue
                assert code == 9, out
                crashed += 1
                check_after_crash(path, out, whole)
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert crashed >= 3 * len(STEPS)  # every checkpoint had several steps to die in


def check_after_crash(path, stdout, whole):
    saved = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("saved")]
    last = saved[-1] if saved else 0
    if not os.path.exists(path):
        assert last == 0
        return
    records = record_keys(checkpoint.load(path)[0].records)
    assert records == whole[: len(records)] and len(records) >= last  # a prefix, at least what was confirmed
    following = STEPS[STEPS.index(last) + 1] if last in STEPS[:-1] else (STEPS[0] if last == 0 else last)
    assert len(records) in (last, following)  # the last confirmed checkpoint, or the one in flight if it committed


def test_an_unchanged_ensemble_group_is_copied_and_loads_the_same(tmp_path, monkeypatch):
    """A checkpoint whose hall of fame has not changed copies the ensemble group from the previous state
    file (HDF5's object copy) instead of writing it again; what loads is the same either way."""
    import numpy as np

    from ensemble.hall_of_fame import Member

    written, added = [], []  # the group written whole or updated in a copy; the members written into a copy
    write_whole, write_header, add_members = checkpoint.write_ensemble, checkpoint.write_header, checkpoint.add_members
    monkeypatch.setattr(checkpoint, "write_ensemble", lambda group, stored: written.append(1) or write_whole(group, stored))
    monkeypatch.setattr(checkpoint, "write_header", lambda group, stored: written.append(1) or write_header(group, stored))
    monkeypatch.setattr(checkpoint, "add_members", lambda group, new: added.append([m.id for m in new]) or add_members(group, new))
    state = full_state()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info())
    checkpoint.save(path, state, info())  # nothing changed: copied
    assert written == [1]
    copied, _ = checkpoint.load(path)
    fresh = str(tmp_path / "fresh.h5")
    checkpoint.save(fresh, state, info())
    assert len(written) == 2
    whole, _ = checkpoint.load(fresh)

    def ensemble(s):
        return [(m.id, m.fitness, m.network, m.training, m.val_pred.tobytes(), m.test_pred.tobytes(),
                 {k: (w.dtype.str, w.shape, w.tobytes()) for k, w in m.weights.items()}) for m in s.hall_of_fame]

    assert ensemble(copied) == ensemble(whole) and copied.hall_of_fame.capacity == whole.hall_of_fame.capacity
    # a change to the hall, the capacity, or the file itself (not the one this process wrote) writes it again
    best = state.hall_of_fame.members[0]
    state.hall_of_fame.offer(Member(10_000, best.fitness + 1, best.network, best.training, best.val_pred, best.test_pred, best.weights))
    checkpoint.save(path, state, info())
    assert len(written) == 3 and checkpoint.load(path)[0].hall_of_fame.ids[0] == 10_000
    assert added == [[10_000]]  # the copy's one new member is all that was written
    state.hall_of_fame.grow(7)
    checkpoint.save(path, state, info())
    assert len(written) == 4 and checkpoint.load(path)[0].hall_of_fame.capacity == 7
    checkpoint.save(path, state, info())
    assert len(written) == 4
    os.utime(path, ns=(1, 1))
    checkpoint.save(path, state, info())
    assert len(written) == 5
    labels = info()
    labels.val_y = np.asarray(labels.val_y).copy()
    labels.val_y[0] = (labels.val_y[0] + 1) % 3
    checkpoint.save(path, state, labels)
    assert len(written) == 6


@pytest.mark.parametrize("staying", [0, 1, 2, 3])
def test_a_changed_hall_loads_the_same_whether_its_group_was_copied_whole_or_member_by_member(tmp_path, monkeypatch, staying):
    """Members that left are deleted from a whole copy while most stay, and only those that stayed are copied
    when most left: either way the state file holds what a fresh write holds, and entrants alone are written."""
    from ensemble.hall_of_fame import Member

    added = []
    add_members = checkpoint.add_members
    monkeypatch.setattr(checkpoint, "add_members", lambda group, new: added.append([m.id for m in new]) or add_members(group, new))
    state = full_state()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info())
    hall = state.hall_of_fame
    assert len(hall.members) == hall.capacity == 3
    best = hall.members[0]
    newcomers = [Member(10_000 + i, best.fitness + 1 + i, best.network, best.training, best.val_pred * (i + 2), best.test_pred,
                        {k: w + i for k, w in best.weights.items()}) for i in range(3 - staying)]
    kept = hall.ids[:staying]
    for m in newcomers:
        hall.offer(m)
    assert sorted(hall.ids) == sorted(kept + [m.id for m in newcomers])
    added.clear()
    checkpoint.save(path, state, info())
    assert sorted(sum(added, [])) == sorted(m.id for m in newcomers)  # the entrants, and nothing else, written
    fresh = str(tmp_path / "fresh.h5")
    checkpoint.save(fresh, state, info())

    def ensemble(path):
        s, _ = checkpoint.load(path)
        return [(m.id, m.fitness, m.network, m.training, m.val_pred.tobytes(), m.test_pred.tobytes(),
                 {k: (w.dtype.str, w.shape, w.tobytes()) for k, w in m.weights.items()}) for m in s.hall_of_fame], \
            s.hall_of_fame.capacity, s.selection

    assert ensemble(path) == ensemble(fresh)
    with h5py.File(path, "r") as f, h5py.File(fresh, "r") as g:  # the same objects, attributes and labels
        assert sorted(f["ensemble/members"]) == sorted(g["ensemble/members"]) == sorted(map(str, hall.ids))
        assert dict(f["ensemble"].attrs) == dict(g["ensemble"].attrs)
        assert all((f["ensemble/labels"][k][...] == g["ensemble/labels"][k][...]).all() for k in ("val", "test"))


def _relist(f, crcs):
    """The state file ``f`` lists its segments with these CRC-32s (after a test rewrote them)."""
    import numpy as np

    del f["segments/crc32"]
    f["segments"].create_dataset("crc32", data=np.asarray(crcs, dtype=np.uint32), fletcher32=True)
    seals_again(f)


MESSAGES = ["", "diverged at epoch 3", "CUDA out of memory: 1.5 GiB (Größe) \u2013 \u6f22\u5b57", "x" * 5000, "\n"]


def with_messages(path, out):
    """The checkpoint ``path`` written again whole to ``out``, its records given messages of every kind, and
    three individuals pending (their operators strings of several lengths and scripts)."""
    from evolve.search.records import Pending

    state, _ = checkpoint.load(path)
    for i, r in enumerate(state.records):
        r.message = MESSAGES[i % len(MESSAGES)]
    state.pending = [Pending(id=state.next_id + k, genome=list(state.records[k].genome), parents=(1, 2), operators=ops, attempts=k)
                     for k, ops in enumerate(["crossover+mutation+redo", "random", "mutation \u00fc"])]
    state.next_id += 3
    checkpoint.save(out, state, info())
    return state.records, state.pending


def test_messages_of_any_length_and_script_survive_a_save_a_merge_and_a_load(tmp_path):
    path, out = str(tmp_path / "c.h5"), str(tmp_path / "m" / "c.h5")
    list(growing_saves(path))
    os.makedirs(os.path.dirname(out))
    expected, pending = with_messages(path, out)
    checkpoint._written.clear()
    segments._cache.clear()  # as a new job would find it: the merge below reads the segment from its file
    assert checkpoint.load(out)[0].records == expected and checkpoint.load(out)[0].pending == pending
    state, _ = checkpoint.load(out)
    state.records += [replace(r, id=r.id + 1000, message=MESSAGES[-1 - i % len(MESSAGES)]) for i, r in enumerate(state.records)]
    state.next_id = state.records[-1].id + 1
    checkpoint.save(out, state, info())  # as many new rows: they merge with the segment before them (read back from its file)
    assert checkpoint.load(out)[0].records == state.records
    assert len(checkpoint._listed(out)[0]) == 1


@pytest.mark.parametrize("version", [checkpoint.FORMAT_VERSION - 1, checkpoint.FORMAT_VERSION + 1])
def test_a_run_file_of_another_format_is_refused_in_one_line_naming_it(tmp_path, version):
    from evolve.errors import RunDirError

    path = str(tmp_path / "c.h5")
    list(growing_saves(path))
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = version
        seals_again(f)  # (a file made so, not damaged: see test_runfile_integrity.py for a damaged version)
    checkpoint._written.clear()
    with pytest.raises(RunDirError, match=f"a run file of format {version}; this evens reads format {checkpoint.FORMAT_VERSION} only"):
        checkpoint.load(path)


def test_a_run_file_with_another_record_layout_is_refused_by_its_version_not_as_damage(tmp_path):
    """A field added to a record without a new format version still cannot pass as the same format."""
    import json

    from evolve.errors import RunDirError

    path = str(tmp_path / "c.h5")
    list(growing_saves(path))
    with h5py.File(path, "r+") as f:
        schema = json.loads(f.attrs["schema"])
        schema["record"]["gpu_seconds"] = "real"
        f.attrs["schema"] = json.dumps(schema)
        seals_again(f)
    checkpoint._written.clear()
    with pytest.raises(RunDirError, match=f"a run file of format {checkpoint.FORMAT_VERSION} with another record layout"):
        checkpoint.load(path)


def test_the_format_version_moves_with_the_record_layout():
    """Adding, removing or changing a field of Record or Pending changes the run file: bump
    checkpoint.FORMAT_VERSION, then update the layout pinned here."""
    assert checkpoint.FORMAT_VERSION == 17
    assert checkpoint.SCHEMA == {
        "record": {"status": "label", "fitness": "real", "metrics": "named", "seconds": "real", "epochs_done": "integer",
                   "message": "text", "curve": "reals", "id": "integer", "genome": "vector", "parents": "pair",
                   "operators": "label", "rung": "integer", "network": "integer", "worker": "integer", "started": "real",
                   "finished": "real"},
        "pending": {"id": "integer", "genome": "vector", "parents": "pair", "operators": "label", "attempts": "integer",
                    "rung": "integer", "network": "integer"},
    }


@pytest.mark.parametrize("edit, says", [
    (lambda f: f["pending"].__setitem__("genome", np.zeros((3, 2))) if not f["pending"].__delitem__("genome") else None,
     "'genome' has 2 values a row"),
    (lambda f: f["pending"].__setitem__("id", np.zeros(3)) if not f["pending"].__delitem__("id") else None, "'id' holds float64"),
    (lambda f: f.attrs.__setitem__("next_id", 0), "next_id 0 is not past every evaluation id"),
    (lambda f: f.attrs.__setitem__("strategy", '{"mode": "async", "population": [999]}'), "names evaluations \\[999\\]"),
])
def test_a_hand_edited_run_file_is_refused_in_one_line_when_loaded_not_later(tmp_path, edit, says):
    """Parts that pass their checksums yet do not fit together (an edit, not damage) are refused at load."""
    from evolve.errors import RunDirError

    path, out = str(tmp_path / "c.h5"), str(tmp_path / "m" / "c.h5")
    list(growing_saves(path))
    os.makedirs(os.path.dirname(out))
    with_messages(path, out)  # three individuals pending
    with h5py.File(out, "r+") as f:
        edit(f)
        seals_again(f)  # an edit that passes the checksums: the checks behind them refuse it
    checkpoint._written.clear()
    with pytest.raises(RunDirError, match=f"damaged checkpoint.*{says}"):
        checkpoint.load(out)

def test_a_damaged_pending_operator_is_refused_not_loaded(tmp_path):
    from evolve.errors import RunDirError

    path, out = str(tmp_path / "c.h5"), str(tmp_path / "m" / "c.h5")
    list(growing_saves(path))
    os.makedirs(os.path.dirname(out))
    with_messages(path, out)  # three pending individuals
    with h5py.File(out, "r") as f:
        at = f["pending/operators"].id.get_chunk_info(0).byte_offset
    with open(out, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x20]))  # "c" -> "C": still text, another operator
    checkpoint._written.clear()
    with pytest.raises(RunDirError, match="damaged checkpoint"):
        checkpoint.load(out)


@pytest.mark.parametrize("damage", ["lengths", "negative", "utf8"])
def test_a_segment_whose_messages_do_not_add_up_or_decode_is_refused(tmp_path, damage):
    """Checksummed and listed, yet not ours (written by something else): one clear error, never garbled records."""
    import zlib

    from evolve.errors import RunDirError

    path, out = str(tmp_path / "c.h5"), str(tmp_path / "m" / "c.h5")
    list(growing_saves(path))
    os.makedirs(os.path.dirname(out))
    with_messages(path, out)
    name = checkpoint._listed(out)[0][0].name
    seg = os.path.join(segments_folder(out), name)
    with h5py.File(seg, "r+") as s:
        lengths, raw = s["message_length"][...], bytearray(s["message"][...].tobytes())
        if damage == "lengths":
            lengths[-1] += 1
        elif damage == "negative":
            lengths[1], lengths[2] = -1, lengths[1] + lengths[2] + 1
        else:
            raw[raw.index(b"\xc3")] = 0xFF  # within "Größe": no longer UTF-8
        del s["message_length"], s["message"]
        s["message_length"], s["message"] = lengths, np.frombuffer(bytes(raw), dtype=np.uint8)
    with open(seg, "rb") as fh:
        crc = zlib.crc32(fh.read())
    with h5py.File(out, "r+") as f:
        crcs = f["segments/crc32"][...]
        crcs[0] = crc
        _relist(f, crcs)
    checkpoint._written.clear()
    segments._cache.clear()
    with pytest.raises(RunDirError, match="damaged checkpoint.*(message column does not add up|utf-8)"):
        checkpoint.load(out)


def test_a_header_h5py_cannot_decode_is_a_damaged_checkpoint(tmp_path, monkeypatch):
    """h5py raises RuntimeError for some damaged object headers (found by scripts/tools/fuzz_run_file.py): one line."""
    from evolve.errors import RunDirError

    path = str(tmp_path / "c.h5")
    list(growing_saves(path))
    checkpoint._written.clear()

    def damaged(self, name):
        raise RuntimeError("Can't synchronously determine if attribute exists by name (ran off end of input buffer while decoding)")

    monkeypatch.setattr(h5py.AttributeManager, "__getitem__", damaged)
    with pytest.raises(RunDirError, match="damaged checkpoint.*RuntimeError"):
        checkpoint.load(path)


def test_no_merge_makes_a_segment_larger_than_its_cap(tmp_path, monkeypatch):
    """A merge holds its rows in memory, so segments stop growing at MERGED_ROWS: a long run's log is then some
    segments of that size and a binary counter's below it, and it still loads to every record."""
    monkeypatch.setattr(segments, "MERGED_ROWS", 8)
    path = str(tmp_path / "c.h5")
    list(growing_saves(path))
    listed = checkpoint.listing(path)
    largest_append = max(b - a for a, b in zip((0,) + STEPS, STEPS))  # (one checkpoint's new rows are one segment, merged or not)
    assert max(s.rows for s in listed) <= max(8, largest_append) and len(listed) > 2 and sum(s.rows for s in listed) == STEPS[-1]
    assert record_keys(checkpoint.load(path)[0].records) == record_keys(full_state().records)
