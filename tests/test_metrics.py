"""search.metric: built-in metrics agree with scikit-learn's, a user's metric drives the search, bad ones are one line."""
import os

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, f1_score, log_loss, mean_absolute_error

from ensemble.problem import Classification, Regression, problem_for, problem_from_dict
from evolve.config.schema import config_from_dict
from evolve.errors import ConfigError

MODELS = os.path.join(os.path.dirname(__file__), "models")


def random_probabilities(rng, n, c):
    p = rng.random((n, c)) ** 3
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_agree_with_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 4, 60), random_probabilities(rng, 60, 5)  # class 4 is never true: macro F1 still counts it if predicted
    labels = np.argmax(p, axis=1)
    assert Classification(5, "balanced_accuracy").scores(p, y)["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, labels))
    assert Classification(5, "macro_f1").scores(p, y)["macro_f1"] == pytest.approx(f1_score(y, labels, average="macro", labels=sorted(set(y) | set(labels))))
    assert Classification(5, "log_loss").scores(p, y)["loss"] == pytest.approx(log_loss(y, p, labels=range(5)))


def test_regression_mae_and_the_direction_of_each_metric():
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    problem = Regression((2,), (0.0, 0.0), (1.0, 1.0), "mae")
    scores = problem.scores(pred, y)
    assert scores["mae"] == pytest.approx(mean_absolute_error(y, pred)) and {"rmse", "r2"} <= set(scores)
    assert problem.fitness(scores) == -scores["mae"] and problem.better(0.1, 0.2)
    r2 = Regression((2,), (0.0, 0.0), (1.0, 1.0), "r2")
    assert r2.fitness(scores) == scores["r2"] and r2.better(0.9, 0.1)
    logloss = Classification(3, "log_loss")
    assert logloss.metric_key == "loss" and logloss.fitness({"accuracy": 1.0, "loss": 0.3}) == -0.3


def test_a_problem_keeps_its_metric_through_the_run_file():
    for problem in (Classification(4, "macro_f1"), Regression((), (1.0,), (2.0,), "mae")):
        assert problem_from_dict(problem.to_dict()) == problem
    assert problem_for("classification", np.zeros(3), 3).metric == "accuracy" and problem_for("regression", np.arange(5.0)).metric == "rmse"


def test_a_users_metric_is_imported_by_name_and_says_its_direction(monkeypatch):
    monkeypatch.syspath_prepend(MODELS)
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 3, 40), random_probabilities(rng, 40, 3)
    problem = Classification(3, "user_metrics:top2_accuracy")
    scores = problem.scores(p, y)
    assert problem.metric_key == "top2_accuracy" and scores["top2_accuracy"] >= scores["accuracy"] and problem.higher_is_better
    worst = problem_for("regression", np.array([0.0, 2.0]), metric="user_metrics:worst_error")
    assert not worst.higher_is_better and worst.fitness(worst.scores(np.array([1.0, 3.0]), np.array([1.0, 1.0]))) == -2.0
    assert problem_from_dict(worst.to_dict()) == worst and not problem_from_dict(worst.to_dict()).higher_is_better


@pytest.mark.parametrize("metric, message", [
    ("f1", "search.metric must be auto, accuracy, balanced_accuracy, macro_f1, log_loss, rmse, mae, r2, or a function as 'module:function'"),
    ("nets/x.py:f", "search.metric must be auto"),
])
def test_an_unknown_metric_is_one_line(metric, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"search": {"metric": metric}})


def test_a_metric_of_the_other_kind_of_problem_is_refused():
    with pytest.raises(ValueError, match="search.metric 'rmse' is not a classification metric"):
        Classification(3, "rmse")


def small_config(tmp_path, metric: str) -> str:
    from conftest import write_blobs

    data = write_blobs(tmp_path / "d.h5", sample_shape=(12,), classes=4)
    cfg = tmp_path / "m.toml"
    model = f'[model]\npath = "{MODELS}"\n' if ":" in metric else ""
    cfg.write_text(f'''[data]
path = "{data}"

{model}
[search]
evaluations = 4
population = 3
metric = "{metric}"

[train]
threads = 1

[space]
family = ["mlp"]
width = [4, 8]
epochs = {{ low = 1, high = 2 }}
''')
    return str(cfg)


@pytest.mark.e2e
def test_the_search_optimises_a_users_metric_and_the_report_and_predict_show_it(tmp_path):
    import subprocess

    import h5py
    from cli_fixture import report
    from conftest import ROOT, evens_cmd, launch

    cfg, out = small_config(tmp_path, "user_metrics:top2_accuracy"), str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", cfg, "--out", out], timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    s = report(out)
    assert s["search_metric"] == {"name": "user_metrics:top2_accuracy", "key": "top2_accuracy", "higher_is_better": True}
    assert s["best"]["fitness"] == s["best"]["val_top2_accuracy"]
    assert "top2_accuracy: val" in subprocess.run(evens_cmd() + ["report", out], capture_output=True, text=True, cwd=ROOT).stdout
    data = str(tmp_path / "d.h5")
    proc = launch(1, evens_cmd() + ["predict", out, data, "--split", "test", "--out", str(tmp_path / "p.h5"), "--model-path", MODELS],
                  timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "top2_accuracy" in proc.stdout, proc.stderr
    with h5py.File(tmp_path / "p.h5") as f:
        assert float(f.attrs["top2_accuracy"]) == s["ensemble"]["test_top2_accuracy"]
    # choosing the ensemble again by the run's metric imports it only from --model-path, saying so first; never from
    # what else is importable, nor from the current folder (which `python -m` puts first on sys.path)
    select = evens_cmd() + ["select", out, "--size", "3"]
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "user_metrics.py").write_text(f"open({str(planted / 'ran')!r}, 'w').close()\n")
    for cwd, extra in ((ROOT, {"PYTHONPATH": os.pathsep.join([ROOT, MODELS])}), (planted, {"PYTHONPATH": ROOT})):
        proc = subprocess.run(select, capture_output=True, text=True, timeout=60, cwd=cwd, env={**os.environ, **extra})
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        assert proc.stderr.splitlines() == [f"evens: error: {out}: the run's search.metric user_metrics:top2_accuracy is code of yours, and "
                                            "evens select imports no code that a run file names unless told where from: give --model-path "
                                            "DIR, the folder of user_metrics"], proc.stderr
    assert not (planted / "ran").exists()
    proc = subprocess.run(select + ["--model-path", MODELS], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == "evens: importing user_metrics (the run's metric user_metrics:top2_accuracy)", proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("metric, message", [
    ("user_metrics:broken", "metric user_metrics:broken returned nan; a metric returns a finite number"),
    ("rmse", "search.metric 'rmse' is not a classification metric"),
    ("no_metrics_module:f", "metric no_metrics_module:f: no module named 'no_metrics_module'"),
])
def test_a_bad_metric_ends_the_job_in_one_line_before_any_data_moves(tmp_path, metric, message):
    from conftest import ROOT, evens_cmd, launch

    cfg, out = small_config(tmp_path, metric), str(tmp_path / "run")
    proc = launch(3, evens_cmd() + ["run", cfg, "--out", out], timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not os.path.exists(out)


def test_calibration_error_is_zero_for_calibrated_probabilities_and_large_for_overconfident_ones():
    rng = np.random.default_rng(0)
    n, problem = 20000, Classification(2)
    confidence = rng.uniform(0.5, 1.0, n)
    y = (rng.random(n) > confidence).astype(np.int64)  # class 0 is right with exactly its stated probability
    calibrated = np.stack([confidence, 1 - confidence], axis=1)
    assert problem.calibration(calibrated, y)["ece"] < 0.01
    overconfident = np.stack([np.full(n, 0.99), np.full(n, 0.01)], axis=1)  # says 0.99, right about 0.75 of the time
    result = problem.calibration(overconfident, y)
    assert abs(result["ece"] - (0.99 - np.mean(y == 0))) < 1e-9 and result["nll"] == problem.scores(overconfident, y)["loss"]
