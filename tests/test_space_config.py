import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.specs import families_for
from evolve.config.schema import apply_overrides, config_from_dict, load_config, parse_value
from evolve.errors import ConfigError
from evolve.search.space import DEFAULT_SPACE, GENE_NAMES, Choice, Range
from evolve.search.space_config import parse_space
from evolve.transport.protocol import _plain

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


def test_decode_gives_the_active_genes_and_key_every_gene():
    space = parse_space({})
    assert space.names == GENE_NAMES
    values = space.decode([0.5] * len(space))  # family "cnn" at 0.5
    assert values["family"] == "cnn" and "kernel_size" in values and "cell" not in values
    assert len(space.key([0.5] * len(space))) == len(space)
    network, training = space.candidate([0.99] * len(space))
    assert network.family == "rnn" and network.cell == "lstm" and network.bidirectional and training.optimizer == "rmsprop"
    assert training.schedule == "constant" and network.norm == "none" and not network.residual  # the classic genes by default
    cnn = space.candidate([0.5] * len(space))[0]
    assert cnn.norm == "batch" and cnn.kernel_size == 3 and cnn.pooling == "max"  # ... as CNNs were before typed genes


SHAPES = [(64,), (3, 100), (1, 8, 8)]

# Valid declarations per gene, for spaces drawn at random: each is a [space] entry.
_DECLARATIONS = {
    "family": [["mlp", "cnn", "rnn"], ["cnn"], {"type": "categorical", "choices": ["mlp", "rnn"], "default": "rnn"}],
    "depth": [{"low": 1, "high": 4}, [2], {"type": "int", "low": 1, "high": 2}],
    "width": [[8, 16], {"type": "categorical", "choices": [4, 8, 24], "per_layer": True}, {"low": 3, "high": 9, "per_layer": True}],
    "activation": [["relu", "tanh"], {"choices": ["gelu", "elu"], "when": {"depth": [2, 3]}}],
    "dropout": [{"low": 0.0, "high": 0.5}, {"type": "float", "low": 0.1, "high": 0.2, "default": 0.05, "when": {"family": "cnn"}}],
    "kernel_size": [[3, 5], {"low": 1, "high": 4}, 7],
    "pooling": [["max", "avg", "none"], "none"],
    "norm": [["none", "batch", "layer"], {"choices": ["batch"], "default": "none", "when": {"family": ["cnn"]}}],
    "residual": [[False, True], {"type": "bool"}, True],
    "cell": [["gru", "lstm"]],
    "bidirectional": [[False, True], {"type": "bool", "when": {"cell": "lstm"}}],
    "learning_rate": [{"low": 1e-4, "high": 1e-1, "log": True}, 0.01],
    "batch_size": [[16, 32], {"low": 8, "high": 40}],
    "epochs": [{"low": 1, "high": 3}],
    "optimizer": [["adam", "adamw", "sgd", "rmsprop"]],
    "weight_decay": [{"low": 1e-6, "high": 1e-2, "log": True}, {"low": 0.0, "high": 0.1, "when": {"optimizer": ["adamw", "sgd"]}}],
    "schedule": [["constant", "cosine", "one_cycle"]],
    "warmup": [{"low": 0.0, "high": 0.3}, {"type": "float", "low": 0.0, "high": 0.5, "when": {"schedule": ["cosine", "one_cycle"]}}],
}
spaces = st.fixed_dictionaries({name: st.sampled_from(options) for name, options in _DECLARATIONS.items()})


@settings(max_examples=80, deadline=None)
@given(spaces, st.data(), st.sampled_from(SHAPES))
def test_any_genome_of_any_space_decodes_to_a_valid_network_for_its_data(raw, data, shape):
    try:
        space = parse_space(raw).for_sample_shape(shape)
    except ConfigError as exc:
        assert "none of which applies" in str(exc)  # e.g. only cnn/rnn on tabular data
        return
    genome = data.draw(st.lists(unit, min_size=len(space), max_size=len(space)))
    network, training = space.candidate(genome)
    assert network.family in families_for(shape) and network == network.canonical()
    assert len(network.layer_widths) == network.depth and training.epochs >= 1 and training.learning_rate > 0
    # the settings as plain dicts (what workers decode, built without the dataclasses): exactly the specs' fields, values and types
    typed = lambda d: [(k, type(v), v) for k, v in d.items()]  # noqa: E731
    plain_network, plain_training = space.settings(space.key(genome))
    assert typed(plain_network) == typed(_plain(network)) and typed(plain_training) == typed(_plain(training))
    assert parse_space(space.to_config()) == space  # the stored form parses back to the same space


@settings(max_examples=80, deadline=None)
@given(spaces, st.data())
def test_inactive_genes_do_not_change_the_network(raw, data):
    space = parse_space(raw).for_sample_shape((3, 100))
    genome = data.draw(st.lists(unit, min_size=len(space), max_size=len(space)))
    active = space.active(genome)
    other = [u if active[name] else data.draw(unit) for name, u in zip(space.names, genome)]
    assert space.key(other) == space.key(genome) and space.candidate(other) == space.candidate(genome)
    some_active = [i for i, name in enumerate(space.names) if active[name] and len(space.genes[i].domain.to_config().get("choices", [0, 1])) > 1]
    assert some_active  # and the genes that are active do matter: flipping one to the far end changes the key
    i = data.draw(st.sampled_from(some_active))
    flipped = list(genome)
    flipped[i] = 0.0 if genome[i] >= 0.5 else 1.0
    if space.genes[i].domain.decode(flipped[i]) != space.genes[i].domain.decode(genome[i]):
        assert space.key(flipped) != space.key(genome)


@settings(max_examples=80, deadline=None)
@given(spaces, st.data())
def test_a_childs_values_from_its_parents_are_its_own(raw, data):
    """child_decoded (the breeder's duplicate check: the mother's values but for the genes crossed from the father or
    mutated, the mutated ones decoded) gives what decoding the child gives, whether a gene is a parent's float or a mutated one, at a
    bound or not."""
    space = parse_space(raw).for_sample_shape((3, 100))
    n = len(space)
    mother, father = (data.draw(st.lists(unit, min_size=n, max_size=n)) for _ in range(2))
    sources = data.draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=n, max_size=n))  # as ga.Brood gives them
    pick = {0: lambda i: mother[i], 1: lambda i: father[i], 2: lambda i: data.draw(st.sampled_from([0.0, 1.0]) | unit),
            3: lambda i: data.draw(unit)}
    child = [pick[source](i) for i, source in enumerate(sources)]
    changes = [(i, source) for i, source in enumerate(sources) if source]  # the genes that are not the mother's
    values = space.child_decoded(child, changes, space.decoded(mother), space.decoded(father))
    assert values == space.decoded(child)
    assert space.key_of(values) == space.key(child)


def test_per_layer_widths_follow_depth():
    space = parse_space({"family": "mlp", "depth": {"low": 1, "high": 3}, "width": {"choices": [8, 16, 32], "per_layer": True}})
    assert space.names[1:5] == ("depth", "width_1", "width_2", "width_3")
    genome = [0.5] * len(space)
    genome[1], genome[2], genome[3], genome[4] = 0.5, 0.0, 0.99, 0.5  # depth 2, widths 8, 32 (16 unused)
    network, _ = space.candidate(genome)
    assert network.depth == 2 and network.layer_widths == (8, 32)
    assert not space.active(genome)["width_3"] and space.active(genome)["width_2"]
    genome[4] = 0.0  # an unused layer's width does not make a new network
    assert space.candidate(genome)[0] == network
    genome[3] = 0.0  # equal widths are the same network as one shared width
    same = space.candidate(genome)[0]
    assert same.widths == () and same.width == 8 and same.layer_widths == (8, 8)


def test_declared_conditions_and_defaults():
    space = parse_space({"family": ["mlp", "cnn"], "dropout": {"low": 0.1, "high": 0.3, "default": 0.05, "when": {"family": "cnn"}},
                         "weight_decay": {"low": 1e-4, "high": 1e-2, "log": True, "when": {"optimizer": ["adamw"]}},
                         "optimizer": ["adam", "adamw"]})
    genome = [0.0] * len(space)  # mlp, adam
    assert space.candidate(genome)[0].dropout == 0.05 and space.candidate(genome)[1].weight_decay == 0.0
    genome[space.names.index("family")] = 0.9
    genome[space.names.index("optimizer")] = 0.9
    network, training = space.candidate(genome)
    assert network.family == "cnn" and network.dropout == pytest.approx(0.1) and training.weight_decay == pytest.approx(1e-4)


def test_old_short_forms_keep_their_meaning():
    """Configs written before typed genes: lists, ranges and fixed values, one width for all layers."""
    old = {"family": ["mlp", "cnn"], "depth": {"low": 1, "high": 3}, "width": [16, 32, 64], "activation": ["relu", "gelu"],
           "dropout": {"low": 0.0, "high": 0.4}, "learning_rate": {"low": 3e-4, "high": 3e-2, "log": True},
           "batch_size": [32, 64, 128], "epochs": {"low": 3, "high": 12}, "optimizer": "adam"}
    space = parse_space(old)
    assert space.names == GENE_NAMES and space.gene("width").domain == Choice((16, 32, 64))
    assert space.gene("depth").domain == Range(1, 3, False, True) and space.gene("optimizer").domain == Choice(("adam",))
    network, _ = space.candidate([0.99] * len(space))
    assert network.layer_widths == (64, 64, 64) and network.widths == ()


def test_cnn_is_dropped_for_tabular_data():
    space = parse_space({}).for_sample_shape((64,))
    assert space.decode([1.0] * len(GENE_NAMES))["family"] == "mlp"
    assert parse_space({}).for_sample_shape((3, 100)).gene("family").domain.options == ("mlp", "cnn", "rnn")
    assert parse_space({}).for_sample_shape((3, 8, 8)).gene("family").domain.options == ("mlp", "cnn")
    with pytest.raises(ConfigError, match="none of which applies"):
        parse_space({"family": "cnn"}).for_sample_shape((64,))


@pytest.mark.parametrize(
    "space, message",
    [
        ({"optimizer": ["adam", "lbfgs"]}, "unknown value 'lbfgs'"),
        ({"depth": {"low": 3, "high": 1}}, "above high"),
        ({"dropout": {"type": "float", "low": 0.4, "high": 0.1}}, "space.dropout: low 0.4 is above high 0.1"),
        ({"learning_rate": {"low": 0.0, "high": 1.0, "log": True}}, "out of range"),
        ({"weight_decay": {"low": 0.0, "high": 1.0, "log": True}}, "log range needs low > 0"),
        ({"depth": {"low": 1.5, "high": 3}}, "expected an integer"),
        ({"width": []}, "empty"),
        ({"width": {"choices": []}}, "empty"),
        ({"colour": ["red"]}, "unknown gene 'space.colour'"),
        ({"activation": {"low": 1, "high": 2}}, "give a list of choices"),
        ({"bidirectional": {"low": 0, "high": 1}}, "give a list of choices"),
        ({"bidirectional": [1]}, "expected true or false"),
        ({"cell": ["gru", "rnn_tanh"]}, "unknown value 'rnn_tanh'"),
        ({"dropout": {"type": "real", "low": 0, "high": 0.5}}, "unknown type 'real'"),
        ({"depth": {"type": "float", "low": 1, "high": 3}}, "depth cannot be float; it is int or categorical"),
        ({"optimizer": {"type": "int", "low": 1, "high": 3}}, "optimizer cannot be int"),
        ({"activation": {"type": "categorical"}}, "needs choices"),
        ({"dropout": {"low": 0.0, "high": 0.5, "when": {"colour": "red"}}}, "when: no gene named 'colour'"),
        ({"dropout": {"low": 0.0, "high": 0.5, "when": {"family": "transformer"}}}, "unknown value 'transformer'"),
        ({"dropout": {"low": 0.0, "high": 0.5, "when": {"learning_rate": 0.1}}}, "not a float one"),
        ({"dropout": {"low": 0.0, "high": 0.5, "when": {"dropout": 1}}}, "cannot depend on itself"),
        ({"optimizer": {"choices": ["adam", "sgd"], "when": {"schedule": "cosine"}},
          "schedule": {"choices": ["constant", "cosine"], "when": {"optimizer": "sgd"}}}, "cycle"),
        ({"width": {"choices": [8], "per_layer": True}, "dropout": {"low": 0, "high": 0.1, "when": {"width": 8}}}, "declared per layer"),
        ({"dropout": {"low": 0.0, "high": 0.5, "per_layer": True}}, "only width can differ per layer"),
        ({"dropout": {"low": 0.0, "high": 0.5, "default": 2.0}}, "space.dropout.default: 2.0 is out of range"),
        ({"dropout": {"low": 0.0, "high": 0.5, "step": 0.1}}, "unknown key 'step'"),
        ({"width": {"choices": [8, 8]}}, "listed twice"),
        ({"dropout": {"low": 0.0}}, "a range needs low and high"),
        ({"norm": ["batch", "group"]}, "unknown value 'group'"),
        ({"schedule": ["cosine", "step"]}, "unknown value 'step'"),
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
    assert config.space.gene("width").domain.options == (8, 16)


def test_override_one_bound_of_a_default_range():
    config = config_from_dict(apply_overrides({}, ["space.depth.high=5"]))
    assert config.space.gene("depth").domain == Range(1, 5, False, True)


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
        ("search.seed=1\nsearch.evaluations=5", "holds more than one value"),  # the rest was dropped without a word
        ("search.seed\nx=1", "not a dotted config key"),
        ("search..seed=1", "not a dotted config key"),
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
    assert config_from_dict({"space": {}}).space == parse_space(DEFAULT_SPACE)


def test_label_smoothing_is_searched_for_a_classifier_and_fixed_at_zero_for_a_regression():
    space = parse_space({"label_smoothing": {"low": 0.0, "high": 0.2}, "family": ["cnn"], "dilation": ["none", "growing"],
                         "head": ["flatten", "average"]})
    classify, regress = space.for_data((2, 32), "classification"), space.for_data((2, 32), "regression")
    assert classify.gene("label_smoothing").domain.to_config() == {"low": 0.0, "high": 0.2, "log": False}
    assert regress.gene("label_smoothing").domain.options == (0.0,)
    genome = [0.9] * len(classify)
    assert classify.specs(classify.key(genome))[1].label_smoothing > 0.1 and regress.specs(regress.key(genome))[1].label_smoothing == 0.0
    network = classify.specs(classify.key(genome))[0]
    assert (network.dilation, network.head) == ("growing", "average")


def test_dilation_and_head_are_inactive_in_an_mlp():
    space = parse_space({"family": ["mlp", "cnn"], "dilation": ["none", "growing"], "head": ["flatten", "average"]})
    mlp = [0.0] + [0.99] * (len(space) - 1)  # family mlp, every other gene at its last value
    assert not space.active(mlp)["dilation"] and not space.active(mlp)["head"]
    network = space.specs(space.key(mlp))[0]
    assert (network.family, network.dilation, network.head) == ("mlp", "none", "flatten")
    rnn = parse_space({"family": ["rnn"], "dilation": ["none", "growing"], "head": ["flatten", "average"]})
    last = [0.99] * len(rnn)
    assert rnn.active(last)["head"] and not rnn.active(last)["dilation"]
    assert rnn.specs(rnn.key(last))[0].head == "average"


def test_paths_in_a_config_file_are_relative_to_its_folder_and_set_values_to_the_current_one(tmp_path, monkeypatch):
    from evolve.config.schema import load_config

    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "run.toml").write_text('[data]\npath = "../data/x.h5"\n\n[model]\nbuilder = "nets:build"\npath = "models"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(str(folder / "run.toml"))
    assert cfg.data.path == str(tmp_path / "data" / "x.h5") and cfg.model.path == str(folder / "models")
    cfg = load_config(str(folder / "run.toml"), ["data.path=here.h5", "model.path=/abs/models"])
    assert cfg.data.path == "here.h5" and cfg.model.path == "/abs/models"  # made absolute from the current folder when a run starts
