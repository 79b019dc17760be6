import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.specs import families_for
from evolve.config import apply_overrides, config_from_dict, load_config, parse_value
from evolve.errors import ConfigError
from evolve.space import DEFAULT_SPACE, GENE_NAMES, Choice, Range, parse_space

unit = st.floats(0.0, 1.0)


@given(unit)
def test_log_range_stays_in_bounds_and_is_log_uniform(u):
    gene = Range(1e-4, 1e-1, log=True)
    value = gene.decode(u)
    assert 1e-4 * (1 - 1e-9) <= value <= 1e-1 * (1 + 1e-9)
    assert math.isclose(math.log10(value), -4 + 3 * u, abs_tol=1e-9)


@given(unit)
def test_integer_range_hits_every_value_evenly(u):
    gene = Range(2, 5, integer=True)
    assert gene.decode(u) in (2, 3, 4, 5)


def test_integer_range_edges():
    gene = Range(2, 5, integer=True)
    assert [gene.decode(u) for u in (0.0, 0.249, 0.25, 0.5, 0.75, 1.0)] == [2, 2, 3, 4, 5, 5]
    assert Choice(("a", "b")).decode(1.0) == "b"


def test_decode_gives_every_gene_a_legal_value():
    space = parse_space({})
    values = space.decode([0.5] * len(GENE_NAMES))
    assert set(values) == set(GENE_NAMES)
    network, training = space.candidate([0.99] * len(GENE_NAMES))
    assert network.family == "rnn" and network.cell == "lstm" and network.bidirectional and training.optimizer == "rmsprop"


SHAPES = [(64,), (3, 100), (1, 8, 8)]


@settings(max_examples=60, deadline=None)
@given(st.lists(unit, min_size=len(GENE_NAMES), max_size=len(GENE_NAMES)), st.sampled_from(SHAPES))
def test_any_genome_decodes_to_a_valid_network_for_its_data(genome, shape):
    network, training = parse_space({}).for_sample_shape(shape).candidate(genome)
    assert network.family in families_for(shape) and network == network.canonical()
    assert training.epochs >= 1 and training.learning_rate > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(unit, min_size=len(GENE_NAMES), max_size=len(GENE_NAMES)), unit, unit, unit)
def test_inactive_genes_do_not_change_the_network(genome, a, b, c):
    space = parse_space({}).for_sample_shape((3, 100))
    network, training = space.candidate(genome)
    other = list(genome)
    if network.family == "rnn":
        other[GENE_NAMES.index("activation")] = a
    else:
        other[GENE_NAMES.index("cell")], other[GENE_NAMES.index("bidirectional")] = b, c
    assert space.candidate(other) == (network, training)


def test_cnn_is_dropped_for_tabular_data():
    space = parse_space({}).for_sample_shape((64,))
    assert space.decode([1.0] * len(GENE_NAMES))["family"] == "mlp"
    assert parse_space({}).for_sample_shape((3, 100)).genes[0].options == ("mlp", "cnn", "rnn")
    assert parse_space({}).for_sample_shape((3, 8, 8)).genes[0].options == ("mlp", "cnn")
    with pytest.raises(ConfigError, match="none of which applies"):
        parse_space({"family": "cnn"}).for_sample_shape((64,))


@pytest.mark.parametrize(
    "space, message",
    [
        ({"optimizer": ["adam", "lbfgs"]}, "unknown value 'lbfgs'"),
        ({"depth": {"low": 3, "high": 1}}, "above high"),
        ({"learning_rate": {"low": 0.0, "high": 1.0, "log": True}}, "out of range"),
        ({"weight_decay": {"low": 0.0, "high": 1.0, "log": True}}, "log range needs low > 0"),
        ({"depth": {"low": 1.5, "high": 3}}, "expected an integer"),
        ({"width": []}, "empty"),
        ({"colour": ["red"]}, "unknown gene"),
        ({"activation": {"low": 1, "high": 2}}, "give a list of choices"),
        ({"bidirectional": {"low": 0, "high": 1}}, "give a list of choices"),
        ({"bidirectional": [1]}, "expected true or false"),
        ({"cell": ["gru", "rnn_tanh"]}, "unknown value 'rnn_tanh'"),
    ],
)
def test_bad_space_is_a_clear_error(space, message):
    with pytest.raises(ConfigError, match=message):
        parse_space(space)


def test_overrides_are_typed():
    assert parse_value("40") == 40 and parse_value("1e-3") == 1e-3 and parse_value("true") is True
    assert parse_value("/x.h5") == "/x.h5" and parse_value("[16, 32]") == [16, 32]
    raw = apply_overrides({"search": {"evaluations": 5}}, ["search.evaluations=40", "data.path=/x.h5", "space.width=[8, 16]"])
    config = config_from_dict(raw)
    assert config.search.evaluations == 40 and config.data.path == "/x.h5"
    assert config.space.genes[GENE_NAMES.index("width")].options == (8, 16)


def test_override_one_bound_of_a_default_range():
    config = config_from_dict(apply_overrides({}, ["space.depth.high=5"]))
    assert config.space.genes[GENE_NAMES.index("depth")] == Range(1, 5, False, True)


@pytest.mark.parametrize(
    "override, message",
    [
        ("search.evalutions=3", "unknown key 'search.evalutions'"),
        ("serch.evaluations=3", "unknown key 'serch.evaluations'"),
        ("search.evaluations=abc", "must be an integer"),
        ("search.evaluations=2.5", "must be an integer"),
        ("search.evaluations=0", "must be >= 1"),
        ("search.crossover_prob=1.5", "between 0.0 and 1.0"),
        ("train.device=tpu", "one of auto, cpu, cuda"),
        ("data.shared_memory=1", "true or false"),
        ("search", "KEY=VALUE"),
        ("space.width.high=3", "not a table"),
        ("search.mutation_eta=nan", "finite number"),
        ("search.checkpoint_seconds=inf", "finite number"),
        ("search.seed=-1", "must be >= 0"),
        ("data.split_seed=-3", "must be >= 0"),
        ("space.dropout={low = 0.0, high = nan}", "finite number"),
        ("space.learning_rate=[inf]", "finite number"),
    ],
)
def test_bad_overrides(override, message):
    raw = {"space": {"width": [16, 32]}}
    with pytest.raises(ConfigError, match=message):
        config_from_dict(apply_overrides(raw, [override]))


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(str(tmp_path / "absent.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[search\nevaluations = 3")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_config(str(bad))
    typo = tmp_path / "typo.toml"
    typo.write_text("[serch]\nevaluations = 3\n")
    with pytest.raises(ConfigError, match="typo.toml: unknown section 'serch'"):
        load_config(str(typo))


def test_config_round_trips_through_its_dict():
    config = load_config("examples/digits.toml", ["search.seed=4"])
    assert config_from_dict(config.to_dict()) == config
    assert config_from_dict({}).space == parse_space(DEFAULT_SPACE)
