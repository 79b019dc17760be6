"""The scaling simulator: the real search loop on simulated workers; its model checked against cases worked by hand."""
import json
import subprocess

import pytest
from conftest import ROOT, evens_cmd
from fakes import search_config

from evolve.engine.simulator import simulate
from evolve.search.space_config import parse_space

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def config(**search):
    return search_config(1, space=SPACE, **search)  # (simulate sets the number of evaluations)


def test_a_fast_master_keeps_every_worker_busy():
    p = simulate(config(), workers=200, task_seconds=10.0, sigma=0.0, master_seconds=0.0, evaluations=2000)
    assert p.utilization == pytest.approx(1.0, abs=1e-9) and p.evaluations == 2000
    assert p.evaluations_per_hour == pytest.approx(3600 * 200 / 10.0, rel=1e-9)  # 200 workers, 10 s each


def test_a_slow_master_is_the_bottleneck():
    # 100 workers finish 100 trainings a second; a master at 50 ms a result takes 20 a second.
    p = simulate(config(), workers=100, task_seconds=1.0, sigma=0.0, master_seconds=0.05, evaluations=3000)
    assert 0.15 < p.utilization < 0.25
    assert p.master_load == pytest.approx(1.0, abs=0.05) and p.evaluations_per_hour == pytest.approx(3600 * 20, rel=0.05)


def test_a_generation_waits_for_its_slowest_training():
    kwargs = dict(workers=256, task_seconds=10.0, sigma=0.5, master_seconds=0.0, evaluations=2560)
    steady = simulate(config(), **kwargs)
    generational = simulate(config(mode="generational", population=256), **kwargs)
    assert steady.utilization > 0.99 and generational.utilization < 0.6  # the barrier idles everyone but the slowest


def test_successive_halving_at_scale_keeps_the_workers_busy_on_short_stages():
    """Promotions are short tasks (a third of a training, then two thirds): more results per second for the master,
    no worker waiting for a rung to fill."""
    kwargs = dict(workers=512, task_seconds=60.0, sigma=0.5, master_seconds=100e-6, evaluations=3000)
    whole = simulate(config(), **kwargs)
    halving = simulate(config(promotion=True), **kwargs)
    assert halving.utilization > 0.97 and whole.utilization > 0.97
    assert halving.evaluations > 3000  # the networks' first stages and their promotions
    # many networks stop at a ninth of their training, though a promotion that misses its holder trains again from the start
    assert halving.makespan_seconds < whole.makespan_seconds and halving.carried_on > 0.8
    assert halving.evaluations_per_hour > 2 * whole.evaluations_per_hour


def test_stages_of_no_epochs_ending_together_on_a_worker_are_simulated():
    """A network of few epochs has rungs of the same epochs: a promotion of no training, queued behind its worker's
    stage, ends when that stage ends (two tasks of one worker at one time: once a crash of the event heap)."""
    from evolve.engine.simulator import SimulatedWorkers
    from evolve.transport.protocol import Task

    workers = SimulatedWorkers(1, task_seconds=10.0, sigma=0.0, master_seconds=0.0)
    key = SPACE.key([0.5] * len(SPACE))
    epochs = SPACE.specs(key)[1].epochs
    workers.send(1, Task.from_key(0, SPACE, key, seed=0, watch={"pause_after": 1}))  # network 0 to its first rung, 1 epoch
    assert workers.receive()[1].evaluation.status == "paused"
    workers.send(1, Task.from_key(1, SPACE, key, seed=1))  # another network, whole
    workers.send(1, Task.from_key(2, SPACE, key, seed=0, watch={"pause_after": 1, "carry_on": 0}))  # rung 1: 1 epoch too, queued
    first, second = workers.receive(), workers.receive()
    assert (first[1].task_id, second[1].task_id) == (1, 2) and epochs > 1
    assert (first[1].evaluation.status, second[1].evaluation.status) == ("ok", "paused")


def test_same_seed_same_projection():
    a = simulate(config(seed=3), workers=64, task_seconds=5.0, master_seconds=1e-3, evaluations=500)
    b = simulate(config(seed=3), workers=64, task_seconds=5.0, master_seconds=1e-3, evaluations=500)
    assert a == b


def test_the_command_says_it_is_a_simulation():
    proc = subprocess.run(evens_cmd() + ["simulate", "examples/digits.toml", "--workers", "128", "--task-seconds", "30", "--master-us", "100"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("SIMULATION: no network is trained") and "projected worker utilization" in proc.stdout
    proc = subprocess.run(evens_cmd() + ["simulate", "examples/digits.toml", "--workers", "16", "--task-seconds", "1", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    out = json.loads(proc.stdout)
    assert out["simulation"] is True and out["workers"] == 16 and out["master_us"] > 0


def test_the_command_projects_a_campaigns_memory_run_file_and_resume_from_its_rate():
    from evolve.engine.simulator import MASTER_BASE_BYTES, MASTER_BYTES_PER_EVALUATION, RESUME_SECONDS_PER_EVALUATION, RESUME_START_SECONDS

    proc = subprocess.run(evens_cmd() + ["simulate", "examples/digits.toml", "--workers", "16", "--task-seconds", "10", "--master-us", "100",
                                         "--hours", "12,72", "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    twelve, seventy_two = out["campaigns"]
    assert twelve["hours"] == 12 and twelve["evaluations"] == int(out["steady_evaluations_per_hour"] * 12)
    assert seventy_two["evaluations"] == int(out["steady_evaluations_per_hour"] * 72)
    # 16 workers busy with 10 s trainings (lognormal, sigma 0.5: a mean of 11.3 s) record some 5,100 an hour
    assert 4_600 < out["steady_evaluations_per_hour"] < 5_600
    assert twelve["master_gb"] == (MASTER_BASE_BYTES + twelve["evaluations"] * MASTER_BYTES_PER_EVALUATION) / 1e9
    assert twelve["resume_seconds"] == RESUME_START_SECONDS + twelve["evaluations"] * RESUME_SECONDS_PER_EVALUATION
    text = subprocess.run(evens_cmd() + ["simulate", "examples/digits.toml", "--workers", "16", "--task-seconds", "10", "--master-us", "100",
                                         "--hours", "12"], capture_output=True, text=True, timeout=120, cwd=ROOT).stdout
    assert "a 12-hour campaign at that rate:" in text and "a resume takes about" in text
