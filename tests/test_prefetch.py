"""search.prefetch: tasks queued on a worker behind the one it trains, started the moment it reports."""
import json
import math

import pytest
from conftest import launch_python
from fakes import SimulatedTransport, VirtualClock, search_config

from evolve.engine.loop import HungWorker, run_search
from evolve.engine.simulator import simulate
from evolve.engine.state import SearchState
from evolve.search.space_config import parse_space

SPACE = parse_space({}).for_sample_shape((1, 8, 8))
SPEEDS = {1: 1.0, 2: 1.5, 3: 2.5}


def settings(budget, checkpoint_seconds=math.inf, **kw):
    return search_config(budget, 4, 3, 0, checkpoint_seconds=checkpoint_seconds, **kw)


def test_each_worker_starts_its_queued_task_the_moment_it_reports_and_records_when_it_started():
    clock = VirtualClock()
    transport = SimulatedTransport(SPEEDS, clock=clock, depth=2)
    state = SearchState.fresh(0)
    assert run_search(state, transport, SPACE, settings(60, prefetch=1), clock=clock, wall_clock=clock)
    assert len(state.records) == 60 and len({r.id for r in state.records}) == 60
    began = {ident: (at, worker) for at, worker, ident in transport.starts}
    for r in state.records:  # started: when its training began, not when it was queued
        assert (r.started, r.worker) == began[r.id] and r.finished == pytest.approx(r.started + SPEEDS[r.worker])
    # while work remained, each worker held two tasks, and its trainings ran back to back
    assert max(sum(1 for _, w, _ in transport.sends[:6] if w == worker) for worker in SPEEDS) == 2
    for worker in SPEEDS:
        mine = sorted((r for r in state.records if r.worker == worker), key=lambda r: r.started)
        assert all(b.started == pytest.approx(a.finished) for a, b in zip(mine, mine[1:]))
    assert 0.9 < state.utilization <= 1.0 + 1e-9  # busy time counts from each start, never twice


def test_the_last_round_queues_nothing_behind_a_busy_worker():
    clock = VirtualClock()
    transport = SimulatedTransport(SPEEDS, clock=clock, depth=2)
    state = SearchState.fresh(0)
    run_search(state, transport, SPACE, settings(30, prefetch=1), clock=clock, wall_clock=clock)
    sent = {ident: at for at, _, ident in transport.sends}
    queued = {ident for at, _, ident in transport.starts if at > sent[ident]}  # started after it was sent: it waited
    assert len(queued) > 10  # while work remained, tasks were queued ...
    assert not queued & set(range(30 - len(SPEEDS), 30))  # ... but none of the last: each went to a free worker


def test_only_the_trainings_count_as_out_at_a_job_death_or_a_hang_never_the_queued_tasks():
    # at a checkpoint, each worker's training counts as out at one more death; what is queued behind it
    # counts only once it starts (the in-flight log notes it then: tests/test_dispatch.py)
    clock = VirtualClock()
    transport = SimulatedTransport({1: 2.0, 2: 50.0}, clock=clock, depth=2)
    state = SearchState.fresh(0)
    seen = []
    run_search(state, transport, SPACE, settings(100, checkpoint_seconds=0, prefetch=1),
               checkpoint=lambda s: seen.append({p.id: p.attempts for p in s.pending}),
               should_stop=lambda: int(clock.now >= 5.0), clock=clock)
    assert seen and all(len(pending) == 4 and sorted(pending.values()) == [0, 0, 1, 1] for pending in seen)
    # a hung worker will never start what is queued behind its training: only that training is to blame
    clock = VirtualClock()
    transport = SimulatedTransport({1: 1.0, 2: math.inf}, clock=clock, depth=2)
    state = SearchState.fresh(0)
    with pytest.raises(HungWorker) as caught:
        run_search(state, transport, SPACE, settings(1000, prefetch=1, eval_timeout_seconds=5.0, hang_seconds=10.0), clock=clock)
    attempts = {p.id: p.attempts for p in state.pending}
    assert attempts.pop(caught.value.ident) == 1 and len(attempts) == 3 and set(attempts.values()) == {0}


def test_a_queued_task_counts_towards_a_hang_only_from_when_it_starts():
    clock = VirtualClock()
    transport = SimulatedTransport({1: 8.0, 2: 8.0}, clock=clock, depth=2)
    state = SearchState.fresh(0)
    # each training takes 8 s; its limit (10 s) plus hang_seconds (5 s) is never passed, though a task
    # queued at 0 s comes back at 16 s
    assert run_search(state, transport, SPACE, settings(20, prefetch=1, eval_timeout_seconds=10.0, hang_seconds=5.0), clock=clock)
    assert len(state.records) == 20


def test_a_drain_waits_for_the_trainings_running_and_redoes_the_queued_tasks():
    clock = VirtualClock()
    transport = SimulatedTransport({1: 4.0, 2: 7.0}, clock=clock, depth=2)
    state = SearchState.fresh(0)
    # the signal at 4 s, as worker 1 reports and starts its queued task (4-8 s); worker 2 trains its
    # first (0-7 s), with one queued behind it (7-14 s)
    assert not run_search(state, transport, SPACE, settings(100, prefetch=1, drain_seconds=100.0),
                          should_stop=lambda: int(clock.now >= 4.0), clock=clock, wall_clock=clock)
    assert clock.now == 8.0  # the drain ended with the trainings running at the signal, not with the queued one (14 s)
    assert len(transport.skipped) == 1 and {p.id for p in state.pending} == transport.skipped
    assert all(p.attempts == 0 for p in state.pending)  # it never ran: redone on resume, nothing counted
    assert [r.status for r in state.records] == ["ok"] * 3 and not {r.id for r in state.records} & transport.skipped
    assert state.utilization <= 1.0


def test_nothing_is_queued_in_generational_mode_or_over_workers_that_do_not_queue():
    for mode, depth in (("generational", 2), ("nsga2", 2), ("async", 1)):
        clock = VirtualClock()
        transport = SimulatedTransport(SPEEDS, clock=clock, depth=depth)  # depth 1: asserts no second task
        state = SearchState.fresh(0)
        run_search(state, transport, SPACE, settings(24, prefetch=1, mode=mode), clock=clock, wall_clock=clock)
        sent = {ident: at for at, _, ident in transport.sends}
        assert len(state.records) == 24 and all(at == sent[ident] for at, _, ident in transport.starts), mode


def test_prefetch_keeps_workers_busy_where_the_master_queues_results():
    # 32 workers with 5 ms trainings and a master busy 100 us per result: a worker without a task
    # queued waits for the master's answer behind the others' results
    alone, queued = (simulate(search_config(1, space=SPACE, prefetch=p), 32, 0.005, 0.5, 100e-6, 3000).utilization for p in (0, 1))
    assert alone < 0.98 and queued > 0.995


@pytest.mark.mpi
@pytest.mark.timing
def test_a_stop_skips_the_tasks_queued_before_it():
    """Wall-clock timing (prog_prefetch.py): a training sleeps 1 s and the stop goes out 0.5 s after the
    first results, so each worker has 0.5 s to start its second task and the stop 0.5 s to come before the third."""
    proc = launch_python(3, "prog_prefetch.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] == out["sent_first"] and out["trained"] == [2, 2]


@pytest.mark.mpi
@pytest.mark.timing
def test_a_drain_answers_the_tasks_queued_skipped_and_lets_the_running_ones_finish():
    """Wall-clock timing: as above, with the drain in place of the stop."""
    proc = launch_python(3, "prog_prefetch.py", "--drain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["trained"] == [2, 2]
    assert out["statuses"] == {"1": ["ok", "ok", "skipped"], "2": ["ok", "ok", "skipped"]}


@pytest.mark.mpi
@pytest.mark.timing
def test_a_drain_behind_eight_queued_tasks_skips_them_all():
    """Wall-clock timing (prog_drain_queue.py): the queued tasks and the drain go out once each worker says it
    began its first training (a 1 s sleep), so all of them are there a second before it ends."""
    proc = launch_python(3, "prog_drain_queue.py", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == '8 {"1": "ossssssss", "2": "ossssssss"}'
