"""End to end: a search over a user's own network ([model] builder), its run file, report and predict."""
import json
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
from cli_fixture import report, wait_for_checkpoint
from conftest import ROOT, evens_cmd, launch, mpiexec, write_blobs

from ensemble import load_ensemble

pytestmark = pytest.mark.e2e
MODELS = os.path.join(ROOT, "tests", "models")


def user_config(tmp_path, builder="user_signal_nets:build", evaluations=4, sample_shape=(2, 16)):
    data = write_blobs(tmp_path / "signals.h5", sample_shape=sample_shape)
    cfg = tmp_path / "own.toml"
    cfg.write_text(f'''[data]
path = "{data}"

[model]
builder = "{builder}"
path = "{MODELS}"

[search]
evaluations = {evaluations}
population = 3

[train]
threads = 1

[space]
channels = [4, 8]
blocks = {{ low = 1, high = 2 }}
kernel = {{ type = "categorical", choices = [3, 5] }}
learning_rate = {{ low = 3e-3, high = 3e-2, log = true }}
epochs = {{ low = 2, high = 3 }}
''')
    return str(cfg), data


@pytest.mark.slow
def test_a_search_over_a_users_network_records_its_genes_and_its_ensemble_predicts(tmp_path):
    cfg, data = user_config(tmp_path)
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", cfg, "--out", out], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    summary = report(out)
    assert summary["evaluations"] == 4 and all(n["network"].startswith("blocks ") for n in summary["top"])
    assert all({"blocks", "channels", "kernel", "learning_rate"} <= set(n["genome"]) and "family" not in n["genome"] for n in summary["top"])
    with h5py.File(os.path.join(out, "checkpoint.h5")) as f:
        config = json.loads(f.attrs["config"])
        member = next(iter(f["ensemble"]["members"].values()))
        network = json.loads(member.attrs["network"])
    assert config["model"] == {"builder": "user_signal_nets:build", "path": MODELS, "check_seconds": 60.0}
    assert network["builder"] == "user_signal_nets:build" and set(network["genes"]) == {"channels", "blocks", "kernel"}
    # predict imports the builder by name from what is importable; nothing is imported from a path in the file
    predict = evens_cmd() + ["predict", out, data, "--split", "test"]
    proc = launch(2, predict + ["--out", str(tmp_path / "none.h5")], timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and (f"no module named 'user_signal_nets' (the run was made with model.path = {MODELS}: give that folder "
                                     "as --model-path, or model_path= to load_ensemble)") in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "none.h5")
    # nor from the current folder, which `python -m` puts on sys.path: standing in the builder's own folder is not asking
    proc = launch(2, predict + ["--out", str(tmp_path / "none.h5")], timeout=120, cwd=MODELS)
    assert proc.returncode == 2 and "no module named 'user_signal_nets' (the run was made with" in proc.stderr, proc.stderr
    proc = launch(2, predict + ["--out", str(tmp_path / "p.h5"), "--model-path", MODELS], timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("evens: importing user_signal_nets (the run's model builder user_signal_nets:build)") == 1
    with h5py.File(tmp_path / "p.h5") as f:
        assert float(f.attrs["accuracy"]) == summary["ensemble"]["test_accuracy"]
        probabilities = f["probabilities"][...]
    ens = load_ensemble(out, device="cpu", model_path=MODELS)
    with h5py.File(data) as f:
        np.testing.assert_allclose(ens.predict(f["test"]["x"][...])["probabilities"], probabilities, rtol=1e-5, atol=1e-6)


def csv_rows(run_dir, path):
    import csv
    import subprocess

    proc = subprocess.run(evens_cmd() + ["report", run_dir, "--csv", str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_bad_builder_ends_the_job_in_one_line_before_any_data_moves(tmp_path):
    for builder, message in (("user_signal_nets:too_many_outputs", "gave output (1, 5); the problem needs (1, 3)"),
                             ("user_signal_nets:nothing_here", "module user_signal_nets has no 'nothing_here'"),
                             ("no_such_module_of_anyones:build", "no module named 'no_such_module_of_anyones'")):
        folder = tmp_path / builder.replace(":", "-")
        folder.mkdir()
        cfg, _ = user_config(folder, builder)
        out = str(folder / "run")
        proc = launch(3, evens_cmd() + ["run", cfg, "--out", out], timeout=120, cwd=ROOT)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "broadcast" not in proc.stderr and not os.path.exists(out)


def test_a_builder_that_fails_for_some_genes_gives_error_records_and_the_search_goes_on(tmp_path):
    cfg, _ = user_config(tmp_path, "user_signal_nets:raises_for_wide", evaluations=6)
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", cfg, "--out", out, "--set", "space.channels=[4, 8, 16]", "--set", "search.evaluations=10"],
                  timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = csv_rows(out, tmp_path / "all.csv")
    failed = [r for r in rows if r["status"] == "error"]
    assert len(rows) == 10 and failed and all("16 channels are not supported" in r["message"] and r["gene_channels"] == "16" for r in failed)
    assert all(r["status"] != "error" for r in rows if r["gene_channels"] != "16")


@pytest.mark.mpi
def test_the_python_api_runs_a_search_with_a_builder_function_on_every_rank(tmp_path):
    cfg, _ = user_config(tmp_path)
    out = str(tmp_path / "run")
    proc = launch(3, [sys.executable, os.path.join(ROOT, "tests", "mpi", "prog_api_search.py"), cfg, out], timeout=240, cwd=ROOT,
                  env={"PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), MODELS])})
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(t) for t in proc.stdout.splitlines() if t.startswith('{"rank"')]
    assert {line["rank"]: line["returned"] for line in lines} == {0: out, 1: None, 2: None}
    assert all(line["handlers_kept"] for line in lines), lines  # the caller's signal handlers again, on every rank
    summary = report(out)
    assert summary["evaluations"] == 4 and {n["genome"]["channels"] for n in summary["top"]} <= {4, 6}
    with h5py.File(os.path.join(out, "checkpoint.h5")) as f:
        assert json.loads(f.attrs["config"])["model"]["builder"] == "user_signal_nets:build"


def test_a_builder_defined_in_the_launching_script_is_refused_in_one_line(tmp_path):
    cfg, _ = user_config(tmp_path)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "mpi", "prog_api_main_builder.py"), cfg, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert "SearchFailed: the search ended with exit status 2" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["evens: error: model builder build is defined in the launching script (__main__); every "
                                                "rank imports it by name, and predict does later: move it into a module and import it "
                                                "from there"], proc.stderr
    assert not os.path.exists(tmp_path / "run")


def test_a_search_that_a_signal_stops_raises_on_every_rank_and_leaves_the_handlers_as_found(tmp_path):
    """SIGTERM to the whole job: every rank's run_search_from raises SearchFailed(75) (the workers' returned None before),
    and every rank's SIGTERM, SIGINT and SIGUSR1 handlers are the caller's again (the workers' were left ignored)."""
    cfg, _ = user_config(tmp_path)
    out = str(tmp_path / "run")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), MODELS])}
    proc = subprocess.Popen([mpiexec(), "-n", "3", sys.executable, os.path.join(ROOT, "tests", "mpi", "prog_api_stopped.py"), cfg, out],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_checkpoint(proc, out, 2, seconds=180)
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    lines = [json.loads(t) for t in stdout.splitlines() if t.startswith('{"rank"')]
    assert sorted(line["rank"] for line in lines) == [0, 1, 2], stdout + stderr
    assert {line["status"] for line in lines} == {75}, stdout + stderr
    assert all(line["handlers_kept"] for line in lines), stdout + stderr


def test_a_config_built_in_code_runs_and_bad_overrides_are_one_line(tmp_path):
    """A dict of the config's tables is a config; an override key that is not a dotted key (one holding '=' and a
    newline, say) and a value that holds a second value are refused in one line, with SearchFailed(2)."""
    cfg, _ = user_config(tmp_path, evaluations=2)
    script = tmp_path / "api_dict.py"
    script.write_text(
        "import sys, tomllib\n"
        "from evolve import SearchFailed, run_search_from\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    tables = tomllib.load(f)  # built in code: the same tables as the file's\n"
        "cases = {'dict': (tables, {}), 'key': (tables, {'search.seed=1\\nsearch.evaluations': 5})}\n"
        "config, overrides = cases[sys.argv[3]]\n"
        "try:\n"
        "    print('returned', run_search_from(config, overrides=overrides, out=sys.argv[2], quiet=True))\n"
        "except SearchFailed as exc:\n"
        "    print('failed', exc.status)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([ROOT, MODELS])}
    run = lambda case: subprocess.run([sys.executable, str(script), str(cfg), str(tmp_path / case), case], capture_output=True, text=True,
                                      timeout=240, cwd=str(tmp_path), env=env)
    done = run("dict")
    assert done.returncode == 0 and f"returned {tmp_path / 'dict'}" in done.stdout, done.stdout + done.stderr
    assert report(str(tmp_path / "dict"))["evaluations"] == 2
    bad = run("key")
    assert "failed 2" in bad.stdout and len(bad.stderr.strip().splitlines()) == 1 and "not a dotted config key" in bad.stderr, bad.stderr
    assert not os.path.exists(tmp_path / "key")


def test_a_users_3d_cnn_searches_volumes_and_predicts(tmp_path):
    cfg, data = user_config(tmp_path, "user_signal_nets:volumes", sample_shape=(1, 4, 6, 6))  # (N, C, D, H, W)
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", cfg, "--out", out], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    summary = report(out)
    assert summary["evaluations"] == 4 and summary["ensemble"]["test_accuracy"] > 0.5  # 3 separable classes
    proc = launch(2, evens_cmd() + ["predict", out, data, "--split", "test", "--out", str(tmp_path / "p.h5"), "--model-path", MODELS],
                  timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    with h5py.File(tmp_path / "p.h5") as f:
        assert float(f.attrs["accuracy"]) == summary["ensemble"]["test_accuracy"]


@pytest.mark.slow
def test_a_users_network_is_cross_validated_like_a_built_in_one(tmp_path):
    """A small file without a val split: the builder's networks are 5 fold trainings each, a member is their 5 models
    averaged, and the ensemble rebuilt from the run predicts what the report says."""
    cfg, _ = user_config(tmp_path, evaluations=3)
    data = write_blobs(tmp_path / "small.h5", sample_shape=(2, 16), n=(60, 40), splits=("train", "test"))
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", cfg, "--out", out, "--set", f"data.path={data}"], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "cross-validation: 5 folds of the 60 training rows" in proc.stderr
    summary = report(out)
    assert summary["chosen_on"] == {**summary["chosen_on"], "rows": 60, "folds": 5}
    with h5py.File(os.path.join(out, "checkpoint.h5")) as f:
        member = f["ensemble"]["members"][str(summary["ensemble"]["members"][0])]
        assert sorted(member["weights"]) == [f"fold{j}" for j in range(5)] and member["val_pred"].shape == (60, 3)
    ensemble = load_ensemble(out, device="cpu", model_path=MODELS)
    with h5py.File(data) as f:
        x, y = f["test/x"][()], f["test/y"][()]
    assert float(np.mean(ensemble.predict(x)["label"] == y)) == summary["ensemble"]["test_accuracy"]
