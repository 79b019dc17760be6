"""The report's summary as a type (evolve.app.presentation.summary; issue 35): the JSON it gives is the one users read, it reads back
to itself, a key it does not declare is refused, and a network's facts are the record's one-value fields."""
import json

import pytest
from test_checkpoint_report import finished_run
from test_nsga2 import run_info, search

from ensemble.results import kinds
from evolve.app.presentation.report import SCALARS, report, summarize
from evolve.app.run.reselect import select_for_run
from evolve.app.presentation.summary import BestNetwork, ChosenOn, NetworkFacts, ParetoMember, Summary, TopNetwork
from evolve.runfile import checkpoint
from evolve.search.records import Record

# The keys of `evens report --json` and summary.json: users and scripts read these (docs/run-file.md)
ALWAYS = {"run_dir", "problem", "metric", "search_metric", "evaluations", "budget", "status_counts", "pending", "wall_seconds",
          "worker_utilization", "sessions", "space", "data", "hall_of_fame", "chosen_on", "best", "ensemble"}


def test_the_json_of_a_report_reads_back_to_itself_and_holds_the_keys_users_read(tmp_path):
    state, info = finished_run(budget=20, fail_every=5)
    checkpoint.save(str(tmp_path / "checkpoint.h5"), state, info)
    printed = json.loads(report(str(tmp_path), as_json=True))
    assert set(printed) == ALWAYS | {"top", "failures"}  # no early stopping, promotion or front in this run
    assert set(printed["failures"]) == {"error"} and set(printed["failures"]["error"]) == {"count", "example"}
    assert {"val_accuracy", "test_accuracy", "genome", "id", "network", "test_calibration"} <= set(printed["best"])
    assert {"rank", "ensemble_weight", "network", "val_accuracy"} <= set(printed["top"][0]) and "test_calibration" not in printed["top"][0]
    assert set(printed["ensemble"]) >= {"method", "size", "picks", "members", "weights", "curve", "test_uncertainty", "test_calibration",
                                        "val_accuracy", "test_accuracy"}
    assert set(printed["chosen_on"]) == {"rows", "folds", "split", "word", "accuracy_se_max"}
    typed = Summary.from_dict(printed)
    assert isinstance(typed.best, BestNetwork) and isinstance(typed.top[0], TopNetwork) and typed.failures["error"].count == 4
    assert typed.to_dict() == printed
    summary = summarize(state, info, str(tmp_path))
    assert Summary.from_dict(summary.to_dict()) == summary
    assert summary.to_dict() == {k: v for k, v in printed.items() if k not in ("top", "failures")}  # summary.json's


def test_a_front_reads_back_with_its_objective_named_as_before():
    state, _ = search(2, 30)
    info = run_info(30)
    state.selection = select_for_run(state.hall_of_fame, info)
    summary = summarize(state, info, "runs/x")
    front = summary.to_dict()["pareto"]
    assert front and all(set(m) == {"id", "fitness", "params", "network", "genome"} for m in front)
    assert Summary.from_dict(summary.to_dict()) == summary and summary.pareto[0].objective == "params"
    latency = {"id": 4, "fitness": 0.9, "latency_us": 3.5, "network": "mlp depth 1", "genome": {"depth": 1}}
    assert ParetoMember.from_dict(latency).cost == 3.5 and ParetoMember.from_dict(latency).to_dict() == latency


def test_a_key_the_summary_does_not_declare_is_refused_and_an_omitted_one_left_out():
    state, info = finished_run()
    d = summarize(state, info).to_dict()
    with pytest.raises(KeyError, match="evaluation"):
        Summary.from_dict({**d, "evaluation": 1})
    with pytest.raises(KeyError, match="row"):
        ChosenOn.from_dict({**d["chosen_on"], "row": 1})
    with pytest.raises(TypeError):
        Summary.from_dict({k: v for k, v in d.items() if k != "budget"})
    assert "early_stopping" not in d and "promotion" not in d and "pareto" not in d and "top" not in d


def test_a_networks_facts_are_its_records_one_value_fields():
    scalars = {name for name, kind in kinds(Record).items() if kind in SCALARS}
    declared = {f for f in NetworkFacts.__dataclass_fields__ if f not in ("metrics", "genome")}
    assert declared | {"network"} == scalars  # network: the record's id of a first stage (BestNetwork), or words (TopNetwork)
