import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ensemble.combine import accuracy, average_probabilities, top_k, uncertainty


def random_probs(rng, k, n, c):
    logits = rng.normal(size=(k, n, c))
    e = np.exp(logits)
    return e / e.sum(axis=-1, keepdims=True)


@given(st.integers(1, 6), st.integers(1, 20), st.integers(2, 5), st.integers(0, 10_000))
def test_uncertainty_matches_independent_definitions(k, n, c, seed):
    probs = random_probs(np.random.default_rng(seed), k, n, c)
    u = uncertainty(probs)
    mean = probs.mean(axis=0)
    # total: entropy of the mean; aleatoric: mean entropy; epistemic: mean KL(member || mean)
    np.testing.assert_allclose(u.total, -(mean * np.log(mean)).sum(-1), atol=1e-9)
    np.testing.assert_allclose(u.aleatoric, -(probs * np.log(probs)).sum(-1).mean(0), atol=1e-9)
    np.testing.assert_allclose(u.epistemic, (probs * np.log(probs / mean)).sum(-1).mean(0), atol=1e-9)
    assert (u.total <= np.log(c) + 1e-9).all()


def test_ensemble_is_the_mean_and_agreeing_members_have_no_epistemic_uncertainty():
    probs = random_probs(np.random.default_rng(0), 4, 10, 3)
    np.testing.assert_allclose(average_probabilities(probs), probs.mean(axis=0))
    same = np.repeat(probs[:1], 3, axis=0)
    np.testing.assert_allclose(uncertainty(same).epistemic, 0.0, atol=1e-12)


def test_averaging_fixes_a_member_mistake():
    y = np.array([0, 1])
    members = np.array([[[0.9, 0.1], [0.6, 0.4]], [[0.8, 0.2], [0.1, 0.9]], [[0.7, 0.3], [0.2, 0.8]]])
    assert [accuracy(m, y) for m in members] == [0.5, 1.0, 1.0]
    assert accuracy(average_probabilities(members), y) == 1.0


def test_top_k_best_first_and_stable():
    assert top_k([0.5, 0.9, 0.9, 0.1], 3) == [1, 2, 0]
    assert top_k([0.2], 5) == [0]
