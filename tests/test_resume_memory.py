"""A resume that reads the state file and not the history (issue 34, evolve.engine.memory): it carries on exactly as
a resume that reads every record, and falls back to the history where some part of the search needs it."""
import json
import os
from dataclasses import replace
import time

import numpy as np
import pytest
from checkpoint_fixture import SPACE, info
from ensemble.results import failed_evaluation
from fakes import landscape, search_config

from evolve.engine import memory
from evolve.engine.loop import run_search, uses_median_rule
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.version import open_run
from evolve.search.early_stop import MedianRule
from evolve.transport.protocol import InProcessTransport

KEYS = lambda records: [(r.id, tuple(r.genome), r.status, r.fitness, r.epochs_done, r.operators, r.parents, r.rung, r.network)  # noqa: E731
                         for r in records]


def flaky(task):
    """The landscape, but one network in five fails (with a message naming it) and one in seven diverges."""
    if task.id % 5 == 2:
        return failed_evaluation(f"RuntimeError: network {task.id} fell over", "error")
    if task.id % 7 == 3:
        return failed_evaluation(f"loss nan at epoch 1 of network {task.id}", "diverged")
    return landscape(task)


def staged(task):
    """The flaky landscape, paused at a rung when successive halving asks: a share of the whole training's score."""
    ev = flaky(task)
    pause = task.watch.get("pause_after")
    if pause and ev.status == "ok":
        ev.status, ev.fitness, ev.epochs_done = "paused", ev.fitness * pause / task.training["epochs"], pause
        ev.val_pred = ev.test_pred = ev.weights = None
    return ev


def first_session(path, config, work=landscape):
    """A search to ``config``'s budget that checkpoints every 5 results and lets go of what each committed, as evens run does."""
    state = SearchState.fresh(0, candidates=3)
    run = replace(info(), config=replace(config, space=info().config.space))

    def save(s):
        checkpoint.save(path, s, run)
        s.let_go()

    run_search(state, InProcessTransport(work, 2), SPACE, config, checkpoint=save, clock=lambda: float(state.recorded))
    save(state)
    return state


def carry_on(path, config, history, work=landscape):
    state, _ = checkpoint.load(path, history=history)
    run_search(state, InProcessTransport(work, 2), SPACE, config)
    return state


@pytest.mark.parametrize("settings", [dict(early_stopping=True, early_stopping_warmup=1), dict(early_stopping=False),
                                      dict(promotion=True, early_stopping=False), dict(promotion=True, eta=2, min_budget=0.25, early_stopping=False),
                                      dict(breeding="model", brood=4, early_stopping=False),
                                      dict(breeding="model", brood=4, promotion=True, early_stopping=False),
                                      dict(mode="generational"), dict(mode="generational", promotion=True, breeding="model", brood=4),
                                      dict(mode="nsga2"), dict(mode="nsga2", promotion=True)])
def test_a_resume_from_the_state_file_alone_carries_on_as_one_that_read_every_record(tmp_path, settings):
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first = search_config(40, 6, 3, 0, checkpoint_seconds=5, **settings)
    work = staged if settings.get("promotion") else landscape
    first_session(path, first, work)
    state, _ = checkpoint.load(path, history=False)
    assert state.records == [] and state.dropped >= 40 and memory.resumable(state.memory, first.search, uses_median_rule(first.search))
    assert ("median.0.kept" in state.memory) == settings.get("early_stopping", False)
    assert ("halving.paused" in state.memory) == settings.get("promotion", False)
    assert ("strategy.surrogate.learned" in state.memory) == (settings.get("breeding") == "model")
    more = search_config(90, 6, 3, 0, **settings)
    remembered, whole = carry_on(path, more, False, work), carry_on(path, more, True, work)
    assert remembered.recorded == whole.recorded
    assert KEYS(remembered.records) == KEYS(whole.records[-len(remembered.records):])  # the same networks, proposed and judged alike
    if settings.get("promotion"):  # with networks paused at rungs the first session filled, and promotions after
        assert len(state.memory["halving.paused"])
        assert len(state.memory["halving.rung0.keys"]) >= 40 or settings.get("mode")  # (a barrier's strategy promotes, not the table)
        assert any(r.network >= 0 for r in remembered.records)
    if settings.get("early_stopping"):  # the rule's bars, carried over, are those the history gives
        everything, _ = checkpoint.load(path)
        restored, rebuilt = MedianRule.restored(memory.part(state.memory, "median")), MedianRule(everything.records)
        assert all(np.array_equal(restored.bars(e), rebuilt.bars(e), equal_nan=True) for e in range(1, 13))
        assert any(np.isfinite(restored.bars(12)))
    assert remembered.hall_of_fame.ids == whole.hall_of_fame.ids


def test_settings_that_build_other_parts_resume_from_the_history(tmp_path):
    """The memory says what it was made under; a resume that turns the median rule on, or breeds by model, reads the
    history (and the search refuses a state that has neither)."""
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    config = search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False)
    first_session(path, config)
    state, _ = checkpoint.load(path, history=False)
    for changed in (search_config(30, 6, 3, 0, early_stopping=True), search_config(30, 6, 3, 0, early_stopping=False, breeding="model")):
        assert not memory.resumable(state.memory, changed.search, uses_median_rule(changed.search))
        with pytest.raises(ValueError, match="holds no history"):
            run_search(checkpoint.load(path, history=False)[0], InProcessTransport(landscape, 2), SPACE, changed)


@pytest.mark.parametrize("settings", [dict(mode="optuna")])
def test_a_search_that_needs_its_history_keeps_no_memory(tmp_path, settings):
    """Optuna's samplers are rebuilt from every trial: its checkpoints hold no memory, so its resumes read every record."""
    pytest.importorskip("optuna")
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False, **settings))
    assert checkpoint.load(path, history=False)[0].memory == {}


def test_the_memory_is_small_and_its_hashes_are_every_network_proposed(tmp_path):
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(60, 6, 3, 0, checkpoint_seconds=5, early_stopping=True, early_stopping_warmup=1))
    state, _ = checkpoint.load(path, history=False)
    everything, _ = checkpoint.load(path)
    seen = state.memory["strategy.seen"]
    assert seen.dtype == np.int64 and np.all(np.diff(seen) > 0)
    assert set(seen.tolist()) == {SPACE.key_hash(SPACE.key(r.genome)) for r in everything.records} | {
        SPACE.key_hash(SPACE.key(p.genome)) for p in everything.pending}
    assert sum(np.asarray(a).nbytes for a in state.memory.values()) < 100 * 60 + 20_000


@pytest.mark.parametrize("settings", [dict(early_stopping=True, early_stopping_warmup=1), dict(promotion=True, early_stopping=False)])
def test_the_account_the_master_keeps_is_the_one_the_history_gives(tmp_path, settings):
    """The tally written into every checkpoint (counts, the best record, early stopping's and promotion's figures, the
    networks of each recent second) is what summarizing the whole history gives, through resumes as well."""
    from evolve.app.presentation.report import summarize, tally_of

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(30, 6, 3, 0, checkpoint_seconds=5, **settings))
    state, run = checkpoint.load(path, history=False)
    assert state.memory  # (promotion too carries on from the state file alone)
    run_search(state, InProcessTransport(landscape, 2), SPACE, search_config(45, 6, 3, 0, **settings))
    checkpoint.save(path, state, run)
    everything, run = checkpoint.load(path)
    assert len(everything.records) == 45 + len([r for r in everything.records if r.network >= 0])
    kept = checkpoint.load(path, history=False)[0].tally
    assert kept.to_state() == tally_of(everything.records, run).to_state() and kept.best.id == tally_of(everything.records, run).best.id
    assert summarize(everything, run, tally=kept) == summarize(everything, run)


def test_status_reads_the_state_file_alone(tmp_path, monkeypatch):
    """evens status at any size of history: it reads no segment."""
    from evolve.app.commands.status import status
    from evolve.runfile import segments

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(30, 6, 3, 0, checkpoint_seconds=5, early_stopping=True, early_stopping_warmup=1))
    expected = status(str(tmp_path / "run"))

    def no_segments(*args):
        raise AssertionError("status read a segment")

    monkeypatch.setattr(segments, "snapshot", no_segments)
    monkeypatch.setattr(checkpoint, "snapshot", no_segments)
    got = status(str(tmp_path / "run"), now=time.time())
    assert got["evaluations"] == 30 and got["best"] == expected["best"] and got["failures"] == expected["failures"]


@pytest.mark.parametrize("k", [1, 3, 100])
def test_the_report_streams_the_history_and_shows_what_reading_every_record_shows(tmp_path, monkeypatch, k):
    """evens report ranks the networks and counts the failures from a few columns, a slice of rows at a time, and reads
    whole records only for the rows it shows: the same tables as from every record, across many segments."""
    from evolve.app.presentation import report as reporting
    from evolve.runfile import history

    monkeypatch.setattr(history, "ROWS", 7)  # slices that cut the segments anywhere
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(60, 6, 3, 0, checkpoint_seconds=5, early_stopping=True, early_stopping_warmup=1), flaky)
    everything, run = checkpoint.load(path)
    assert len(checkpoint.listing(path)) > 1 and any(r.status != "ok" for r in everything.records)
    state, _ = checkpoint.load(path, history=False)
    with open_run(path) as opened:
        top, failures = reporting.streamed_top_and_failures(opened.history, state, run, k)
    assert top == reporting.top_networks(everything, run.space(), k)
    assert failures == reporting.failures_by_kind(everything) and set(failures) >= {"error", "diverged"}
    text = reporting.report(str(tmp_path / "run"), top=k)
    assert f"top {min(k, sum(r.status == 'ok' for r in everything.records))} networks" in text


def test_a_damaged_segment_is_a_one_line_error_of_the_report(tmp_path):
    from evolve.app.presentation import report as reporting
    from evolve.errors import RunDirError

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False))
    segment = os.path.join(checkpoint.segments_folder(path), checkpoint.listing(path)[0].name)
    with open(segment, "r+b") as f:
        f.seek(os.path.getsize(segment) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(RunDirError, match="does not match its checksum"):
        reporting.report(str(tmp_path / "run"))


def test_the_csv_streams_the_history_and_holds_what_every_record_gives(tmp_path, monkeypatch, capsys):
    """evens report --csv writes the rows a slice of the history at a time (slices cutting segments anywhere here) and
    reads no whole history: the same rows as the CSV of every record in memory."""
    from evolve.app.presentation import report as reporting
    from evolve.app.presentation.csv_table import to_csv
    from evolve.runfile import history, segments

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(60, 6, 3, 0, checkpoint_seconds=5, early_stopping=True, early_stopping_warmup=1), flaky)
    everything, run = checkpoint.load(path)
    assert len(checkpoint.listing(path)) > 1
    expected = to_csv(everything, run.space())

    def no_snapshot(*args):
        raise AssertionError("the whole history was read")

    monkeypatch.setattr(segments, "snapshot", no_snapshot)
    monkeypatch.setattr(checkpoint, "snapshot", no_snapshot)
    monkeypatch.setattr(history, "ROWS", 12)  # records() takes a quarter: 3 rows a slice
    assert reporting.report(str(tmp_path / "run"), csv_path="-") is None
    assert capsys.readouterr().out == expected
    out = tmp_path / "runs.csv"
    assert "wrote" in reporting.report(str(tmp_path / "run"), csv_path=str(out)) and out.read_text() == expected
    assert expected.count("\n") == 61 and "RuntimeError: network" in expected


def test_a_damaged_segment_leaves_no_half_written_csv(tmp_path):
    from evolve.app.presentation.csv_table import write_csv
    from evolve.errors import RunDirError

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    first_session(path, search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False))
    segment = os.path.join(checkpoint.segments_folder(path), checkpoint.listing(path)[-1].name)
    with open(segment, "r+b") as f:
        f.seek(os.path.getsize(segment) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(RunDirError, match="checksum|damaged"):
        with open_run(path) as opened:
            write_csv(str(folder / "runs.csv"), path, checkpoint.load(path, history=False)[0], info(), opened.history)
    assert os.listdir(folder) == []


def test_select_reads_no_history_and_keeps_what_a_resume_needs(tmp_path, monkeypatch):
    """evens select chooses from the hall of fame and summarises from the run's account: no segment read; the records,
    the account and the master's memory stay as they were, and the summary is what every record gives."""
    from evolve.app.presentation.report import summarize
    from evolve.app.run.reselect import reselect
    from evolve.runfile import segments

    folder = tmp_path / "run"
    path = str(folder / "checkpoint.h5")
    os.makedirs(folder)
    first_session(path, search_config(60, 6, 3, 0, checkpoint_seconds=5, early_stopping=True, early_stopping_warmup=1), flaky)
    before, _ = checkpoint.load(path)

    def no_snapshot(*args):
        raise AssertionError("the whole history was read")

    with monkeypatch.context() as m:
        m.setattr(segments, "snapshot", no_snapshot)
        m.setattr(checkpoint, "snapshot", no_snapshot)
        summary = reselect(str(folder), size=2)
    after, run = checkpoint.load(path)
    assert KEYS(after.records) == KEYS(before.records) and after.tally.to_state() == before.tally.to_state()
    assert after.memory.keys() == before.memory.keys() and all(np.array_equal(after.memory[k], before.memory[k]) for k in after.memory)
    assert run.config.ensemble.size == 2 and summary == summarize(after, run, str(folder))
    assert memory.resumable(after.memory, run.config.search, uses_median_rule(run.config.search))  # a resume still reads no history


def test_a_pareto_front_is_read_from_its_members_rows_only(tmp_path, monkeypatch):
    """NSGA-II's report and select show the Pareto front from the state file and its members' rows (found by a scan of
    the ids, a slice at a time), never the whole history: the same front as from every record."""
    from evolve.app.presentation import report as reporting
    from evolve.app.run.reselect import reselect
    from evolve.runfile import history, segments

    monkeypatch.setattr(history, "ROWS", 7)  # slices that cut the segments anywhere
    folder = tmp_path / "run"
    path = str(folder / "checkpoint.h5")
    os.makedirs(folder)
    first_session(path, search_config(40, 6, 3, 0, checkpoint_seconds=5, mode="nsga2"))
    everything, run = checkpoint.load(path)
    assert len(everything.strategy["front"]) > 1
    expected = reporting.summarize(everything, run, str(folder)).to_dict()["pareto"]

    def no_snapshot(*args):
        raise AssertionError("the whole history was read")

    with monkeypatch.context() as m:
        m.setattr(segments, "snapshot", no_snapshot)
        m.setattr(checkpoint, "snapshot", no_snapshot)
        assert reporting.report(str(folder), as_json=True) and json.loads(reporting.report(str(folder), as_json=True))["pareto"] == expected
        assert reselect(str(folder), size=2).to_dict()["pareto"] == expected
