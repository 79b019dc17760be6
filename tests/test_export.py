"""`evens export`: members written as torch.export archives and ONNX models, applied where evens cannot be imported.

A fresh interpreter (``-I``, with evens' packages blocked from import) runs the snippet of docs/export.md on
each export, and its answers are compared with the ensemble's as ``evens predict`` computes it.
"""
import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict

import h5py
import numpy as np
import pytest
import torch
from conftest import ROOT
from test_store_predict import arrays_for, stored_run

from ensemble.builders import add_model_path
from ensemble.export import Applied, export_ensemble, export_member, reason
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.predict import load_ensemble
from ensemble.problem import Classification
from ensemble.select import select_ensemble
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.store import EnsembleError, StoredEnsemble, write_ensemble
from ensemble.train import DeviceData, train_and_evaluate
from evolve.app.commands.cli import main

HAS_ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))
# one test process for the module, so that the exports of its module fixture (three searches, each exported) are made once
pytestmark = pytest.mark.xdist_group("export")
FORMATS = ["pt2", pytest.param("onnx", marks=pytest.mark.skipif(not HAS_ONNX, reason="needs evens[export]: onnx, onnxscript, onnxruntime"))]
RUNS = {  # a classifier of images taken as uint8 (one member downsampled, in partial blocks), one of signals with a recurrent
    # member, a regression with standardised inputs
    "images": ((1, 8, 8), [NetworkSpec("cnn", 2, 8), NetworkSpec("cnn", 2, 8, downsample=3)], np.uint8, False),
    "signals": ((2, 16), [NetworkSpec("cnn", 1, 8, dilation="growing"), NetworkSpec("rnn", 1, 8, cell="lstm", bidirectional=True)],
                np.float32, False),
    "regression": ((12,), [NetworkSpec("mlp", 2, 16, standardize=True), NetworkSpec("mlp", 1, 8, "tanh")], np.float32, True),
}
APPLY = '''
import sys


class NoEvens:
    """Refuses to import evens' own packages: the export must not need them."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ensemble", "evolve", "data_bcast"):
            raise ImportError(f"{name} must not be imported")


sys.meta_path.insert(0, NoEvens())  # ahead of the finder of an editable install of evens
for name in ("ensemble", "evolve", "data_bcast"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise AssertionError(f"{name} is importable")
sys.path.insert(0, sys.argv[1])
import numpy as np
from apply import apply, load

for folder, x, out in zip(*[iter(sys.argv[2:])] * 3):
    manifest, members = load(folder)
    np.savez(out, **apply(manifest, members, np.load(x)))
assert not {"ensemble", "evolve", "data_bcast"} & {name.split(".")[0] for name in sys.modules}
'''


def doc_snippet() -> str:
    """The applying code of docs/export.md, as a user would copy it."""
    with open(os.path.join(ROOT, "docs", "export.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    return next(block for block in blocks if "def apply(" in block)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every run of RUNS exported in every format that is installed (the regression through the command's main),
    and applied by the docs' snippet in one fresh process: {(run, format): (answer, expected, manifest)}."""
    base = tmp_path_factory.mktemp("export")
    (base / "apply.py").write_text(doc_snippet())
    (base / "runner.py").write_text(APPLY)
    jobs, expected = [], {}
    for name, (shape, specs, dtype, regression) in RUNS.items():
        folder = base / name
        folder.mkdir()
        path, stored, arrays = stored_run(folder, shape, specs, dtype, regression)
        x = arrays["test/x"][:37]  # not the batch a member was captured or checked with
        np.save(folder / "x.npy", x)
        expected[name] = load_ensemble(path, device="cpu").predict(x)  # what evens predict computes
        for fmt in ("pt2", "onnx") if HAS_ONNX else ("pt2",):
            out = folder / fmt
            if name == "regression":
                with contextlib.redirect_stdout(io.StringIO()) as said:
                    assert main(["export", path, "--format", fmt, "--out", str(out)]) == 0
                assert said.getvalue() == f"wrote {out}: 2 member(s) as {fmt} and manifest.json\n"
            else:
                export_ensemble(path, str(out), fmt, say=lambda line: pytest.fail(f"unexpected: {line}"))
            jobs.append((name, fmt, [str(out), str(folder / "x.npy"), str(folder / f"{fmt}.npz")]))
    proc = subprocess.run([sys.executable, "-I", str(base / "runner.py"), str(base)] + [a for *_, args in jobs for a in args],
                          capture_output=True, text=True, timeout=120, cwd=str(base))
    assert proc.returncode == 0, proc.stderr
    results = {}
    for name, fmt, (out, _, answer) in jobs:
        with np.load(answer) as f, open(os.path.join(out, "manifest.json")) as m:
            results[name, fmt] = ({k: f[k] for k in f.files}, expected[name], json.load(m))
    return results


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("run", list(RUNS))
def test_an_export_applied_without_evens_gives_what_evens_predict_gives(exported, run, fmt):
    answer, expected, manifest = exported[run, fmt]
    assert set(answer) == set(expected)
    for name in expected:
        if name == "label":
            np.testing.assert_array_equal(answer[name], expected[name])
        else:
            np.testing.assert_allclose(answer[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
    shape, specs, dtype, regression = RUNS[run]
    assert manifest["format"] == "evens-export" and manifest["format_version"] == 1 and manifest["file_format"] == fmt
    assert manifest["complete"] and manifest["missing"] == [] and len(manifest["members"]) == len(specs)
    assert manifest["input"] == {**manifest["input"], "name": "x", "shape": [None, *shape], "dtype": np.dtype(dtype).name}
    assert manifest["problem"]["kind"] == ("regression" if regression else "classification")
    assert not regression or expected["std"].max() > 0  # two members that differ: the spread is compared too
    assert sum(m["weight"] for m in manifest["members"]) == pytest.approx(1.0)
    assert all(m["weight"] == m["run_weight"] and m["network"]["family"] == s.family for m, s in zip(manifest["members"], specs))


BRANCHY = '''
from torch import nn


class Branchy(nn.Module):
    def __init__(self, features, outputs):
        super().__init__()
        self.linear = nn.Linear(features, outputs)

    def forward(self, x):
        if x.sum() > 0:  # Python control flow on a tensor's value: torch.export cannot capture it
            return self.linear(x)
        return -self.linear(x)


def build(genes, sample_shape, outputs):
    return Branchy(sample_shape[0], outputs)
'''


@pytest.fixture
def branchy(tmp_path):
    """The module of BRANCHY, importable as branchy_nets from tmp_path; sys.path and sys.modules restored after."""
    (tmp_path / "branchy_nets.py").write_text(BRANCHY)
    saved = list(sys.path)
    add_model_path(str(tmp_path))
    yield
    sys.path[:] = saved
    sys.modules.pop("branchy_nets", None)


def run_with_branchy(tmp_path, builtin: bool) -> tuple[str, dict]:
    """A run whose ensemble holds a user's network that branches on tensor values (id 0), with an MLP (id 1) or not."""
    arrays = arrays_for((12,))
    problem = Classification(3)
    data = DeviceData.from_arrays(arrays, problem)
    hall, training = HallOfFame(4), TrainSpec(1e-2, 32, 2)
    networks = [{"builder": "branchy_nets:build", "genes": {}}] + ([asdict(NetworkSpec("mlp", 1, 8))] if builtin else [])
    for i, network in enumerate(networks):
        ev = train_and_evaluate(network if i == 0 else NetworkSpec(**network), training, data, seed=i)
        hall.offer(Member(i, ev.fitness, network, asdict(training), ev.val_pred, ev.test_pred, ev.weights))
    selection = select_ensemble(list(hall), problem, arrays["val/y"], arrays["test/y"], "top_k", len(networks))
    path = str(tmp_path / "run.h5")
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group("ensemble"), StoredEnsemble(problem, (12,), "float32", arrays["val/y"], arrays["test/y"], hall, selection))
    return path, arrays


def test_a_member_torch_export_cannot_capture_is_left_out_in_one_line_and_the_manifest_says_so(tmp_path, capsys, branchy):
    path, arrays = run_with_branchy(tmp_path, builtin=True)
    out = tmp_path / "out"
    assert main(["export", path, "--format", "pt2", "--out", str(out), "--model-path", str(tmp_path)]) == 0
    said = capsys.readouterr()
    importing, warning = said.err.splitlines()
    assert importing == "evens: importing branchy_nets (the run's model builder branchy_nets:build)"
    assert warning.startswith("evens: warning: member #0 (branchy_nets:build) cannot be exported to pt2, left out: its forward pass "
                              "branches on tensor values, which torch.export cannot capture (")
    assert said.out == f"wrote {out}: 1 member(s) as pt2 and manifest.json; left out #0, the others' weights renormalised to sum to 1\n"
    assert sorted(os.listdir(out)) == ["manifest.json", "member-1.pt2"]
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    assert not manifest["complete"] and [m["id"] for m in manifest["members"]] == [1]
    (gone,) = manifest["missing"]
    assert gone == {"id": 0, "network": {"builder": "branchy_nets:build", "genes": {}}, "run_weight": 0.5, "reason": warning.split("left out: ")[1]}
    assert manifest["members"][0]["weight"] == 1.0 and manifest["members"][0]["run_weight"] == 0.5
    # what is left is the MLP alone, as evens applies it
    ens = load_ensemble(path, device="cpu")
    (mlp,) = [m for m in ens.members if m.id == 1]
    with torch.no_grad():
        got = torch.export.load(str(out / "member-1.pt2")).module()(torch.from_numpy(arrays["test/x"])).numpy()
        want = ens.head.predictions(mlp.models[0](torch.from_numpy(arrays["test/x"]))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


class FixedBatch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.linear(x.reshape(2, 12))  # works for the batch it is captured with, and no other


def test_a_network_that_fixes_its_batch_is_named_as_such(tmp_path):
    with pytest.raises(Exception) as caught:
        export_member(Applied(FixedBatch(), Classification(3)).eval(), (12,), "float32", "pt2")
    assert reason(caught.value) == "its forward pass fixes the batch size (torch.export could not keep the batch dimension free)"


def test_an_ensemble_of_members_that_cannot_be_exported_writes_nothing(tmp_path, branchy):
    path, _ = run_with_branchy(tmp_path, builtin=False)
    said = []
    with pytest.raises(EnsembleError, match="no member of the ensemble could be exported to pt2"):
        export_ensemble(path, str(tmp_path / "out"), "pt2", say=said.append)
    assert [line for line in said if "cannot be exported" in line] == [said[-1]] and "member #0" in said[-1]
    assert not [name for name in os.listdir(tmp_path) if name.startswith((".out", "out"))]  # nor a half-written folder


def test_a_folder_with_anything_in_it_is_refused_in_one_line(tmp_path, capsys):
    path, _, _ = stored_run(tmp_path, (12,), [NetworkSpec("mlp", 1, 8)])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", path, "--format", "pt2", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"evens: error: {out}: not empty; an export goes into a new or empty folder\n"
    assert os.listdir(out) == ["notes.txt"]
    with pytest.raises(EnsembleError, match="exists and is not a folder"):
        export_ensemble(path, str(out / "notes.txt"), "pt2")
    (tmp_path / "empty").mkdir()
    export_ensemble(path, str(tmp_path / "empty"), "pt2")  # an empty folder is taken
    assert sorted(os.listdir(tmp_path / "empty")) == ["manifest.json", "member-0.pt2"]


def test_onnx_without_its_packages_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import ensemble.export

    monkeypatch.setattr(ensemble.export, "_importable", lambda name: name != "onnxruntime")
    with pytest.raises(EnsembleError, match=r"exporting to ONNX needs onnxruntime: pip install 'evens\[export\]'"):
        export_ensemble(str(tmp_path / "run.h5"), str(tmp_path / "out"), "onnx")
