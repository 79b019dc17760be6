import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.combine import combine, ensemble_prediction
from ensemble.problem import Classification, Regression, problem_from_dict


def random_probs(rng, k, n, c):
    logits = rng.normal(size=(k, n, c))
    e = np.exp(logits)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def random_weights(rng, k):
    counts = rng.integers(1, 4, size=k)
    return counts / counts.sum()


def H(p):
    return -(p * np.log(p)).sum(-1)


@given(st.integers(1, 6), st.integers(1, 20), st.integers(2, 5), st.integers(0, 10_000))
def test_classification_matches_independent_definitions(k, n, c, seed):
    rng = np.random.default_rng(seed)
    raw, w = random_probs(rng, k, n, c), random_weights(rng, k)  # float32, as networks give: sums off 1 by ~1e-7
    out = combine(Classification(c), list(raw), w, n)
    np.testing.assert_allclose(out["probabilities"], np.tensordot(w, raw.astype(np.float64), axes=1), atol=1e-12)
    probs = raw.astype(np.float64)
    probs /= probs.sum(-1, keepdims=True)  # the uncertainties are those of the members as distributions
    mean = np.tensordot(w, probs, axes=1)
    np.testing.assert_array_equal(out["label"], mean.argmax(-1))
    # total: entropy of the mean; aleatoric: weighted mean entropy; epistemic: weighted mean KL(member || mean)
    np.testing.assert_allclose(out["entropy"], H(mean), atol=1e-9)
    np.testing.assert_allclose(out["aleatoric"], np.tensordot(w, H(probs), axes=1), atol=1e-9)
    np.testing.assert_allclose(out["epistemic"], np.tensordot(w, (probs * np.log(probs / mean)).sum(-1), axes=1), atol=1e-9)
    np.testing.assert_allclose(out["disagreement"], np.tensordot(w, probs.argmax(-1) != mean.argmax(-1), axes=1), atol=1e-12)
    assert (out["entropy"] <= np.log(c) + 1e-9).all()


def test_agreeing_members_have_no_epistemic_uncertainty_and_no_disagreement():
    probs = random_probs(np.random.default_rng(0), 1, 10, 3)
    out = combine(Classification(3), [probs[0]] * 3, [0.5, 0.25, 0.25], 10)
    np.testing.assert_allclose(out["epistemic"], 0.0, atol=1e-12)
    np.testing.assert_array_equal(out["disagreement"], 0.0)


def test_averaging_fixes_a_member_mistake():
    y = np.array([0, 1])
    members = np.array([[[0.9, 0.1], [0.6, 0.4]], [[0.8, 0.2], [0.1, 0.9]], [[0.7, 0.3], [0.2, 0.8]]])
    problem = Classification(2)
    assert [problem.scores(m, y)["accuracy"] for m in members] == [0.5, 1.0, 1.0]
    out = combine(problem, list(members), [1 / 3] * 3, 2)
    assert problem.scores(ensemble_prediction(problem, out), y)["accuracy"] == 1.0
    np.testing.assert_allclose(out["disagreement"], [0.0, 1 / 3])


@pytest.mark.parametrize("target_shape", [(), (3,)])
def test_regression_mean_and_std_are_the_weighted_moments(target_shape):
    rng = np.random.default_rng(1)
    problem = Regression.from_targets(rng.normal(size=(50,) + target_shape))
    preds = [rng.normal(size=(7, problem.outputs)).astype(np.float32) for _ in range(4)]
    w = random_weights(rng, 4)
    out = combine(problem, preds, w, 7)
    stacked = np.stack(preds).astype(np.float64)
    mean = np.average(stacked, axis=0, weights=w)
    std = np.sqrt(np.average((stacked - mean) ** 2, axis=0, weights=w))
    assert out["mean"].shape == (7,) + target_shape and out["std"].shape == (7,) + target_shape
    np.testing.assert_allclose(out["mean"].reshape(7, -1), mean, atol=1e-12)
    np.testing.assert_allclose(out["std"].reshape(7, -1), std, atol=1e-12)


def ranks_allreduce(size):
    """An allreduce among ``size`` threads: each thread's array, summed, given back to all."""
    barrier, parts, lock = threading.Barrier(size), [], threading.Lock()

    def allreduce(array):
        with lock:
            parts.append(array.copy())
        barrier.wait()
        total = sum(parts[1:], parts[0].copy())
        barrier.wait()
        with lock:
            parts.clear()
        barrier.wait()
        return total

    return allreduce


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 7), st.integers(1, 4), st.booleans(), st.integers(0, 10_000))
def test_members_split_over_ranks_give_the_whole_ensemble_answer(k, ranks, regression, seed):
    """What predict does under MPI: each rank combines only its members; the reductions complete it."""
    rng = np.random.default_rng(seed)
    problem = Regression((2,), (0.0, 0.0), (1.0, 1.0)) if regression else Classification(4)
    preds = [rng.dirichlet(np.ones(problem.outputs), 9).astype(np.float32) for _ in range(k)]
    w = random_weights(rng, k)
    whole = combine(problem, preds, w, 9)
    reduce = ranks_allreduce(ranks)
    answers = [None] * ranks

    def rank(r):
        mine = list(range(r, k, ranks))  # round-robin, uneven when ranks does not divide k
        answers[r] = combine(problem, [preds[i] for i in mine], [w[i] for i in mine], 9, allreduce=reduce)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for answer in answers:
        assert answer.keys() == whole.keys()
        for name in whole:
            np.testing.assert_array_equal(answer[name], whole[name], err_msg=name)  # exactly: the sums are exact


def test_classification_scores_are_exact_fractions():
    problem = Classification(3)
    p = np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]], dtype=np.float32)
    s = problem.scores(p, np.array([1, 0, 0]))
    assert s["accuracy"] == 2 / 3
    assert s["loss"] == pytest.approx(-np.mean(np.log([0.5, 0.6, 0.1])))
    assert problem.fitness(s) == 2 / 3 and problem.selection_key(s) == (2 / 3, -s["loss"])


def test_regression_scores_rmse_and_r2():
    problem = Regression.from_targets(np.zeros((4, 2)))
    y = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]])
    pred = y + np.array([[0.5, 0.0], [-0.5, 0.0], [0.5, 0.0], [-0.5, 0.0]])
    s = problem.scores(pred, y)
    assert s["rmse"] == pytest.approx(np.sqrt(1.0 / 8))
    # output 0: 1 - 1/5; output 1 is constant and predicted perfectly: 1 (scikit-learn's convention)
    assert s["r2"] == pytest.approx((0.8 + 1.0) / 2)
    assert problem.fitness(s) == -s["rmse"]
    assert problem.scale == (1.0, 1.0)  # constant targets get scale 1, not a division by zero


def test_problems_round_trip_and_refuse_unknown_kinds():
    for problem in (Classification(7), Regression.from_targets(np.arange(12.0).reshape(6, 2))):
        assert problem_from_dict(problem.to_dict()) == problem
    with pytest.raises(ValueError, match="unknown problem kind"):
        problem_from_dict({"kind": "ranking"})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-2.0**31, 2.0**31, allow_nan=False), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_fixed_point_sums_are_exact_in_any_order(values, rnd):
    from ensemble.combine import from_fixed, to_fixed

    limbs = [to_fixed(np.array(v)) for v in values]
    for v, limb in zip(values, limbs):
        assert abs(from_fixed(limb) - v) <= 2.0**-72 + abs(v) * 2.0**-52  # the split loses nothing that matters
    shuffled = list(limbs)
    rnd.shuffle(shuffled)
    assert np.array_equal(sum(limbs, np.zeros(2, np.int64)), sum(shuffled, np.zeros(2, np.int64)))


@pytest.mark.parametrize("regression", [False, True])
def test_the_order_of_members_does_not_change_a_bit(regression):
    rng = np.random.default_rng(3)
    if regression:
        problem = Regression.from_targets(rng.normal(100.0, 30.0, size=(64, 3)))
        preds = [rng.normal(100.0, 30.0, size=(11, 3)).astype(np.float32) for _ in range(7)]
    else:
        problem = Classification(5)
        preds = list(random_probs(rng, 7, 11, 5))
    w = random_weights(rng, 7)
    whole = combine(problem, preds, w, 11)
    order = rng.permutation(7)
    again = combine(problem, [preds[i] for i in order], [w[i] for i in order], 11)
    for name in whole:
        np.testing.assert_array_equal(again[name], whole[name], err_msg=name)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10_000), st.booleans(), st.floats(1e-3, 1e6), st.floats(-1e6, 1e6))
def test_an_ensemble_of_one_network_is_that_network_exactly(seed, regression, spread, centre):
    rng = np.random.default_rng(seed)
    if regression:
        y = (centre + spread * rng.normal(size=(50, 2))).astype(np.float32)
        problem = Regression.from_targets(y)
        pred = (centre + spread * rng.normal(size=(9, 2))).astype(np.float32)
    else:
        problem = Classification(4)
        pred = random_probs(rng, 1, 9, 4)[0]
    alone = ensemble_prediction(problem, combine(problem, [pred], [1.0], 9))
    np.testing.assert_array_equal(alone, pred.astype(np.float64))
