"""The custom-model example (examples/custom_model/), end to end as a user runs it: the TOML and the
Python-API script at np=3, then predict and load_ensemble. Small budgets, the example's own genes."""
import os
import sys

import h5py
import numpy as np
import pytest
from cli_fixture import report
from conftest import ROOT, evens_cmd, launch

from data_bcast.synthetic import make_signals, write_generated
from ensemble import load_ensemble

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = os.path.join(ROOT, "examples", "custom_model")
SMALL = ["search.evaluations=4", "search.population=3", "space.channels=[8]", "space.blocks={low = 1, high = 2}",
         "space.epochs={low = 1, high = 2}", "train.threads=1"]


@pytest.fixture(scope="module")
def signals(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "signals.h5")
    write_generated(path, make_signals, sizes={"train": 200, "val": 100, "test": 100})
    return path


def test_the_custom_model_example_runs_from_its_toml_and_predicts(signals, tmp_path):
    out = str(tmp_path / "run")
    sets = [a for s in SMALL + [f"data.path={signals}"] for a in ("--set", s)]
    proc = launch(2, evens_cmd() + ["run", os.path.join(EXAMPLE, "signals.toml"), "--out", out, *sets], timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = report(out)
    assert summary["evaluations"] == 4
    proc = launch(2, evens_cmd() + ["predict", out, signals, "--split", "test", "--out", str(tmp_path / "p.h5"), "--model-path", EXAMPLE],
                  timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "p.h5") as f:
        assert float(f.attrs["accuracy"]) == summary["ensemble"]["test_accuracy"]
        probabilities = f["probabilities"][...]
    with h5py.File(signals) as f:
        x = f["test"]["x"][...]
    np.testing.assert_allclose(load_ensemble(out, device="cpu", model_path=EXAMPLE).predict(x)["probabilities"], probabilities,
                               rtol=1e-5, atol=1e-6)


def test_the_custom_model_examples_python_script_runs_the_search(signals, tmp_path):
    proc = launch(2, [sys.executable, os.path.join(EXAMPLE, "search.py"), *SMALL, f"data.path={signals!r}",
                      f"out={str(tmp_path / 'run')!r}"], timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"search.py: the run is in {tmp_path / 'run'}" in proc.stdout
    assert report(str(tmp_path / "run"))["evaluations"] == 4
