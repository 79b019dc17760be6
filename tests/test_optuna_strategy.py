"""Strategies as plug-ins: the registry and its capabilities, and an Optuna sampler as an evens strategy."""
import json
import math
import random

import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, run_on, search_config

from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search import registry
from evolve.search.ga import random_genome
from evolve.search.registry import Capabilities, Context, make_strategy
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

optuna = pytest.importorskip("optuna")  # installed by scripts/setup.sh (evens[optuna]); a user's install may lack it

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def test_the_registry_names_every_strategy_and_what_each_can_do():
    assert registry.names() == ("async", "generational", "nsga2", "optuna")
    caps = {name: registry.capabilities(name) for name in registry.names()}
    assert not caps["async"].barrier and caps["async"].order_matters and "model" in caps["async"].breeding
    assert caps["generational"].barrier and not caps["generational"].order_matters
    assert caps["nsga2"].objectives == 2 and caps["nsga2"].breeding == ("blind",)
    assert caps["optuna"].order_matters and not caps["optuna"].barrier and caps["optuna"].needs == "optuna"
    with pytest.raises(ValueError, match="unknown search mode 'bayes' \\(known: async, generational, nsga2, optuna\\)"):
        registry.capabilities("bayes")


def test_a_strategy_registered_from_elsewhere_is_a_search_mode(monkeypatch):
    """A new strategy is one class with a name, its capabilities and create(): the engine asks it, not its name."""
    monkeypatch.setattr(registry, "_STRATEGIES", dict(registry._loaded()))

    @registry.register
    class Everything:  # proposes random genomes, in the order asked
        name = mode = "random-test"
        capabilities = Capabilities(barrier=False, order_matters=False)

        @classmethod
        def create(cls, context):
            return cls(context)

        def __init__(self, context):
            self.rng, self.n = context.rng, len(context.space)

        def ask(self):
            from evolve.search.strategy import Proposal

            genome = random_genome(self.rng, self.n)
            return Proposal(genome, (-1, -1), "random", SPACE.key(genome))

        def tell(self, record):
            pass

        def to_state(self):
            return {"mode": self.mode}

    assert "random-test" in registry.names()
    state = SearchState.fresh(0, candidates=3)
    run_on(3, state, SPACE, search_config(12, 4, 3, mode="random-test", early_stopping=True))
    assert len(state.records) == 12 and all(r.curve == [] for r in state.records)  # order-free: no early stopping
    with pytest.raises(TypeError, match="a strategy needs"):
        registry.register(type("Nothing", (), {"name": "nothing"}))


def test_the_config_asks_the_strategy_what_it_supports():
    with pytest.raises(ConfigError, match='search.breeding = "model" does not work with search.mode "nsga2" \\(it supports blind\\)'):
        config_from_dict({"search": {"mode": "nsga2", "breeding": "model"}})
    with pytest.raises(ConfigError, match='search.selection = "ensemble" does not work with search.mode "optuna"'):
        config_from_dict({"search": {"mode": "optuna", "selection": "ensemble"}})
    with pytest.raises(ConfigError, match="search.sampler must be one of tpe, gp, cmaes, random"):
        config_from_dict({"search": {"mode": "optuna", "sampler": "grid"}})
    assert config_from_dict({"search": {"mode": "optuna", "sampler": "cmaes"}}).search.sampler == "cmaes"


def test_a_missing_optional_dependency_is_one_line_before_the_search_starts(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cmaes" else real(name, *a))
    with pytest.raises(ConfigError) as info:
        config_from_dict({"search": {"mode": "optuna", "sampler": "cmaes"}})
    assert str(info.value) == 'search.mode = "optuna" with search.sampler = "cmaes" needs cmaes: pip install "evens[optuna]"'


def test_encode_is_decode_inverted_on_every_gene():
    rng = random.Random(3)
    space = parse_space({}).for_data((2, 64), "classification")
    for _ in range(500):
        genome = random_genome(rng, len(space))
        again = space.key(space.encode(space.decode(genome)))
        for a, b in zip(space.key(genome), again):
            assert a == b if not isinstance(a, float) else math.isclose(a, b, rel_tol=1e-12)
    with pytest.raises(ValueError, match="gene family"):
        space.encode({"family": "transformer"})


def _optuna_search(budget, sampler="tpe", workers=3, seed=0, **kwargs):
    state = SearchState.fresh(seed, candidates=3)
    run_on(workers, state, SPACE, search_config(budget, 6, 3, seed, mode="optuna", sampler=sampler), **kwargs)
    return state


@pytest.mark.parametrize("sampler", ["tpe", "gp", "cmaes", "random"])
def test_each_sampler_searches_the_native_space_through_the_engine(sampler):
    state = _optuna_search(14 if sampler == "gp" else 24, sampler)
    assert sorted(r.id for r in state.records) == list(range(len(state.records))) and state.records
    assert all(r.operators == f"optuna-{sampler}" and r.parents == (-1, -1) for r in state.records)
    keys = [SPACE.key(r.genome) for r in state.records]
    assert len(set(keys)) == len(keys)  # no network trained twice
    for r in state.records:  # what the sampler chose is a network of the space, its conditional genes at their defaults when off
        decoded = SPACE.decode(r.genome)
        assert set(decoded) == {name for name, on in SPACE.active(r.genome).items() if on}
    assert json.loads(json.dumps(state.strategy)) == {"mode": "optuna", "sampler": sampler}  # nothing of Optuna's in the run file


def test_tpe_learns_the_landscape():
    """After its random start-up trials (10), TPE proposes better networks than random search does."""
    tpe = [r.fitness for r in sorted(_optuna_search(50, "tpe", workers=1).records, key=lambda r: r.id)]
    blind = [r.fitness for r in sorted(_optuna_search(50, "random", workers=1).records, key=lambda r: r.id)]
    assert sum(tpe[25:]) / 25 > sum(blind[25:]) / 25 + 0.02


def test_a_resume_rebuilds_the_study_from_the_records_and_the_pending(tmp_path):
    state = SearchState.fresh(0, candidates=3)
    clock = VirtualClock()
    stop = lambda: len(state.records) >= 11  # noqa: E731
    config = search_config(30, 6, 3, 0, mode="optuna", checkpoint_seconds=0)
    run_search(state, SimulatedTransport({1: 1.0, 2: 1.3, 3: 1.7}, clock=clock), SPACE, config, should_stop=stop, clock=clock)
    assert state.pending and len(state.records) == 11
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, RunInfo(config_from_dict({"search": {"evaluations": 30, "mode": "optuna"}, "space": {}}), list(GENE_NAMES),
                                         data, VAL_Y, TEST_Y))
    resumed, _ = checkpoint.load(path)
    rebuilt = make_strategy("optuna", Context(SPACE, config.search, resumed.rng, resumed.records, resumed.pending, resumed.strategy))
    trials = rebuilt.study.get_trials(deepcopy=False)
    assert len(trials) == 11 + len(resumed.pending)
    assert [t.state.name for t in trials[11:]] == ["RUNNING"] * len(resumed.pending)  # what was out is out again, not drawn afresh
    assert sorted(t.value for t in trials[:11]) == sorted(r.fitness for r in resumed.records)
    run_search(resumed, SimulatedTransport({1: 1.0, 2: 1.0}, clock=clock), SPACE, config, clock=clock)
    assert sorted(r.id for r in resumed.records) == list(range(30))
    keys = [SPACE.key(r.genome) for r in resumed.records]
    assert len(set(keys)) == len(keys)


def test_a_repeat_is_answered_from_its_record_not_trained_again():
    """A space of 4 networks: the sampler draws repeats, and only the 4 are trained; the rest of the budget is not spent twice."""
    tiny = parse_space({"family": ["mlp"], "depth": [1, 2], "width": [16, 32], "learning_rate": 1e-3, "batch_size": 32, "epochs": 2,
                        "optimizer": "adam", "weight_decay": 0.0, "activation": "relu", "dropout": 0.0}).for_sample_shape((1, 8, 8))
    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(landscape, 1), tiny, search_config(6, 4, 3, 0, mode="optuna", space=tiny))
    keys = [tiny.key(r.genome) for r in state.records]
    assert len(state.records) == 6 and len(set(keys)) == 4  # 2 repeats once every network is known (REDRAWS spent), not before
    assert len(set(keys[:4])) == 4


def test_with_promotion_each_network_is_one_trial_told_its_first_stage(tmp_path):
    state = SearchState.fresh(0, candidates=3)
    config = search_config(20, 6, 3, 0, mode="optuna", promotion=True, checkpoint_seconds=0)
    from fakes import landscape as whole

    def staged(task):  # the landscape, paused at a rung when asked (a lower score short of the whole training)
        ev = whole(task)
        if task.watch.get("pause_after"):
            ev.status, ev.fitness = "paused", ev.fitness * 0.9
            ev.val_pred = ev.test_pred = ev.weights = None
        return ev

    run_search(state, InProcessTransport(staged, 1), SPACE, config)
    first = [r for r in state.records if r.network < 0]
    assert len(first) == 20 and len(state.records) > 20
    rebuilt = make_strategy("optuna", Context(SPACE, config.search, state.rng, state.records, state.pending, state.strategy))
    trials = rebuilt.study.get_trials(deepcopy=False)
    assert len(trials) == 20 and all(t.state.name == "COMPLETE" for t in trials)  # not failed: a paused first stage has a fitness
    assert sorted(t.value for t in trials) == sorted(r.fitness for r in first)
