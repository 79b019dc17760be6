"""evens report names every member of the ensemble (issue 25, defect 4): the top table, then the members
ranked below it; the CSV's and the JSON's ``ensemble_weight`` is each network's share of the picks. Networks
tied on fitness rank by validation loss (evolve.search.records.best_first)."""
import csv
import io
import json
import math

from test_checkpoint_report import finished_run

from ensemble.select import Selection
from evolve.app.presentation.report import report, summarize, top_networks
from evolve.runfile import checkpoint
from evolve.search.records import Record, best_first


def run_with_a_low_ranked_member(tmp_path):
    """A run whose ensemble is its best network once and a hall member ranked far below the top 3 four
    times, as a bagged greedy ensemble leaves it ("#20, #2 x4" in the demo)."""
    state, info = finished_run(budget=20, k=3, candidates=6)
    ranked = sorted((r for r in state.records if r.status == "ok"), key=best_first)
    rank = {r.id: i for i, r in enumerate(ranked, 1)}
    low = max(state.hall_of_fame.ids, key=rank.get)
    assert rank[low] > 3
    state.selection = Selection("greedy", 5, (ranked[0].id, low, low, low, low), 5, (0.5,) * 5, (0.5,) * 5)
    checkpoint.save(str(tmp_path / "checkpoint.h5"), state, info)
    return str(tmp_path), state, ranked[0].id, low, rank[low]


def test_the_report_lists_every_member_of_the_ensemble_with_its_picks(tmp_path):
    folder, state, best, low, low_rank = run_with_a_low_ranked_member(tmp_path)
    text = report(folder, top=3)
    assert f"#{best}, #{low} x4" in text  # the summary's line
    table = text[text.index("top 3 networks"):text.index("not ok")].splitlines()
    rows = {line.split()[0]: line.split() for line in table[2:] if line.strip().startswith(("*#", "#"))}
    assert f"*#{best}" in rows and f"*#{low}" in rows
    assert "picks of the 5" in table[0]
    assert rows[f"*#{low}"][1] == str(low_rank) and rows[f"*#{low}"][6] == "4" and rows[f"*#{best}"][6] == "1"
    assert "and the ensemble's other 1 member:" in table[-2]


def test_json_and_csv_give_each_networks_share_of_the_picks(tmp_path, capsys):
    folder, state, best, low, _ = run_with_a_low_ranked_member(tmp_path)
    top = json.loads(report(folder, top=3, as_json=True))["top"]
    assert [t["rank"] for t in top[:3]] == [1, 2, 3] and {t["id"] for t in top} >= {best, low}
    assert {t["id"]: t["ensemble_weight"] for t in top if t["ensemble_weight"]} == {best: 0.2, low: 0.8}
    assert all("in_ensemble" not in t for t in top)
    report(folder, csv_path="-")
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert "in_ensemble" not in rows[0]
    weights = {int(r["id"]): float(r["ensemble_weight"]) for r in rows}
    assert {i: w for i, w in weights.items() if w} == {best: 0.2, low: 0.8} and math.isclose(sum(weights.values()), 1.0)


def test_networks_tied_on_fitness_rank_by_validation_loss_then_id():
    state, info = finished_run(budget=20, k=3, candidates=6)
    ok = sorted((r for r in state.records if r.status == "ok"), key=lambda r: (-r.fitness, r.id))
    first = ok[0]
    later = max(ok, key=lambda r: r.id)  # a later network, worse until it is made to tie
    assert later.id > first.id
    later.fitness = first.fitness  # a tie at the top, as accuracy on a small validation split gives
    later.metrics = {**later.metrics, "val_loss": first.metrics["val_loss"] / 2}
    assert summarize(state, info).best.id == later.id
    assert [t.id for t in top_networks(state, info.space(), 2)][:2] == [later.id, first.id]
    later.metrics["val_loss"] = first.metrics["val_loss"]  # equal loss too: the earlier id
    assert summarize(state, info).best.id == first.id


def test_best_first_puts_a_record_without_a_validation_loss_after_one_with_it():
    a = Record(id=3, genome=[0.5], status="ok", fitness=0.9, metrics={"val_loss": 0.4})
    b = Record(id=1, genome=[0.5], status="ok", fitness=0.9, metrics={"val_loss": math.nan})
    c = Record(id=2, genome=[0.5], status="ok", fitness=0.9)
    d = Record(id=9, genome=[0.5], status="ok", fitness=0.95, metrics={"val_loss": 9.0})
    assert [r.id for r in sorted([a, b, c, d], key=best_first)] == [9, 3, 1, 2]
