"""Shared fixtures: tiny synthetic datasets and a launcher for MPI programs.

Markers (declared in pyproject.toml):
  mpi     launches mpiexec in a subprocess (tests/mpi/ programs, at 2 and 3 ranks)
  e2e     an end-to-end run of the `evens` command
  slow    takes over 10 s on a 2-core machine
  timing  asserts on wall-clock time (its docstring says what); margins hold on a loaded 2-core machine
  scale   a history of EVENS_SCALE evaluations (tests/test_scale.py; 10^7: some 10 minutes), else skipped

  pytest -q -m "not slow"            the quick loop while working
  pytest -q -m "not mpi and not e2e" pure unit tests, no mpiexec
  ./scripts/test.sh                  the whole suite, as CI runs it (15 to 20 minutes on 2 cores)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from data_bcast.h5file import write_dataset

torch.set_num_threads(1)
# Property tests assert behaviour, not speed: hypothesis's default 200 ms deadline per example (and its
# too-slow health check) failed them on a machine loaded by other work.
settings.register_profile("evens", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("evens")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_PROGRAMS = os.path.join(ROOT, "tests", "mpi")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """scripts/test.sh's ``--dist loadgroup`` sends the tests of one ``xdist_group`` to one process (the real-Slurm
    tests share one local cluster; test_export's searches are made once) by a suffix that pytest-xdist adds to each
    test's id. pytest 9.2 keeps the id in ``Node._id``, where xdist 3.8 still writes ``_nodeid``, so its suffix was
    lost and groups were split across processes; it is added here where it is missing."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


def blobs(n: int, sample_shape: tuple[int, ...], classes: int = 3, seed: int = 0, dtype=np.float32):
    """Separable classes: each class has its own mean pattern plus noise."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 1.0, size=(classes,) + sample_shape)
    y = rng.integers(0, classes, size=n)
    x = means[y] + 0.3 * rng.normal(size=(n,) + sample_shape)
    if dtype == np.uint8:
        x = np.clip((x + 3) * 40, 0, 255).astype(np.uint8)
    return x.astype(dtype), y.astype(np.int64)


def blob_splits(sample_shape, n=(120, 40, 40), classes=3, splits=("train", "val", "test"), dtype=np.float32, seed=0):
    """One draw of blobs, cut into splits (so all splits share the class patterns)."""
    x, y = blobs(sum(n[: len(splits)]), sample_shape, classes, seed=seed, dtype=dtype)
    bounds = np.cumsum((0,) + tuple(n[: len(splits)]))
    return {split: (x[a:b], y[a:b]) for split, a, b in zip(splits, bounds, bounds[1:])}


def write_blobs(path, sample_shape=(1, 8, 8), n=(120, 40, 40), classes=3, splits=("train", "val", "test"), dtype=np.float32):
    write_dataset(str(path), blob_splits(sample_shape, n, classes, splits, dtype))
    return str(path)


def write_regression(path, features=8, n=(120, 40, 40), targets=(), seed=0):
    """y = 50 + 20 * (a fixed linear function of x) + noise, of shape (N,) + targets."""
    rng = np.random.default_rng(seed)
    total = sum(n)
    x = rng.normal(size=(total, features)).astype(np.float32)
    coef = rng.normal(size=(features, int(np.prod(targets or (1,)))))
    y = (50.0 + 20.0 * x @ coef + rng.normal(scale=2.0, size=(total, coef.shape[1]))).astype(np.float32).reshape((total,) + targets)
    bounds = np.cumsum((0,) + tuple(n))
    write_dataset(str(path), {s: (x[a:b], y[a:b]) for s, a, b in zip(("train", "val", "test"), bounds, bounds[1:])})
    return str(path)


@pytest.fixture
def image_file(tmp_path):
    return write_blobs(tmp_path / "images.h5")


def mpiexec() -> str:
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        pytest.skip("no mpiexec on PATH")
    return exe


def launch(n: int, args: list[str], timeout: float = 120, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n N args...``; a hang fails the test instead of blocking the suite."""
    # ROOT first, then the tests folder (for programs that share its fixtures), the rest kept
    path = os.pathsep.join(p for p in (ROOT, os.path.join(ROOT, "tests"), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **(env or {})}
    return subprocess.run(
        [mpiexec(), "-n", str(n), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env
    )


def launch_python(n: int, program: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return launch(n, [sys.executable, os.path.join(MPI_PROGRAMS, program), *args], timeout=timeout)


def tiny_search(family: str = "['mlp', 'cnn']") -> list[str]:
    """``--set`` arguments for a search of tiny networks that train in a fraction of a second."""
    settings = [f"space.family={family}", "space.width=[4, 8]", "space.depth={low = 1, high = 2}",
                "space.epochs={low = 1, high = 2}", "search.population=4", "train.threads=1"]
    return [arg for s in settings for arg in ("--set", s)]


def alive(pid: int) -> bool:
    """Is process ``pid`` running (there, and not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def evens_cmd() -> list[str]:
    return [sys.executable, "-m", "evolve"]


@pytest.fixture
def small_config(tmp_path):
    """A config for a search of 6 networks on small blobs (the end-to-end tests' usual job)."""
    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30), classes=3)
    cfg = tmp_path / "small.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 6\ncheckpoint_seconds = 0.0\n')
    return str(cfg)


def checksums_again(member) -> None:
    """A member group's checksums (ensemble format 3) made again from what it holds now: a hand-edited run
    file that is consistent with itself, so that what a test edited meets the checks after the checksums."""
    import json

    from ensemble.store import member_checksums

    weights = {name: d[...] for name, d in member["weights"].items()}
    member.attrs["checksums"] = json.dumps(member_checksums(member["val_pred"][...], member["test_pred"][...], weights))
    seals_again(member)


def seals_again(f) -> None:
    """Every seal (attribute ``crc32``, see ensemble.store.seal) in ``f`` (a run file or one of its groups) made
    again from what it holds now: a hand edit that passes the checksums, so that it meets the checks behind them."""
    from ensemble.store import HEADER_OWN, MEMBER_OWN, SEAL, seal
    from evolve.runfile.checkpoint import ROOT_OWN

    for obj in [f] + _objects(f):
        if SEAL in obj.attrs:
            own = {"/": ROOT_OWN, "/ensemble": HEADER_OWN}.get(obj.name, MEMBER_OWN if obj.name.startswith("/ensemble/members/") else ())
            seal(obj, own)


def _objects(group) -> list:
    import h5py

    found = []
    if isinstance(group, h5py.Group):
        group.visititems(lambda name, obj: found.append(obj))
    return found
