"""train.loss and train.class_weights: the built-in losses, a user's loss, and balanced class weights."""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import blob_splits
from sklearn.utils.class_weight import compute_class_weight

from ensemble.models import NetworkSpec
from ensemble.problem import Classification, Regression
from ensemble.specs import TrainSpec
from ensemble.train import DeviceData, Head, balanced_weights, train_and_evaluate
from evolve.config.schema import config_from_dict
from evolve.errors import ConfigError

MODELS = os.path.join(os.path.dirname(__file__), "models")


def test_balanced_weights_are_scikit_learns():
    y = np.array([0, 0, 0, 0, 1, 1, 2, 0, 1, 0])
    np.testing.assert_allclose(balanced_weights(y, 3), compute_class_weight("balanced", classes=np.arange(3), y=y))
    assert balanced_weights(np.array([0, 0, 1]), 3)[2] == 1.0  # a class absent from train weighs 1


def test_focal_loss_down_weights_the_samples_already_right():
    torch.manual_seed(0)
    out, target = torch.randn(8, 3) * 3, torch.randint(0, 3, (8,))
    focal = Head(Classification(3), loss="focal").loss(out, target)
    each = F.cross_entropy(out, target, reduction="none")
    p_true = torch.softmax(out, 1).gather(1, target[:, None])[:, 0]
    assert torch.allclose(focal, ((1 - p_true) ** 2 * each).mean()) and focal < F.cross_entropy(out, target)


def test_class_weights_weigh_the_cross_entropy():
    out, target = torch.randn(6, 2), torch.tensor([0, 0, 0, 0, 1, 1])
    weights = balanced_weights(target.numpy(), 2)
    loss = Head(Classification(2), class_weights=weights).loss(out, target)
    assert torch.allclose(loss, F.cross_entropy(out, target, weight=torch.tensor(weights, dtype=torch.float32)))


@pytest.mark.parametrize("name, reference", [("mse", F.mse_loss), ("mae", F.l1_loss), ("huber", F.huber_loss)])
def test_regression_losses(name, reference):
    out, target = torch.randn(5, 2), torch.randn(5, 2)
    assert torch.allclose(Head(Regression((2,), (0.0, 0.0), (1.0, 1.0)), loss=name).loss(out, target), reference(out, target))


def test_a_users_loss_is_imported_by_name_and_trains(monkeypatch):
    monkeypatch.syspath_prepend(MODELS)
    splits = blob_splits((10,), n=(90, 30, 30))
    arrays = {f"{s}/{k}": v for s, (x, y) in splits.items() for k, v in (("x", x), ("y", y))}
    data = DeviceData.from_arrays(arrays, Classification(3), "cpu", loss="user_metrics:squared_hinge", class_weights="balanced")
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 16), TrainSpec(1e-2, 16, 5), data, seed=0)
    assert ev.status == "ok" and ev.metrics["val_accuracy"] > 0.8


@pytest.mark.parametrize("loss, message", [("mse", "train.loss 'mse' is not a classification loss"), ("focal", None)])
def test_a_loss_of_the_other_kind_is_refused(loss, message):
    if message is None:
        Head(Classification(2), loss=loss)
        with pytest.raises(ValueError, match="train.loss 'focal' is not a regression loss"):
            Head(Regression((), (0.0,), (1.0,)), loss=loss)
    else:
        with pytest.raises(ValueError, match=message):
            Head(Classification(2), loss=loss)


def test_an_unknown_loss_or_class_weighting_is_one_line():
    with pytest.raises(ConfigError, match="train.loss must be auto, cross_entropy, focal, mse, mae, huber"):
        config_from_dict({"train": {"loss": "l2"}})
    with pytest.raises(ConfigError, match="train.class_weights must be one of none, balanced"):
        config_from_dict({"train": {"class_weights": "inverse"}})


@pytest.mark.e2e
@pytest.mark.parametrize("loss, weights, message", [
    ("focal", "balanced", None),
    ("mae", "none", "train.loss 'mae' is not a classification loss"),
    ("user_metrics:not_a_tensor", "none", "loss user_metrics:not_a_tensor returned 3; a loss returns a finite scalar tensor"),
])
def test_a_run_with_a_loss_trains_or_ends_in_one_line(tmp_path, loss, weights, message):
    from conftest import ROOT, evens_cmd, launch, tiny_search, write_blobs

    data = write_blobs(tmp_path / "d.h5", sample_shape=(12,))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n\n[train]\nloss = "{loss}"\nclass_weights = "{weights}"\n'
                   + (f'\n[model]\npath = "{MODELS}"\n' if ":" in loss else ""))
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, *tiny_search("['mlp']"), "--set", "search.evaluations=3"], timeout=180, cwd=ROOT)
    if message is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not os.path.exists(out)
