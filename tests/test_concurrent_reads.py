"""Reading a run that a job is writing (issue 35, defects 13 and 14): every reader sees one checkpoint whole, never one
version's listing or selection with another's segments or weights, and a run a starting job has claimed is called that.

The races are made deterministic: a job's checkpoint (a rename over checkpoint.h5, then the removal of the segments
it merged) is made to happen at the worst moment, between two reads of one reader."""
import os

import h5py
import numpy as np
import pytest

from ensemble import predict as ensemble_predict
from ensemble import store
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.problem import Classification
from ensemble.select import select_ensemble
from ensemble.store import StoredEnsemble, chosen_members, read_chosen, write_ensemble

VAL_Y, TEST_Y = np.array([0, 1, 2, 0, 1, 2]), np.array([2, 1, 0, 2])


def _member(ident: int, fitness: float) -> Member:
    rng = np.random.default_rng(ident)
    return Member(ident, fitness, {"family": "mlp"}, {"learning_rate": 0.01},
                  rng.dirichlet(np.ones(3), len(VAL_Y)).astype(np.float32), rng.dirichlet(np.ones(3), len(TEST_Y)).astype(np.float32),
                  {"0.weight": rng.normal(size=(3, 4)).astype(np.float32)})


def _run_file(path: str, best: int) -> None:
    """A run file whose hall holds members 0 to 3 and whose ensemble is member ``best`` alone (the best by fitness)."""
    problem = Classification(3)
    hall = HallOfFame(8, [_member(i, 0.9 if i == best else 0.5 - 0.01 * i) for i in range(4)])
    selection = select_ensemble(list(hall), problem, VAL_Y, TEST_Y, "top_k", 1)
    assert selection.ids == [best]
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group(store.GROUP), StoredEnsemble(problem, (4,), "float32", VAL_Y, TEST_Y, hall, selection))


def _checkpoint_after_first_read(monkeypatch, replace) -> None:
    """``replace()`` (a job's checkpoint) runs once, right after the reader's first reading of an ensemble group."""
    real, done = store.read_ensemble, []

    def read_then_checkpoint(*args, **kwargs):
        out = real(*args, **kwargs)
        if not done:
            done.append(True)
            replace()
        return out
    monkeypatch.setattr(store, "read_ensemble", read_then_checkpoint)


@pytest.mark.parametrize("reader", ["read_chosen", "read_members"])
def test_predict_reads_the_ensemble_and_its_weights_from_one_checkpoint(tmp_path, monkeypatch, reader):
    """Defect 14: read_chosen opened the run file twice, took the chosen ids from one checkpoint and the weights from the
    next, and called a healthy run 'member #1 has no stored weights'. Predict, export and load_ensemble read through it."""
    run = tmp_path / "run"
    run.mkdir()
    path = str(run / store.RUN_FILE_NAME)
    _run_file(path, best=0)
    _run_file(str(tmp_path / "next.h5"), best=1)
    _checkpoint_after_first_read(monkeypatch, lambda: os.replace(tmp_path / "next.h5", path))  # as the job replaces it
    if reader == "read_chosen":
        stored = read_chosen(str(run))
        chosen = chosen_members(stored, str(run), need_weights=True)
    else:  # what predict, export and load_ensemble call
        stored, chosen = ensemble_predict.read_members(str(run))
    assert [m.id for m, _ in chosen] == [0]  # the checkpoint that was in place when the reader opened it, whole
    np.testing.assert_array_equal(chosen[0][0].weights["0.weight"], _member(0, 0.0).weights["0.weight"])
    assert all(m.weights is None for m in stored.hall_of_fame if m.id != 0)  # only the chosen members' weights are read
