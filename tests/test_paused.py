"""A training in stages (successive halving's promotion) gives the unbroken training's network, bit for bit."""
import math

import numpy as np
import pytest
import torch

from ensemble.paused import Paused
from ensemble.problem import Classification
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, Watch, train_and_evaluate


def data_for(shape, n=70, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, rows in (("train", n), ("val", 24), ("test", 24)):
        arrays[f"{split}/x"] = rng.normal(size=(rows, *shape)).astype(np.float32)
        arrays[f"{split}/y"] = rng.integers(0, 3, rows)
    return DeviceData.from_arrays(arrays, Classification(3))


CASES = [  # every optimizer and schedule, dropout (torch's global stream), batch norm (buffers), augmentation (the batch generator)
    ((8,), NetworkSpec("mlp", 2, 16, dropout=0.3, activation="gelu"),
     TrainSpec(3e-3, 16, 9, optimizer="adam", schedule="cosine", warmup=0.2)),
    ((1, 20), NetworkSpec("cnn", 2, 8, norm="batch", pooling="avg"),
     TrainSpec(1e-2, 8, 7, optimizer="sgd", schedule="one_cycle", augment="shift", weight_decay=1e-4)),
    ((8,), NetworkSpec("mlp", 1, 32, norm="layer", residual=True),
     TrainSpec(1e-3, 32, 6, optimizer="rmsprop", weight_decay=1e-3)),
    ((8,), NetworkSpec("mlp", 3, 16, dropout=0.1, norm="batch"),
     TrainSpec(2e-3, 10, 8, optimizer="adamw", label_smoothing=0.1, schedule="cosine")),
]


def _keep_all(fitness, loss):
    return True


@pytest.mark.parametrize("shape, network, training", CASES)
def test_stages_give_the_unbroken_training_bit_for_bit(shape, network, training):
    data = data_for(shape)
    whole = train_and_evaluate(network, training, data, seed=11, keep=_keep_all)
    first = train_and_evaluate(network, training, data, seed=11, until=2)
    assert first.status == "paused" and first.epochs_done == 2 and first.paused is not None and math.isfinite(first.fitness)
    second = train_and_evaluate(network, training, data, seed=11, until=5, resume=Paused.from_arrays(dict(first.paused)))
    assert second.status == "paused" and second.epochs_done == 3  # trained in this stage: epochs 3 to 5
    last = train_and_evaluate(network, training, data, seed=11, keep=_keep_all, resume=Paused.from_arrays(second.paused))
    assert last.status == "ok" and last.epochs_done == training.epochs - 5 and whole.epochs_done == training.epochs
    assert whole.weights.keys() == last.weights.keys()
    for name in whole.weights:
        assert np.array_equal(whole.weights[name], last.weights[name]), name
    assert np.array_equal(whole.val_pred, last.val_pred) and np.array_equal(whole.test_pred, last.test_pred)
    assert last.fitness == whole.fitness


def test_a_paused_fitness_is_the_unbroken_trainings_at_that_epoch_and_the_curve_carries_on():
    data = data_for((8,))
    network, training = CASES[0][1], CASES[0][2]
    watch = Watch(stop_below=(math.nan,) * training.epochs)  # the curve measured every epoch, nothing stopped
    whole = train_and_evaluate(network, training, data, seed=3, watch=watch)
    first = train_and_evaluate(network, training, data, seed=3, watch=watch, until=4)
    assert first.fitness == whole.curve[3]
    last = train_and_evaluate(network, training, data, seed=3, watch=watch, resume=Paused.from_arrays(first.paused))
    assert last.curve == whole.curve


def test_a_pause_at_or_past_the_last_epoch_is_the_whole_training():
    data = data_for((8,))
    network, training = CASES[2][1], CASES[2][2]
    ev = train_and_evaluate(network, training, data, seed=0, until=training.epochs + 3, keep=_keep_all)
    assert ev.status == "ok" and ev.paused is None and ev.epochs_done == training.epochs


def test_a_paused_state_is_named_arrays_and_refuses_what_is_not_one():
    data = data_for((8,))
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 8), TrainSpec(1e-3, 16, 4), data, seed=0, until=1)
    arrays = ev.paused
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    assert {"epoch", "curve", "rng/batches", "rng/torch"} <= set(arrays) and any(k.startswith("opt/") for k in arrays)
    with pytest.raises(ValueError, match="unknown 'x/y'"):
        Paused.from_arrays({**arrays, "x/y": np.zeros(1)})
    with pytest.raises(ValueError, match="need its random streams"):
        Paused.from_arrays({k: v for k, v in arrays.items() if k != "rng/torch"})
    with pytest.raises(ValueError, match="do not fit this network"):
        train_and_evaluate(NetworkSpec("mlp", 2, 8), TrainSpec(1e-3, 16, 4), data, seed=0, resume=Paused.from_arrays(arrays))


def test_a_staged_training_leaves_the_callers_random_stream_as_the_unbroken_one_does():
    data = data_for((8,))
    network, training = CASES[0][1], CASES[0][2]
    train_and_evaluate(network, training, data, seed=5)
    after_whole = torch.get_rng_state()
    first = train_and_evaluate(network, training, data, seed=5, until=3)
    train_and_evaluate(network, training, data, seed=5, resume=Paused.from_arrays(first.paused))
    assert torch.equal(torch.get_rng_state(), after_whole)


def test_the_cache_holds_paused_trainings_up_to_its_bytes_and_lets_the_oldest_go_first():
    from ensemble.paused import PausedCache

    data = data_for((8,))
    arrays = train_and_evaluate(NetworkSpec("mlp", 1, 8), TrainSpec(1e-3, 16, 4), data, seed=0, until=1).paused
    size = sum(a.nbytes for a in arrays.values())
    cache = PausedCache(max_bytes=2 * size)
    cache.put((1, ()), arrays)
    cache.put((2, ()), arrays)
    cache.put((1, ()), arrays)  # held again: once, and now the most recent
    assert len(cache) == 2 and cache.bytes == 2 * size
    cache.put((3, ()), arrays)  # one too many: the least recently paused (2) goes
    assert cache.take((2, ())) is None and cache.take((1, ())).epoch == 1 and cache.take((3, ())) is not None
    assert (cache.hits, cache.misses, len(cache), cache.bytes) == (2, 1, 0, 0)
    PausedCache(max_bytes=size - 1).put((4, ()), arrays)  # larger than the whole cache: not kept (and no error)
