"""evens report's CSV and figures, and evens status, from a run directory alone."""
import csv
import io
import math
import os

import pytest
from test_checkpoint_report import finished_run

from evolve.app.presentation.report import report
from evolve.app.infra.runlock import LOCK_NAME, RunLock
from evolve.app.commands.status import format_status, status
from evolve.errors import RunDirError
from evolve.runfile import checkpoint


@pytest.fixture
def run_dir(tmp_path):
    state, info = finished_run(budget=20, k=3, fail_every=7)
    folder = tmp_path / "run"
    folder.mkdir()
    checkpoint.save(str(folder / "checkpoint.h5"), state, info)
    return str(folder), state


def test_csv_has_one_row_per_evaluation_with_metrics_genes_and_ensemble_weights(run_dir, capsys):
    folder, state = run_dir
    assert report(folder, csv_path="-") is None  # written to standard output as it is made
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["id"]) for r in rows] == [r.id for r in state.records]  # in the order recorded
    by_id = {r.id: r for r in state.records}
    for row in rows:
        r = by_id[int(row["id"])]
        assert row["status"] == r.status and int(row["worker"]) == r.worker
        assert float(row["fitness"]) == r.fitness or (row["fitness"] == "-inf" and r.fitness == -math.inf)
        assert float(row["started"]) == r.started and row["operators"] == r.operators
        if r.status == "ok":
            assert float(row["val_accuracy"]) == r.metrics["val_accuracy"]  # full precision
        else:
            assert row["val_accuracy"] == "" and "boom" in row["message"]
        assert row["gene_family"] in ("mlp", "cnn") and int(row["gene_depth"]) >= 1
    weights = {int(r["id"]): float(r["ensemble_weight"]) for r in rows}
    assert math.isclose(sum(weights.values()), 1.0) and {i for i, w in weights.items() if w} == set(state.selection.ids)


def test_csv_and_figures_are_written_and_never_replace_a_file_unless_forced(run_dir, tmp_path):
    folder, state = run_dir
    out = tmp_path / "runs.csv"
    text = report(folder, csv_path=str(out), plot_dir=str(tmp_path / "figs"))
    assert f"wrote {out}: 20 evaluations" in text and "wrote 4 figures" in text
    assert "top 10 networks" in text and "not ok, by kind:" in text and "error: 3  (e.g. #0: ValueError: boom" in text
    for name in ("search.png", "ensemble.png", "workers.png", "hyperparameters.png"):
        with open(tmp_path / "figs" / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    before = out.read_text()
    with pytest.raises(RunDirError, match="already exists; refusing to replace it"):
        report(folder, csv_path=str(out))
    with pytest.raises(RunDirError, match="search.png: already exists"):
        report(folder, plot_dir=str(tmp_path / "figs"))
    assert out.read_text() == before
    report(folder, csv_path=str(out), plot_dir=str(tmp_path / "figs"), force=True)


def test_status_of_a_finished_run_and_of_one_a_job_holds(run_dir):
    folder, state = run_dir
    s = status(folder)
    assert s["job"] is None and s["evaluations"] == 20 and s["budget"] == 20 and s["failures"] == {"error": 3}
    assert s["best"]["id"] == max((r for r in state.records if r.status == "ok"), key=lambda r: (r.fitness, -r.id)).id
    text = format_status(s)
    assert "no job holds the run" in text and "evaluations: 20 of 20 (100 %)" in text and "not ok: 3 error" in text
    with RunLock.acquire(folder):
        held = status(folder)
        assert held["job"]["pid"] == str(os.getpid())
        assert f"a job holds the run (host {held['job']['host']}, process {os.getpid()}" in format_status(held)
        # status never takes the lock: a job can start while someone watches
    assert os.path.exists(os.path.join(folder, LOCK_NAME))


def test_csv_has_a_column_for_every_gene_whatever_family_the_first_network_is():
    """The gene columns come from the search space, not from the first record: an MLP first still
    leaves the CNN genes their columns, empty where a gene did not shape the network."""
    from evolve.app.presentation.csv_table import to_csv
    from evolve.engine.state import SearchState
    from evolve.search.records import Record
    from evolve.search.space_config import parse_space

    space = parse_space({"family": ["mlp", "cnn"], "kernel_size": [3, 5, 7], "pooling": ["max", "avg"]})
    family = space.names.index("family")
    genomes = []
    for u in (0.1, 0.9):  # an MLP, then a CNN
        genome = [0.5] * len(space)
        genome[family] = u
        genomes.append(genome)
    state = SearchState.fresh(0)
    state.records = [Record(id=i, genome=g, status="ok", fitness=0.5) for i, g in enumerate(genomes)]
    rows = list(csv.DictReader(io.StringIO(to_csv(state, space))))
    assert {f"gene_{g}" for g in space.names} <= set(rows[0])
    assert rows[0]["gene_family"] == "mlp" and rows[0]["gene_kernel_size"] == "" and rows[0]["gene_pooling"] == ""
    assert rows[1]["gene_family"] == "cnn" and rows[1]["gene_kernel_size"] == "5" and rows[1]["gene_pooling"] in ("max", "avg")
