import errno
import json
import os
import socket
import time

import h5py
import numpy as np
import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, landscape, search_config

from ensemble.combine import combine, ensemble_prediction
from evolve.app.presentation.report import summarize
from evolve.app.presentation.report_text import format_summary
from evolve.app.run.reselect import select_for_run
from evolve.app.infra.rundir import check_new_run_dir, claim_default_run_dir, claim_run_dir
from evolve.app.infra.runlock import RunLock
from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space import GENE_NAMES
from evolve.transport.protocol import InProcessTransport


def finished_run(budget=12, k=3, fail_every=0, candidates=6):
    def evaluate(task):
        if fail_every and task.id % fail_every == 0:
            raise ValueError("boom")
        return landscape(task)

    config = config_from_dict({"search": {"evaluations": budget}, "ensemble": {"size": k, "candidates": candidates}, "space": {}})
    state = SearchState.fresh(0, candidates)
    space = config.space.for_sample_shape((1, 8, 8))
    settings = search_config(budget, 4, candidates, 0)
    run_search(state, InProcessTransport(evaluate, 2), space, settings)
    info = RunInfo(
        config=config,
        gene_names=list(GENE_NAMES),
        data={"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32", "sizes": {"train": 10, "val": 4, "test": 6}},
        val_y=VAL_Y,
        test_y=TEST_Y,
        wall_seconds=3.5,
        sessions=1,
    )
    state.selection = select_for_run(state.hall_of_fame, info)
    return state, info


def test_round_trip_keeps_everything(tmp_path):
    state, info = finished_run(fail_every=5)
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    loaded, linfo = checkpoint.load(path)
    assert loaded.records == state.records  # status, metrics, messages, genomes, times: all of it
    assert any(r.status == "error" and r.metrics == {} for r in loaded.records)
    assert loaded.population == state.population and loaded.next_id == state.next_id
    assert loaded.rng.getstate() == state.rng.getstate()
    assert loaded.rng.random() == state.rng.random()
    assert loaded.hall_of_fame.ids == state.hall_of_fame.ids and loaded.hall_of_fame.capacity == 6
    for a, b in zip(loaded.hall_of_fame, state.hall_of_fame):
        assert (a.fitness, a.network, a.training) == (b.fitness, b.network, b.training)
        np.testing.assert_array_equal(a.test_pred, b.test_pred)
        assert a.weights.keys() == b.weights.keys()
        for name in a.weights:  # weights come back exactly, dtype and all
            assert a.weights[name].dtype == b.weights[name].dtype
            np.testing.assert_array_equal(a.weights[name], b.weights[name])
    assert loaded.selection == state.selection is not None
    assert linfo.config == info.config and linfo.wall_seconds == 3.5 and linfo.data == info.data
    np.testing.assert_array_equal(linfo.test_y, info.test_y)
    assert sorted(os.listdir(tmp_path)) == ["c.evaluations", "c.h5"]  # no temporary file left behind
    assert all(n.startswith("seg-") and n.endswith(".h5") for n in os.listdir(tmp_path / "c.evaluations"))


def test_checkpoint_holds_only_plain_data(tmp_path):
    state, info = finished_run()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    kinds = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            dt = obj.dtype
            kinds.append(dt.kind)
            vlen = h5py.check_vlen_dtype(dt)  # rows of numbers of varying length (learning curves)
            assert dt.kind in "iuf" or h5py.check_string_dtype(dt) is not None or (vlen is not None and vlen.kind in "iuf"), (name, dt)
        for value in obj.attrs.values():
            assert isinstance(value, (str, bytes, int, float, np.number)), (name, value)

    with h5py.File(path) as f:
        f.visititems(visit)
        visit("/", f)
    assert "f" in kinds


def test_a_checkpoint_read_without_weights_cannot_be_written_back(tmp_path):
    state, info = finished_run()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    light, linfo = checkpoint.load(path, weights=False)
    assert all(m.weights is None for m in light.hall_of_fame)
    with pytest.raises(ValueError, match="would lose the weights"):
        checkpoint.save(path, light, linfo)
    full, _ = checkpoint.load(path)
    assert all(m.weights for m in full.hall_of_fame)  # the failed write left the file as it was


def _flip_a_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(path, "wb").write(bytes(data))


def _segment(tmp_path):
    folder = tmp_path / "c.evaluations"
    return str(folder / sorted(os.listdir(folder))[0])


@pytest.mark.parametrize("damage", ["selection names a missing member", "a segment's byte changed", "a segment gone",
                                    "a truncated column in a segment"])
def test_damaged_checkpoints_are_one_line_errors(tmp_path, damage):
    state, info = finished_run()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    if damage == "selection names a missing member":
        with h5py.File(path, "a") as f:
            sel = json.loads(f["ensemble"].attrs["selection"])
            sel["path"][0] = 999
            f["ensemble"].attrs["selection"] = json.dumps(sel)
    elif damage == "a segment's byte changed":
        _flip_a_byte(_segment(tmp_path))
    elif damage == "a segment gone":
        os.remove(_segment(tmp_path))
    else:
        with h5py.File(_segment(tmp_path), "a") as f:
            ids = f["id"][:3]
            del f["id"]
            f["id"] = ids
    with pytest.raises(RunDirError, match="damaged checkpoint") as err:
        checkpoint.load(path)
    assert "\n" not in str(err.value)


def test_not_a_checkpoint(tmp_path):
    other = tmp_path / "x.h5"
    with h5py.File(other, "w") as f:
        f["a"] = 1
    with pytest.raises(RunDirError, match="not an evens checkpoint"):
        checkpoint.load(str(other))
    junk = tmp_path / "junk.h5"
    junk.write_text("hello")
    with pytest.raises(RunDirError, match="not a readable checkpoint"):
        checkpoint.load(str(junk))


def test_summary_ensemble_is_the_weighted_mean_of_its_members():
    state, info = finished_run(k=3)
    s = summarize(state, info, "somewhere")
    e = s.ensemble
    sel = state.selection
    assert e.members == sel.ids and e.weights == sel.weights and e.method == "greedy" and e.size == 3
    members = [state.hall_of_fame.by_id(i) for i in e.members]
    mean = sum(w * m.test_pred.astype(np.float64) for w, m in zip(e.weights, members))
    assert e.score("test", "accuracy") == PROBLEM.scores(mean, TEST_Y)["accuracy"]
    out = combine(PROBLEM, [m.test_pred for m in members], e.weights, len(TEST_Y))
    assert e.score("test", "accuracy") == PROBLEM.scores(ensemble_prediction(PROBLEM, out), TEST_Y)["accuracy"]
    assert e.curve.path == list(sel.path) and len(e.curve.val) == len(sel.path) >= 3  # 8 bags of up to 3 picks
    best = max(state.records, key=lambda r: (r.fitness, -r.id))
    assert s.best.id == best.id and s.best.score("test", "accuracy") == best.metrics["test_accuracy"]
    assert s.evaluations == 12 and s.wall_seconds == 3.5 and s.problem == "classification"
    genes = set(s.best.genome)  # the active genes: an mlp has no kernel size, only an rnn a cell
    assert {"family", "depth", "learning_rate"} <= genes <= set(GENE_NAMES) and ("cell" in genes) == (s.best.genome["family"] == "rnn")
    text = format_summary(s)
    assert f"best network #{best.id}" in text and "ensemble (greedy" in text and "ensemble curve" in text


def test_summary_uses_the_configured_ensemble():
    state, info = finished_run(k=4)
    info.config = info.config.with_overrides(["ensemble.size=2", "ensemble.method='top_k'"])
    state.selection = select_for_run(state.hall_of_fame, info)
    e = summarize(state, info).ensemble
    assert e.members == state.hall_of_fame.ids[:2] and e.method == "top_k" and e.weights == [0.5, 0.5]


def test_claiming_run_directories(tmp_path):
    target = str(tmp_path / "runs" / "a")
    claim = claim_run_dir(target)
    with pytest.raises(RunDirError, match=rf"another job is using this run \(host {socket.gethostname()}, process {os.getpid()}"):
        claim_run_dir(target)  # a second run racing for the same --out loses, and is told who holds it
    claims = [claim_default_run_dir("cfg.toml", root=str(tmp_path / "runs")) for _ in range(3)]
    assert len({c.path for c in claims}) == 3 and all(os.path.basename(c.path).startswith("cfg-") for c in claims)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunDirError, match="cannot create the run directory"):
        claim_run_dir(str(tmp_path / "afile" / "run"))
    claim.release()
    assert not os.path.exists(target)  # it made the directory, and never wrote a checkpoint


def test_a_failed_start_leaves_the_users_empty_directory_and_a_dead_start_can_be_reused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    claim_run_dir(str(mine)).release()
    assert mine.is_dir() and os.listdir(mine) == []  # the user made it: it stays, empty
    dead = claim_run_dir(str(mine))  # a job killed before its first checkpoint leaves its claim and lock ...
    dead.lock._fd, fd = -1, dead.lock._fd
    os.close(fd)  # ... and the kernel drops its lock when it dies
    assert sorted(os.listdir(mine)) == [".evens-lock", ".evens-run"]
    again = claim_run_dir(str(mine))  # neither blocks a new run there
    again.release()
    assert os.listdir(mine) == []


def test_a_start_killed_while_writing_its_first_checkpoint_leaves_a_directory_a_new_run_takes_over(tmp_path):
    """Killed after its devices and while its first checkpoint was being written (seen under load in the chaos test):
    the claim, lock, devices, in-flight log, segments folder and the state file's temporary are evens' own, and a
    new run there clears them; a file of the user's, or the same files without evens' claim, keep it refused."""
    dead = tmp_path / "dead"
    claim = claim_run_dir(str(dead))
    claim.lock._fd, fd = -1, claim.lock._fd
    os.close(fd)
    (dead / "devices.json").write_text("{}")
    (dead / "checkpoint.inflight").write_bytes(b"")
    (dead / "checkpoint.evaluations").mkdir()
    (dead / "checkpoint.evaluations" / ".seg-000001.abc.tmp").write_bytes(b"x")
    (dead / ".checkpoint.h5.41288f7083b09c80.tmp").write_bytes(b"partial")
    again = claim_run_dir(str(dead))
    assert sorted(os.listdir(dead)) == [".evens-lock", ".evens-run"]
    again.release()
    for name in ("mine.txt", "devices.json"):
        other = tmp_path / f"other-{name}"
        other.mkdir()
        (other / name).write_text("the user's")
        with pytest.raises(RunDirError, match="directory is not empty"):
            claim_run_dir(str(other))
        assert (other / name).read_text() == "the user's"


def test_a_symlink_planted_as_the_lock_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "run" / ".evens-lock")
    with pytest.raises(RunDirError, match="is a symbolic link"):
        RunLock.acquire(str(tmp_path / "run"))
    assert victim.read_text() == "precious"


def test_without_flock_the_named_holder_counts(tmp_path, monkeypatch):
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock_file = tmp_path / ".evens-lock"
    lock_file.write_text(f"host={socket.gethostname()} pid={os.getppid()} started=earlier\n")  # alive, on this host
    with pytest.raises(RunDirError, match=f"process {os.getppid()}.*if it is dead, delete"):
        RunLock.acquire(str(tmp_path))
    lock_file.write_text(f"host={socket.gethostname()} pid=999999999 started=earlier\n")  # no such process
    RunLock.acquire(str(tmp_path)).release()
    lock_file.write_text("host=elsewhere pid=1 started=earlier\n")  # another host, fresh heartbeat
    with pytest.raises(RunDirError, match="host elsewhere"):
        RunLock.acquire(str(tmp_path))
    os.utime(lock_file, (time.time() - 3600, time.time() - 3600))  # no heartbeat for an hour
    lock = RunLock.acquire(str(tmp_path), stale_seconds=900)
    assert not lock.flocked and f"pid={os.getpid()}" in lock_file.read_text()
    lock.release()
    assert lock_file.read_text() == ""


def test_new_run_dir_never_takes_a_used_directory(tmp_path):
    check_new_run_dir(str(tmp_path / "new"))
    check_new_run_dir(str(tmp_path))  # empty is fine
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not empty"):
        check_new_run_dir(str(tmp_path))
    (tmp_path / "checkpoint.h5").write_text("")
    with pytest.raises(RunDirError, match="--resume"):
        check_new_run_dir(str(tmp_path))


def test_temporary_files_are_unpredictable_exclusive_and_cleared_by_the_next_job(tmp_path):
    from evolve.app.run.prepare import prepare
    from evolve.runfile.tempfiles import exclusive_temp, remove_stale

    target = str(tmp_path / "checkpoint.h5")
    names = {exclusive_temp(target) for _ in range(50)}
    assert len(names) == 50 and all(os.path.basename(n).startswith(".checkpoint.h5.") and n.endswith(".tmp") for n in names)
    remove_stale(str(tmp_path))
    # a symlink planted at the old, predictable name is left alone, and what it points to untouched
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / f"checkpoint.h5.tmp-{os.getpid()}")
    state, info = finished_run()
    checkpoint.save(target, state, info)
    assert victim.read_text() == "precious"
    # a job killed mid-write leaves temporaries; the next job to hold the lock clears them, and only them
    leftovers = [exclusive_temp(target), exclusive_temp(os.path.join(checkpoint.segments_folder(target), "seg-0.h5"))]
    (tmp_path / "notes.txt").write_text("the user's")
    prepared = prepare(None, [], None, str(tmp_path))
    try:
        assert not any(os.path.exists(p) for p in leftovers)
        assert (tmp_path / "notes.txt").read_text() == "the user's" and victim.read_text() == "precious"
    finally:
        prepared.release()
