"""The master's loop under faults: a preemption drain, individuals out when jobs died, a hung worker,
the in-flight log a dead job leaves, and the test-only fault injection of the worker."""
import math

import h5py
import pytest
from checkpoint_fixture import info as run_info
from conftest import seals_again
from fakes import SimulatedTransport, VirtualClock, landscape, search_config

from ensemble.results import Evaluation
from evolve.engine.loop import CRASHED_MESSAGE, HungWorker, run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint
from evolve.search.records import Pending
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport, Task
from evolve.transport.worker import injected_faults, with_faults

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def settings(budget, **kw):
    return search_config(budget, 4, 3, 0, checkpoint_seconds=0, **kw)


class TimedTransport(SimulatedTransport):
    """A simulated transport whose ``receive`` honours its timeout on the virtual clock; a worker with
    speed ``inf`` never answers."""

    def receive(self, timeout=None, wants=None):
        if not self._running or (timeout is not None and self._running[0][0] > self.clock.now + timeout):
            if timeout is not None:
                self.clock.now += timeout
            return None
        return super().receive(timeout) if wants is None else super().receive(timeout, wants)


def signals_at(clock, *times):
    """should_stop: how many of ``times`` have passed."""
    return lambda: sum(clock.now >= t for t in times)


def test_a_drain_records_the_trainings_that_finish_in_time_and_sends_nothing_new():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: 4.0, 3: 30.0}, clock=clock)
    state, lines = SearchState.fresh(0), []
    finished = run_search(state, transport, SPACE, settings(100, drain_seconds=10.0), should_stop=signals_at(clock, 2.5),
                          clock=clock, say=lines.append)
    assert not finished
    signal_at = 2.5
    sent_after = [tid for t, _, tid in transport.sends if t >= signal_at]
    assert sent_after == []  # nothing new went out after the signal
    out_at_signal = {tid for t, w, tid in transport.sends if t < signal_at} - {tid for t, _, tid in transport.results if t < signal_at}
    recorded = {r.id for r in state.records}
    # workers 1 and 2 finished inside the 10 s drain and were recorded; worker 3's (30 s) was not
    slow = next(tid for _, w, tid in transport.sends if w == 3)
    assert out_at_signal - {slow} <= recorded and slow not in recorded
    assert [p.id for p in state.pending] == [slow] and state.pending[0].attempts == 0  # a clean stop: no death counted
    assert state.workers_busy == 1
    assert 12.5 <= clock.now <= 13.6  # it waited the drain's limit (from when it saw the signal), and no longer
    assert any(line.startswith("draining: waiting up to 10 s for 3 trainings") for line in lines), lines
    assert any("1 of 3 trainings still out" in line for line in lines), lines


def test_a_drain_that_gets_everything_back_ends_early_with_no_worker_busy():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: 3.0}, clock=clock)
    state, lines = SearchState.fresh(0), []
    assert not run_search(state, transport, SPACE, settings(100, drain_seconds=60.0), should_stop=signals_at(clock, 2.5),
                          clock=clock, say=lines.append)
    assert state.pending == [] and state.workers_busy == 0
    assert clock.now < 4.0  # not the whole 60 s
    assert len(state.records) == len(transport.sends)
    assert any("draining: all 2 trainings recorded" in line for line in lines), lines


def test_a_second_signal_ends_the_drain_at_once():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: 40.0}, clock=clock)
    state, lines = SearchState.fresh(0), []
    assert not run_search(state, transport, SPACE, settings(100, drain_seconds=60.0), should_stop=signals_at(clock, 2.5, 5.0),
                          clock=clock, say=lines.append)
    assert 5.0 <= clock.now < 5.5
    assert len(state.pending) == 1 and state.workers_busy == 1
    assert any("a second signal" in line for line in lines), lines


def test_without_a_drain_a_stop_leaves_everything_out_pending():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: 4.0}, clock=clock)
    state = SearchState.fresh(0)
    assert not run_search(state, transport, SPACE, settings(100), should_stop=signals_at(clock, 2.5), clock=clock)
    assert clock.now < 3.0 and len(state.pending) == 2


def _pending(ids, attempts):
    state = SearchState.fresh(0)
    run_search(state, InProcessTransport(landscape, 1), SPACE, settings(4))
    genomes = [r.genome for r in state.records]
    state.records.clear()
    state.hall_of_fame = SearchState.fresh(0).hall_of_fame
    state.strategy = {}
    state.next_id = max(ids) + 1
    state.pending = [Pending(id=i, genome=list(genomes[k]), parents=(-1, -1), operators="random", attempts=a) for k, (i, a) in enumerate(zip(ids, attempts))]
    return state


def test_an_individual_out_at_two_job_deaths_is_recorded_as_crashed_and_never_sent():
    state = _pending([0, 1, 2], [2, 1, 0])
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: 1.0}, clock=clock)
    lines = []
    assert run_search(state, transport, SPACE, settings(6), clock=clock, say=lines.append)
    by_id = state.by_id()
    assert by_id[0].status == "crashed" and by_id[0].message == CRASHED_MESSAGE and by_id[0].fitness == -math.inf
    assert 0 not in {tid for _, _, tid in transport.sends}
    assert [tid for _, _, tid in transport.sends[:2]] == [1, 2]  # the others are redone first
    assert by_id[1].operators.endswith("+redo") and by_id[1].status == "ok"
    assert len(state.records) == 6 and state.pending == []
    assert any("evaluation 0" in line and "crashed" in line for line in lines)


def test_checkpoints_while_running_count_the_individuals_out_and_the_last_one_does_not():
    state = _pending([0], [1])
    clock = VirtualClock()
    transport = TimedTransport({1: 50.0, 2: 2.0}, clock=clock)  # 0, redone first, is on the slow worker
    seen = []

    def save(s):
        seen.append({p.id: p.attempts for p in s.pending})

    run_search(state, transport, SPACE, settings(100), checkpoint=save, should_stop=signals_at(clock, 10.0), clock=clock)
    # while it ran, redone individual 0 (out at one death) counted as out at a second, new ones at a first
    assert seen and seen[0][0] == 2 and all(a == 1 for i, a in seen[0].items() if i != 0)
    final = {p.id: p.attempts for p in state.pending}
    assert final[0] == 1 and all(a == 0 for i, a in final.items() if i != 0)


def test_a_silent_worker_past_its_time_limit_is_reported_hung():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: math.inf, 3: 2.0}, clock=clock)
    state = SearchState.fresh(0)
    with pytest.raises(HungWorker) as caught:
        run_search(state, transport, SPACE, settings(1000, eval_timeout_seconds=5.0, hang_seconds=10.0), clock=clock)
    hung = caught.value
    assert hung.worker == 2 and 15.0 < hung.seconds <= 16.5 and 15.0 < clock.now <= 16.5
    attempts = {p.id: p.attempts for p in state.pending}
    assert attempts.pop(hung.ident) == 1  # the hung one is to blame ...
    assert set(attempts.values()) <= {0}  # ... the others, out at that moment, are not


def test_no_hang_detection_without_a_time_limit():
    clock = VirtualClock()
    transport = TimedTransport({1: 1.0, 2: math.inf}, clock=clock)
    state = SearchState.fresh(0)
    assert not run_search(state, transport, SPACE, settings(1000, hang_seconds=10.0), should_stop=signals_at(clock, 500.0),
                          clock=clock)


def test_a_nan_fitness_is_recorded_as_an_error():
    def nan_for_3(task):
        return Evaluation(status="ok", fitness=math.nan, metrics={}, seconds=0.0, epochs_done=1) if task.id == 3 else landscape(task)

    state = SearchState.fresh(0)
    assert run_search(state, InProcessTransport(nan_for_3, 2), SPACE, settings(8))
    bad = state.by_id()[3]
    assert bad.status == "error" and bad.fitness == -math.inf and "nan" in bad.message
    assert all(math.isfinite(r.fitness) for r in state.records if r.status == "ok")


def _saved(tmp_path, state):
    path = str(tmp_path / "checkpoint.h5")
    checkpoint.save(path, state, run_info())
    return path


def _saved_with_one_pending(tmp_path, evaluations):
    """A checkpoint after ``evaluations`` results, with one more individual out (at one job death)."""
    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(landscape, 2), SPACE, settings(evaluations))
    state.pending = [Pending(id=evaluations, genome=list(state.records[0].genome), parents=(0, 1), operators="crossover", attempts=1)]
    state.next_id = evaluations + 1
    return state, _saved(tmp_path, state)


def test_the_in_flight_log_adds_what_was_out_when_the_job_died(tmp_path):
    state, path = _saved_with_one_pending(tmp_path, 6)
    log = checkpoint.InFlightLog(path)
    log.sent(Pending(id=6, genome=list(state.records[0].genome), parents=(0, 1), operators="crossover+redo", attempts=2))  # redone: out at a second death
    log.sent(Pending(id=7, genome=list(state.records[1].genome), parents=(2, 3), operators="mutation", attempts=1))
    log.sent(Pending(id=8, genome=list(state.records[2].genome), parents=(2, 3), operators="mutation", attempts=1))
    log.done(8)  # came back, never checkpointed: redone, and not to blame
    log.close()
    with open(checkpoint.inflight_path(path), "a") as fh:
        fh.write('{"sent": 9, "genome": [1.0')  # a line the dying job never finished
    loaded, _ = checkpoint.load(path)
    assert {p.id: p.attempts for p in loaded.pending} == {6: 2, 7: 1, 8: 0}
    assert loaded.next_id == 9  # past every id the log names
    assert [p.genome for p in loaded.pending if p.id == 7] == [list(state.records[1].genome)]

    log = checkpoint.InFlightLog(path)
    log.reset()
    log.close()
    again, _ = checkpoint.load(path)
    assert {p.id: p.attempts for p in again.pending} == {6: 1}


def test_a_checkpoint_missing_a_pending_column_is_refused_as_damaged(tmp_path):
    _, path = _saved_with_one_pending(tmp_path, 4)
    assert checkpoint.load(path)[0].pending[0].attempts == 1
    with h5py.File(path, "a") as f:
        del f["pending/attempts"]
        seals_again(f)  # a column gone, yet the checksums pass: the layout check refuses it
    checkpoint._written.clear()
    with pytest.raises(RunDirError, match="damaged checkpoint.*'attempts' is missing"):
        checkpoint.load(path)


def test_fault_injection_parses_and_acts():
    assert injected_faults("kill:5, raise:7,nan:9,hang:11").by_id == {5: "kill", 7: "raise", 9: "nan", 11: "hang"}
    assert not injected_faults("")
    for bad in ("kill", "boom:3", "kill:x", "kill:family=", "kill:=cnn", "kill:family=cnn&"):
        with pytest.raises(ValueError):
            injected_faults(bad)
    evaluate = with_faults(lambda task: "trained", injected_faults("raise:7,nan:9"))
    task = lambda i: Task(i, {}, {})  # noqa: E731
    assert evaluate(task(1)) == "trained"
    with pytest.raises(RuntimeError, match="injected fault"):
        evaluate(task(7))
    ev = evaluate(task(9))
    assert ev.status == "ok" and math.isnan(ev.fitness)


def test_a_fault_by_design_hits_every_evaluation_of_that_design_whatever_its_id():
    faults = injected_faults("raise:family=cnn&width=8")
    evaluate = with_faults(lambda task: "trained", faults)
    design = lambda i, family, width: Task(i, {"family": family, "width": width}, {"epochs": 2})  # noqa: E731
    for ident in (3, 40):
        with pytest.raises(RuntimeError, match=f"evaluation {ident}"):
            evaluate(design(ident, "cnn", 8))
    assert evaluate(design(5, "cnn", 4)) == "trained" and evaluate(design(6, "mlp", 8)) == "trained"
    assert faults.fault_of(design(1, "cnn", 8)) == "raise" and injected_faults("kill:epochs=2").fault_of(design(1, "mlp", 4)) == "kill"


@pytest.mark.e2e
@pytest.mark.timing
def test_an_idle_worker_waits_without_spinning_and_takes_a_task_within_milliseconds():
    """Wall-clock timing: the CPU seconds an idle worker uses over 4 s, and the seconds a task then takes
    to reach it. A waiting worker naps (about 1 % of a core, a few ms to a task; under 1 % and 10 ms
    measured with two busy loops on the 2 cores); the bounds leave room for a loaded machine."""
    import json

    from conftest import launch_python

    proc = launch_python(3, "prog_idle_cpu.py", "4", timeout=60)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    # broken: a worker spinning in a blocking receive (MPICH polls without yielding) takes a whole core
    # alone, and still half of one beside two busy processes on the 2 cores
    assert all(f < 0.15 for f in figures["cpu_fraction"].values()), figures
    # broken: a worker that sleeps a second or so between probes takes half a second to a task on average
    assert all(d < 0.2 for d in figures["delivery_seconds"]), figures
