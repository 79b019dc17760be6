"""`evens predict` and `load_ensemble`: the stored ensemble, applied to data, on 1, 2 and 3 ranks."""
import json
import os
import re
import shutil
import socket
import subprocess

import h5py
import numpy as np
import pytest
from conftest import ROOT, checksums_again, evens_cmd, launch, tiny_search, write_blobs

from ensemble import EnsembleError, load_ensemble

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("predict")]  # one process: the module's search is made once



def report(run_dir):
    out = subprocess.run(evens_cmd() + ["report", run_dir, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished search whose ensemble is the top 5 (so 2 and 3 ranks split its members unevenly)."""
    tmp = tmp_path_factory.mktemp("predict")
    data = write_blobs(tmp / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 45), classes=3)
    cfg = tmp / "c.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 8\n[ensemble]\nsize = 5\nmethod = "top_k"\n')
    out = str(tmp / "run")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, *tiny_search()], timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {"dir": out, "data": data, "tmp": tmp, "summary": report(out)}


def predict(ranks, run_dir, *args, timeout=120):
    return launch(ranks, evens_cmd() + ["predict", run_dir, *args], timeout=timeout, cwd=ROOT)


def test_predict_reproduces_the_reported_test_accuracy_on_1_2_and_3_ranks(run):
    reported = run["summary"]["ensemble"]
    assert len(reported["members"]) == 5
    outputs = {}
    for ranks in (1, 2, 3):
        out = str(run["tmp"] / f"p{ranks}.h5")
        proc = predict(ranks, run["dir"], run["data"], "--split", "test", "--out", out, "--batch-size", "16")
        assert proc.returncode == 0, proc.stderr
        assert f"on {ranks} rank(s)" in proc.stdout and "accuracy" in proc.stdout
        with h5py.File(out) as f:
            assert float(f.attrs["accuracy"]) == reported["test_accuracy"]  # exactly, not approximately
            assert float(f.attrs["loss"]) == reported["test_loss"]  # to the last bit too: the sums are exact
            assert json.loads(f.attrs["members"]) == reported["members"]
            outputs[ranks] = {name: f[name][...] for name in f}
    first = outputs[1]
    assert set(first) == {"probabilities", "label", "entropy", "aleatoric", "epistemic", "disagreement"}
    assert first["probabilities"].shape == (45, 3) and first["label"].shape == (45,)
    np.testing.assert_allclose(first["probabilities"].sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(first["entropy"], first["aleatoric"] + first["epistemic"], atol=1e-5)
    for ranks in (2, 3):  # the same file, whatever the number of ranks
        for name in first:
            np.testing.assert_array_equal(outputs[ranks][name], first[name], err_msg=name)


def test_the_python_api_gives_the_same_answer(run):
    ens = load_ensemble(run["dir"], device="cpu")
    assert ens.ids == run["summary"]["ensemble"]["members"] and sum(ens.weights) == pytest.approx(1.0)
    with h5py.File(run["data"]) as f:
        x, y = f["test"]["x"][...], f["test"]["y"][...]
    out = ens.predict(x, batch_size=7)
    assert float(np.mean(out["label"] == y)) == run["summary"]["ensemble"]["test_accuracy"]
    assert set(out) == {"probabilities", "label", "entropy", "aleatoric", "epistemic", "disagreement"}
    again = ens.predict(x.astype(np.float64))  # any float dtype is taken, as float32
    np.testing.assert_array_equal(again["label"], out["label"])
    with pytest.raises(EnsembleError, match="shape"):
        ens.predict(x[:, :, :3])


def test_greedy_reselection_then_predict(run, tmp_path):
    run_dir = str(tmp_path / "run")
    shutil.copytree(run["dir"], run_dir)
    proc = subprocess.run(evens_cmd() + ["select", run_dir, "--method", "greedy", "--size", "4", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    ens = summary["ensemble"]
    assert ens["method"] == "greedy" and ens["size"] == 4 and ens["val_accuracy"] >= summary["best"]["val_accuracy"]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["ensemble"] == ens
    assert report(run_dir)["ensemble"] == ens
    out = str(tmp_path / "p.h5")
    proc = predict(2, run_dir, run["data"], "--split", "test", "--out", out)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(out) as f:
        assert float(f.attrs["accuracy"]) == ens["test_accuracy"] and json.loads(f.attrs["weights"]) == ens["weights"]


def _no_weights(run, tmp):
    run_dir = str(tmp / "stripped")
    shutil.copytree(run["dir"], run_dir)
    with h5py.File(os.path.join(run_dir, "checkpoint.h5"), "a") as f:
        for g in f["ensemble"]["members"].values():
            for name in list(g["weights"]):
                del g["weights"][name]
    return run_dir


def _nan_member(run, tmp):
    """A run whose last chosen member has a NaN weight: with 5 members on 3 ranks, round robin puts
    it on rank 1, so the failure starts away from the rank that reads and writes."""
    run_dir = str(tmp / "nan")
    shutil.copytree(run["dir"], run_dir)
    last = run["summary"]["ensemble"]["members"][-1]
    with h5py.File(os.path.join(run_dir, "checkpoint.h5"), "a") as f:
        weights = f["ensemble"]["members"][str(last)]["weights"]
        name = next(n for n in weights if weights[n].dtype.kind == "f")
        weights[name][(0,) * weights[name].ndim] = np.nan
        checksums_again(f["ensemble"]["members"][str(last)])  # (else the checksums refuse it, on rank 0, before it is read)
    return [run_dir, run["data"], "--split", "test"]


def _write_x(tmp, name, x):
    path = str(tmp / name)
    with h5py.File(path, "w") as f:
        f["x"] = x
    return path


BAD = {
    "wrong sample shape": (lambda run, tmp: [run["dir"], _write_x(tmp, "s.h5", np.zeros((5, 1, 4, 4), np.float32))], "has shape (5, 1, 4, 4)"),
    "wrong dtype": (lambda run, tmp: [run["dir"], _write_x(tmp, "d.h5", np.zeros((5, 1, 6, 6), np.int32))], "is int32"),
    "nan in x": (lambda run, tmp: [run["dir"], _write_x(tmp, "n.h5", np.full((5, 1, 6, 6), np.nan, np.float32))], "NaN"),
    "nan in a later batch": (
        lambda run, tmp: [run["dir"], _write_x(tmp, "m.h5", np.where(np.arange(40)[:, None, None, None] == 33, np.inf, np.zeros((40, 1, 6, 6), np.float32))), "--batch-size", "8"],
        "NaN or infinite",
    ),
    "no weights": (lambda run, tmp: [_no_weights(run, tmp), run["data"], "--split", "test"], "has no stored weights"),
    "nan weights on one rank": (_nan_member, "member"),
    "no such split": (lambda run, tmp: [run["dir"], run["data"], "--split", "holdout"], "no group 'holdout'"),
    "no root x": (lambda run, tmp: [run["dir"], run["data"]], "name a group with --split"),
    "missing input": (lambda run, tmp: [run["dir"], str(tmp / "absent.h5")], "no such input file"),
    "not a run": (lambda run, tmp: [str(tmp), run["data"], "--split", "test"], "no run file here"),
    "input is a directory": (lambda run, tmp: [run["dir"], str(tmp)], "is a directory"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_2_on_every_rank(run, tmp_path, case):
    make, expected = BAD[case]
    out = tmp_path / "out.h5"
    proc = predict(3, *make(run, tmp_path), "--out", str(out), timeout=60)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr
    where = re.search(rf"\(rank (\d+) on {re.escape(socket.gethostname())}\)$", errors[0])
    assert where and where.group(1) == ("1" if case == "nan weights on one rank" else "0"), errors[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # nothing half-written


def test_an_output_folder_that_cannot_be_written_is_one_line_on_every_rank(run):
    proc = predict(2, run["dir"], run["data"], "--split", "test", "--out", "/proc/predictions.h5", timeout=60)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "cannot write in /proc" in errors[0], proc.stderr


def test_output_permissions_follow_the_umask_and_unusable_labels_are_named(run, tmp_path):
    labelled = str(tmp_path / "neg.h5")
    with h5py.File(run["data"]) as f, h5py.File(labelled, "w") as g:
        g["x"] = f["test"]["x"][...]
        g["y"] = -f["test"]["y"][...] - 1  # not class labels
    out = tmp_path / "p.h5"
    proc = launch(1, ["sh", "-c", f"umask 027 && exec {' '.join(evens_cmd())} predict {run['dir']} {labelled} --out {out}"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "y not scored: its labels are not all in 0..2" in proc.stdout
    assert (out.stat().st_mode & 0o777) == 0o640
    with h5py.File(out) as f:
        assert "accuracy" not in f.attrs


def test_predict_never_overwrites_what_the_user_owns(run, tmp_path):
    out = tmp_path / "mine.h5"
    out.write_text("the user's file")
    proc = predict(1, run["dir"], run["data"], "--split", "test", "--out", str(out))
    assert proc.returncode == 2 and "already exists; use --force" in proc.stderr and out.read_text() == "the user's file"
    proc = predict(1, run["dir"], run["data"], "--split", "test", "--out", run["data"], "--force")
    assert proc.returncode == 2 and "is one of the inputs" in proc.stderr
    with h5py.File(run["data"]) as f:
        assert "test" in f  # the data file is untouched
    proc = predict(1, run["dir"], run["data"], "--split", "test", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    with h5py.File(out) as f:
        assert f["label"].shape == (45,)
