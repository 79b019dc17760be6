import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.combine import combine, ensemble_prediction
from ensemble.hall_of_fame import OPEN, HallOfFame, Member, clears
from ensemble.problem import Classification, Regression
from ensemble.select import Selection, select_ensemble


def pool(seed, m=8, n=60, c=4, regression=False):
    """A hall of fame of noisy members: each is right on a random part of the samples."""
    rng = np.random.default_rng(seed)
    if regression:
        y = rng.normal(size=n).astype(np.float32)
        problem = Regression.from_targets(y)
        preds = [(y[:, None] + rng.normal(scale=rng.uniform(0.2, 1.5), size=(n, 1))).astype(np.float32) for _ in range(m)]
    else:
        y = rng.integers(0, c, size=n)
        problem = Classification(c)
        preds = []
        for _ in range(m):
            logits = rng.normal(size=(n, c))
            logits[np.arange(n), y] += rng.uniform(0.0, 2.5)
            p = np.exp(logits)
            preds.append((p / p.sum(1, keepdims=True)).astype(np.float32))
    members = [Member(i, problem.fitness(problem.scores(p, y)), {}, {}, p, p) for i, p in enumerate(preds)]
    hall = HallOfFame(m, members)
    return problem, y, hall.members


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 10), st.booleans())
def test_greedy_starts_from_the_best_and_never_lowers_the_validation_metric(seed, size, regression):
    problem, y, members = pool(seed, regression=regression)
    sel = select_ensemble(members, problem, y, y, "greedy", size)
    assert sel.path[0] == members[0].id  # the first pick is the best member
    assert len(sel.path) == size and 1 <= sel.picks <= size
    assert math.isclose(sum(sel.weights), 1.0, rel_tol=1e-12)
    chosen = combine(problem, [members[[m.id for m in members].index(i)].val_pred for i in sel.ids], sel.weights, len(y))
    ens = problem.scores(ensemble_prediction(problem, chosen), y)
    best = problem.scores(members[0].val_pred, y)
    assert problem.selection_key(ens) >= problem.selection_key(best)
    assert not problem.better(best[problem.metric], ens[problem.metric])
    assert sel.curve_val[0] == best[problem.metric]


def test_greedy_can_pick_a_member_twice_and_weights_are_pick_shares():
    problem, y, members = pool(3, m=4)
    sel = select_ensemble(members, problem, y, y, "greedy", 12)
    counts = {i: sel.path[: sel.picks].count(i) for i in sel.ids}
    assert sel.weights == [counts[i] / sel.picks for i in sel.ids]
    assert sel.picks > len(sel.ids)  # with 4 members and up to 12 picks, some member is picked again


def test_top_k_is_the_plain_mean_of_the_best_k():
    problem, y, members = pool(1)
    sel = select_ensemble(members, problem, y, y, "top_k", 3)
    assert sel.ids == [m.id for m in members[:3]] and sel.weights == [1 / 3] * 3 and sel.picks == 3
    by_hand = (members[0].val_pred.astype(np.float64) + members[1].val_pred + members[2].val_pred) / 3
    assert sel.curve_val[-1] == problem.scores(by_hand, y)["accuracy"]
    out = combine(problem, [m.val_pred for m in members[:3]], sel.weights, len(y))
    np.testing.assert_allclose(out["probabilities"], by_hand, atol=1e-12)


def test_asking_for_more_than_there_is():
    problem, y, members = pool(2, m=2)
    sel = select_ensemble(members, problem, y, y, "top_k", 5)
    assert sel.ids == [m.id for m in members] and len(sel.path) == 2 and sel.picks == 2
    assert select_ensemble([], problem, y, y, "greedy", 5) is None
    with pytest.raises(ValueError, match="unknown ensemble method"):
        select_ensemble(members, problem, y, y, "bagging", 5)


def test_selection_round_trips_through_a_dict():
    problem, y, members = pool(4)
    sel = select_ensemble(members, problem, y, y, "greedy", 6)
    assert Selection.from_dict(sel.to_dict()) == sel


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.1, 0.5, 0.5, 0.9, float("-inf")]), st.sampled_from([0.2, 0.3, 0.3, float("inf")]),
                          st.integers(0, 50)), max_size=40, unique_by=lambda t: t[2]),
       st.integers(1, 6))
def test_hall_of_fame_keeps_exactly_the_best_and_its_bar_agrees(entries, capacity):
    """Best first: higher fitness, then lower loss (ties on accuracy are common), then the earlier id."""
    hall = HallOfFame(capacity)
    offered = []
    for fitness, loss, ident in entries:
        bar = hall.entry_bar()
        member = Member(ident, fitness, {}, {}, None, None, loss=loss)
        assert clears(fitness, loss, ident, bar) == hall.qualifies(fitness, ident, loss)
        entered = hall.offer(member)
        assert entered == clears(fitness, loss, ident, bar)
        if bar != OPEN:  # the bar never falls: the worst member only gets better
            new = hall.entry_bar()
            assert (-new[0], new[1], new[2]) <= (-bar[0], bar[1], bar[2])
        if math.isfinite(fitness):
            offered.append((fitness, loss, ident))
    best = sorted(offered, key=lambda t: (-t[0], t[1], t[2]))[:capacity]
    assert [(m.fitness, m.loss, m.id) for m in hall] == best


def test_equal_fitness_is_settled_by_loss_in_the_hall_the_report_and_top_k():
    """One order everywhere: the hall of fame, best_first (the report) and top_k rank networks tied on
    accuracy by their validation log-loss, not by id."""
    from evolve.search.records import Record, best_first

    y = np.array([0, 1, 0, 1])
    losses = {0: 0.40, 1: 0.10, 2: 0.25}
    hall = HallOfFame(2)
    records = []
    for ident, loss in losses.items():
        p = np.tile([0.5, 0.5], (4, 1)).astype(np.float32)
        hall.offer(Member(ident, 1.0, {}, {}, p, p, loss=loss))
        records.append(Record(id=ident, genome=[0.0], status="ok", fitness=1.0, metrics={"val_loss": loss}))
    assert hall.ids == [1, 2]  # id 0 (the earliest, with the worst loss) is out
    assert [r.id for r in sorted(records, key=best_first)] == [1, 2, 0]
    sel = select_ensemble(list(hall), Classification(2), y, y, "top_k", 1)
    assert sel.ids == [1]


def weak_and_sure(n: int = 40):
    """Member 0 is right everywhere by a hair; member 1 is sure and right but on two samples. Averaging them
    costs those two samples' accuracy, but the average's log-loss is far lower. (problem, y, members, weak)."""
    y = np.zeros(n, dtype=np.int64)
    weak = np.tile([0.51, 0.49], (n, 1)).astype(np.float32)
    sure = np.tile([0.99, 0.01], (n, 1)).astype(np.float32)
    sure[:2] = [0.4, 0.6]
    members = HallOfFame(2, [Member(0, 1.0, {}, {}, weak, weak), Member(1, 0.95, {}, {}, sure, sure)]).members
    return Classification(2), y, members, weak


def test_the_loss_criterion_keeps_a_member_that_accuracy_would_drop_for_one_sample():
    """Selection by accuracy keeps the weak member alone (and its poor probabilities); by log-loss it
    averages both, far better calibrated."""
    problem, y, members, _ = weak_and_sure()
    by_accuracy = select_ensemble(members, problem, y, y, "greedy", 4)
    by_loss = select_ensemble(members, problem, y, y, "greedy", 4, criterion="loss")
    assert by_accuracy.ids == [0] and set(by_loss.ids) == {0, 1}
    assert combine_loss(problem, members, by_loss, y) < 0.5 * combine_loss(problem, members, by_accuracy, y)
    with pytest.raises(ValueError, match="unknown selection criterion"):
        select_ensemble(members, problem, y, y, "greedy", 3, criterion="brier")


def combine_loss(problem, members, sel, y):
    by_id = {m.id: m for m in members}
    pred = sum(w * by_id[i].val_pred.astype(np.float64) for i, w in zip(sel.ids, sel.weights))
    return problem.scores(pred, y)["loss"]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 8))
def test_bagged_selection_pools_every_bags_picks_and_is_fixed_by_its_seed(seed, size, bags):
    problem, y, members = pool(seed)
    sel = select_ensemble(members, problem, y, y, "greedy", size, bags=bags, seed=seed)
    again = select_ensemble(members, problem, y, y, "greedy", size, bags=bags, seed=seed)
    assert sel == again and sel.picks == len(sel.path) and bags <= sel.picks <= bags * size
    assert math.isclose(sum(sel.weights), 1.0) and set(sel.ids) <= {m.id for m in members}


def test_min_members_adds_a_second_network_that_costs_no_validation_loss():
    """Selection by accuracy keeps the weak member alone; the average's log-loss is far lower, so
    min_members = 2 takes both; a second network that would raise the loss is not added."""
    problem, y, members, weak = weak_and_sure()
    alone = select_ensemble(members, problem, y, y, "greedy", 4)
    two = select_ensemble(members, problem, y, y, "greedy", 4, min_members=2)
    assert alone.ids == [0] and two.ids[0] == 0 and set(two.ids) == {0, 1}
    assert set(select_ensemble(members, problem, y, y, "greedy", 4, bags=8, min_members=2).ids) == {0, 1}  # bagged too
    assert combine_loss(problem, members, two, y) < combine_loss(problem, members, alone, y)
    bad = np.tile([0.3, 0.7], (len(y), 1)).astype(np.float32)  # wrong everywhere: averaging it in raises the loss
    members = HallOfFame(2, [Member(0, 1.0, {}, {}, weak, weak), Member(2, 0.0, {}, {}, bad, bad)]).members
    assert select_ensemble(members, problem, y, y, "greedy", 4, min_members=2).ids == [0]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.integers(1, 4))
def test_min_members_never_raises_the_validation_loss(seed, size, min_members):
    problem, y, members = pool(seed)
    plain = select_ensemble(members, problem, y, y, "greedy", size)
    sel = select_ensemble(members, problem, y, y, "greedy", size, min_members=min_members)
    loss = lambda s: problem.selection_key(problem.scores(sum(w * {m.id: m for m in members}[i].val_pred.astype(np.float64)  # noqa: E731
                                                               for i, w in zip(s.ids, s.weights)), y), "loss")
    assert sel == plain or (len(sel.ids) >= min(min_members, size) and loss(sel) >= loss(plain))


def test_bags_of_a_small_hall_hold_every_member_so_bagging_is_plain_greedy():
    """A half of 6 members (3) would often leave out the good ones; a bag holds at least BAG_MIN (10) or all."""
    problem, y, members = pool(3, m=6)
    plain = select_ensemble(members, problem, y, y, "greedy", 4)
    bagged = select_ensemble(members, problem, y, y, "greedy", 4, bags=8, seed=1)
    assert bagged.picks == 8 * plain.picks and dict(zip(bagged.ids, bagged.weights)) == pytest.approx(dict(zip(plain.ids, plain.weights)))


def test_evens_select_chooses_again_by_log_loss_and_the_run_keeps_the_setting(tmp_path):
    """`evens select RUN --criterion loss --bags 8`: for calibrated probabilities after the fact
    (docs/benchmarks.md, calibration); the choice and the settings are stored, so a resume keeps them."""
    from test_checkpoint_report import finished_run

    from ensemble.problem import problem_from_dict
    from evolve.app.run.reselect import reselect
    from evolve.runfile import checkpoint

    state, info = finished_run(budget=20, k=3, candidates=8)
    folder = tmp_path / "run"
    folder.mkdir()
    checkpoint.save(str(folder / "checkpoint.h5"), state, info)
    summary = reselect(str(folder), criterion="loss", bags=8)
    loaded, linfo = checkpoint.load(str(folder / "checkpoint.h5"), weights=False)
    assert linfo.config.ensemble.criterion == "loss" and linfo.config.ensemble.bags == 8
    expected = select_ensemble(list(state.hall_of_fame), problem_from_dict(info.data["problem"]), info.val_y, info.test_y,
                               "greedy", linfo.config.ensemble.size, criterion="loss", bags=8, seed=info.config.search.seed)
    assert loaded.selection == expected and summary.ensemble.members == expected.ids
    with pytest.raises(Exception, match="criterion"):
        reselect(str(folder), criterion="nonsense")


def test_pooled_bags_keep_no_bag_that_leaves_the_score_unchanged_and_the_loss_worse():
    """Accuracy saturates on a few rows; a bag whose picks leave it unchanged while the log-loss gets worse is cut."""
    from ensemble.select import _scored

    problem, y = Classification(2), np.array([0, 1, 0, 1])
    sure = np.array([[0.95, 0.05], [0.05, 0.95]] * 2, dtype=np.float32)
    unsure = np.array([[0.6, 0.4], [0.4, 0.6]] * 2, dtype=np.float32)
    key = lambda scores: problem.selection_key(scores, "accuracy")  # noqa: E731
    assert _scored([0, 1], [sure, unsure], None, problem, y, None, key, keep_best=True, ends=[1, 2]).picks == 1
    assert _scored([1, 0], [sure, unsure], None, problem, y, None, key, keep_best=True, ends=[1, 2]).picks == 2  # the sure one helps
    assert _scored([0, 0], [sure, unsure], None, problem, y, None, key, keep_best=True, ends=[1, 2]).picks == 2  # equal: more bags


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10_000), st.integers(11, 32), st.sampled_from(["accuracy", "loss"]))  # (more than BAG_MIN: bags of halves)
def test_a_bagged_ensemble_scores_at_least_the_best_network_on_the_rows_that_decide(seed, n_members, criterion):
    rng = np.random.default_rng(seed)
    problem, y = Classification(3), rng.integers(0, 3, 30)
    preds = [rng.dirichlet(np.ones(3) * rng.uniform(0.3, 3), 30).astype(np.float32) for _ in range(n_members)]
    key = lambda p: problem.selection_key(problem.scores(p, y), criterion)  # noqa: E731
    members = sorted((Member(i, problem.fitness(problem.scores(p, y)), {}, {}, p, p) for i, p in enumerate(preds)),
                     key=lambda m: (-m.fitness, m.id))
    sel = select_ensemble(members, problem, y, None, "greedy", 5, criterion=criterion, bags=8, seed=seed)
    ensemble = sum(w * preds[i].astype(np.float64) for i, w in zip(sel.ids, sel.weights))
    got, best = key(ensemble), key(members[0].val_pred)
    assert got >= best or (np.isclose(got[0], best[0], rtol=0, atol=1e-9) and got[1] >= best[1] - 1e-9), (got, best)
