"""Data-aware default search spaces (evolve.search.presets): chosen from the data's shape, scaled by its size,
overridden gene by gene; a config with its own [space] table keeps the classic space."""
import os

import pytest
from conftest import ROOT

from evolve.config.schema import config_from_dict, load_config
from evolve.errors import ConfigError
from evolve.search import presets
from evolve.search.presets import DataFacts
from evolve.search.space import DEFAULT_SPACE
from evolve.search.space_config import parse_space


def facts(shape, problem="classification", n=1000):
    return DataFacts(tuple(shape), problem, n)


@pytest.mark.parametrize("shape, preset, families", [((30,), "tabular", ("mlp",)), ((2, 64), "signal", ("cnn", "rnn")),
                                                     ((2, 128), "signal", ("cnn",)), ((3, 16, 16), "image", ("cnn",))])
def test_a_config_without_a_space_table_gets_the_preset_for_its_datas_shape(shape, preset, families):
    config = config_from_dict({"search": {"evaluations": 20}})
    assert config.space is None and config.preset == "auto"
    resolved, chosen = config.resolved(facts(shape))
    assert chosen["asked"] == "auto" and chosen["chosen"] == preset and str(shape) in chosen["why"]
    assert resolved.space.gene("family").domain.options == families and resolved.preset == ""
    space = resolved.space.for_data(shape, "classification")
    genome = [0.5] * len(space)
    genome[space.names.index("family")] = 0.0  # the first family: mlp for a table, cnn otherwise
    network, training = space.candidate(genome)
    assert training.epochs >= 20 and training.label_smoothing > 0  # tens of epochs; label smoothing searched
    if preset != "tabular":
        assert network.head == "average" and network.norm == "batch"


def test_a_shape_no_preset_fits_is_one_line_pointing_to_a_space_table_or_an_own_network():
    with pytest.raises(ConfigError, match=r"no preset fits samples of shape \(1, 4, 4, 4\); declare a \[space\] table .* own network"):
        config_from_dict({}).resolved(facts((1, 4, 4, 4)))


def test_a_named_preset_with_genes_of_its_own():
    config = config_from_dict({"space": {"preset": "image", "depth": {"low": 2, "high": 3}, "kernel_size": 3}})
    resolved, chosen = config.resolved(facts((1, 8, 8)))
    assert chosen == {"asked": "image", "chosen": "image", "why": "named in the config", "overrides": ["depth", "kernel_size"]}
    space = resolved.space
    assert (space.gene("depth").domain.low, space.gene("depth").domain.high) == (2, 3)
    assert space.gene("kernel_size").domain.options == (3,) and space.gene("head").domain.options == ("average",)
    with pytest.raises(ConfigError, match="space.preset 'signal' is for samples of 2 dimension"):
        config_from_dict({"space": {"preset": "signal"}}).resolved(facts((1, 8, 8)))
    with pytest.raises(ConfigError, match="space.preset must be one of auto, classic, tabular, signal, image"):
        config_from_dict({"space": {"preset": "resnet"}})
    with pytest.raises(ConfigError, match="unknown gene 'space.depht'"):
        config_from_dict({"space": {"preset": "image", "depht": 3}})


def test_a_space_table_without_a_preset_searches_the_classic_space_as_before():
    table = {"width": [8, 16], "epochs": {"low": 2, "high": 4}}
    for config in (config_from_dict({"space": table}), config_from_dict({"space": {**table, "preset": "classic"}})):
        assert config.space == parse_space(table) and config.resolved(facts((1, 8, 8))) == (config, None)
    assert load_config("examples/digits.toml").space == parse_space(load_config("examples/digits.toml").to_dict()["space"])
    assert config_from_dict({"space": {}}).space == parse_space(DEFAULT_SPACE)


def test_presets_scale_with_the_data_small_data_gets_narrower_networks_and_more_epochs():
    small, large = (config_from_dict({}).resolved(facts((3, 32, 32), n=n))[0].space for n in (800, 50_000))
    assert max(small.gene("width").domain.options) < max(large.gene("width").domain.options) == 256
    assert small.gene("epochs").domain.high > large.gene("epochs").domain.high


def test_a_resolved_config_is_concrete_and_survives_its_round_trip():
    resolved, _ = config_from_dict({"space": {"preset": "auto", "dropout": 0.1}}).resolved(facts((12,), "regression"))
    again = config_from_dict(resolved.to_dict())
    assert again == resolved and again.space is not None and "preset" not in resolved.to_dict()["space"]
    assert resolved.space.for_data((12,), "regression").gene("label_smoothing").domain.options == (0.0,)


@pytest.mark.parametrize("example, shape, preset", [("signals.toml", (2, 128), "signal"), ("shapes.toml", (1, 16, 16), "image")])
def test_the_preset_examples_have_only_data_and_search_and_get_the_preset_their_data_fits(example, shape, preset):
    import tomllib

    path = os.path.join(ROOT, "examples", example)
    with open(path, "rb") as f:
        assert set(tomllib.load(f)) == {"data", "search"}
    config = load_config(path)
    resolved, chosen = config.resolved(DataFacts(shape, "classification", 1000))
    assert chosen["chosen"] == preset and chosen["asked"] == "auto" and resolved.space is not None


@pytest.mark.parametrize("rows, batches", [(31, [2, 4, 8]), (200, [8, 16, 32]), (4000, [32, 64, 128]), (1_000_000, [64, 128, 256, 512])])
def test_batch_sizes_fit_the_rows_a_training_fits_on(rows, batches):
    from evolve.search.presets import batch_sizes

    assert batch_sizes(facts((2, 64), n=rows)) == batches
    assert batch_sizes(DataFacts((2, 64), "classification", 250, folds=5)) == batch_sizes(facts((2, 64), n=200))  # 4 folds of 5


def test_a_model_builders_training_genes_follow_the_data_unless_its_space_declares_them():
    """A builder's own genes are the user's; its training genes are the presets' (batches and epochs scaled to the
    data), not the classic 2-12 epochs, and a training gene the [space] table declares stays as declared."""
    from evolve.search import presets

    raw = {"model": {"builder": "mynets:build"}, "space": {"channels": [16, 32]}}
    config = config_from_dict(raw)
    assert config.space is None  # made from the data
    small = DataFacts((1, 100), "classification", 255)
    resolved, chosen = config.resolved(small)
    assert chosen["chosen"] == "builder" and resolved.space.builder == "mynets:build"
    assert resolved.space.gene("batch_size").domain.options == tuple(presets.batch_sizes(small))
    assert resolved.space.gene("epochs").to_config() == parse_space({"epochs": presets.training(small)["epochs"]}).gene("epochs").to_config()
    assert resolved.space.gene("channels").domain.options == (16, 32)
    own = config_from_dict({**raw, "space": {"channels": [16], "epochs": {"low": 3, "high": 4}}}).resolved(small)[0]
    assert (own.space.gene("epochs").domain.low, own.space.gene("epochs").domain.high) == (3, 4)
    again = config_from_dict(resolved.to_dict())  # a run's stored config parses back to the same space
    assert again.space == resolved.space
    with pytest.raises(ConfigError, match="presets are for the built-in families"):
        config_from_dict({**raw, "space": {"preset": "signal"}})


@pytest.mark.parametrize("rows, folds", [(31, 0), (50, 5), (200, 0), (400, 0), (720, 0), (4000, 0), (1_000_000, 0)])
def test_training_length_is_a_step_budget_on_small_data_and_tens_of_epochs_on_more(rows, folds):
    """Small data trains for 1,000 to 3,000 optimiser steps at the middle batch size (not the ~50 that 20-60 epochs
    of big batches gave 31 rows); the budget fades out by 1,000 rows per training, where the old epochs stand."""
    import math

    from evolve.search.presets import STEPS, batch_sizes, training

    f = DataFacts((2, 64), "classification", rows, folds)
    epochs = training(f)["epochs"]
    per_epoch = math.ceil(f.fit_rows / batch_sizes(f)[1])
    old = (20, 60) if rows <= 2_000 else (10, 40) if rows <= 20_000 else (5, 20) if rows <= 200_000 else (2, 10)
    if f.fit_rows <= 200:
        assert epochs["low"] * per_epoch >= STEPS[0] and epochs["high"] * per_epoch >= STEPS[1]
    if f.fit_rows >= 1000 or rows >= 720:
        assert (epochs["low"], epochs["high"]) == old
    assert epochs["low"] >= old[0] and epochs["high"] >= old[1]


def counted_macs(network, shape) -> int:
    """Multiply-adds of one sample's forward pass through the built network: counted layer by layer on its convolutions
    (each output position: input channels x kernel positions), linear layers and recurrent layers (each step: every
    weight matrix once)."""
    import math

    import torch
    from torch import nn

    from ensemble.models import build_network

    model = build_network(network, shape, 6).eval()
    total = 0

    def count(module, inputs, out):
        nonlocal total
        if isinstance(module, (nn.Conv1d, nn.Conv2d)):
            total += out.numel() * module.in_channels // module.groups * math.prod(module.kernel_size)
        elif isinstance(module, nn.Linear):
            total += out.numel() * module.in_features
        else:
            total += inputs[0].shape[1] * sum(p.numel() for name, p in module.named_parameters() if name.startswith("weight"))

    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear, nn.RNNBase)):
            module.register_forward_hook(count)
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    return total


@pytest.mark.parametrize("shape, rows", [((3, 256, 256), 36), ((3, 224, 224), 5000), ((1, 10_000), 40)])
def test_a_preset_bounds_the_cost_of_a_network_on_large_samples(shape, rows):
    """Issue 35: 36 training images of 3x256x256 (5 folds of 28 rows, 143-429 epochs) got the image preset of small images,
    whose largest network convolved 256x256 maps: about 1,700 T multiply-adds a network, hours of CPU. Now every preset's
    largest network costs at most presets.ROW_MACS multiply-adds per training row over its training (there: its input
    averaged down to 32x32, widths up to 64, the same epochs; 7 T a network); likewise on more rows and on a long series."""
    facts = DataFacts(shape, "classification", rows, folds=5 if rows < 1000 else 0)
    space = config_from_dict({}).resolved(facts)[0].space.for_data(shape, "classification")
    network, training = space.candidate([1.0] * len(space))  # every gene's last choice: the deepest, widest, longest training
    per_row = counted_macs(network, shape) * training.epochs
    if shape == (3, 256, 256):
        assert 3 * per_row * facts.fit_rows * facts.folds < 10e12  # forward and backward, every fold (HEAD: 1,700 T)
        assert network.downsample == 8 and network.width == 64 and training.epochs == 429  # the step budget kept
    assert per_row <= presets.ROW_MACS and network.downsample > 1


BENCHMARKED = [  # (sample shape, training rows, folds): bench_quality's and bench_small's sets, the examples' and these tests'
    ((1, 8, 8), 720, 0), ((1, 16, 16), 1000, 0), ((2, 128), 1000, 0), ((1, 150), 50, 5), ((1, 24), 67, 5), ((6, 100), 40, 5),
    ((12, 25), 270, 5), ((4,), 75, 5), ((13,), 89, 5), ((30,), 284, 5), ((10,), 266, 5), ((2, 64), 31, 0), ((2, 64), 1_000_000, 0),
    ((1, 100), 255, 0), ((3, 16, 16), 1000, 0), ((3, 32, 32), 800, 0), ((3, 32, 32), 800, 5), ((3, 32, 32), 50_000, 0),
    ((1, 500), 4000, 0), ((1, 500), 10_000, 0)]


@pytest.mark.parametrize("shape, rows, folds", BENCHMARKED)
def test_the_cost_bound_leaves_the_presets_of_the_benchmarked_sizes_as_they_were(shape, rows, folds):
    facts = DataFacts(shape, "classification", rows, folds)
    name, _ = presets.choose(facts)
    assert presets.table(name, facts) == presets.by_rows(name, facts)
    assert "downsample" not in presets.table(name, facts)


@pytest.mark.parametrize("network, shape", [
    ({"family": "cnn", "depth": 5, "width": 32, "kernel_size": 5, "pooling": "max", "downsample": 8}, (3, 250, 250)),
    ({"family": "cnn", "depth": 3, "width": 16, "kernel_size": 4, "pooling": "none", "downsample": 1, "dilation": "growing"}, (2, 100)),
    ({"family": "mlp", "depth": 3, "width": 64}, (30,)),
    ({"family": "rnn", "depth": 2, "width": 16, "cell": "lstm", "bidirectional": True}, (3, 40)),
])
def test_the_cost_estimate_is_what_the_built_network_computes(network, shape):
    """presets.sample_macs against the multiply-adds counted on the built network (which adds its head's few: 4 % of this MLP's)."""
    from ensemble.specs import NetworkSpec

    spec = NetworkSpec(**network, residual=False)
    estimate = presets.sample_macs({"cell": "gru", "bidirectional": False, **network}, shape)
    assert estimate <= counted_macs(spec, shape) <= 1.05 * estimate
