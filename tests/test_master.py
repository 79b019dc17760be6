import statistics

import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, search_config

from ensemble.hall_of_fame import HallOfFame, Member
from evolve.config.schema import config_from_dict
from evolve.engine.loop import YOUNG_COLLECTION, run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.records import best_first
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def settings(budget, population=6, k=3):
    return search_config(budget, population, k, 0, checkpoint_seconds=0)


def in_process(workers, evaluate=landscape):
    return InProcessTransport(evaluate, workers)


def test_budget_ids_population_and_members():
    state = SearchState.fresh(0, candidates=3)
    transport = in_process(3, landscape)
    assert run_search(state, transport, SPACE, settings(25))
    assert len(state.records) == 25 and state.pending == []
    assert sorted(r.id for r in state.records) == list(range(25))
    assert len(state.population) == 6
    best3 = sorted(state.records, key=best_first)[:3]
    assert state.hall_of_fame.ids == [r.id for r in best3]
    pop_scores = sorted(r.fitness for r in state.records if r.id in state.population)
    assert pop_scores == sorted(r.fitness for r in state.records)[-6:]  # steady state keeps the best


def test_children_come_from_the_population_after_the_random_start():
    state = SearchState.fresh(1)
    run_search(state, in_process(2, landscape), SPACE, settings(30))
    random_start = [r for r in state.records if r.parents == (-1, -1)]
    bred = [r for r in state.records if r.parents != (-1, -1)]
    assert 6 <= len(random_start) <= 8 and len(bred) >= 20
    ids = {r.id for r in state.records}
    assert all(p in ids for r in bred for p in r.parents)


def test_evolution_beats_its_random_start():
    means = []
    for seed in range(3):
        state = SearchState.fresh(seed)
        run_search(state, in_process(4, landscape), SPACE, settings(80, population=10))
        first = [r.fitness for r in state.records[:10]]
        last = [r.fitness for r in state.records[-20:]]
        means.append(statistics.mean(last) - statistics.mean(first))
    assert min(means) > 0


def test_same_seed_same_search():
    runs = []
    for _ in range(2):
        state = SearchState.fresh(5)
        run_search(state, in_process(3, landscape), SPACE, settings(15))
        runs.append([r.genome for r in state.records])
    assert runs[0] == runs[1]


def test_a_free_worker_gets_work_at_once_and_fast_workers_do_more():
    clock = VirtualClock()
    transport = SimulatedTransport({1: 1.0, 2: 2.0, 3: 5.0}, clock=clock)
    state = SearchState.fresh(0)
    run_search(state, transport, SPACE, settings(60), clock=clock)
    counts = {w: sum(1 for r in state.records if r.worker == w) for w in (1, 2, 3)}
    assert counts[1] > counts[2] > counts[3]
    # every send after the first wave happens at the very moment that worker's previous result arrived
    finished_at = {}
    for time_, worker, _ in sorted(transport.results):
        finished_at.setdefault(worker, []).append(time_)
    for time_, worker, _ in transport.sends[3:]:
        assert time_ in finished_at[worker]
    assert state.utilization > 0.9


def test_a_failing_evaluation_is_recorded_and_the_search_goes_on():
    def flaky(task):
        if task.id % 4 == 1:
            raise RuntimeError("CUDA out of memory")
        return landscape(task)

    state = SearchState.fresh(0)
    assert run_search(state, in_process(2, flaky), SPACE, settings(20))
    errors = [r for r in state.records if r.status == "error"]
    assert len(state.records) == 20 and len(errors) == 5
    assert all("CUDA out of memory" in r.message for r in errors)
    assert not set(state.population) & {r.id for r in errors}
    assert not set(state.hall_of_fame.ids) & {r.id for r in errors}


def test_stop_checkpoint_resume_continues_the_count(tmp_path):
    clock = VirtualClock()
    state = SearchState.fresh(0)
    stop_after = lambda: len(state.records) >= 7  # noqa: E731
    saved = []
    transport = SimulatedTransport({1: 1.0, 2: 1.5, 3: 2.5}, clock=clock)
    finished = run_search(state, transport, SPACE, settings(12), should_stop=stop_after, clock=clock, checkpoint=saved.append)
    assert not finished and len(state.records) == 7 and len(state.pending) == 2  # the other two workers were busy
    assert saved, "the loop wrote checkpoints while it ran"

    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    info = RunInfo(config_from_dict({"search": {"evaluations": 12}, "space": {}}), list(GENE_NAMES), data, VAL_Y, TEST_Y)
    path = str(tmp_path / "checkpoint.h5")
    checkpoint.save(path, state, info)
    resumed, _ = checkpoint.load(path)
    pending_ids = {p.id for p in resumed.pending}

    transport = SimulatedTransport({1: 1.0, 2: 1.0}, clock=clock)
    assert run_search(resumed, transport, SPACE, settings(12), clock=clock)
    assert len(resumed.records) == 12
    assert sorted(r.id for r in resumed.records) == list(range(12))
    assert pending_ids <= {r.id for r in resumed.records[7:]}  # the interrupted ones were redone first
    assert {tid for _, _, tid in transport.sends[:2]} == pending_ids


def test_nothing_to_do_when_the_budget_is_already_spent():
    state = SearchState.fresh(0)
    run_search(state, in_process(2, landscape), SPACE, settings(5))
    clock = VirtualClock()
    transport = SimulatedTransport({1: 1.0, 2: 1.0}, clock=clock)
    assert run_search(state, transport, SPACE, settings(3), clock=clock)
    assert len(state.records) == 5 and transport.sends == []


def test_the_hall_of_fame_never_shrinks_and_grows_on_resume():
    state = SearchState.fresh(0, candidates=4)
    run_search(state, in_process(2), SPACE, settings(10, k=4))
    assert len(state.hall_of_fame) == 4
    run_search(state, in_process(2), SPACE, settings(16, k=2))
    assert len(state.hall_of_fame) == 4  # asking for fewer candidates drops none of the kept networks
    ok = sorted((r for r in state.records if r.status == "ok"), key=best_first)
    assert state.hall_of_fame.ids == [r.id for r in ok[:4]]
    run_search(state, in_process(2), SPACE, settings(30, k=6))
    ok = sorted((r for r in state.records if r.status == "ok"), key=best_first)
    assert state.hall_of_fame.capacity == 6 and state.hall_of_fame.ids == [r.id for r in ok[:6]]


def test_tasks_carry_the_entry_threshold_and_only_candidates_come_back_whole():
    sent, whole = [], []

    def spy(task):
        ev = landscape(task)
        sent.append(task.entry_bar)
        whole.append(ev.has_payload)
        return ev

    state = SearchState.fresh(0, candidates=3)
    run_search(state, in_process(1, spy), SPACE, settings(60, k=3))
    assert sent[:3] == [(float("-inf"), float("inf"), -1)] * 3  # room in the hall: everything comes back whole
    assert all(b[0] >= a[0] for a, b in zip(sent, sent[1:]))  # a full hall's bar only rises
    # One worker, so the bar a task carried is still the bar when its result arrives: a result
    # came back whole exactly when it entered the hall (replayed here), and most did not.
    replay = HallOfFame(3)
    entered = [replay.qualifies(r.fitness, r.id, r.loss) and replay.offer(Member(r.id, r.fitness, {}, {}, None, None, loss=r.loss))
               for r in state.records]
    assert whole == entered and sum(whole) < len(whole) / 2
    best3 = sorted(state.records, key=lambda r: (-r.fitness, r.id))[:3]
    assert state.hall_of_fame.ids == [r.id for r in best3]  # yet the hall holds exactly the best three
    assert all(m.weights and m.val_pred.shape == (4, 2) for m in state.hall_of_fame)


def test_a_stale_bar_costs_an_offer_never_a_payload():
    """The first wave of a big job leaves with an open bar; only results that enter on arrival come whole."""
    offered = []

    def spy(task):
        ev = landscape(task)
        offered.append(ev.has_payload)
        return ev

    delivered = []
    clock = VirtualClock()
    transport = SimulatedTransport({w: 1.0 + (w % 7) / 10 for w in range(1, 41)}, evaluate=spy, clock=clock)
    real_receive = transport.receive

    def receive(timeout=None, wants=None):
        got = real_receive(timeout, wants)
        delivered.append(got[1].evaluation.has_payload)
        return got

    transport.receive = receive
    state = SearchState.fresh(0, candidates=3)
    run_search(state, transport, SPACE, settings(120, k=3), clock=clock)
    assert sum(offered[:40]) == 40  # every first-wave result clears the open bar it left with
    replay = HallOfFame(3)
    entered = {r.id for r in state.records if replay.offer(Member(r.id, r.fitness, {}, {}, None, None, loss=r.loss))}
    assert sum(delivered) == len(entered) < sum(offered)  # a payload crosses only for an entry
    assert state.hall_of_fame.ids == [r.id for r in sorted(state.records, key=best_first)[:3]]


@pytest.mark.parametrize("workers", [1, 5])
def test_more_workers_than_budget_is_fine(workers):
    state = SearchState.fresh(0)
    run_search(state, in_process(workers, landscape), SPACE, settings(3))
    assert len(state.records) == 3


def test_a_task_made_from_a_key_carries_the_settings_the_genome_decodes_to():
    import random

    from evolve.transport.protocol import Task

    rng = random.Random(0)
    for _ in range(50):
        genome = [rng.random() for _ in range(len(SPACE))]
        keyed = Task.from_key(7, SPACE, SPACE.key(genome), 11, (0.5, 3), {"time_limit": 1.0})
        built = Task.build(7, *SPACE.candidate(genome), 11, (0.5, 3), {"time_limit": 1.0})
        assert keyed == built and keyed.specs() == SPACE.candidate(genome)
        assert Task(**built.plain()) == built
    # the space a worker is sent (its config) decodes every key as the master's does
    assert parse_space(SPACE.to_config()) == SPACE


class _Polled(InProcessTransport):
    """Results that are all 'already here': ``poll`` takes them without waiting. Logs sends to ``events``."""

    def __init__(self, workers, events):
        super().__init__(landscape, workers)
        self.events, self.receives = events, 0

    def send(self, worker, task):
        self.events.append(("send", task.id))
        super().send(worker, task)

    def receive(self, timeout=None, wants=None):
        self.receives += 1
        return super().receive(timeout, wants)

    def poll(self, wants=None):
        return super().receive(0.0, wants)


class _Journal:
    def __init__(self, events):
        self.events = events

    def sent(self, individual, attempts):
        self.events.append(("sent", individual.id))

    def done(self, ident):
        self.events.append(("done", ident))

    def flush(self):
        self.events.append(("flush", None))


def test_results_already_waiting_are_taken_in_one_turn_and_every_task_is_journalled_before_it_goes_out():
    events = []
    transport = _Polled(4, events)
    state = SearchState.fresh(0)
    assert run_search(state, transport, SPACE, settings(40), journal=_Journal(events))
    assert sorted(r.id for r in state.records) == list(range(40))
    assert transport.receives <= 12  # 4 results a turn, not one (40 receives before poll)
    # replayed in order: a task goes out only after a flush that follows its entry
    noted, flushed = set(), set()
    for kind, ident in events:
        if kind == "sent":
            noted.add(ident)
        elif kind == "flush":
            flushed |= noted
        elif kind == "send":
            assert ident in flushed, f"task {ident} went out before its journal entry was written"
    assert sum(kind == "flush" for kind, _ in events) < 40


def test_the_search_loop_and_its_checkpoints_make_no_reference_cycles(tmp_path):
    """Young collections are rare while a search runs (YOUNG_COLLECTION), and what is alive at each
    checkpoint is frozen: cyclic garbage made per evaluation would pile up for the whole search."""
    import gc

    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}

    def garbage(budget: int, name: str) -> list:
        info = RunInfo(config_from_dict({"search": {"evaluations": budget}, "space": {}}), list(GENE_NAMES), data, VAL_Y, TEST_Y)
        path = str(tmp_path / name)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage, to count
        try:
            state = SearchState.fresh(0)
            run_search(state, SimulatedTransport({1: 1.0, 2: 1.5, 3: 2.5}), SPACE,
                       search_config(budget, 6, 8, 0, checkpoint_seconds=0, early_stopping=True),
                       checkpoint=lambda s: checkpoint.save(path, s, info))
            checkpoint.save(path, state, info)
            gc.collect()  # after the search: nothing is frozen any more
            return [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    garbage(10, "warm.h5")  # modules imported and caches filled on first use leave garbage once
    few, many = garbage(20, "few.h5"), garbage(120, "many.h5")
    assert len(many) <= len(few), f"{len(many) - len(few)} more objects of cyclic garbage for 100 more evaluations: {many[:20]}"


def test_a_checkpoint_due_ends_the_turn_so_checkpoint_seconds_0_saves_after_every_result():
    transport = _Polled(4, [])
    state = SearchState.fresh(0)
    saved = []
    assert run_search(state, transport, SPACE, settings(30), checkpoint=lambda s: saved.append(len(s.records)))
    assert saved == list(range(1, 30))  # one more result at each (the last checkpoint is the caller's)


def test_the_history_is_kept_from_the_garbage_collector_while_the_search_runs_and_given_back_after():
    import gc

    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    frozen, thresholds = [], []  # how many objects the collector leaves alone, and when it looks at the young ones
    state = SearchState.fresh(0)

    def seen(record, s):
        frozen.append(gc.get_freeze_count())
        thresholds.append(gc.get_threshold())

    run_search(state, in_process(2), SPACE, search_config(40, 6, 3, 0, checkpoint_seconds=0),
               checkpoint=lambda s: None, on_result=seen)
    assert len(frozen) == 40 and min(frozen) > 0
    assert frozen[-1] > frozen[0]  # what each checkpoint left alive joined the frozen history
    assert gc.get_freeze_count() == 0  # all of it back in the collector's reach
    # the young objects are collected less often while it runs (the loop makes no cycles), as before after
    assert set(thresholds) == {(max(before[0], YOUNG_COLLECTION), *before[1:])} and gc.get_threshold() == before
    gc.freeze()  # a caller's own frozen objects stay frozen
    try:
        run_search(SearchState.fresh(1), in_process(2), SPACE, settings(10))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
