"""search.selection = "ensemble": individuals valued by what they add to the run's ensemble."""
import math

import numpy as np
import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, landscape, run_on, search_config, trace

from ensemble.contribution import EnsembleValue
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.problem import Classification
from ensemble.select import select_ensemble
from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.ga import Individual, admit_by_value
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))
N = 60


def predictions(right: np.ndarray, confidence: float = 0.7) -> np.ndarray:
    """Two-class probabilities: ``confidence`` on the true class (0) where ``right``, on the other elsewhere."""
    p = np.where(right[:, None], [confidence, 1 - confidence], [1 - confidence, confidence])
    return p.astype(np.float32)


def valuer(members: list[Member], size: int = 5) -> tuple[EnsembleValue, HallOfFame]:
    y = np.zeros(N, dtype=np.int64)
    problem = Classification(2)
    hall = HallOfFame(8, members)
    choose = lambda ms: select_ensemble(ms, problem, y, None, "greedy", size)  # noqa: E731
    return EnsembleValue(hall, problem, y, choose, size), hall


def test_a_network_wrong_elsewhere_is_worth_more_than_a_copy_of_the_ensemble():
    first = np.arange(N) >= 10  # wrong on samples 0-9
    other = np.arange(N) < 50  # as accurate, wrong on samples 50-59
    best = Member(0, 0.84, {}, {}, predictions(first), predictions(first))
    copy = Member(1, 0.83, {}, {}, predictions(first), predictions(first))
    diverse = Member(2, 0.83, {}, {}, predictions(other), predictions(other))
    value, hall = valuer([best, copy, diverse], size=1)  # the ensemble is the best network alone
    v_best, v_copy, v_diverse, v_absent = value([0, 1, 2, 99])
    assert v_diverse > v_copy == v_best  # averaging in the diverse one lowers the log-loss; a copy changes nothing
    assert v_absent == -math.inf  # not in the hall of fame: no predictions to value it by


def test_values_follow_the_hall_of_fame_as_it_changes():
    right = np.arange(N) >= 6
    value, hall = valuer([Member(0, 0.9, {}, {}, predictions(right), predictions(right))])
    before = value([0])[0]
    better = np.ones(N, dtype=bool)
    hall.offer(Member(1, 1.0, {}, {}, predictions(better, 0.9), predictions(better, 0.9)))
    after = value([0])[0]
    assert after != before  # the ensemble is now chosen from both; member 0 is valued against it


def test_steady_state_replacement_drops_the_lowest_valued():
    population = [Individual.evaluated([0.1], 0.9, i) for i in range(3)]
    values = {0: -0.5, 1: -0.2, 2: -0.9, 3: -0.3}
    admit_by_value(population, Individual.evaluated([0.2], 0.1, 3), 3, lambda ids: [values[i] for i in ids])
    assert sorted(ind.ident for ind in population) == [0, 1, 3]  # 2 left, though its fitness beats the newcomer's
    admit_by_value(population, Individual.evaluated([0.3], 0.99, 4), 3, lambda ids: [-1.0 if i == 4 else values[i] for i in ids])
    assert sorted(ind.ident for ind in population) == [0, 1, 3]  # the newcomer was worth least: not admitted


def run(workers: int, budget: int, mode: str, stop=None, state=None):
    state = state or SearchState.fresh(0, candidates=6)
    config = search_config(budget, 6, 6, 0, checkpoint_seconds=0, mode=mode, selection="ensemble")
    run_on(workers, state, SPACE, config, validation=(PROBLEM, VAL_Y), should_stop=stop or (lambda: 0))
    return state


def test_generational_ensemble_selection_is_the_same_with_1_2_or_5_workers():
    runs = [run(w, 36, "generational") for w in (1, 2, 5)]
    assert trace(runs[0]) == trace(runs[1]) == trace(runs[2])
    assert runs[0].strategy == runs[1].strategy
    plain = SearchState.fresh(0, candidates=6)
    run_search(plain, InProcessTransport(landscape, 1), SPACE, search_config(36, 6, 6, 0, checkpoint_seconds=0, mode="generational"))
    assert runs[0].strategy["population"] != plain.strategy["population"]  # valued otherwise, other survivors


def test_generational_resume_with_ensemble_selection_computes_what_an_unbroken_run_does(tmp_path):
    whole = run(1, 30, "generational")
    state = SearchState.fresh(0, candidates=6)
    run(2, 30, "generational", stop=lambda: len(state.records) >= 14, state=state)
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    config = config_from_dict({"search": {"evaluations": 30, "selection": "ensemble"}, "ensemble": {"candidates": 6}, "space": {}})
    checkpoint.save(path, state, RunInfo(config, list(GENE_NAMES), data, VAL_Y, TEST_Y))
    resumed, _ = checkpoint.load(path)
    run(3, 30, "generational", state=resumed)
    assert trace(resumed) == trace(whole)


def test_async_ensemble_selection_keeps_the_population_in_the_hall():
    state = run(3, 60, "async")
    assert len(state.records) == 60
    hall = set(state.hall_of_fame.ids)
    assert set(state.strategy["population"]) <= hall  # members without predictions are valued -inf and replaced first


def test_ensemble_selection_needs_the_validation_split_and_one_objective():
    state = SearchState.fresh(0, candidates=6)
    with pytest.raises(ValueError, match="validation"):
        run_search(state, InProcessTransport(landscape, 1), SPACE, search_config(6, 6, 6, 0, selection="ensemble"))
    with pytest.raises(ConfigError, match="nsga2"):
        config_from_dict({"search": {"mode": "nsga2", "selection": "ensemble"}})
    with pytest.raises(ConfigError, match="search.selection must be one of fitness, ensemble"):
        config_from_dict({"search": {"selection": "diverse"}})
