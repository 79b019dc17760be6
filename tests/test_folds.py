"""Cross-validation (data.folds): a network is k fold tasks, combined into one record and one member.

The search runs in one process on a made-up fold-aware landscape (each fold's score depends on the genes
and the fold), so what the master does with the folds is checked exactly: the mean, the out-of-fold
predictions in row order, the bagged test predictions, a fold that fails, a resume that trains only the
folds it lacks, and the same generational search on any number of workers.
"""
import math

import numpy as np
import pytest
from fakes import VirtualClock, search_config

from ensemble.folds import assign_folds, bagged, combine_folds, split_fold_weights
from ensemble.problem import Classification
from ensemble.results import Evaluation
from evolve.engine.evaluations import FoldPlan
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

PROBLEM = Classification(3)
TRAIN_Y = np.array([0, 1, 2] * 7 + [0, 1])  # 23 rows
TEST_Y = np.array([2, 1, 0, 0, 1])
K = 5
FOLD = assign_folds(TRAIN_Y, K, 0, stratified=True)
SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def plan(k: int = K, refit: bool = False) -> FoldPlan:
    return FoldPlan.of(k, TRAIN_Y, TEST_Y, PROBLEM, seed=0, refit=refit)


def fold_landscape(task, faults=None) -> Evaluation:
    """One fold training of a made-up network: its predictions on the fold's rows lean to the true class by an
    amount the genes and the fold decide; ``faults`` (id -> fold -> status) makes a fold end otherwise."""
    held, k = task.fold
    rows = np.flatnonzero(assign_folds(TRAIN_Y, k, 0, True) == held)
    lr = task.training["learning_rate"]
    strength = 0.3 + 0.5 * task.network["width"] / 128 - 0.1 * abs(math.log10(lr) + 2.5) + 0.05 * held
    rng = np.random.default_rng([task.id, held])

    def predictions(y):
        p = rng.dirichlet(np.ones(3), len(y)) * (1 - strength)
        p[np.arange(len(y)), y] += strength
        return p.astype(np.float32)

    if held == k:  # the refit on every row: no validation rows, so no fitness
        test = predictions(TEST_Y)
        return Evaluation(status="ok", fitness=math.nan, metrics={f"test_{n}": v for n, v in PROBLEM.scores(test, TEST_Y).items()},
                          seconds=2.0, epochs_done=task.training["epochs"], val_pred=np.zeros((0, 3), np.float32), test_pred=test,
                          weights={"w": np.full(3, 99.0, np.float32), "b": np.array(task.id)})
    status = (faults or {}).get(task.id, {}).get(held)
    if status == "error":
        raise RuntimeError(f"made-up failure in fold {held}")
    if status in ("timeout", "stopped"):
        return Evaluation(status=status, fitness=0.1 if status == "stopped" else -math.inf, epochs_done=1, message=status, curve=[0.1])
    val, test = predictions(TRAIN_Y[rows]), predictions(TEST_Y)
    scores = {f"val_{n}": v for n, v in PROBLEM.scores(val, TRAIN_Y[rows]).items()}
    scores.update({f"test_{n}": v for n, v in PROBLEM.scores(test, TEST_Y).items()})
    scores["params"] = float(task.network["width"] * task.network["depth"])
    return Evaluation(status="ok", fitness=scores["val_accuracy"], metrics=scores, seconds=1.0, epochs_done=task.training["epochs"],
                      val_pred=val, test_pred=test, weights={"w": np.full(3, held, np.float32), "b": np.array(task.id)})


class Counting:
    """An evaluation function that keeps every (id, fold) it trained."""

    def __init__(self, faults=None):
        self.trained, self.faults = [], faults

    def __call__(self, task):
        self.trained.append((task.id, task.fold))
        return fold_landscape(task, self.faults)


def search(budget, workers=1, mode="async", state=None, evaluate=None, refit=False, **settings):
    state = state or SearchState.fresh(0, candidates=6)
    evaluate = evaluate or Counting()
    config = search_config(budget, population=4, candidates=6, mode=mode, checkpoint_seconds=0, **settings)
    if workers == 1:
        transport = InProcessTransport(evaluate, 1)
        finished = run_search(state, transport, SPACE, config, folds=plan(refit=refit), validation=(PROBLEM, TRAIN_Y))
    else:
        from fakes import SimulatedTransport

        clock = VirtualClock()
        transport = SimulatedTransport({w: 1.0 + 0.37 * (w % 3) + 0.11 * w for w in range(1, workers + 1)}, evaluate=evaluate, clock=clock)
        finished = run_search(state, transport, SPACE, config, folds=plan(refit=refit), validation=(PROBLEM, TRAIN_Y), clock=clock)
    return state, evaluate, finished


def test_folds_are_dealt_by_class_the_same_on_every_rank_and_cover_every_row():
    fold = assign_folds(TRAIN_Y, K, 3, stratified=True)
    assert np.array_equal(fold, assign_folds(TRAIN_Y.copy(), K, 3, stratified=True))
    assert sorted(np.bincount(fold)) == [4, 4, 5, 5, 5]
    for c in range(3):  # each class spread over the folds, give or take one row
        counts = np.bincount(fold[TRAIN_Y == c], minlength=K)
        assert counts.max() - counts.min() <= 1
    assert not np.array_equal(fold, assign_folds(TRAIN_Y, K, 4, stratified=True))
    with pytest.raises(ValueError, match="need at least 5 training rows"):
        assign_folds(TRAIN_Y[:4], K, 0, stratified=True)


def test_a_network_is_its_k_folds_combined():
    state, counted, finished = search(8)
    assert finished and len(state.records) == 8
    assert sorted(counted.trained) == sorted((i, (j, K)) for i in range(8) for j in range(K))  # every fold once
    for r in state.records:
        assert r.status == "ok"
    best = state.hall_of_fame.members[0]
    record = state.by_id()[best.id]
    parts = [fold_landscape(_task_of(record, j)) for j in range(K)]
    assert record.fitness == pytest.approx(np.mean([p.fitness for p in parts]))
    assert record.metrics["fold_std"] == pytest.approx(np.std([p.fitness for p in parts], ddof=1))
    oof = np.zeros((len(TRAIN_Y), 3), np.float32)
    for j, p in enumerate(parts):
        oof[FOLD == j] = p.val_pred
    assert np.array_equal(best.val_pred, oof)  # every training row, predicted by the fold model that did not see it
    assert np.array_equal(best.test_pred, bagged([p.test_pred for p in parts]))
    assert record.metrics["oof_accuracy"] == PROBLEM.scores(oof, TRAIN_Y)["accuracy"]
    assert best.loss == record.metrics["val_loss"] and len(split_fold_weights(best.weights)) == K
    assert [float(w["w"][0]) for w in split_fold_weights(best.weights)] == list(range(K))


def _task_of(record, held):
    from evolve.transport.protocol import Task

    return Task.from_key(record.id, SPACE, SPACE.key(record.genome), 0, fold=(held, K))


@pytest.mark.parametrize("workers", [1, 3])
def test_with_refit_a_member_is_the_network_trained_on_every_row_chosen_out_of_fold(workers):
    state, counted, finished = search(8, workers=workers, refit=True)
    assert finished and sorted(counted.trained) == sorted((i, (j, K)) for i in range(8) for j in range(K + 1))  # folds, then the refit
    best = state.hall_of_fame.members[0]
    record = state.by_id()[best.id]
    parts = [fold_landscape(_task_of(record, j)) for j in range(K + 1)]
    assert record.fitness == pytest.approx(np.mean([p.fitness for p in parts[:K]]))  # chosen out of fold all the same
    assert np.array_equal(best.test_pred, parts[K].test_pred) and set(best.weights) == {"w", "b"} and best.weights["w"][0] == 99.0
    assert record.metrics["test_accuracy"] == parts[K].metrics["test_accuracy"] and record.seconds == K + 2.0


@pytest.mark.parametrize("status", ["error", "timeout", "stopped"])
def test_a_fold_that_fails_ends_its_network_as_that_fold_ended_and_the_search_goes_on(status):
    counted = Counting(faults={2: {1: status}, 5: {0: status}})
    state, _, finished = search(10, evaluate=counted)
    assert finished and len(state.records) == 10
    records = state.by_id()
    for ident, fold in ((2, 1), (5, 0)):
        assert records[ident].status == status and records[ident].message.startswith(f"fold {fold + 1} of {K}")
        assert ident not in state.hall_of_fame.ids
        assert not [f for i, f in counted.trained if i == ident and f[0] > fold]  # in one process: nothing sent after it
    assert all(r.status == "ok" for i, r in records.items() if i not in (2, 5))


def test_a_fold_that_fails_while_others_are_out_lets_them_go_when_they_come_back():
    counted = Counting(faults={1: {0: "error"}})
    state, _, finished = search(12, workers=4, evaluate=counted)
    assert finished and len(state.records) == 12 and state.pending == [] and state.folding == {}
    assert state.by_id()[1].status == "error"


@pytest.mark.parametrize("mode", ["generational", "nsga2"])
def test_a_generational_search_with_folds_is_the_same_on_1_2_or_5_workers(mode):
    runs = [search(16, workers=w, mode=mode) for w in (1, 2, 5)]
    traces = [[(r.id, tuple(r.genome), r.fitness, r.metrics.get("fold_std")) for r in sorted(s.records, key=lambda r: r.id)] for s, _, _ in runs]
    assert traces[0] == traces[1] == traces[2]
    assert [m.id for m in runs[0][0].hall_of_fame] == [m.id for m in runs[2][0].hall_of_fame]
    if mode == "nsga2":
        assert runs[0][0].strategy["front"]


def test_a_resume_trains_only_the_folds_a_network_lacks(tmp_path):
    """Stopped with networks part-way through their folds: the checkpoint keeps the folds back, and the resumed
    search (on another number of workers) trains each (network, fold) exactly once in all."""
    first = Counting()
    state = SearchState.fresh(0, candidates=6)
    clock = VirtualClock()
    from fakes import SimulatedTransport

    transport = SimulatedTransport({w: 1.0 + 0.3 * w for w in (1, 2, 3)}, evaluate=first, clock=clock)
    config = search_config(10, population=4, candidates=6, checkpoint_seconds=0, drain_seconds=1.0)
    path = str(tmp_path / "checkpoint.h5")
    info = RunInfo(config=config, gene_names=list(SPACE.names), data={"sample_shape": [1, 8, 8], "problem": PROBLEM.to_dict(),
                   "x_dtype": "float32"}, val_y=TRAIN_Y, test_y=TEST_Y)
    stops = iter([0] * 14 + [1] * 1000)
    finished = run_search(state, transport, SPACE, config, folds=plan(), validation=(PROBLEM, TRAIN_Y), clock=clock,
                          should_stop=lambda: next(stops), checkpoint=lambda s: checkpoint.save(path, s, info))
    assert not finished
    checkpoint.save(path, state, info)
    assert state.folding, "the test needs a network stopped part-way through its folds"
    resumed, _ = checkpoint.load(path)
    assert resumed.folding.keys() == state.folding.keys()
    for ident, parts in state.folding.items():
        for j, ev in parts.items():
            kept = resumed.folding[ident][j]
            assert (kept.fitness, kept.metrics) == (ev.fitness, ev.metrics) and np.array_equal(kept.val_pred, ev.val_pred)
            assert kept.weights.keys() == ev.weights.keys()
    second = Counting()
    _, _, finished = search(10, workers=2, state=resumed, evaluate=second)
    assert finished and len(resumed.records) == 10 and resumed.pending == [] and resumed.folding == {}
    both = first.trained + second.trained
    assert sorted(both) == sorted(set(both)) and len(both) == 10 * K  # nothing trained twice, nothing missed
    uninterrupted, _, _ = search(10, workers=2)
    assert {r.id: r.fitness for r in resumed.records} == {r.id: r.fitness for r in uninterrupted.records}


def test_combining_keeps_the_folds_spread_and_scores_the_bagged_test_predictions():
    parts = [fold_landscape(_task_of_genome([0.5] * len(SPACE), 7, j)) for j in range(K)]
    ev = combine_folds(parts, FOLD, PROBLEM, TRAIN_Y, TEST_Y)
    assert ev.metrics["test_accuracy"] == PROBLEM.scores(bagged([p.test_pred for p in parts]), TEST_Y)["accuracy"]
    assert ev.seconds == K and ev.epochs_done == sum(p.epochs_done for p in parts)
    assert ev.metrics["params"] == parts[0].metrics["params"]


def _task_of_genome(genome, ident, held):
    from evolve.transport.protocol import Task

    return Task.from_key(ident, SPACE, SPACE.key(genome), 0, fold=(held, K))


def test_fold_weights_split_back_and_refuse_a_mix():
    parts = [{"a": np.zeros(2)}, {"a": np.ones(2)}]
    from ensemble.folds import fold_weights

    assert [p["a"].tolist() for p in split_fold_weights(fold_weights(parts))] == [[0, 0], [1, 1]]
    assert split_fold_weights({"a": np.zeros(1)}) == [{"a": np.zeros(1)}]
    with pytest.raises(ValueError, match="mix"):
        split_fold_weights({"fold0/a": np.zeros(1), "b": np.zeros(1)})
    with pytest.raises(ValueError, match="not 0..1"):
        split_fold_weights({"fold0/a": np.zeros(1), "fold2/a": np.zeros(1)})


def test_the_task_seed_of_a_fold_differs_from_the_networks_and_is_fixed():
    from evolve.engine.loop import task_seed

    assert task_seed(3, 10) == task_seed(3, 10, 0)  # a network that is not cross-validated keeps its seed
    seeds = {task_seed(3, 10, part) for part in range(6)}
    assert len(seeds) == 6 and task_seed(3, 10, 2) == task_seed(3, 10, 2)


def test_a_folded_member_predicts_in_evens_predict_and_export_what_the_master_recorded(tmp_path):
    """Real fold trainings (fold views of the data) made one member: load_ensemble rebuilds its fold networks and
    averages them to the master's bagged test predictions bit for bit, and its exported module does too."""
    import h5py
    import torch
    from conftest import blob_splits

    from ensemble.export import applied
    from ensemble.hall_of_fame import HallOfFame, Member
    from ensemble.predict import load_ensemble
    from ensemble.select import select_ensemble
    from ensemble.specs import NetworkSpec, TrainSpec
    from ensemble.store import StoredEnsemble, write_ensemble
    from ensemble.train import DeviceData, train_and_evaluate

    splits = blob_splits((2, 16), (60, 1, 30))
    arrays = {f"{s}/{k}": v for s, xy in splits.items() for k, v in zip("xy", xy)}
    arrays["val/x"], arrays["val/y"] = arrays["val/x"][:0], arrays["val/y"][:0]  # no val split: the folds decide
    problem = Classification(3)
    data = DeviceData.from_arrays(arrays, problem)
    fold = assign_folds(arrays["train/y"], 3, 0, stratified=True)
    spec, training = NetworkSpec("cnn", 2, 8), TrainSpec(1e-2, 16, 2)
    parts = [train_and_evaluate(spec, training, data.fold_view(fold, j), seed=j) for j in range(3)]
    assert all(p.status == "ok" and p.val_pred.shape == (np.count_nonzero(fold == j), 3) for j, p in enumerate(parts))
    refit = train_and_evaluate(spec, training, data.fold_view(fold, 3), seed=3)  # fold k of k: every row, none to validate on
    assert refit.status == "ok" and math.isnan(refit.fitness) and refit.val_pred.shape == (0, 3) and refit.has_payload
    assert np.array_equal(combine_folds(parts, fold, problem, arrays["train/y"], arrays["test/y"], refit).test_pred, refit.test_pred)
    ev = combine_folds(parts, fold, problem, arrays["train/y"], arrays["test/y"])
    hall = HallOfFame(2)
    hall.offer(Member(0, ev.fitness, vars(spec), vars(training), ev.val_pred, ev.test_pred, ev.weights, loss=ev.loss))
    selection = select_ensemble(list(hall), problem, arrays["train/y"], arrays["test/y"], "top_k", 1)
    path = str(tmp_path / "run.h5")
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group("ensemble"), StoredEnsemble(problem, (2, 16), "float32", arrays["train/y"], arrays["test/y"],
                                                                  hall, selection))
    ens = load_ensemble(path, device="cpu")
    (member,) = ens.members
    assert len(member.models) == 3
    x = torch.from_numpy(arrays["test/x"])
    assert np.array_equal(member.predictions(ens.head, x), ev.test_pred)
    assert np.array_equal(ens.predict(arrays["test/x"])["probabilities"], ev.test_pred.astype(np.float64))
    with torch.no_grad():
        assert np.array_equal(applied(member.models, problem)(x).numpy(), ev.test_pred)


# ------------------------------------------------------------------ the command line, end to end


def test_auto_folds_where_a_small_file_has_no_val_split_and_refusals_where_folds_cannot_be(tmp_path):
    from conftest import write_blobs

    from evolve.app.run.prepare import AUTO_FOLDS, AUTO_FOLDS_UNDER, resolve_folds
    from evolve.config.schema import load_config
    from evolve.errors import ConfigError

    small = write_blobs(tmp_path / "small.h5", (6,), n=(60, 20), splits=("train", "test"))
    own_val = write_blobs(tmp_path / "val.h5", (6,), n=(60, 20, 20))
    large = write_blobs(tmp_path / "large.h5", (6,), n=(AUTO_FOLDS_UNDER + 10, 20), splits=("train", "test"))

    def resolved(path, *sets):
        return resolve_folds(load_config(None, [f"data.path={path}", *sets])).data

    assert (resolved(small).folds, resolved(small).val_fraction) == (AUTO_FOLDS, 0.0)
    assert resolved(own_val).folds == 0 and resolved(large).folds == 0 and resolved(small, "data.folds=0").folds == 0
    assert resolved(large, "data.folds=3").folds == 3
    with pytest.raises(ConfigError, match="holds its own val split; set data.folds = 0"):
        resolved(own_val, "data.folds=5")
    with pytest.raises(ConfigError, match="not data.mode = \"shard\""):
        resolved(small, "data.folds=5", "data.mode=shard")
    tiny = write_blobs(tmp_path / "tiny.h5", (6,), n=(15, 5), splits=("train", "test"))
    with pytest.raises(ConfigError, match="needs at least 20 training rows; .* has 15"):
        resolved(tiny, "data.folds=20")
    assert resolved(tiny).folds == AUTO_FOLDS
    nine = write_blobs(tmp_path / "nine.h5", (6,), n=(9, 3), splits=("train", "test"))
    assert resolved(nine).folds == 0  # too few rows for auto's 5 folds of 2 rows or more
    assert resolved(tmp_path / "missing.h5").folds == 0  # the broadcast says what is wrong with the file


@pytest.mark.e2e
def test_a_cross_validated_run_reports_its_folds_and_predicts_what_it_reports(tmp_path):
    import json
    import subprocess

    from cli_fixture import SMALL, report
    from conftest import ROOT, evens_cmd, launch, write_blobs

    data = write_blobs(tmp_path / "data.h5", (1, 6, 6), n=(50, 30), splits=("train", "test"))
    cfg = tmp_path / "cv.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 5\n')
    run = str(tmp_path / "run")
    proc = launch(3, evens_cmd() + ["run", str(cfg), "--out", run, *SMALL], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert ("cross-validation: 5 folds of the 50 training rows; networks are scored, and the ensemble chosen, on their "
            "out-of-fold predictions over all 50") in proc.stderr
    assert "chosen on: 50 training rows, out of fold (5 folds)" in proc.stdout
    summary = report(run)
    assert summary["chosen_on"]["rows"] == 50 and summary["data"]["sizes"]["val"] == 0
    assert "fold_std" in summary["best"] and "oof_accuracy" in summary["best"]
    text = subprocess.run(evens_cmd() + ["report", run], capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    assert "best network #" in text and "oof " in text and "spread over folds" in text
    status = subprocess.run(evens_cmd() + ["status", run], capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    assert "cross-validation: 5 folds of 50 training rows" in status
    csv = subprocess.run(evens_cmd() + ["report", run, "--csv", "-"], capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    header, *rows = csv.splitlines()
    assert "fold_std" in header.split(",") and len(rows) == 5  # one row per network
    predicted = launch(2, evens_cmd() + ["predict", run, data, "--split", "test", "--out", str(tmp_path / "p.h5")], timeout=120, cwd=ROOT)
    assert predicted.returncode == 0, predicted.stderr
    assert f"accuracy {summary['ensemble']['test_accuracy']:.6g}, loss {summary['ensemble']['test_loss']:.6g}" in predicted.stdout
    exported = subprocess.run(evens_cmd() + ["export", run, "--format", "pt2", "--out", str(tmp_path / "ex")], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((tmp_path / "ex" / "manifest.json").read_text())
    assert all(m["folds"] == 5 for m in manifest["members"])


@pytest.mark.e2e
def test_a_files_own_small_val_split_is_named_at_start_up_with_the_error_an_accuracy_on_it_has(tmp_path, small_config):
    from cli_fixture import SMALL
    from conftest import ROOT, evens_cmd, launch

    proc = launch(2, evens_cmd() + ["run", small_config, "--out", str(tmp_path / "run"), "--set", "search.evaluations=1", *SMALL],
                  timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert ("validation: 30 rows (the file's own val split); an accuracy measured on them has a standard error of up to 0.091, "
            "so networks closer than that are told apart by chance") in proc.stderr
    assert "chosen on: 30 validation rows; an accuracy on them has a standard error of up to 0.091" in proc.stdout


@pytest.mark.parametrize("seed", range(20))
def test_the_open_networks_counters_agree_with_counting_them(seed):
    """Evaluations keeps its budget counts without scanning (the master at scale): after any sequence of opening,
    sending, skipping, failing and completing parts, they equal what counting the networks gives."""
    import random as stdlib_random

    from evolve.engine.evaluations import Evaluations
    from evolve.search.records import Pending

    rng = stdlib_random.Random(seed)
    ev = Evaluations(plan())
    out: list[tuple[int, tuple]] = []
    next_id = 0
    for _ in range(300):
        action = rng.random()
        if action < 0.15 or not ev.open:
            done = {j: fold_landscape(_task_of_genome([0.5] * len(SPACE), next_id, j)) for j in range(rng.randrange(3))}
            redo = rng.random() < 0.5
            ev.start(Pending(id=next_id, genome=[0.5] * len(SPACE)), (), done if redo else None, redo=redo)
            next_id += 1
        elif action < 0.55 and ev.queue:
            evaluation = rng.choice(list(ev.queue.values()))
            out.append((evaluation.individual.id, ev.take_part(evaluation)))
        elif out:
            ident, fold = out.pop(rng.randrange(len(out)))
            if rng.random() < 0.1:
                ev.skipped(ident, fold)
            else:
                status = "ok" if rng.random() < 0.9 else "error"
                part = fold_landscape(_task_of_genome([0.5] * len(SPACE), ident, fold[0])) if status == "ok" else \
                    Evaluation(status="error", fitness=-math.inf, message="x")
                ev.returned(ident, fold, part)
        assert all(not ev.open[i].out and not ev.open[i].done and ev.open[i].individual.operators.endswith("+redo") for i in ev.unstarted)
        begun = [e for e in ev.open.values() if e.individual.id not in ev.unstarted]
        assert ev.counted() == len(begun)
        assert ev.parts_left() == sum(len(e.unsent) for e in begun)
        assert ev.unsent == sum(len(e.unsent) for e in ev.open.values())
        assert set(ev.queue) == {i for i, e in ev.open.items() if e.unsent}
        assert all(e.out == sum(i == e.individual.id for i, _ in out) for e in ev.open.values())
