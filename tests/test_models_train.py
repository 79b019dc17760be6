import numpy as np
import pytest
import torch
from conftest import blob_splits, blobs

from ensemble.device import cpu_threads
from ensemble.models import NetworkSpec, build_network, families_for
from ensemble.problem import Classification, Regression
from ensemble.specs import TrainSpec
from ensemble.train import DeviceData, set_precision, train_and_evaluate

ACCEPTS = {"mlp": {1, 2, 3}, "cnn": {2, 3}, "rnn": {2}}  # sample dimensions each family takes


@pytest.mark.parametrize("shape", [(12,), (2, 20), (1, 8, 8), (3, 5, 7)])
@pytest.mark.parametrize("family", ["mlp", "cnn", "rnn"])
@pytest.mark.parametrize("depth", [1, 3])
def test_each_family_builds_on_its_layouts_and_refuses_the_others(shape, family, depth):
    assert (family in families_for(shape)) == (len(shape) in ACCEPTS[family])
    if len(shape) not in ACCEPTS[family]:
        with pytest.raises(ValueError, match=f"family '{family}' does not apply to samples of shape .*; it takes"):
            build_network(NetworkSpec(family, depth, 8), shape, 4)
        return
    net = build_network(NetworkSpec(family, depth, 8, "gelu", 0.1), shape, 4)
    assert net(torch.randn(5, *shape)).shape == (5, 4)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_networks_learn_sequences(cell, bidirectional):
    ev = train_and_evaluate(NetworkSpec("rnn", 2, 16, cell=cell, bidirectional=bidirectional), TrainSpec(1e-2, 32, 8), data_for((2, 16)), seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.9, ev
    first = {n: w.shape for n, w in ev.weights.items()}
    assert ("rnn.weight_ih_l1_reverse" in first) == bidirectional and first["head.weight"] == (3, 16 * (2 if bidirectional else 1))


def test_cnn_convolves_in_as_many_dimensions_as_the_sample_has():
    conv1d = build_network(NetworkSpec("cnn", 1, 4), (2, 20), 3)
    conv2d = build_network(NetworkSpec("cnn", 1, 4), (1, 8, 8), 3)
    assert any(isinstance(m, torch.nn.Conv1d) for m in conv1d.modules())
    assert any(isinstance(m, torch.nn.Conv2d) for m in conv2d.modules())


def data_for(shape, dtype=np.float32):
    splits = blob_splits(shape, (200, 60, 60), dtype=dtype)
    arrays = {f"{s}/{k}": v for s, xy in splits.items() for k, v in zip("xy", xy)}
    return DeviceData.from_arrays(arrays, Classification(3))


def regression_data(shape=(6,), targets=()):
    """y = a fixed linear function of x (plus a little noise), in units far from 0 and 1."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320,) + shape).astype(np.float32)
    coef = rng.normal(size=(int(np.prod(shape)),) + (targets or (1,)))
    y = (100.0 + 30.0 * x.reshape(320, -1) @ coef + rng.normal(scale=1.0, size=(320,) + (targets or (1,)))).astype(np.float32)
    y = y.reshape((320,) + targets)
    arrays = {"train/x": x[:200], "train/y": y[:200], "val/x": x[200:260], "val/y": y[200:260], "test/x": x[260:], "test/y": y[260:]}
    return DeviceData.from_arrays(arrays, Regression.from_targets(y[:200]))


@pytest.mark.parametrize("shape, family", [((10,), "mlp"), ((2, 16), "cnn"), ((1, 6, 6), "cnn")])
def test_training_learns_separable_classes(shape, family):
    ev = train_and_evaluate(NetworkSpec(family, 1, 16), TrainSpec(1e-2, 32, 5), data_for(shape), seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.9 and ev.metrics["test_accuracy"] > 0.9
    assert ev.fitness == ev.metrics["val_accuracy"]
    assert ev.val_pred.shape == (60, 3) and np.allclose(ev.val_pred.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("targets", [(), (2,)])
def test_regression_learns_targets_in_their_own_units(targets):
    data = regression_data(targets=targets)
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 32), TrainSpec(1e-2, 32, 30), data, seed=0)
    spread = float(np.std(data.y["val"]))
    assert ev.status == "ok" and ev.metrics["val_r2"] > 0.9 and ev.metrics["test_r2"] > 0.9
    assert ev.metrics["val_rmse"] < 0.3 * spread and ev.fitness == -ev.metrics["val_rmse"]
    assert ev.val_pred.shape == (60, int(np.prod(targets or (1,))))
    assert abs(float(ev.val_pred.mean()) - float(data.y["val"].mean())) < 0.2 * spread  # predictions in the targets' units


def test_payload_only_for_networks_worth_keeping():
    data = data_for((10,))
    kept = train_and_evaluate(NetworkSpec("mlp", 1, 8), TrainSpec(1e-2, 32, 2), data, seed=0)
    skipped = train_and_evaluate(NetworkSpec("mlp", 1, 8), TrainSpec(1e-2, 32, 2), data, seed=0, keep=lambda fitness, loss: False)
    assert kept.has_payload and kept.weights and set(kept.weights) == {"1.weight", "1.bias", "3.weight", "3.bias"}
    assert not skipped.has_payload and skipped.weights is None and skipped.payload() == {}
    assert skipped.metrics == kept.metrics and skipped.fitness == kept.fitness


def test_uint8_inputs_are_scaled_and_train():
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 16), TrainSpec(3e-2, 16, 10), data_for((10,), np.uint8), seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.9


def test_same_seed_same_network():
    data = data_for((10,))
    a = train_and_evaluate(NetworkSpec("mlp", 2, 8, dropout=0.2), TrainSpec(1e-2, 16, 2), data, seed=5)
    b = train_and_evaluate(NetworkSpec("mlp", 2, 8, dropout=0.2), TrainSpec(1e-2, 16, 2), data, seed=5)
    np.testing.assert_array_equal(a.val_pred, b.val_pred)
    for name in a.weights:
        np.testing.assert_array_equal(a.weights[name], b.weights[name])


def test_exploding_loss_is_reported_as_diverged():
    ev = train_and_evaluate(NetworkSpec("mlp", 2, 32), TrainSpec(1e4, 16, 3, "sgd"), data_for((10,)), seed=0)
    assert ev.status == "diverged" and ev.metrics == {} and ev.fitness == float("-inf") and "NaN" in ev.message
    assert not ev.has_payload


def test_cpu_data_shares_memory_with_the_arrays():
    arrays = {f"{s}/{k}": v for s in ("train", "val", "test") for k, v in zip("xy", blobs(10, (4,)))}
    data = DeviceData.from_arrays(arrays, Classification(3))
    arrays["train/x"][0, 0] = 42.0
    assert data.x["train"][0, 0].item() == 42.0


def test_a_last_batch_of_one_does_not_break_batch_norm():
    data = data_for((1, 8, 8))
    n = data.x["train"].shape[0]
    batch = n - 1  # leaves a final batch of exactly one sample
    ev = train_and_evaluate(NetworkSpec("cnn", 4, 4), TrainSpec(1e-2, batch, 2), data, seed=0)
    assert ev.status == "ok"


def test_threads_never_oversubscribe():
    assert cpu_threads(cores=16, ranks_sharing=4) == 4
    assert cpu_threads(cores=2, ranks_sharing=3) == 1
    assert cpu_threads(cores=64, ranks_sharing=8, cores_per_task=7) == 7
    assert cpu_threads(cores=64, ranks_sharing=8, requested=2, cores_per_task=7) == 2


def test_member_accuracy_is_the_same_number_the_ensemble_math_gives():
    from ensemble.combine import combine, ensemble_prediction

    data = data_for((10,))
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 4), TrainSpec(1e-3, 32, 1), data, seed=1)
    for split in ("val", "test"):
        pred = ev.val_pred if split == "val" else ev.test_pred
        alone = combine(data.problem, [pred], [1.0], len(pred))
        assert ev.metrics[f"{split}_accuracy"] == data.problem.scores(ensemble_prediction(data.problem, alone), data.y[split])["accuracy"]


# --- the typed search space's architecture and training genes -------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ensemble.train import lr_factor  # noqa: E402
from evolve.search.space_config import parse_space  # noqa: E402

SMALL_SPACE = parse_space({
    "depth": {"low": 1, "high": 3}, "width": {"choices": [3, 4, 6], "per_layer": True}, "epochs": 1, "batch_size": 16,
    "kernel_size": [1, 2, 3, 4], "pooling": ["max", "avg", "none"], "norm": ["none", "batch", "layer"], "residual": [False, True],
    "schedule": ["constant", "cosine", "one_cycle"], "warmup": {"low": 0.0, "high": 0.3},
})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=len(SMALL_SPACE), max_size=len(SMALL_SPACE)), st.sampled_from([(12,), (2, 9), (1, 7, 5)]))
def test_any_decoded_genome_builds_a_network_that_trains(genome, shape):
    network, training = SMALL_SPACE.for_sample_shape(shape).candidate(genome)
    model = build_network(network, shape, 5)
    assert model(torch.randn(4, *shape)).shape == (4, 5)
    widths = [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features != 5 and m.bias is not None]
    if network.family == "mlp":
        assert widths == list(network.layer_widths)
    ev = train_and_evaluate(network, training, data_for(shape), seed=0)
    assert ev.status in ("ok", "diverged") and ev.epochs_done <= 1


def test_architecture_genes_shape_the_network():
    plain = build_network(NetworkSpec("cnn", 2, 8), (1, 8, 8), 3)
    kinds = [type(m).__name__ for m in plain]
    assert kinds.count("BatchNorm2d") == 2 and kinds.count("MaxPool2d") == 2  # the classic CNN: batch norm, max pooling
    odd = build_network(NetworkSpec("cnn", 2, 8, kernel_size=5, pooling="avg", norm="layer", residual=True, widths=(4, 8)), (1, 8, 8), 3)
    names = {type(m).__name__ for m in odd.modules()}
    assert {"AvgPool2d", "GroupNorm", "Residual"} <= names and "MaxPool2d" not in names and "BatchNorm2d" not in names
    convs = [m for m in odd.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.kernel_size for c in convs if c.kernel_size != (1, 1)] == [(5, 5), (5, 5)] and [c.out_channels for c in convs] == [4, 4, 8, 8]
    mlp = build_network(NetworkSpec("mlp", 2, 16, norm="batch", residual=True), (12,), 3)
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in mlp.modules()) == 2 and sum(type(m).__name__ == "Residual" for m in mlp.modules()) == 2
    none = build_network(NetworkSpec("cnn", 3, 4, pooling="none", kernel_size=4), (1, 8, 8), 3)
    assert none(torch.randn(2, 1, 8, 8)).shape == (2, 3)
    maps = none[:-3](torch.randn(2, 1, 8, 8))  # before the head: an even kernel keeps the map's size, as an odd one does
    assert maps.shape == (2, 4, 8, 8)
    for k, shape in ((2, (1, 8, 8)), (4, (2, 9))):
        net = build_network(NetworkSpec("cnn", 2, 4, kernel_size=k, residual=True, pooling="none"), shape, 3)
        assert net(torch.randn(3, *shape)).shape == (3, 3)


def test_old_specs_build_the_same_layers():
    """Specs stored before the new genes existed (no norm, widths, ...) build the networks they built then."""
    old = NetworkSpec(**{"family": "cnn", "depth": 2, "width": 8, "activation": "relu", "dropout": 0.1, "cell": "gru", "bidirectional": False})
    assert old.norm == "batch" and list(build_network(old, (1, 8, 8), 3).state_dict()) == [
        "1.weight", "1.bias", "2.weight", "2.bias", "2.running_mean", "2.running_var", "2.num_batches_tracked",
        "6.weight", "6.bias", "7.weight", "7.bias", "7.running_mean", "7.running_var", "7.num_batches_tracked", "13.weight", "13.bias"]
    assert NetworkSpec("mlp", 1, 8).norm == "none"


@pytest.mark.parametrize("schedule", ["constant", "cosine", "one_cycle"])
@pytest.mark.parametrize("warmup", [0.0, 0.2])
def test_learning_rate_schedules(schedule, warmup):
    spec = TrainSpec(1e-2, 32, 5, schedule=schedule, warmup=warmup)
    total = 100
    f = [lr_factor(spec, s, total) for s in range(total)]
    assert max(f) == pytest.approx(1.0) and all(0 <= x <= 1 + 1e-12 for x in f)
    rise = int(round((warmup or (0.3 if schedule == "one_cycle" else 0)) * total))
    assert all(a < b for a, b in zip(f[:rise], f[1:rise]))  # rising through the warm-up
    if schedule == "constant":
        assert f[rise:] == [1.0] * (total - rise)
    else:
        assert all(a >= b for a, b in zip(f[rise:], f[rise + 1:])) and f[-1] < 1e-3  # annealed to (almost) zero
    if schedule == "one_cycle":
        assert f[0] == pytest.approx(1 / 25 + (1 - 1 / 25) / rise)


def test_a_scheduled_training_ends_at_its_last_rate():
    from ensemble.train import make_optimizer, make_schedule
    model = torch.nn.Linear(3, 2)
    spec = TrainSpec(0.1, 8, 2, schedule="cosine")
    opt = make_optimizer(spec, model.parameters())
    sched = make_schedule(spec, opt, 5)
    rates = []
    for _ in range(10):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[0] == pytest.approx(0.1) and rates[-1] == pytest.approx(0.0, abs=1e-12) and make_schedule(TrainSpec(0.1, 8, 2), opt, 5) is None


def with_precision(data: DeviceData, precision: str) -> DeviceData:
    arrays = {f"{s}/x": data.x[s].numpy() for s in data.x} | {f"{s}/y": data.y[s] for s in data.y}
    return DeviceData.from_arrays(arrays, data.problem, data.device, precision)


@pytest.mark.parametrize("shape,family", [((12,), "mlp"), ((1, 8, 8), "cnn"), ((2, 16), "rnn")])
def test_bf16_autocast_trains_every_family_and_scores_in_float32(shape, family):
    data = with_precision(data_for(shape), "bf16")
    seen = []
    hook = lambda module, inputs, output: seen.append(output.dtype)  # noqa: E731
    ev = train_and_evaluate(NetworkSpec(family, 2, 16), TrainSpec(1e-2, 32, 8), data, seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.9, ev
    assert ev.val_pred.dtype == np.float32 and np.allclose(ev.val_pred.sum(axis=1), 1, atol=1e-5)
    assert all(w.dtype == np.float32 for w in ev.weights.values() if w.dtype.kind == "f")  # the weights stay float32
    # the forward pass really ran in bfloat16: a hooked linear layer sees it
    model = build_network(NetworkSpec(family, 2, 16), shape, 3)
    next(m for m in model.modules() if isinstance(m, torch.nn.Linear)).register_forward_hook(hook)
    with data.autocast():
        model(data.x["val"][:4])
    assert seen == [torch.bfloat16]


def test_bf16_predictions_are_close_to_fp32_but_not_identical():
    fp32 = data_for((12,))
    spec, training = NetworkSpec("mlp", 2, 32), TrainSpec(1e-2, 32, 4)
    a = train_and_evaluate(spec, training, fp32, seed=3)
    b = train_and_evaluate(spec, training, with_precision(fp32, "bf16"), seed=3)
    assert a.status == b.status == "ok"
    assert not np.array_equal(a.val_pred, b.val_pred)  # bfloat16 changed the arithmetic ...
    assert np.abs(a.val_pred - b.val_pred).max() < 0.1  # ... but not what the network learned
    set_precision("fp32")


def test_precision_settings():
    set_precision("tf32")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32" and torch.backends.cudnn.conv.fp32_precision == "tf32"
    set_precision("fp32")
    assert torch.backends.cuda.matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        set_precision("fp8")


@pytest.mark.parametrize("shape", [(2, 64), (1, 12, 12)])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_growing_dilation_doubles_each_blocks_reach_and_keeps_the_maps_size(shape, k):
    """dilation="growing": block i convolves with dilation 2**i (a TCN's receptive field), the map's size kept."""
    spec = NetworkSpec("cnn", 3, 4, kernel_size=k, pooling="none", dilation="growing")
    net = build_network(spec, shape, 3)
    convs = [m for m in net.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d))]
    assert [c.dilation[0] for c in convs] == [1, 2, 4]
    x = torch.randn(2, *shape)
    maps = torch.nn.Sequential(*[m for m in net if not isinstance(m, (torch.nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool2d, torch.nn.Flatten, torch.nn.Linear))])
    assert maps(x).shape[2:] == x.shape[2:]
    plain = build_network(NetworkSpec("cnn", 3, 4, kernel_size=k, pooling="none"), shape, 3)
    assert all(m.dilation[0] == 1 for m in plain.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)))


@pytest.mark.parametrize("shape", [(2, 40), (3, 9, 9)])
def test_an_average_head_reads_each_maps_mean_and_a_flatten_head_a_few_positions(shape):
    average = build_network(NetworkSpec("cnn", 2, 6, pooling="none", head="average"), shape, 5)
    flatten = build_network(NetworkSpec("cnn", 2, 6, pooling="none"), shape, 5)
    assert [m for m in average.modules() if isinstance(m, torch.nn.Linear)][-1].in_features == 6
    assert [m for m in flatten.modules() if isinstance(m, torch.nn.Linear)][-1].in_features == 6 * 4 ** (len(shape) - 1)
    assert average(torch.randn(3, *shape)).shape == (3, 5)
    # the average head sees where a pattern is no more: a shifted input gives the same output (circular padding aside)
    net = build_network(NetworkSpec("cnn", 1, 6, kernel_size=1, pooling="none", head="average", norm="none"), shape, 5).eval()
    x = torch.randn(1, *shape)
    assert torch.allclose(net(x), net(torch.roll(x, 3, dims=-1)), atol=1e-5)


def test_dilation_is_a_cnns_alone_and_the_head_a_cnns_or_an_rnns():
    spec = NetworkSpec("mlp", 2, 8, dilation="growing", head="average")
    assert (spec.canonical().dilation, spec.canonical().head) == ("none", "flatten")
    assert NetworkSpec("rnn", 2, 8, dilation="growing", head="average").canonical().head == "average"
    with pytest.raises(ValueError, match="unknown dilation"):
        NetworkSpec("cnn", 2, 8, dilation="exponential")


@pytest.mark.parametrize("cell, bidirectional", [("gru", False), ("lstm", True)])
def test_an_rnns_average_head_reads_its_outputs_mean_over_the_steps_and_a_flatten_head_its_last_state(cell, bidirectional):
    torch.manual_seed(0)
    x = torch.randn(3, 2, 20)
    average = build_network(NetworkSpec("rnn", 2, 6, cell=cell, bidirectional=bidirectional, head="average"), (2, 20), 4).eval()
    outputs, _ = average.rnn(x.transpose(1, 2))
    assert torch.allclose(average(x), average.head(outputs.mean(dim=1)), atol=1e-6)
    last = build_network(NetworkSpec("rnn", 2, 6, cell=cell, bidirectional=bidirectional), (2, 20), 4).eval()
    last.load_state_dict(average.state_dict())  # the same weights: only the readout differs
    assert not torch.allclose(last(x), average(x))


def test_label_smoothing_softens_a_classifiers_loss_and_a_regression_ignores_it():
    from ensemble.train import Head

    head = Head(Classification(3))
    out, target = torch.tensor([[8.0, 0.0, 0.0]]), torch.tensor([0])
    assert head.loss(out, target, 0.1) > head.loss(out, target) > 0  # a confident, right answer costs more when smoothed
    data = regression_data()
    y = data.fit_target[:4]
    assert data.head.loss(y, y, 0.3) == 0.0
    smoothed = train_and_evaluate(NetworkSpec("mlp", 1, 16), TrainSpec(1e-2, 32, 3, label_smoothing=0.2), data_for((12,)), seed=0)
    assert smoothed.status == "ok" and smoothed.metrics["val_accuracy"] > 0.8
    with pytest.raises(ValueError):
        TrainSpec(1e-2, 32, 3, label_smoothing=1.0)


def test_standardize_learns_the_training_splits_statistics_and_keeps_them_in_the_weights():
    """A table whose features live far from 0 and 1: standardised inside the network, and the statistics
    travel with the weights, so a rebuilt network predicts the same."""
    from ensemble.models import Standardize

    data = regression_data(shape=(6,))
    far = {s: data.x[s] * 1000.0 + 5000.0 for s in data.x}
    data.x.update(far)
    ev = train_and_evaluate(NetworkSpec("mlp", 2, 32, standardize=True), TrainSpec(1e-2, 32, 30), data, seed=0)
    plain = train_and_evaluate(NetworkSpec("mlp", 2, 32), TrainSpec(1e-2, 32, 30), data, seed=0)
    assert ev.status == "ok" and ev.metrics["val_rmse"] < 0.5 * plain.metrics["val_rmse"]
    assert np.allclose(ev.weights["0.mean"], far["train"].mean(dim=0).numpy(), rtol=1e-5)
    rebuilt = build_network(NetworkSpec("mlp", 2, 32, standardize=True), (6,), 1)
    rebuilt.load_state_dict({k: torch.from_numpy(v) for k, v in ev.weights.items()})
    assert isinstance(rebuilt[0], Standardize) and torch.allclose(rebuilt[0].std, torch.from_numpy(ev.weights["0.std"]))
    constant = Standardize((2,))
    constant.fit(torch.tensor([[1.0, 3.0], [1.0, 5.0]]))
    assert constant.std.tolist() == [1.0, 1.0] and constant(torch.tensor([[1.0, 4.0]])).tolist() == [[0.0, 0.0]]


def test_shift_augmentation_moves_each_sample_by_its_own_offset_within_an_eighth_and_fills_with_zeros():
    from ensemble.train import shifted

    x = torch.zeros(64, 1, 16, 16)
    x[:, 0, 8, 8] = 1.0
    moved = shifted(x, torch.Generator().manual_seed(0))
    where = [tuple(torch.nonzero(m[0]).tolist()[0]) for m in moved]
    assert all(abs(r - 8) <= 2 and abs(c - 8) <= 2 for r, c in where) and len(set(where)) > 10  # 16 / 8 = 2 either way
    assert moved.sum() == 64  # nothing but the pixel moved in (zeros fill)
    signal = torch.arange(8.0).repeat(5, 2, 1)  # (5, 2, 8): both channels of a sample move together
    out = shifted(signal, torch.Generator().manual_seed(1))
    assert torch.equal(out[:, 0], out[:, 1])
    ev = train_and_evaluate(NetworkSpec("cnn", 2, 8, head="average"), TrainSpec(1e-2, 32, 4, augment="shift"), data_for((1, 8, 8)), seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.8


def test_downsample_averages_the_input_over_blocks_before_the_first_convolution():
    """A CNN with downsample f convolves the input's f x f block averages (a partial block at an edge: the average of
    what it holds); the classic space has no downsample gene (its genomes as before), a [space] table may declare it."""
    from torch import nn

    net = build_network(NetworkSpec("cnn", 2, 8, downsample=8, head="average"), (3, 250, 250), 4)
    pool = next(m for m in net if isinstance(m, nn.AvgPool2d))
    x = torch.rand(2, 3, 250, 250)
    blocks = pool(x)
    assert blocks.shape == (2, 3, 32, 32) and net(x).shape == (2, 4)
    assert torch.allclose(blocks[:, :, 0, 0], x[:, :, :8, :8].mean(dim=(2, 3)))
    assert torch.allclose(blocks[:, :, 31, 31], x[:, :, 248:, 248:].mean(dim=(2, 3)))  # a 2x2 block at the corner
    assert build_network(NetworkSpec("cnn", 2, 8, downsample=4), (1, 100), 3)(torch.zeros(5, 1, 100)).shape == (5, 3)
    assert NetworkSpec("mlp", 2, 8, downsample=4).canonical() == NetworkSpec("mlp", 2, 8)
    with pytest.raises(ValueError, match="downsample=0"):
        NetworkSpec("cnn", 2, 8, downsample=0)
    assert "downsample" not in parse_space({}).names
    space = parse_space({"family": "cnn", "downsample": [2, 4]})
    network, _ = space.candidate([0.9] * len(space))
    assert network.downsample == 4


def test_the_signal_presets_networks_read_every_channel_of_a_multichannel_series():
    """Genomes of the signal preset for (6, 50) and (6, 100) series build CNNs and RNNs (on the shorter) whose output depends on all 6 channels."""
    from evolve.search.presets import DataFacts, table

    families = {}
    for shape in ((6, 50), (6, 100)):
        space = parse_space(table("signal", DataFacts(shape, "classification", 40))).for_data(shape, "classification")
        rng = np.random.default_rng(0)
        genomes = [np.zeros(len(space)), np.ones(len(space)), *rng.random((6, len(space)))]
        for genome in genomes:
            network, _ = space.candidate(list(genome))
            families.setdefault(shape, set()).add(network.family)
            model = build_network(network, shape, 4).eval()
            x = torch.randn(3, *shape, requires_grad=True)
            out = model(x)
            assert out.shape == (3, 4), network
            out.sum().backward()
            assert (x.grad.abs().sum(dim=(0, 2)) > 0).all(), network  # no channel ignored, none read as a step
    assert families == {(6, 50): {"cnn", "rnn"}, (6, 100): {"cnn"}}  # recurrent networks on short series only
