import os

import h5py
import numpy as np
import pytest

from simulate import TEST_SHAPE, VAL_SHAPE, landscape
from ensemble.combine import accuracy, average_probabilities
from evolve import checkpoint
from evolve.checkpoint import RunInfo
from evolve.config import config_from_dict
from evolve.errors import RunDirError
from evolve.ga import GAParams
from evolve.master import SearchSettings, SearchState, run_search
from evolve.protocol import InProcessTransport
from evolve.app.report import format_summary, summarize
from evolve.app.rundir import check_new_run_dir, claim_default_run_dir, claim_run_dir, release_run_dir
from evolve.space import GENE_NAMES


def finished_run(budget=12, k=3, fail_every=0):
    def evaluate(task):
        if fail_every and task.id % fail_every == 0:
            raise ValueError("boom")
        ev = landscape(task)
        rng = np.random.default_rng(task.id)
        ev.val_probs = rng.dirichlet(np.ones(2), VAL_SHAPE[0]).astype(np.float32)
        ev.test_probs = rng.dirichlet(np.ones(2), TEST_SHAPE[0]).astype(np.float32)
        return ev

    config = config_from_dict({"search": {"evaluations": budget}, "ensemble": {"size": k}})
    state = SearchState.fresh(0)
    space = config.space.for_sample_shape((1, 8, 8))
    settings = SearchSettings(budget, GAParams(population=4), k, 0)
    run_search(state, InProcessTransport(evaluate, 2, VAL_SHAPE, TEST_SHAPE), space, settings)
    info = RunInfo(
        config=config.to_dict(),
        gene_names=list(GENE_NAMES),
        data={"num_classes": 2, "sample_shape": [1, 8, 8], "sizes": {"train": 10, "val": 4, "test": 6}},
        val_labels=np.array([0, 1, 1, 0]),
        test_labels=np.array([1, 0, 1, 1, 0, 0]),
        wall_seconds=3.5,
        sessions=1,
    )
    return state, info


def test_round_trip_keeps_everything(tmp_path):
    state, info = finished_run(fail_every=5)
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    loaded, linfo = checkpoint.load(path)
    assert loaded.records == state.records  # status, messages, genomes, times: all of it
    assert loaded.population == state.population and loaded.next_id == state.next_id
    assert loaded.rng.getstate() == state.rng.getstate()
    assert loaded.rng.random() == state.rng.random()
    assert [m.id for m in loaded.members] == [m.id for m in state.members]
    for a, b in zip(loaded.members, state.members):
        np.testing.assert_array_equal(a.test_probs, b.test_probs)
    assert linfo.config == info.config and linfo.wall_seconds == 3.5
    np.testing.assert_array_equal(linfo.test_labels, info.test_labels)
    assert os.listdir(tmp_path) == ["c.h5"]  # no temporary file left behind


def test_checkpoint_holds_only_plain_data(tmp_path):
    state, info = finished_run()
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, info)
    kinds = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            dt = obj.dtype
            kinds.append(dt.kind)
            assert dt.kind in "iuf" or h5py.check_string_dtype(dt) is not None, (name, dt)
        for value in obj.attrs.values():
            assert isinstance(value, (str, bytes, int, float, np.number)), (name, value)

    with h5py.File(path) as f:
        f.visititems(visit)
        visit("/", f)
    assert "f" in kinds


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


def test_summary_ensemble_is_the_mean_of_its_members():
    state, info = finished_run(k=3)
    s = summarize(state, info, "somewhere")
    members = {m.id: m for m in state.members}
    assert s["ensemble"]["members"] == [m.id for m in state.members] and len(members) == 3
    mean = average_probabilities(np.stack([members[i].test_probs for i in s["ensemble"]["members"]]))
    assert s["ensemble"]["test_accuracy"] == accuracy(mean, info.test_labels)
    best = max(state.records, key=lambda r: (r.val_accuracy, -r.id))
    assert s["best"]["id"] == best.id and s["best"]["test_accuracy"] == best.test_accuracy
    assert s["evaluations"] == 12 and s["wall_seconds"] == 3.5
    assert set(s["best"]["genome"]) == set(GENE_NAMES)
    text = format_summary(s)
    assert f"best network #{best.id}" in text and "ensemble of 3" in text


def test_summary_uses_the_configured_ensemble_size():
    state, info = finished_run(k=4)
    info.config["ensemble"]["size"] = 2
    s = summarize(state, info)
    assert s["ensemble"]["members"] == [m.id for m in state.members[:2]] and s["ensemble"]["size"] == 2


def test_claiming_run_directories(tmp_path):
    target = str(tmp_path / "runs" / "a")
    claim_run_dir(target)
    with pytest.raises(RunDirError, match="another run has just taken|not empty"):
        claim_run_dir(target)  # a second run racing for the same --out loses, with a clear message
    names = {claim_default_run_dir("cfg.toml", root=str(tmp_path / "runs")) for _ in range(3)}
    assert len(names) == 3 and all(os.path.basename(n).startswith("cfg-") for n in names)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunDirError, match="cannot create the run directory"):
        claim_run_dir(str(tmp_path / "afile" / "run"))
    release_run_dir(target)
    assert not os.path.exists(target)


def test_new_run_dir_never_takes_a_used_directory(tmp_path):
    check_new_run_dir(str(tmp_path / "new"))
    check_new_run_dir(str(tmp_path))  # empty is fine
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not empty"):
        check_new_run_dir(str(tmp_path))
    (tmp_path / "checkpoint.h5").write_text("")
    with pytest.raises(RunDirError, match="--resume"):
        check_new_run_dir(str(tmp_path))
