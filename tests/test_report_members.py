"""evens report names every member of the ensemble (issue 25, defect 4): the top table, then the members
ranked below it; the CSV's and the JSON's ``ensemble_weight`` is each network's share of the picks."""
import csv
import io
import json
import math

from test_checkpoint_report import finished_run

from ensemble.select import Selection
from evolve.app.report import report
from evolve.runfile import checkpoint


def run_with_a_low_ranked_member(tmp_path):
    """A run whose ensemble is its best network once and a hall member ranked far below the top 3 four
    times, as a bagged greedy ensemble leaves it ("#20, #2 x4" in the demo)."""
    state, info = finished_run(budget=20, k=3, candidates=6)
    ranked = sorted((r for r in state.records if r.status == "ok"), key=lambda r: (-r.fitness, r.id))
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


def test_json_and_csv_give_each_networks_share_of_the_picks(tmp_path):
    folder, state, best, low, _ = run_with_a_low_ranked_member(tmp_path)
    top = json.loads(report(folder, top=3, as_json=True))["top"]
    assert [t["rank"] for t in top[:3]] == [1, 2, 3] and {t["id"] for t in top} >= {best, low}
    assert {t["id"]: t["ensemble_weight"] for t in top if t["ensemble_weight"]} == {best: 0.2, low: 0.8}
    assert all("in_ensemble" not in t for t in top)
    rows = list(csv.DictReader(io.StringIO(report(folder, csv_path="-"))))
    assert "in_ensemble" not in rows[0]
    weights = {int(r["id"]): float(r["ensemble_weight"]) for r in rows}
    assert {i: w for i, w in weights.items() if w} == {best: 0.2, low: 0.8} and math.isclose(sum(weights.values()), 1.0)
