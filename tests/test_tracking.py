"""``[track] tensorboard``: each evaluation and the ensemble reach RUN_DIR/tensorboard/, read back as TensorBoard reads them."""
import copy
import dataclasses
import glob
import math
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, evens_cmd, launch, tiny_search
from fakes import PROBLEM, TEST_Y, VAL_Y, run_on, search_config

from evolve.app.run.tb_events import Events, masked_crc32c_function
from evolve.app.run.tracking import FOLDER, Untracked, check_trackers, open_tracker
from evolve.config.schema import TrackConfig
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.search.records import Record


def tracked(evaluations: int, **search):
    config = search_config(evaluations, population=4, candidates=4, checkpoint_seconds=0.0, **search)
    return dataclasses.replace(config, track=TrackConfig(tensorboard=True))


def search(run_dir, config, state=None, workers=3, saved=lambda state: None) -> SearchState:
    """A session of an in-process search (3 simulated workers) with the tracker on its callbacks, as evens run enters it;
    ``saved(state)`` after each checkpoint's save."""
    state = state or SearchState.fresh(0, config.ensemble.candidates)
    track = open_tracker(config, str(run_dir), config.space, PROBLEM, state, say=print)

    def save(state):  # as the run's checkpoint does: the ensemble chosen again from the hall of fame
        state.selection = config.choose_ensemble(state.hall_of_fame.members, PROBLEM, VAL_Y, TEST_Y)
        saved(state)

    try:
        run_on(workers, state, config.space, config, on_result=track.results(lambda record, state: None),
               checkpoint=track.checkpoints(save))
        save(state)
        track.ensemble(state, always=True)
    finally:
        track.close()
    return state


def read(folder):
    """A TensorBoard run as TensorBoard's own reader holds it, every event kept."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    run = accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    run.Reload()
    return run


def scalars(run, tag) -> dict:
    return {e.step: e.value for e in run.Scalars(tag)}


def test_each_evaluation_its_genes_and_curve_and_the_ensemble_reach_tensorboard(tmp_path):
    metadata = pytest.importorskip("tensorboard.plugins.hparams.metadata")
    config = tracked(12, early_stopping=True)  # early stopping: the workers send their curves
    state = search(tmp_path, config)
    runs = tmp_path / FOLDER
    found = read(runs / "search")
    ids, val = scalars(found, "evaluation/id"), scalars(found, "evaluation/val_accuracy")
    assert ids == {step: r.id for step, r in enumerate(state.records, 1)}  # step: evaluations recorded
    for step, r in enumerate(state.records, 1):
        assert val[step] == pytest.approx(r.metrics["val_accuracy"])
    best = max(r.fitness for r in state.records if r.status == "ok")
    assert max(scalars(found, "best/val_accuracy").items())[1] == pytest.approx(best)
    chosen = state.selection
    last = len(state.records)
    assert scalars(found, "ensemble/val_accuracy")[last] == pytest.approx(chosen.curve_val[chosen.picks - 1])
    assert scalars(found, "ensemble/test_accuracy")[last] == pytest.approx(chosen.curve_test[chosen.picks - 1])
    assert scalars(found, "ensemble/members")[last] == len(chosen.ids)
    table = found.Tensors("ensemble/table")[-1].tensor_proto.string_val[0].decode()
    assert all(f"| #{i} |" in table for i in chosen.ids)

    assert sorted(os.listdir(runs / "trials")) == sorted(f"{r.id:06d}" for r in state.records)
    curves = 0
    for r in state.records:
        trial = read(runs / "trials" / f"{r.id:06d}")
        start = metadata.parse_session_start_info_plugin_data(trial.PluginTagToContent("hparams")[metadata.SESSION_START_INFO_TAG])
        hparams = {k: v.string_value or v.number_value if v.WhichOneof("kind") != "bool_value" else v.bool_value
                   for k, v in start.hparams.items()}
        assert hparams == {"status": r.status, **config.space.decode(r.genome)}  # the active genes, decoded
        assert scalars(trial, "val_accuracy") == {r.epochs_done: pytest.approx(r.metrics["val_accuracy"])}
        if r.curve:
            curves += 1
            assert scalars(trial, "curve/val_accuracy") == {e: pytest.approx(f) for e, f in enumerate(r.curve, 1)}
    assert curves


def test_a_failed_evaluation_is_counted_and_its_trial_failed(tmp_path):
    metadata = pytest.importorskip("tensorboard.plugins.hparams.metadata")
    from tensorboard.plugins.hparams import api_pb2

    config = tracked(1)
    state = SearchState.fresh(0, 4)
    track = open_tracker(config, str(tmp_path), config.space, PROBLEM, state, say=print)
    failed = Record(id=0, genome=[0.5] * len(config.space), status="error", fitness=-math.inf, message="CUDA out of memory")
    state.records.append(failed)  # as the loop records it, then calls on_result
    track.results(lambda record, state: None)(failed, state)
    track.close()
    found = read(tmp_path / FOLDER / "search")
    assert scalars(found, "status/error") == {1: 1.0} and "evaluation/fitness" not in found.Tags()["scalars"]  # -inf is left out
    trial = read(tmp_path / FOLDER / "trials" / "000000")
    end = metadata.parse_session_end_info_plugin_data(trial.PluginTagToContent("hparams")[metadata.SESSION_END_INFO_TAG])
    assert end.status == api_pb2.STATUS_FAILURE


def test_a_resume_appends_to_the_runs_and_counts_on(tmp_path):
    pytest.importorskip("tensorboard")
    state = search(tmp_path, tracked(6))
    search(tmp_path, tracked(10), state)
    runs = tmp_path / FOLDER
    assert len(glob.glob(str(runs / "search" / "*tfevents*"))) == 2  # one file per session
    found = read(runs / "search")
    assert scalars(found, "evaluation/id") == {step: r.id for step, r in enumerate(state.records, 1)}
    assert len(os.listdir(runs / "trials")) == 10


def served(folder) -> tuple[list[str], dict] | None:
    """The runs and the search's scalars (tag -> [(step, value)]) as ``tensorboard --logdir`` shows them where tensorboard's
    data server is installed (its default loader then, RustBoard); None without it."""
    from tensorboard.context import RequestContext
    from tensorboard.data import provider, server_ingester
    from tensorboard.util import grpc_util

    try:
        binary = server_ingester.get_server_binary()
    except server_ingester.NoDataServerError:
        return None
    ingester = server_ingester.SubprocessServerDataIngester(binary, str(folder), reload_interval=0,
                                                            channel_creds_type=grpc_util.ChannelCredsType.LOCAL)
    ingester.start()
    try:
        context, deadline = RequestContext(), time.monotonic() + 60
        while True:  # it loads once, each run at once, after it has listed them
            found = ingester.data_provider.read_scalars(context, experiment_id="", plugin_name="scalars", downsample=10**6,
                                                        run_tag_filter=provider.RunTagFilter(runs=["search"]))
            if found.get("search", {}).get("evaluation/id") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        runs = sorted(run.run_name for run in ingester.data_provider.list_runs(context, experiment_id=""))
        return runs, {tag: [(d.step, d.value) for d in data] for tag, data in found.get("search", {}).items()}
    finally:
        ingester._stdin_handle.close()  # (the server ends when its stdin does)


def test_a_resume_after_a_kill_shows_each_evaluation_once(tmp_path):
    """SIGKILL between checkpoints: the session had written evaluations that the checkpoint it is resumed from does
    not hold. The resume goes on at the step after the checkpoint's count, and TensorBoard shows each step once, with
    the resumed session's values, and no trial of a lost evaluation: read as ``tensorboard --logdir`` reads (the
    multiplexer purging orphaned data, as with --load_fast=false; the data server where installed), and by one left
    running across the kill. A resume that lost nothing keeps everything."""
    multiplexer = pytest.importorskip("tensorboard.backend.event_processing.plugin_event_multiplexer")
    from tensorboard.util import tensor_util

    runs = tmp_path / FOLDER
    running = multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})  # a TensorBoard left running
    kept = []

    def checkpoint(state):  # the last checkpoint before the kill: the one saved with 7 recorded
        if state.recorded <= 7:
            kept[:] = [copy.deepcopy(state)]

    lost = search(tmp_path, tracked(11), saved=checkpoint)  # wrote 11, of which the checkpoint holds 7
    checkpointed = kept[0]
    assert (checkpointed.recorded, len(lost.records)) == (7, 11)
    (written,) = glob.glob(str(runs / "search" / "*tfevents*"))
    with open(written, "ab") as f:  # a series only the lost evaluations have (a failure's count), and the kill cut a record
        events = Events()
        f.write(events.scalars(11, time.time(), {"status/error": 1.0}) + events.scalars(12, time.time(), {"evaluation/id": 99.0})[:30])
    running.AddRunsFromDirectory(str(runs))
    running.Reload()

    def shown(accumulators) -> tuple[list[str], dict]:
        accumulators.AddRunsFromDirectory(str(runs))
        accumulators.Reload()
        series = {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in accumulators.Tensors("search", tag)]
                  for tag in accumulators.Runs()["search"]["tensors"]}
        return sorted(accumulators.Runs()), {tag: points for tag, points in series.items() if points}  # (a purged series: none)

    def assert_each_once(state, view) -> None:
        names, scalar = view
        steps = {step: r for step, r in enumerate(state.records, 1)}
        assert scalar["evaluation/id"] == [(step, r.id) for step, r in steps.items()]  # each step once, the resumed values
        assert scalar["status/ok"] == [(step, step) for step in steps]
        assert scalar["evaluation/val_accuracy"] == [(step, pytest.approx(r.metrics["val_accuracy"])) for step, r in steps.items()]
        assert "status/error" not in scalar
        for tag, points in scalar.items():
            assert [step for step, _ in points] == sorted({step for step, _ in points}) and points[-1][0] <= len(steps), tag
        assert names == ["search"] + [f"trials/{r.id:06d}" for r in sorted(state.records, key=lambda r: r.id)]  # no lost trial

    resumed = search(tmp_path, tracked(9), checkpointed, workers=2)  # (on 2 workers: another network at step 9)
    assert [r.id for r in resumed.records[7:]] != [r.id for r in lost.records[7:9]]
    assert_each_once(resumed, shown(multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})))
    assert_each_once(resumed, shown(running))  # what the running one held of the lost session is dropped (SessionLog START)
    rustboard = served(runs)
    if rustboard is not None:
        assert_each_once(resumed, rustboard)

    again = search(tmp_path, tracked(10), copy.deepcopy(resumed))  # a resume from a checkpoint that holds everything
    assert_each_once(again, shown(multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})))
    last = max(scalars(read(runs / "search"), "ensemble/members"))
    assert last == 10 and 9 in scalars(read(runs / "search"), "ensemble/members")  # the last session's ensemble is kept


def test_off_it_writes_nothing(tmp_path):
    config = dataclasses.replace(tracked(4), track=TrackConfig())
    state = SearchState.fresh(0, 4)
    track = open_tracker(config, str(tmp_path), config.space, PROBLEM, state, say=print)
    assert isinstance(track, Untracked)
    progress = []
    run_on(3, state, config.space, config, on_result=track.results(lambda r, s: progress.append(r)))
    track.close()
    assert len(progress) == 4 and os.listdir(tmp_path) == []


def test_without_tensorboard_the_check_says_so_in_one_line(monkeypatch):
    for name in [n for n in sys.modules if n == "tensorboard" or n.startswith("tensorboard.")] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # every import of tensorboard fails, as if not installed
    check_trackers(dataclasses.replace(tracked(4), track=TrackConfig()))  # off: nothing to check
    with pytest.raises(ConfigError) as error:
        check_trackers(tracked(4))
    assert "\n" not in str(error.value) and "pip install tensorboard" in str(error.value)


def test_the_checksum_is_tensorboards():
    masked_crc32c = pytest.importorskip("tensorboard.compat.tensorflow_stub.pywrap_tensorflow").masked_crc32c
    for data in (b"", b"x", bytes(range(256)) * 9):
        assert masked_crc32c_function()(data) == masked_crc32c(data)


@pytest.mark.e2e
def test_a_search_writes_its_runs_and_closes_them(tmp_path, small_config):
    pytest.importorskip("tensorboard")
    run_dir = str(tmp_path / "run")
    done = subprocess.run(evens_cmd() + ["run", small_config, "--out", run_dir, "--set", "search.evaluations=3", "--set",
                                         "track.tensorboard=true", *tiny_search("['mlp']")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    found = read(os.path.join(run_dir, FOLDER, "search"))
    assert sorted(scalars(found, "evaluation/id")) == [1, 2, 3] and 3 in scalars(found, "ensemble/val_accuracy")
    assert len(os.listdir(os.path.join(run_dir, FOLDER, "trials"))) == 3


@pytest.mark.mpi
@pytest.mark.e2e
def test_without_tensorboard_every_rank_ends_at_once_in_one_line(tmp_path, small_config):
    fake = tmp_path / "site" / "tensorboard"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'tensorboard'\")\n")
    run_dir = tmp_path / "run"
    done = launch(3, evens_cmd() + ["run", small_config, "--out", str(run_dir), "--set", "track.tensorboard=true"], timeout=60,
                  env={"PYTHONPATH": os.pathsep.join((str(fake.parent), ROOT))})
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("evens: error: track.tensorboard") and "pip install tensorboard" in said[0], done.stderr
    assert not run_dir.exists()  # refused before the run directory is claimed


def test_a_resume_that_read_no_history_carries_on_from_the_account_and_the_hall_of_fame(tmp_path):
    """Its best so far and status counts are the account's, and the ensemble's table shows its members' scores (val from
    their fitness, test from their test predictions): what a resume that read every record knows, without it."""
    from checkpoint_fixture import info

    from evolve.app.run.tracking import _carried_over
    from evolve.runfile import checkpoint
    from evolve.search.tally import Tally

    config = tracked(12)
    state = search(tmp_path / "first", config)
    state.tally = Tally.of(state.records, config.space)
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    checkpoint.save(path, state, dataclasses.replace(info(), config=dataclasses.replace(config, space=info().config.space)))
    remembered, _ = checkpoint.load(path, history=False)
    assert remembered.records == [] and remembered.dropped == 12
    best, statuses, members = _carried_over(remembered, PROBLEM, TEST_Y)
    best_then, statuses_then, _ = _carried_over(state, PROBLEM, TEST_Y)
    assert best == best_then and statuses == statuses_then
    assert set(members) == {m.id for m in state.hall_of_fame.members}
    for m in state.hall_of_fame.members:
        assert members[m.id][2] == {"val_accuracy": m.fitness, "test_accuracy": PROBLEM.scores(m.test_pred, TEST_Y)["accuracy"]}
    search(tmp_path / "first", tracked(16), remembered)  # and goes on, counting from there
    found = read(tmp_path / "first" / FOLDER / "search")
    assert max(scalars(found, "evaluation/id")) == 16 and scalars(found, "status/ok")[16] == sum(statuses.values()) + 4


def test_it_keeps_the_metrics_of_the_best_networks_only():
    from evolve.app.run.tracking import _Members

    members = _Members(4, {})
    for i in range(1000):
        members.add(i, (i * 7919) % 1000 / 1000, 0.5, {"val_accuracy": i})
    assert len(members._kept) <= 8
    best = sorted(range(1000), key=lambda i: -((i * 7919) % 1000))[:4]
    assert all(members.metrics(i) == {"val_accuracy": i} for i in best) and members.metrics(0) == {}
