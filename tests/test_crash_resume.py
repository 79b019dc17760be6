"""End to end: a design that kills its worker (and so, while trainings run in the worker rank, the MPI
job) costs a bounded number of job deaths; the crash-proof resume records it as crashed, never proposes
that design again, and blames no network that was only queued behind it (issue 24, item 4.1). These
runs keep trainings in their ranks (train.isolation = "none"), where a training that dies ends the job.

The fault is keyed by design (EVENS_TEST_FAULTS="kill:family=mlp&width=8"), not by evaluation id: a resume
that proposes the same network again under a new id is what these tests must see."""
import os

import pytest
from cli_fixture import SMALL
from conftest import ROOT, evens_cmd, launch

from evolve.runfile import checkpoint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KILLER = {"family": "mlp", "width": "8"}
LAUNCHES = 16  # at most: the first job and its resumes; each killer design (how many the search meets depends on timing) costs up to two job deaths, as asserted


def _matches(network: dict, training: dict) -> bool:
    settings = {**network, **training}
    return all(str(settings.get(name)) == value for name, value in KILLER.items())


def test_a_design_that_kills_its_worker_is_crashed_once_and_the_run_finishes(tmp_path, small_config):
    """With a task queued behind each training (search.prefetch = 1, the default): the queued one is never blamed.
    Without queueing (prefetch = 0) the same accounting is the in-process tests' (test_reliability, test_dispatch)."""
    out, evaluations = str(tmp_path / "run"), 14
    env = {"EVENS_TEST_FAULTS": "kill:" + "&".join(f"{k}={v}" for k, v in KILLER.items())}
    args = ["--set", "search.prefetch=1", "--set", "search.seed=3", "--set", "train.isolation=none"]
    codes = []
    result = launch(3, evens_cmd() + ["run", small_config, "--out", out, "--set", f"search.evaluations={evaluations}", *args, *SMALL],
                    timeout=180, cwd=ROOT, env=env)
    codes.append(result.returncode)
    while result.returncode != 0 and len(codes) < LAUNCHES:
        result = launch(3, evens_cmd() + ["run", "--resume", out], timeout=180, cwd=ROOT, env=env)
        codes.append(result.returncode)
    assert result.returncode == 0, (codes, result.stderr[-3000:])

    state, info = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    space = info.space()
    assert len(state.records) == evaluations and state.pending == []
    designs = {r.id: space.key(r.genome) for r in state.records}
    killers = [r for r in state.records if _matches(*space.settings(designs[r.id]))]
    crashed = [r for r in state.records if r.status == "crashed"]
    assert crashed, "the search never met the killer design: choose another seed"
    # every network of the killer design is recorded as crashed, each design once, and no other network
    assert all(r.status == "crashed" for r in killers), [(r.id, r.status) for r in killers]
    assert len({designs[r.id] for r in killers}) == len(killers), "a design that crashed was proposed again"
    # Blame falls on what was training, never on what was queued behind it, and two suspects never train
    # together: a network is blamed for another's crash only if it trained beside a killer at two job
    # deaths, at most one beside each killer's second death with two workers (isolation avoids even that).
    innocent = [r.id for r in crashed if r not in killers]
    assert len(innocent) <= len(killers), f"networks blamed for another's crash: {innocent}"
    assert len(codes) <= 2 * len(killers) + 1, codes
