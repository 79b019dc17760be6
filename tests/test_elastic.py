"""Elastic resume. End to end: a run started at ``mpiexec -n 4`` is killed (SIGKILL to every process),
resumed at ``-n 3``, killed again, and resumed at ``-n 5`` to its end. It finishes its budget exactly,
and what the strategy and the hall of fame held at each kill is what the next session carries on from.
In one process: a generational run whose job dies after tasks went out, before the next checkpoint."""
import fcntl
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from cli_fixture import SMALL, report, wait_for_checkpoint
from conftest import ROOT, evens_cmd, launch, mpiexec
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, search_config

from evolve.app.infra.runlock import LOCK_NAME
from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

BUDGET = 30
POPULATION = 4  # tiny_search's search.population
CANDIDATES = BUDGET  # the hall of fame keeps every network: each one of the first session must still be there


def _start(ranks, args):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    return subprocess.Popen([mpiexec(), "-n", str(ranks), *evens_cmd(), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _kill_after(proc, out, evaluations):
    """SIGKILL to every process of the job once its checkpoint holds ``evaluations``; then the run as a resume loads it."""
    wait_for_checkpoint(proc, out, evaluations)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    _wait_until_the_master_is_gone(out)
    state, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    return state


def _wait_until_the_master_is_gone(out, seconds=30):
    """Until the killed master's run lock is free. SIGKILL ends a process after the system call it is in (the rename
    that commits a checkpoint, say), which may be after mpiexec has gone: read the run before that, and the test
    would compare the next session with a checkpoint older than the one it resumed from."""
    fd = os.open(os.path.join(out, LOCK_NAME), os.O_RDONLY)
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the killed job still holds its run"
                time.sleep(0.05)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def ga_order(record):
    """The GA's order, best first: fitness alone, then the earlier id (no loss tie-break: evolve.search.ga.Fitness)."""
    return (-record.fitness, record.id)


def _replay_async(population, records, told):
    """Steady-state replacement from ``population`` (ids) over the records ``told``, in the order told: fill up to
    the population's size, then a better result replaces the worst (the lowest fitness, then the latest id: the GA
    compares fitness alone)."""
    population, records = list(population), dict(records)
    for r in told:
        if r.status != "ok":
            continue
        records[r.id] = r
        if len(population) < POPULATION:
            population.append(r.id)
            continue
        worst = max(range(len(population)), key=lambda k: ga_order(records[population[k]]))
        if r.fitness > records[population[worst]].fitness:
            population[worst] = r.id
    return population


def _async_carries_on(before, after, final):
    """Replacement from ``before``'s population over the results told since gives ``after``'s (the next checkpoint's),
    and the next session breeds from it: a strategy that started again would first send random networks."""
    assert len(before.population) == POPULATION
    assert [r.id for r in after.records[:len(before.records)]] == [r.id for r in before.records]
    told = after.records[len(before.records):]
    assert _replay_async(before.population, {r.id: r for r in before.records}, told) == after.population
    new = [r for r in final.records if r.id >= before.next_id]
    assert new and all(r.operators != "random" for r in new)
    return 0


def _generational_carries_on(before, after, final):
    """The generation in progress at ``before`` is finished as it was bred (what is left of its queue, in order,
    under the next ids), and the next one is bred from the best of ``before``'s population and that generation.
    Returns how many individuals joined that generation beyond its size: sent after the checkpoint by the job
    that died, bred for a generation the checkpoint had not reached (the in-flight log names them)."""
    s = before.strategy
    out = sorted(before.pending, key=lambda p: p.id)
    queue, joined = list(s["queue"]), 0
    for late in out[s["outstanding"]:]:  # sent after the checkpoint: taken from the queue, or bred past it
        taken = next((q for q in queue if q[0] == late.genome), None)
        if taken is None:
            joined += 1
        else:
            queue.remove(taken)
    records = final.by_id()
    queue_ids = list(range(before.next_id, before.next_id + len(queue)))
    for ident, (genome, parents, operators) in zip(queue_ids, queue):
        r = records[ident]
        assert (r.genome, list(r.parents), r.operators) == (genome, parents, operators), ident
    generation = s["told"] + [p.id for p in out] + queue_ids
    pool = [records[i] for i in set(s["population"]) | {i for i in generation if records[i].status == "ok"}]
    survivors = [r.id for r in sorted(pool, key=ga_order)[:POPULATION]]
    next_ids = range(before.next_id + len(queue), before.next_id + len(queue) + POPULATION)
    bred = [records[i] for i in next_ids if i in records]
    assert bred and all(r.operators != "random" and set(r.parents) <= set(survivors) for r in bred), (survivors, bred)
    if after.strategy["generation"] == s["generation"] + 1:
        assert after.strategy["population"] == survivors
    return joined


def _same_member(a, b):
    return a.id == b.id and a.fitness == b.fitness and np.array_equal(a.val_pred, b.val_pred) and np.array_equal(a.test_pred, b.test_pred)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "generational"])
def test_a_run_killed_and_resumed_on_other_worker_counts_finishes_its_budget_and_carries_its_state(tmp_path, small_config, mode):
    out = str(tmp_path / "run")
    first = _start(4, ["run", small_config, "--out", out, "--set", f"search.evaluations={BUDGET}", "--set", f"search.mode={mode}",
                       "--set", f"ensemble.candidates={CANDIDATES}", *SMALL])
    at_first_kill = _kill_after(first, out, 6)
    assert 6 <= len(at_first_kill.records) < BUDGET and at_first_kill.pending
    second = _start(3, ["run", "--resume", out])
    at_second_kill = _kill_after(second, out, len(at_first_kill.records) + 4)  # (early: tiny trainings finish fast)
    assert len(at_second_kill.records) < BUDGET
    last = launch(5, evens_cmd() + ["run", "--resume", out], timeout=180, cwd=ROOT)
    assert last.returncode == 0, last.stderr
    assert "searching with 4 worker(s)" in last.stderr

    final, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    assert len(final.records) == BUDGET and sorted(r.id for r in final.records) == list(range(BUDGET)) and final.pending == []
    summary = report(out)
    assert summary["evaluations"] == BUDGET and summary["pending"] == 0 and summary["sessions"] == 3

    records = final.by_id()
    for kill in (at_first_kill, at_second_kill):
        # what was recorded stays as it was; what was out is redone under its own id
        assert all(records[r.id] == r for r in kill.records)
        assert all(records[p.id].operators.endswith("+redo") and records[p.id].genome == p.genome for p in kill.pending), \
            [(p, records[p.id]) for p in kill.pending]
    # the hall of fame carried over: every member of the first session is still there, as it was checkpointed
    # (members are offered once, when their result arrives; a hall of fame rebuilt on resume would lack them)
    assert sorted(final.hall_of_fame.ids) == sorted(r.id for r in final.records if r.status == "ok")
    assert len(at_first_kill.hall_of_fame) >= 6
    assert all(_same_member(m, final.hall_of_fame.by_id(m.id)) for m in at_first_kill.hall_of_fame)

    carries_on = _async_carries_on if mode == "async" else _generational_carries_on
    joined = carries_on(at_first_kill, at_second_kill, final) + carries_on(at_second_kill, final, final)
    if mode == "generational":  # each generation is the population's size, whatever the workers, plus those that joined
        s = final.strategy
        assert BUDGET == POPULATION * s["generation"] + POPULATION - len(s["queue"]) + joined and s["outstanding"] == 0


# --- in one process: a job that dies after tasks went out, before the checkpoint that follows ------------

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


class _Died(Exception):
    pass


def _trace(state):
    return [(r.id, tuple(r.genome), r.parents, r.operators.removesuffix("+redo"), r.fitness) for r in sorted(state.records, key=lambda r: r.id)]


@pytest.mark.parametrize("dies_at, from_queue", [(3, True), (6, False), (9, True)])
def test_a_generational_resume_sends_nothing_twice_when_the_job_died_after_tasks_went_out(tmp_path, dies_at, from_queue):
    """The job (3 simulated workers) dies as its ``dies_at``-th checkpoint would be written: the tasks sent since the
    last one are in the in-flight log only, and the checkpoint's strategy state does not count them as out. The
    resume (2 workers) redoes them and sends none of them again under a new id (before: a network trained twice,
    or a barrier passed with a task out); the budget is spent exactly. Tasks taken from the generation in progress
    leave the run as the unbroken run; tasks of a generation bred after the checkpoint join the one in progress."""
    config = search_config(BUDGET, 6, 3, 0, checkpoint_seconds=0, mode="generational")
    whole = SearchState.fresh(0, candidates=3)
    run_search(whole, InProcessTransport(landscape, 1), SPACE, config)

    path = str(tmp_path / "checkpoint.h5")
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    info = RunInfo(config_from_dict({"search": {"evaluations": BUDGET}, "space": {}}), list(GENE_NAMES), data, VAL_Y, TEST_Y)
    journal, saves = checkpoint.InFlightLog(path), []

    def save(state):
        saves.append(len(state.records))
        if len(saves) == dies_at:
            raise _Died
        checkpoint.save(path, state, info)
        journal.reset()

    state = SearchState.fresh(0, candidates=3)
    transport = SimulatedTransport({1: 1.0, 2: 1.4, 3: 1.9}, clock=VirtualClock())
    with pytest.raises(_Died):
        run_search(state, transport, SPACE, config, checkpoint=save, journal=journal, clock=transport.clock)
    journal.close()
    resumed, _ = checkpoint.load(path)
    s = resumed.strategy
    late = sorted(resumed.pending, key=lambda p: p.id)[s["outstanding"]:]
    assert late, "the in-flight log holds tasks sent after the checkpoint"
    assert all(any(q[0] == p.genome for q in s["queue"]) for p in late) == from_queue

    run_search(resumed, InProcessTransport(landscape, 2), SPACE, config)
    assert sorted(r.id for r in resumed.records) == list(range(BUDGET))
    assert len({tuple(r.genome) for r in resumed.records}) == BUDGET  # (as in the unbroken run: no network twice)
    end = resumed.strategy
    joined = 0 if from_queue else len(late)
    assert BUDGET == 6 * end["generation"] + 6 - len(end["queue"]) + joined and end["outstanding"] == 0
    if from_queue:
        assert _trace(resumed) == _trace(whole)
