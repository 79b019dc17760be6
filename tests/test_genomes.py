"""The paused networks' genomes in a file beside the state file (evolve.runfile.genomes, issue 34): successive halving's
master keeps none in memory, a resume carries on with the file the checkpoint names, and reads the history where that
file is gone or is not the checkpoint's."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from checkpoint_fixture import SPACE
from cli_fixture import SMALL, report
from conftest import ROOT, evens_cmd
from fakes import search_config
from test_proposed import session
from test_resume_memory import KEYS, carry_on, staged

from evolve.engine import memory
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.genomes import ROWS, TOKEN, GenomeFile, genomes_path, open_for, usable


def test_a_row_comes_back_as_written_and_a_reopened_file_is_checked_against_the_checkpoints_word(tmp_path):
    path = str(tmp_path / "c.genomes")
    store = GenomeFile(path, 3)
    store.put(5, [0.25, 0.5, 1.0])
    store.put(2, [0.0, 1e-300, 0.75])
    assert store.get(5) == [0.25, 0.5, 1.0] and store.get(2) == [0.0, 1e-300, 0.75]
    assert store.get(3) is None and store.get(40) is None  # a hole, and past the end
    said = store.memory()
    assert said[ROWS].tolist() == [6] and len(bytes(said[TOKEN])) == 16
    store.sync()
    store.close()
    assert usable(path, said, 3)
    again = open_for(path, said, 3)
    assert again.get(5) == [0.25, 0.5, 1.0] and again.token == bytes(said[TOKEN])
    again.close()
    assert usable(path, {}, 3)  # a memory that counts on no file
    assert not usable(path, said, 4)  # other genes
    assert not usable(path, {**said, TOKEN: np.zeros(16, np.uint8)}, 3)  # another run's file
    assert not usable(path, {**said, ROWS: np.asarray([7])}, 3)  # shorter than the checkpoint says
    assert not usable(str(tmp_path / "gone.genomes"), said, 3)
    with open(path, "r+b") as f:  # a row whose id is not its place's: not taken for the genome asked for
        f.seek(32 + 5 * 32)
        f.write((99).to_bytes(8, "little"))
    assert open_for(path, said, 3).get(5) is None
    fresh = open_for(path, {}, 3)  # a memory without a token: a new file
    assert fresh.token != bytes(said[TOKEN]) and fresh.get(2) is None


@pytest.mark.parametrize("settings", [dict(), dict(eta=2, min_budget=0.25), dict(breeding="model", brood=4)])
def test_a_resume_with_the_genomes_in_the_file_carries_on_as_one_that_read_every_record(tmp_path, settings):
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    session(path, search_config(40, 6, 3, 0, checkpoint_seconds=5, promotion=True, early_stopping=False, **settings), work=staged)
    state, _ = checkpoint.load(path, history=False)
    kept = memory.part(state.memory, "halving")
    assert "paused_genomes" not in kept and TOKEN in kept and usable(genomes_path(path), kept, len(SPACE))
    more = search_config(90, 6, 3, 0, promotion=True, early_stopping=False, **settings)
    whole = carry_on(path, more, True, staged)  # the history, the genomes in memory
    assert session(path, more, state, staged).recorded == whole.recorded
    everything = checkpoint.load(path)[0].records
    assert KEYS(everything) == KEYS(whole.records)  # the same networks, proposed and judged alike
    assert any(r.network >= 0 and r.id > 45 for r in everything)  # promotions after the resume: genomes from the file


def test_a_promotion_whose_genome_is_gone_ends_in_one_line_naming_the_file(tmp_path):
    from evolve.engine.promotion import Halving
    from evolve.errors import RunDirError

    store = GenomeFile(str(tmp_path / "c.genomes"), 3)
    halving = Halving(3, 1 / 9, genomes=store)
    with pytest.raises(RunDirError, match=r"c.genomes: the genome of network 4, paused at a rung, is missing"):
        halving.stage(SearchState.fresh(0), 4, 1)


@pytest.mark.e2e
def test_evens_run_keeps_the_genomes_in_the_file_and_a_resume_without_it_reads_the_history(tmp_path, small_config):
    out = str(tmp_path / "run")
    args = ["--set", "search.promotion=true", "--set", "space.epochs={low = 6, high = 9}", *SMALL]
    first = subprocess.run(evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=8", *args],
                           capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    kept = memory.part(checkpoint.load(os.path.join(out, "checkpoint.h5"), history=False)[0].memory, "halving")
    assert "paused_genomes" not in kept and os.path.getsize(os.path.join(out, "checkpoint.genomes")) > 32
    shutil.move(os.path.join(out, "checkpoint.genomes"), tmp_path / "elsewhere")  # gone: the resume reads the history
    again = subprocess.run(evens_cmd() + ["run", "--resume", out, "--set", "search.evaluations=12"], capture_output=True,
                           text=True, timeout=180, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    final, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    assert report(out)["evaluations"] == 12 and sum(r.network < 0 for r in final.records) == 12
    records = final.by_id()
    assert all(records[r.parents[0]].genome == r.genome for r in final.records if r.network >= 0)
    now = memory.part(final.memory, "halving")
    assert usable(os.path.join(out, "checkpoint.genomes"), now, len(final.records[0].genome)) and \
        bytes(now[TOKEN]) != bytes(kept[TOKEN])  # written again, under a new token


def test_a_link_or_a_folder_in_the_files_place_is_one_line_and_nothing_it_points_to_is_touched(tmp_path):
    from evolve.errors import RunDirError

    target = tmp_path / "precious"
    target.write_bytes(b"the user's")
    path = tmp_path / "c.genomes"
    path.symlink_to(target)
    with pytest.raises(RunDirError, match=r"c.genomes: cannot open the paused networks' genomes \(Too many levels"):
        GenomeFile(str(path), 3)
    assert target.read_bytes() == b"the user's"
    path.unlink()
    path.mkdir()
    with pytest.raises(RunDirError, match=r"c.genomes: cannot open the paused networks' genomes \(Is a directory\)"):
        GenomeFile(str(path), 3)
