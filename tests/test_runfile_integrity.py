"""Issue 24, items 4.3 and 4.4: every byte of the run file that loading trusts is checksummed, and one
damaged member leaves the hall of fame, by name, instead of blocking the run."""
import io
import logging
import os
import pickle
import re
import shutil
from collections import Counter

import h5py
import numpy as np
import pytest
from test_checkpoint_report import finished_run

from ensemble.predict import load_ensemble, read_stored
from ensemble.store import EnsembleError
from evolve.app.run.prepare import prepare
from evolve.app.run.reselect import reselect
from evolve.errors import RunDirError
from evolve.runfile import checkpoint


def _saved_run(folder) -> str:
    """A finished run's directory (hall of 6 members with weights, a chosen ensemble of 3); its run file's path."""
    state, info = finished_run()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(str(folder), checkpoint.CHECKPOINT_NAME)
    checkpoint.save(path, state, info)
    checkpoint._written.clear()  # as a new job finds it
    return path


def _arrays(arrays: dict) -> tuple:
    return tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in sorted((arrays or {}).items()))


def _hall(hall, without=()) -> tuple:
    return hall.capacity, tuple((m.id, m.fitness, repr(m.network), repr(m.training), _arrays({"v": m.val_pred, "t": m.test_pred}),
                                 _arrays(m.weights)) for m in hall if m.id not in without)


def _run_tuple(loaded, without=()) -> tuple:
    """Everything checkpoint.load gives, comparable; as if the members ``without`` had been left out."""
    state, info = loaded
    selection = None if set(without) & set(state.selection.path if state.selection else ()) else state.selection
    return (repr(state.records), repr(state.pending), repr(state.strategy), state.rng.getstate(), state.next_id,
            state.busy_seconds, state.capacity_seconds, _hall(state.hall_of_fame, without), repr(selection), repr(info.config),
            info.gene_names, repr(info.data), _arrays({"v": info.val_y, "t": info.test_y}), info.wall_seconds, info.sessions,
            info.version, repr(info.preset))


def _ensemble_content(path: str) -> tuple:
    """Everything evens predict reads (ensemble.predict.read_stored), comparable."""
    s = read_stored(path)
    return (repr(s.problem), s.sample_shape, s.x_dtype, _arrays({"v": s.val_y, "t": s.test_y}), _hall(s.hall_of_fame), repr(s.selection))


def _attribute_bytes(path: str) -> list[tuple[str, int]]:
    """(object/attribute, file offset) of bytes inside attribute values: each string's UTF-8 bytes as found in
    the file (a few spread over it), and numbers whose 8 bytes occur in the file exactly once."""
    with open(path, "rb") as fh:
        data = fh.read()
    found = []

    def visit(name, obj):
        for key, value in obj.attrs.items():
            raw = value.encode() if isinstance(value, str) else np.asarray(value).tobytes()
            at = data.find(raw)
            if not raw or at < 0 or (not isinstance(value, str) and data.count(raw) != 1):
                continue
            spots = sorted({0, len(raw) // 2, len(raw) - 1})
            found.extend((f"/{name}@{key}".replace("//", "/"), at + i) for i in spots)

    with h5py.File(path, "r") as f:
        visit("", f)
        f.visititems(visit)
    return found


def _flipped(path: str, offset: int, out: str) -> str:
    shutil.copytree(os.path.dirname(path), out)
    copy = os.path.join(out, os.path.basename(path))
    with open(copy, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 0x01]))  # a digit stays a digit: the change most likely to pass as a value
    checkpoint._written.clear()
    return copy


def test_every_one_byte_change_inside_an_attribute_is_refused_or_named_never_loaded_silently(tmp_path, monkeypatch, evens_log):
    """Each change is refused in one line naming the file, or (inside one member) leaves that member out and says so."""
    path = _saved_run(tmp_path / "run")
    intact, ensemble = checkpoint.load(path), _ensemble_content(path)
    spots = _attribute_bytes(path)
    assert len(spots) >= 100 and {s.split("@")[1] for s, _ in spots} >= {"config", "strategy", "selection", "training", "data", "network", "checksums"}

    def refuse(*a, **k):
        raise AssertionError("loading unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)  # loading never executes code, whatever the file holds
    monkeypatch.setattr(pickle, "load", refuse)
    silent, outcomes = [], []
    for i, (where, offset) in enumerate(spots):
        copy = _flipped(path, offset, str(tmp_path / f"flip{i}"))
        evens_log.clear()
        try:
            loaded = checkpoint.load(copy)
            named = [int(n) for line in evens_log for n in re.findall(r"member (\d+) is damaged", line) if copy in line]
            outcomes.append("dropped, named" if named else "loaded")
            if _run_tuple(loaded, named) != _run_tuple(intact, named):
                silent.append((where, offset, "checkpoint.load"))
        except RunDirError as exc:
            outcomes.append("refused")
            assert "\n" not in str(exc) and copy in str(exc), (where, str(exc))
        try:
            if _ensemble_content(copy) != ensemble:
                silent.append((where, offset, "read_stored"))
        except EnsembleError as exc:
            assert "\n" not in str(exc) and copy in str(exc), (where, str(exc))
        shutil.rmtree(os.path.dirname(copy))
    print(f"of {len(spots)} one-byte changes inside attributes: {dict(Counter(outcomes))} by checkpoint.load; "
          f"{len(silent)} loads (of {len({o for _, o, _ in silent})} changes) gave changed content unsaid")
    assert silent == []


def _damage_weight(path: str, ident: int) -> None:
    """Flip one byte inside member ``ident``'s first weight tensor, where it lies in the file (HDF5 then finds its
    Fletcher-32 wrong: the read fails)."""
    with h5py.File(path, "r") as f:
        weights = f[f"ensemble/members/{ident}/weights"]
        at = next(weights[n] for n in sorted(weights) if weights[n].chunks).id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x40]))


class _Lines(logging.Handler):
    """What is said on the "evens" logger (set up by evens run: propagate is off, so caplog may miss it)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def evens_log():
    handler, log = _Lines(), logging.getLogger("evens")
    log.addHandler(handler)
    yield handler.lines
    log.removeHandler(handler)


def test_a_damaged_member_weight_leaves_the_hall_named_and_the_rest_load(tmp_path, evens_log):
    path = _saved_run(tmp_path / "run")
    before, _ = checkpoint.load(path)
    chosen = before.selection.ids[0]
    _damage_weight(path, chosen)
    state, _ = checkpoint.load(path)
    assert state.hall_of_fame.ids == [i for i in before.hall_of_fame.ids if i != chosen]
    for m in state.hall_of_fame:  # the rest, whole
        assert _arrays(m.weights) == _arrays(before.hall_of_fame.by_id(m.id).weights)
    assert state.hall_of_fame.capacity == before.hall_of_fame.capacity and state.selection is None  # (it held the member)
    said = [line for line in evens_log if f"member {chosen}" in line]
    assert len(said) == 1 and path in said[0] and "dropped" in said[0] and "\n" not in said[0]
    assert state.records == before.records  # its evaluation stays recorded


def test_evens_select_drops_a_damaged_member_and_chooses_again_and_predict_names_it_first(tmp_path, capsys):
    path = _saved_run(tmp_path / "run")
    run_dir = os.path.dirname(path)
    before, _ = checkpoint.load(path)
    chosen = before.selection.ids[0]
    _damage_weight(path, chosen)
    with pytest.raises(EnsembleError, match=f"member {chosen}\\b") as err:  # predict never uses fewer members silently
        load_ensemble(run_dir, device="cpu")
    assert "\n" not in str(err.value) and "evens select" in str(err.value)
    summary = reselect(run_dir)
    assert f"member {chosen}" in capsys.readouterr().err
    assert chosen not in summary.ensemble.members
    checkpoint._written.clear()
    after, _ = checkpoint.load(path)  # the drop is saved: nothing left to say
    assert chosen not in after.hall_of_fame.ids and len(after.hall_of_fame) == len(before.hall_of_fame) - 1
    assert after.selection is not None and chosen not in after.selection.ids
    assert chosen not in read_stored(run_dir).hall_of_fame.ids


def test_a_resume_goes_on_without_a_damaged_member_and_says_so(tmp_path, evens_log):
    from fakes import landscape, search_config

    from evolve.engine.loop import run_search
    from evolve.transport.protocol import InProcessTransport

    path = _saved_run(tmp_path / "run")
    before, _ = checkpoint.load(path)
    dropped = before.hall_of_fame.ids[-1]
    _damage_weight(path, dropped)
    prepared = prepare(None, [], None, os.path.dirname(path))
    try:
        state, info = prepared.state, prepared.info
        assert dropped not in state.hall_of_fame.ids and any(f"member {dropped}" in line for line in evens_log)
        run_search(state, InProcessTransport(landscape, 2), info.space(), search_config(len(state.records) + 4, 4, 6, 0))
        checkpoint.save(path, state, info)
    finally:
        prepared.release()
    checkpoint._written.clear()
    again, _ = checkpoint.load(path)
    assert len(again.records) == len(before.records) + 4 and dropped not in again.hall_of_fame.ids
    assert all(m.weights for m in again.hall_of_fame)


def test_a_member_listed_but_gone_is_named_and_dropped(tmp_path, evens_log):
    path = _saved_run(tmp_path / "run")
    before, _ = checkpoint.load(path)
    gone = before.hall_of_fame.ids[1]
    with h5py.File(path, "r+") as f:
        del f[f"ensemble/members/{gone}"]
    with pytest.raises(EnsembleError, match=f"member {gone}\\b"):
        read_stored(path)
    state, _ = checkpoint.load(path)
    assert state.hall_of_fame.ids == [i for i in before.hall_of_fame.ids if i != gone]
    assert any(f"member {gone}" in line for line in evens_log)


def test_a_run_file_of_the_format_before_is_refused_in_one_line(tmp_path):
    path = _saved_run(tmp_path / "run")
    with h5py.File(path, "r+") as f:  # as the format before wrote it: no checksums over the attributes
        for obj in [f] + [o for o in _objects(f)]:
            obj.attrs.pop("crc32", None)
        f.attrs["format_version"] = checkpoint.FORMAT_VERSION - 1
    with pytest.raises(RunDirError, match=f"a run file of format {checkpoint.FORMAT_VERSION - 1}; this evens reads format "
                                          f"{checkpoint.FORMAT_VERSION} only") as err:
        checkpoint.load(path)
    assert "\n" not in str(err.value)


def _objects(f):
    out = []
    f.visititems(lambda name, obj: out.append(obj))
    return out


def test_the_version_attribute_damaged_is_damage_not_another_format(tmp_path):
    path = _saved_run(tmp_path / "run")
    with h5py.File(path, "r+") as f:
        f.attrs.modify("format_version", checkpoint.FORMAT_VERSION + 1)  # not sealed again: damage, as a flipped byte makes it
    with pytest.raises(RunDirError, match="damaged checkpoint.*the checksum over / "):
        checkpoint.load(path)


def test_the_checksum_layout_is_pinned_to_the_format_version():
    from ensemble import store

    assert checkpoint.FORMAT_VERSION == 17 and store.FORMAT_VERSION == 6 and store.SEAL == "crc32"
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.attrs.update(a="x", b=3)
        f["d"] = np.arange(3)
        store.seal(f)
        assert store.seal_holds(f)
        f.attrs["b"] = 4
        assert not store.seal_holds(f)
