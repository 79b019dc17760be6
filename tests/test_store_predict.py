"""Trained networks through the run file and back: weights exact, predictions identical, inputs checked."""
import json
from dataclasses import asdict

import h5py
import numpy as np
import pytest
import torch
from conftest import blob_splits, checksums_again

from ensemble.combine import combine
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.predict import load_ensemble
from ensemble.problem import Classification, Regression
from ensemble.select import select_ensemble
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.store import EnsembleError, StoredEnsemble, read_ensemble, write_ensemble
from ensemble.train import DeviceData, train_and_evaluate


def arrays_for(shape, dtype=np.float32, regression=False):
    splits = blob_splits(shape, (120, 40, 40), dtype=dtype)
    arrays = {f"{s}/{k}": v for s, xy in splits.items() for k, v in zip("xy", xy)}
    if regression:
        for s in ("train", "val", "test"):
            arrays[f"{s}/y"] = (10.0 * arrays[f"{s}/y"] + arrays[f"{s}/x"].reshape(len(arrays[f"{s}/y"]), -1).mean(1)).astype(np.float32)
    return arrays


def stored_run(tmp_path, shape, specs, dtype=np.float32, regression=False):
    arrays = arrays_for(shape, dtype, regression)
    problem = Regression.from_targets(arrays["train/y"]) if regression else Classification(3)
    data = DeviceData.from_arrays(arrays, problem)
    hall = HallOfFame(8)
    for i, spec in enumerate(specs):
        ev = train_and_evaluate(spec, TrainSpec(1e-2, 32, 3), data, seed=i)
        assert ev.status == "ok" and ev.has_payload
        hall.offer(Member(i, ev.fitness, asdict(spec), asdict(TrainSpec(1e-2, 32, 3)), ev.val_pred, ev.test_pred, ev.weights))
    selection = select_ensemble(list(hall), problem, arrays["val/y"], arrays["test/y"], "top_k", len(specs))
    stored = StoredEnsemble(problem, shape, str(np.dtype(dtype)), arrays["val/y"], arrays["test/y"], hall, selection)
    path = str(tmp_path / "run.h5")
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group("ensemble"), stored)
    return path, stored, arrays


FAMILIES = {
    (12,): [NetworkSpec("mlp", 2, 16), NetworkSpec("mlp", 1, 8, "tanh", 0.2)],
    (2, 16): [NetworkSpec("cnn", 2, 8), NetworkSpec("rnn", 2, 8, cell="lstm", bidirectional=True), NetworkSpec("rnn", 1, 8)],
    (1, 8, 8): [NetworkSpec("cnn", 2, 8), NetworkSpec("mlp", 1, 16)],
}


@pytest.mark.parametrize("shape", list(FAMILIES))
def test_members_come_back_exactly_and_predict_what_they_predicted_in_training(tmp_path, shape):
    path, stored, arrays = stored_run(tmp_path, shape, FAMILIES[shape])
    with h5py.File(path) as f:
        back = read_ensemble(f["ensemble"])
    for a, b in zip(back.hall_of_fame, stored.hall_of_fame):
        assert a.weights.keys() == b.weights.keys()
        for name in a.weights:  # int64 batch counts and channels-last conv weights alike
            assert a.weights[name].dtype == b.weights[name].dtype
            np.testing.assert_array_equal(a.weights[name], b.weights[name])
    ens = load_ensemble(path, device="cpu")
    out = ens.predict(arrays["test/x"])
    members = [stored.hall_of_fame.by_id(i) for i in stored.selection.ids]
    expected = combine(stored.problem, [m.test_pred for m in members], stored.selection.weights, 40)
    for name in expected:  # the same networks, the same computation: identical to the last bit
        np.testing.assert_array_equal(out[name], expected[name], err_msg=name)


def test_uint8_runs_take_uint8_inputs_only(tmp_path):
    path, stored, arrays = stored_run(tmp_path, (1, 8, 8), [NetworkSpec("cnn", 1, 8)], dtype=np.uint8)
    ens = load_ensemble(path, device="cpu")
    assert ens.predict(arrays["test/x"])["label"].shape == (40,)
    with pytest.raises(EnsembleError, match="uint8 inputs"):
        ens.predict(arrays["test/x"].astype(np.float32))


def test_regression_members_predict_in_the_targets_units(tmp_path):
    path, stored, arrays = stored_run(tmp_path, (12,), FAMILIES[(12,)], regression=True)
    out = load_ensemble(path, device="cpu").predict(arrays["test/x"])
    assert set(out) == {"mean", "std"} and out["mean"].shape == (40,)
    scores = stored.problem.scores(out["mean"].reshape(-1, 1), arrays["test/y"])
    assert scores["rmse"] == stored.problem.scores(
        sum(w * stored.hall_of_fame.by_id(i).test_pred.astype(np.float64) for i, w in zip(stored.selection.ids, stored.selection.weights)),
        arrays["test/y"],
    )["rmse"]


def test_inputs_are_checked(tmp_path):
    path, _, arrays = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])
    ens = load_ensemble(path, device="cpu")
    x = arrays["test/x"].copy()
    for bad, message in [(x[:, :5], r"has shape \(40, 5\); the ensemble takes \(N, 12\)"), (x.astype(np.int64), "is int64"),
                         (np.where(np.arange(40)[:, None] == 7, np.nan, x), "NaN")]:
        with pytest.raises(EnsembleError, match=message):
            ens.predict(bad)
    assert ens.predict(x[:0])["probabilities"].shape == (0, 3)


def test_damaged_weights_are_a_clear_error(tmp_path):
    path, _, _ = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])
    with h5py.File(path, "a") as f:
        w = f["ensemble/members/0/weights"]
        del w["1.weight"]
        w["1.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(EnsembleError, match="member 0: its weights do not match their checksum"):
        load_ensemble(path, device="cpu")
    with h5py.File(path, "a") as f:  # the checksum made again: a file consistent with itself, yet wrong for the network
        checksums_again(f["ensemble/members/0"])
    with pytest.raises(EnsembleError, match="stored weights do not fit its network"):
        load_ensemble(path, device="cpu")
    with h5py.File(path, "a") as f:
        f["ensemble"].attrs["problem"] = "{not json"
    with pytest.raises(EnsembleError, match="damaged ensemble"):
        load_ensemble(path, device="cpu")


def test_loading_runs_no_pickle(tmp_path, monkeypatch):
    path, _, arrays = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])
    import pickle

    def refuse(*a, **k):
        raise AssertionError("something was unpickled")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert load_ensemble(path, device="cpu").predict(arrays["test/x"])["label"].shape == (40,)


def test_hand_edited_members_are_clear_errors(tmp_path):
    path, _, arrays = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])
    with h5py.File(path, "a") as f:
        w = f["ensemble/members/0/weights/1.weight"]
        w[0, 0] = np.nan
    with pytest.raises(EnsembleError, match="member 0: its weights do not match their checksum"):
        load_ensemble(path, device="cpu")
    with h5py.File(path, "a") as f:
        checksums_again(f["ensemble/members/0"])
    with pytest.raises(EnsembleError, match="member #0 predicts NaN or infinite values"):
        load_ensemble(path, device="cpu").predict(arrays["test/x"])
    with h5py.File(path, "a") as f:
        f["ensemble/members/0"].attrs["network"] = '{"family": "mlp", "depth": 1, "width": 4, "colour": "red"}'
        checksums_again(f["ensemble/members/0"])
    with pytest.raises(EnsembleError, match="member #0: invalid network spec"):
        load_ensemble(path, device="cpu")


@pytest.mark.parametrize("part", ["test_pred", "weights"])
def test_a_chunk_that_hdf5_no_longer_finds_is_refused_not_read_as_zeros(tmp_path, part):
    """Damage to a dataset's chunk index (scripts/tools/fuzz_run_file.py found one in 150 flips) makes HDF5 read a chunk
    as its fill value, with no error and no Fletcher-32 to check: the member's checksums catch it."""
    path, _, _ = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])
    with h5py.File(path, "a") as f:  # the same effect, made on purpose: an all-zero chunk where data was
        g = f["ensemble/members/0"]
        name = "test_pred" if part == "test_pred" else "weights/" + sorted(g["weights"])[0]
        data = g[name][...]
        del g[name]
        g.create_dataset(name, data=np.zeros_like(data), fletcher32=True)
    with pytest.raises(EnsembleError, match="damaged ensemble.*member 0: its (predictions|weights) do not match their checksum"):
        load_ensemble(path, device="cpu")


def test_a_run_without_an_ensemble_yet(tmp_path):
    problem = Classification(3)
    stored = StoredEnsemble(problem, (12,), "float32", np.zeros(4, np.int64), np.zeros(4, np.int64), HallOfFame(4), None)
    path = str(tmp_path / "empty.h5")
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group("ensemble"), stored)
    with pytest.raises(EnsembleError, match="no ensemble yet"):
        load_ensemble(path, device="cpu")


def _set_selection(f, **change):
    sel = json.loads(f["ensemble"].attrs["selection"])
    sel.update(change)
    f["ensemble"].attrs["selection"] = json.dumps(sel)


def _replace(f, name, data):
    del f[name]
    f[name] = data


DAMAGE = {
    "selection names a missing member": lambda f: _set_selection(f, path=[0, 999]),
    "no picks": lambda f: _set_selection(f, picks=0),
    "more picks than the path": lambda f: _set_selection(f, picks=50),
    "unknown method": lambda f: _set_selection(f, method="bagging"),
    "members is a dataset": lambda f: _replace(f, "ensemble/members", np.zeros(3)),
    "weights of strings": lambda f: _replace(f, "ensemble/members/0/weights/1.weight", np.array([b"ab"] * 3)),
    "predictions of the wrong shape": lambda f: _replace(f, "ensemble/members/0/test_pred", np.zeros((39, 3), np.float32)),
    "labels out of range": lambda f: _replace(f, "ensemble/labels/test", np.full(40, 7, np.int64)),
    "x dtype": lambda f: f["ensemble"].attrs.__setitem__("x_dtype", "int8"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_ensemble_is_refused_in_one_line(tmp_path, case):
    path, _, _ = stored_run(tmp_path, (12,), FAMILIES[(12,)])
    with h5py.File(path, "a") as f:
        DAMAGE[case](f)
    with pytest.raises(EnsembleError, match="damaged ensemble") as info:
        load_ensemble(path, device="cpu")
    assert "\n" not in str(info.value)


def test_a_flipped_byte_in_stored_weights_or_predictions_is_refused_not_loaded(tmp_path):
    """Fletcher-32 over every stored array: damage is an error, never a silently changed network."""
    from evolve.errors import EvensError

    for target in ("weights", "val_pred"):
        path, stored, arrays = stored_run(tmp_path, (12,), FAMILIES[(12,)])
        with h5py.File(path, "r") as f:
            member = f["ensemble/members"][str(stored.selection.ids[0])]
            ds = member["val_pred"] if target == "val_pred" else member["weights"][sorted(member["weights"])[0]]
            assert ds.fletcher32
            offset = ds.id.get_chunk_info(0).byte_offset
        data = bytearray(open(path, "rb").read())
        data[offset + 3] ^= 0x10
        open(path, "wb").write(bytes(data))
        with pytest.raises((EnsembleError, EvensError)) as info:
            load_ensemble(path, device="cpu").predict(arrays["test/x"])
        assert "\n" not in str(info.value)


def test_a_header_h5py_cannot_decode_is_a_one_line_error(tmp_path, monkeypatch):
    """h5py raises RuntimeError for some damaged object headers ("ran off end of input buffer while decoding",
    found by scripts/tools/fuzz_run_file.py): a damaged ensemble, not a traceback."""
    path, _, _ = stored_run(tmp_path, (12,), FAMILIES[(12,)][:1])

    def damaged(self, name):
        raise RuntimeError("Can't synchronously determine if attribute exists by name (ran off end of input buffer while decoding)")

    monkeypatch.setattr(h5py.AttributeManager, "__getitem__", damaged)
    with pytest.raises(EnsembleError, match="damaged ensemble.*RuntimeError"):
        load_ensemble(path, device="cpu")
