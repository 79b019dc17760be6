"""End to end: the `evens` command under as a user runs it (a job's failures: test_job_faults.py)."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import h5py
import numpy as np
import pytest
from cli_fixture import SMALL, checkpoint_evaluations, report, start_job, wait_for_checkpoint
from conftest import ROOT, evens_cmd, launch, launch_python, tiny_search, write_blobs, write_regression

pytestmark = pytest.mark.e2e


def test_run_report_and_resume(tmp_path, small_config):
    out = str(tmp_path / "run")
    proc = launch_python(3, "prog_run_spied.py", "run", small_config, "--out", out, *SMALL, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "best network" in proc.stdout and "ensemble (greedy, " in proc.stdout and "ensemble curve" in proc.stdout
    spied = json.loads(proc.stdout.strip().splitlines()[-1])
    assert spied == {"worker_opens": [[], []], "codes": [0, 0, 0]}

    first = report(out)
    assert first["evaluations"] == 6 and first["sessions"] == 1
    assert set(first["best"]) >= {"val_accuracy", "test_accuracy"}
    ens = first["ensemble"]
    assert 1 <= len(ens["members"]) <= ens["picks"] <= 3 * 8 and 0 <= ens["test_accuracy"] <= 1  # 8 bags (the default) of up to 3 picks
    assert ens["val_accuracy"] >= first["best"]["val_accuracy"]  # 6 networks: every bag holds all, so greedy never does worse on validation
    assert len(first["hall_of_fame"]["ids"]) == 6  # room for 32: every network so far is kept
    assert 0 < first["worker_utilization"] <= 1 and first["wall_seconds"] > 0
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f)["evaluations"] == 6

    proc = launch(2, evens_cmd() + ["run", "--resume", out, "--set", "search.evaluations=9", "--set", "ensemble.size=5",
                                    "--set", "ensemble.method='top_k'"], timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    second = report(out)
    assert second["evaluations"] == 9 and second["sessions"] == 2
    assert set(first["hall_of_fame"]["ids"]) < set(second["hall_of_fame"]["ids"])  # the hall came through the resume whole
    assert second["ensemble"]["method"] == "top_k" and second["ensemble"]["members"] == second["hall_of_fame"]["ids"][:5]
    assert second["wall_seconds"] > first["wall_seconds"]
    assert second["best"]["val_accuracy"] >= first["best"]["val_accuracy"]


def test_regression_run_end_to_end(tmp_path):
    data = write_regression(tmp_path / "reg.h5", targets=(2,))
    cfg = tmp_path / "reg.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n')
    out = str(tmp_path / "reg")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, "--set", "search.evaluations=6",
                                    *tiny_search("['mlp']"), "--set", "space.epochs={low = 5, high = 10}"],
                  timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "val rmse" in proc.stdout and "member std" in proc.stdout
    s = report(out)
    assert s["problem"] == "regression" and s["metric"] == "rmse"
    for part in (s["best"], s["ensemble"]):
        assert {"val_rmse", "test_rmse", "val_r2", "test_r2"} <= set(part) and "test_accuracy" not in part
        assert part["test_rmse"] > 0 and part["test_r2"] <= 1
    assert s["ensemble"]["val_rmse"] <= s["best"]["val_rmse"]  # greedy never does worse on validation
    assert s["ensemble"]["test_uncertainty"]["std"] >= 0 and s["data"]["problem"]["target_shape"] == [2]
    from ensemble import load_ensemble

    with h5py.File(data) as f:
        x, y = f["test"]["x"][...], f["test"]["y"][...]
    pred = load_ensemble(out, device="cpu").predict(x)
    assert pred["mean"].shape == (40, 2) and pred["std"].shape == (40, 2) and (pred["std"] >= 0).all()
    rmse = float(np.sqrt(np.mean((pred["mean"].astype(np.float64) - y) ** 2)))
    assert rmse == pytest.approx(s["ensemble"]["test_rmse"], rel=1e-12)
    for ranks in (1, 3):  # the reported RMSE, to the last bit, however the members are split
        p = launch(ranks, evens_cmd() + ["predict", out, data, "--split", "test", "--out", str(tmp_path / f"p{ranks}.h5")], timeout=120, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        with h5py.File(tmp_path / f"p{ranks}.h5") as f:
            assert float(f.attrs["rmse"]) == s["ensemble"]["test_rmse"] and float(f.attrs["r2"]) == s["ensemble"]["test_r2"]


def test_rnn_family_end_to_end_on_sequences(tmp_path):
    data = write_blobs(tmp_path / "seq.h5", sample_shape=(2, 16), n=(120, 40, 40), classes=3)
    cfg = tmp_path / "seq.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[space]\nfamily = ["rnn"]\nepochs = {{ low = 3, high = 6 }}\nwidth = [8, 16]\n')
    out = str(tmp_path / "seq")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, "--set", "search.evaluations=5", "--set", "search.population=4",
                                    "--set", "ensemble.size=3", "--set", "train.threads=1"], timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    s = report(out)
    assert s["best"]["genome"]["family"] == "rnn" and s["best"]["genome"]["cell"] in ("gru", "lstm")
    assert s["best"]["val_accuracy"] > 0.6 and s["ensemble"]["val_accuracy"] >= s["best"]["val_accuracy"]
    pred = launch(2, evens_cmd() + ["predict", out, data, "--split", "test", "--out", str(tmp_path / "p.h5")], timeout=120, cwd=ROOT)
    assert pred.returncode == 0, pred.stderr
    with h5py.File(tmp_path / "p.h5") as f:
        assert float(f.attrs["accuracy"]) == s["ensemble"]["test_accuracy"]


def test_demo_data_makes_its_folder_and_convert_names_a_missing_one(tmp_path):
    proc = subprocess.run(evens_cmd() + ["make-digits", str(tmp_path / "data" / "digits.h5")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and (tmp_path / "data" / "digits.h5").exists(), proc.stderr
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 2), np.float32), y=np.arange(4))
    proc = subprocess.run(evens_cmd() + ["convert", str(tmp_path / "d.npz"), str(tmp_path / "nowhere" / "d.h5")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.startswith("evens: error:") and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_single_process_run_trains_in_process(tmp_path, small_config):
    out = str(tmp_path / "solo")
    proc = subprocess.run(evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=2", *SMALL],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert report(out)["evaluations"] == 2


BAD = {
    "missing config": (["run", "nope.toml"], "nope.toml: no such config file"),
    "unknown key": (["run", "{cfg}", "--set", "search.evalutions=3"], "unknown key 'search.evalutions'"),
    "wrong type": (["run", "{cfg}", "--set", "search.evaluations=many"], "must be an integer"),
    "missing data": (["run", "{cfg}", "--set", "data.path={tmp}/absent.h5"], "no such data file"),
    "not hdf5": (["run", "{cfg}", "--set", "data.path={cfg}"], "not a readable HDF5 file"),
    "used run dir": (["run", "{cfg}", "--out", "{tmp}/used"], "directory is not empty"),
    "missing run dir": (["run", "--resume", "{tmp}/absent"], "no such run directory"),
    "no checkpoint": (["run", "--resume", "{tmp}/used"], "no checkpoint.h5 here"),
    "no gpu": (["run", "{cfg}", "--set", "train.device=cuda"], "no CUDA device"),
    "bad flag": (["run", "{cfg}", "--frobnicate"], "unrecognized arguments"),
    "fifo data": (["run", "{cfg}", "--set", "data.path={tmp}/fifo.h5"], "is a FIFO, not a regular HDF5 data file"),
    "one class": (["run", "{cfg}", "--set", "data.path={tmp}/one-class.h5"], "train/y holds 1 class"),
    "external link": (["run", "{cfg}", "--set", "data.path={tmp}/linked.h5"], "train/x is an external link to"),
}


def _bad_files(tmp_path):
    """The data files BAD's cases name: each would once hang the job or train on nonsense."""
    os.mkfifo(tmp_path / "fifo.h5")
    write_blobs(tmp_path / "one-class.h5")
    with h5py.File(tmp_path / "one-class.h5", "a") as f:
        f["train/y"][...] = 1
    write_blobs(tmp_path / "linked.h5")
    write_blobs(tmp_path / "elsewhere.h5")
    with h5py.File(tmp_path / "linked.h5", "a") as f:
        del f["train/x"]
        f["train/x"] = h5py.ExternalLink(str(tmp_path / "elsewhere.h5"), "train/x")


@pytest.mark.timing
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_ends_every_rank_fast_with_one_line(tmp_path, small_config, case):
    """Wall-clock timing: every rank ends within 60 s (some 3 s here, loaded or not); a rank left waiting
    at a collective would hang until the 90 s timeout."""
    if case == "no gpu":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("the user's notes")
    _bad_files(tmp_path)
    args, expected = BAD[case]
    args = [a.format(cfg=small_config, tmp=tmp_path) for a in args]
    start = time.monotonic()
    proc = launch(3, evens_cmd() + args, timeout=90, cwd=ROOT)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    if case != "bad flag":  # a usage error comes before MPI starts; every other says where it happened
        where = re.search(rf"\(rank (\d+) on {re.escape(socket.gethostname())}\)$", errors[0])
        assert where and (where.group(1) != "0") == (case == "no gpu"), errors[0]  # a worker has no GPU; the rest is the master's
    assert "Traceback" not in proc.stderr
    assert elapsed < 60
    assert (tmp_path / "used" / "notes.txt").read_text() == "the user's notes"
    assert sorted(os.listdir(tmp_path / "used")) == ["notes.txt"]


@pytest.mark.slow
def test_resume_refuses_other_data_or_another_search_space(tmp_path, small_config):
    out = str(tmp_path / "run")
    first = subprocess.run(evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=1", *SMALL],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    other = write_blobs(tmp_path / "other.h5", sample_shape=(1, 6, 6), n=(90, 30, 31), classes=3)
    altered = tmp_path / "altered.h5"  # same sizes and labels, one training value changed
    altered.write_bytes((tmp_path / "data.h5").read_bytes())
    with h5py.File(altered, "a") as f:
        f["train/x"][0, 0, 0, 0] += 1.0
    cases = {
        "data.path=" + other: "sizes is",
        "data.path=" + str(altered): "the data differs from the run's (fingerprint",
        "space.width=[4, 8, 16]": "search space differs",
        "search.promotion=true": "search.promotion is True, but the run's is False",
    }
    for override, expected in cases.items():
        proc = launch(3, evens_cmd() + ["run", "--resume", out, "--set", override], timeout=90, cwd=ROOT)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
        assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr
    assert report(out)["evaluations"] == 1  # the run is untouched


@pytest.mark.slow
@pytest.mark.timing
def test_one_job_per_run_directory(tmp_path, small_config):
    """A second job on a run that a job is writing gets one line and exit 2; the first goes on intact.
    Wall-clock timing: each refusal comes within 60 s (a few s here); a job waiting for the lock would hang
    until the 90 s timeout."""
    out = str(tmp_path / "run")
    first = start_job(["run", small_config, "--out", out, "--set", "search.evaluations=100000", *SMALL])
    wait_for_checkpoint(first, out, 2)
    for args in (["run", "--resume", out], ["run", small_config, "--out", out], ["select", out, "--method", "top_k"]):
        start = time.monotonic()
        proc = launch(3 if args[0] == "run" else 1, evens_cmd() + args, timeout=90, cwd=ROOT)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr
        assert "another job is using this run (host" in errors[0] or "already holds a run" in errors[0], errors[0]
        assert time.monotonic() - start < 60
    watching = subprocess.run(evens_cmd() + ["status", out], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert watching.returncode == 0 and "a job holds the run (host" in watching.stdout, watching.stdout + watching.stderr
    assert first.poll() is None  # the first job never noticed
    os.killpg(first.pid, signal.SIGKILL)  # and now it dies without a word: its lock goes with it
    first.communicate(timeout=60)
    done = checkpoint_evaluations(out)
    summary = report(out)
    assert summary["ensemble"]["method"] == "greedy" and summary["sessions"] == 1  # the refused select changed nothing
    again = launch(3, evens_cmd() + ["run", "--resume", out, "--set", f"search.evaluations={done + 2}"], timeout=180, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert report(out)["evaluations"] == done + 2


def test_a_resume_given_a_config_keeps_an_absolute_data_path(tmp_path, small_config):
    """Relative paths in a config are read from where the job starts; the run stores them absolute."""
    here = tmp_path / "here"
    here.mkdir()
    os.replace(tmp_path / "data.h5", here / "data.h5")
    cfg = here / "rel.toml"
    cfg.write_text(open(small_config).read().replace(str(tmp_path / "data.h5"), "data.h5"))
    run = [*evens_cmd(), "run"]
    first = subprocess.run([*run, "rel.toml", "--out", "../run", "--set", "search.evaluations=1", *SMALL],
                           capture_output=True, text=True, timeout=120, cwd=here, env=dict(os.environ, PYTHONPATH=ROOT))
    assert first.returncode == 0, first.stderr
    second = subprocess.run([*run, "rel.toml", "--resume", "../run", "--set", "search.evaluations=2", *SMALL],
                            capture_output=True, text=True, timeout=120, cwd=here, env=dict(os.environ, PYTHONPATH=ROOT))
    assert second.returncode == 0, second.stderr
    third = subprocess.run([*run, "--resume", str(tmp_path / "run"), "--set", "search.evaluations=3"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert third.returncode == 0, third.stderr
    assert report(str(tmp_path / "run"))["data"]["path"] == str(here / "data.h5")


def test_a_launcher_of_another_mpi_is_refused_before_anything_runs(tmp_path):
    """Open MPI's mpirun starting processes whose mpi4py is MPICH's: each process would be a world of
    one, a master of its own; all exit 2 at once, rank 0 says why in one line, and nothing is written."""
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, OMPI_COMM_WORLD_SIZE="3")
    procs = [subprocess.run([*evens_cmd(), "run", os.path.join(ROOT, "examples", "digits.toml"), "--out", str(out)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(env, OMPI_COMM_WORLD_RANK=str(rank)))
             for rank in (0, 1)]
    assert [p.returncode for p in procs] == [2, 2]
    lines = [[line for line in p.stderr.splitlines() if line.startswith("evens:")] for p in procs]
    assert len(lines[0]) == 1 and lines[1] == [], lines
    assert re.fullmatch(r"evens: error: the launcher started 3 processes, but MPI sees each one alone: mpi4py uses another "
                        r"MPI \(.+\) than the launcher's; .*docs/cluster.md\)", lines[0][0]), lines[0][0]
    assert not out.exists()


def test_srun_with_a_plugin_that_does_not_match_is_refused_on_every_rank_naming_the_plugin(tmp_path):
    """srun with the plugin `none` starts processes that MPI sees each alone and sets no PMI variables, only its own:
    every one exits 2 at once (before: one took the run and searched, the others stopped, and the job requeued)."""
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, SLURM_STEP_NUM_TASKS="3", SLURM_NTASKS="3")
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMI_RANK"):
        env.pop(name, None)
    procs = [subprocess.run([*evens_cmd(), "run", os.path.join(ROOT, "examples", "digits.toml"), "--out", str(out)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(env, SLURM_PROCID=str(rank)))
             for rank in (0, 1, 2)]
    assert [p.returncode for p in procs] == [2, 2, 2]
    first = [line for line in procs[0].stderr.splitlines() if line.startswith("evens:")]
    assert len(first) == 1 and "srun started 3 processes, but MPI sees each one alone" in first[0] and "--mpi=pmi2" in first[0]
    assert not out.exists()



def test_the_allocations_task_count_is_not_a_launchers(monkeypatch):
    """A batch script's own process (no srun) sees SLURM_NTASKS of the allocation: it started no one."""
    from evolve.app.infra.process import launcher_size

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert launcher_size() == 1
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    assert launcher_size() == 4


@pytest.mark.slow
def test_a_config_with_only_data_and_search_searches_the_preset_its_data_fits_and_keeps_it_on_resume(tmp_path):
    data = write_blobs(tmp_path / "images.h5")  # samples (1, 8, 8): the image preset
    cfg = tmp_path / "plain.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n\n[search]\nevaluations = 3\npopulation = 2\n')
    out = str(tmp_path / "run")
    short = ["--set", "space.preset='auto'", "--set", "space.epochs={low = 2, high = 3}"]  # the preset, but not its hundreds of
    # epochs on 120 rows (minutes of CPU)
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, *short], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "search space: preset image, chosen for samples of shape (1, 8, 8): 1 channel(s) of 8x8 pixels" in proc.stderr
    assert "search space: preset image" in proc.stdout  # the summary says it too
    s = report(out)
    assert s["space"] == {"asked": "auto", "chosen": "image", "why": "samples of shape (1, 8, 8): 1 channel(s) of 8x8 pixels",
                          "overrides": ["epochs"]}
    assert {n["network"].split()[0] for n in s["top"]} <= {"cnn"}
    proc = launch(2, evens_cmd() + ["run", "--resume", out, "--set", "search.evaluations=4"], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert report(out)["space"]["chosen"] == "image" and report(out)["evaluations"] == 4
    proc = launch(3, evens_cmd() + ["run", str(cfg), "--out", str(tmp_path / "other"), "--set", "space.preset='tabular'"],
                  timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "space.preset 'tabular' is for samples of 1 dimension(s); the data's are (1, 8, 8)" in proc.stderr


def test_volumes_are_broadcast_and_searched_by_mlps_and_no_preset_claims_them(tmp_path):
    data = write_blobs(tmp_path / "volumes.h5", sample_shape=(1, 3, 4, 4))  # (N, C, D, H, W)
    cfg = tmp_path / "volumes.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n\n[search]\nevaluations = 3\npopulation = 2\n')
    out = str(tmp_path / "run")
    proc = launch(3, evens_cmd() + ["run", str(cfg), "--out", out], timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "no preset fits samples of shape (1, 3, 4, 4)" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not os.path.exists(out)
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, "--set", "space.family=['mlp']"], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert report(out)["evaluations"] == 3
