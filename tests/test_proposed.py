"""The networks proposed, as hashes appended to a file beside the state file at each checkpoint (evolve.runfile.proposed,
issue 34): a checkpoint writes only what was proposed since the last, a resume carries on from the file the checkpoint
names, and reads the history where that file is gone, short or another run's."""
import os
import shutil
import subprocess
from dataclasses import replace

import h5py
import numpy as np
import pytest
from checkpoint_fixture import SPACE, info
from cli_fixture import SMALL, report
from conftest import ROOT, evens_cmd
from fakes import search_config
from test_resume_memory import KEYS, carry_on, flaky

from evolve.engine import memory
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint, genomes, proposed
from evolve.runfile.proposed import COUNT, CRC, TOKEN, ProposedLog, proposed_path
from evolve.search.keyset import KeySet
from evolve.transport.protocol import InProcessTransport


def test_the_file_appends_and_a_reopened_one_drops_what_no_checkpoint_counted(tmp_path):
    path = str(tmp_path / "c.proposed")
    log = ProposedLog(path)
    log.append(np.asarray([5, -3, 2**62], dtype=np.int64))
    said = {f"seen_{k}": v for k, v in log.memory().items()}
    log.append(np.asarray([7], dtype=np.int64))  # appended for a checkpoint that never committed
    log.sync()
    log.close()
    assert said[COUNT].tolist() == [3] and os.path.getsize(path) == 32 + 4 * 8
    assert proposed.usable(path, said) and proposed.read_for(path, said).tolist() == [-3, 5, 2**62]
    again = proposed.open_for(path, said)
    assert os.path.getsize(path) == 32 + 3 * 8 and again.count == 3  # the hash no checkpoint counted is gone
    again.append(np.asarray([-3, 9], dtype=np.int64))  # a repeat is harmless: read back once
    grown = {f"seen_{k}": v for k, v in again.memory().items()}
    again.close()
    assert proposed.read_for(path, grown).tolist() == [-3, 5, 9, 2**62]
    assert proposed.read_for(path, {**grown, CRC: said[CRC]}) is None  # not the hashes the checkpoint counted
    assert proposed.usable(path, {})  # a memory that counts on no file
    assert not proposed.usable(path, {**said, TOKEN: np.zeros(16, np.uint8)})  # another run's file
    assert not proposed.usable(path, {**said, COUNT: np.asarray([6])})  # shorter than the checkpoint says
    assert not proposed.usable(str(tmp_path / "gone.proposed"), said)
    fresh = proposed.open_for(path, {})
    assert fresh.count == 0 and fresh.token != bytes(said[TOKEN]) and os.path.getsize(path) == 32


def test_a_journaled_set_gives_its_log_only_what_was_added_since_the_last_checkpoint(tmp_path):
    held = KeySet(range(100), hasher=lambda k: k * 7919)
    log = ProposedLog(str(tmp_path / "c.proposed"))
    held.journal(log)  # a new file: everything held goes in at the first checkpoint
    assert held.memory("seen").keys() == {"seen_token", "seen_count", "seen_crc32"} and log.count == 100
    held.update(range(100, 130))
    held.add(5)  # one it holds
    assert held.memory("seen")["seen_count"].tolist() == [131] and held.memory("seen")["seen_count"].tolist() == [131]
    said = {f"seen_{k}": v for k, v in log.memory().items()}
    log.sync()
    assert proposed.read_for(log.path, said).tolist() == held.hashes().tolist() == sorted(k * 7919 for k in range(130))
    assert KeySet(range(3)).memory("seen")["seen"].tolist() == [0, 1, 2]  # without a log: every hash, as before


def session(path, config, state=None, work=flaky):
    """As evens run: the side files beside the state file (the networks proposed; with promotion, the paused networks'
    genomes), synced before each checkpoint, the records let go after it."""
    state = state or SearchState.fresh(0, candidates=3)
    run = replace(info(), config=replace(config, space=info().config.space))
    remembered = memory.carried(state) or {}
    log = proposed.open_for(proposed_path(path), memory.part(remembered, "strategy"))
    store = genomes.open_for(genomes.genomes_path(path), memory.part(remembered, "halving"), len(SPACE)) if config.search.promotion else None
    sides = [side for side in (log, store) if side is not None]

    def save(s):
        for side in sides:
            side.sync()
        checkpoint.save(path, s, run)
        s.let_go()

    run_search(state, InProcessTransport(work, 2), SPACE, config, checkpoint=save, clock=lambda: float(state.recorded), proposed=log,
               genomes=store)
    save(state)
    for side in sides:
        side.close()
    return state


@pytest.mark.parametrize("settings", [dict(), dict(mode="generational"), dict(mode="nsga2")])
def test_a_resume_with_the_hashes_in_the_file_carries_on_as_one_that_read_every_record(tmp_path, settings):
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    session(path, search_config(40, 6, 3, 0, checkpoint_seconds=5, early_stopping=False, **settings))
    with h5py.File(path, "r") as f:
        assert "strategy.seen" not in f["master"] and "strategy.seen_token" in f["master"]  # not written whole
    size = os.path.getsize(proposed_path(path))
    state, _ = checkpoint.load(path, history=False)
    kept = memory.part(state.memory, "strategy")
    assert 40 <= kept["seen_count"][0] and size == 32 + 8 * kept["seen_count"][0] and len(kept["seen"]) >= 40
    more = search_config(90, 6, 3, 0, early_stopping=False, **settings)
    whole = carry_on(path, more, True, flaky)  # the history, the hashes rebuilt from every record
    assert session(path, more, state).recorded == whole.recorded
    everything = checkpoint.load(path)[0].records
    assert KEYS(everything) == KEYS(whole.records)  # the same networks, proposed and judged alike
    grown = os.path.getsize(proposed_path(path))
    assert 32 + 8 * 90 <= grown < 32 + 8 * 130  # each network appended about once, not the whole set at every checkpoint


def test_a_resume_whose_file_is_gone_or_short_reads_the_history(tmp_path):
    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    session(path, search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False))
    assert memory.part(checkpoint.load(path, history=False)[0].memory, "strategy")["seen_count"][0] >= 20
    with open(proposed_path(path), "r+b") as f:
        f.seek(32 + 8 * 3)
        f.write(b"\xff")  # a damaged hash
    assert checkpoint.load(path, history=False)[0].memory == {}  # the memory cannot carry on: a resume reads the history
    with open(proposed_path(path), "r+b") as f:
        f.truncate(32 + 8 * 5)
    assert checkpoint.load(path, history=False)[0].memory == {}
    os.remove(proposed_path(path))
    assert checkpoint.load(path, history=False)[0].memory == {}


@pytest.mark.e2e
def test_evens_run_appends_the_networks_proposed_and_a_resume_without_the_file_reads_the_history(tmp_path, small_config):
    out = str(tmp_path / "run")
    first = subprocess.run(evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=8", *SMALL],
                           capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    path = os.path.join(out, "checkpoint.h5")
    kept = memory.part(checkpoint.load(path, history=False)[0].memory, "strategy")
    assert kept["seen_count"][0] >= 8 and os.path.getsize(proposed_path(path)) == 32 + 8 * kept["seen_count"][0]
    shutil.move(proposed_path(path), tmp_path / "elsewhere")  # gone: the resume reads the history, and writes a new file
    again = subprocess.run(evens_cmd() + ["run", "--resume", out, "--set", "search.evaluations=12"], capture_output=True,
                           text=True, timeout=180, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert report(out)["evaluations"] == 12
    now = memory.part(checkpoint.load(path, history=False)[0].memory, "strategy")
    assert bytes(now[TOKEN]) != bytes(kept[TOKEN]) and now[COUNT][0] >= 12 and len(set(now["seen"].tolist())) == len(now["seen"])


def test_a_link_in_the_files_place_is_one_line_and_what_it_points_to_is_untouched(tmp_path):
    from evolve.errors import RunDirError

    target = tmp_path / "precious"
    target.write_bytes(b"the user's")
    path = tmp_path / "c.proposed"
    path.symlink_to(target)
    with pytest.raises(RunDirError, match=r"c.proposed: cannot open the hashes of the networks proposed \(Too many levels"):
        ProposedLog(str(path))
    assert target.read_bytes() == b"the user's"


def test_networks_out_when_the_search_resumed_go_into_the_file_though_sent_after_its_checkpoint(tmp_path):
    """The in-flight log gives a resume the networks sent after the last checkpoint: they are out, so proposed, though
    the file the checkpoint names does not hold them; its next checkpoint appends them (else a later resume would
    propose them again, as a design that killed its worker twice was)."""
    from evolve.search.records import Pending

    path = str(tmp_path / "run" / "checkpoint.h5")
    os.makedirs(os.path.dirname(path))
    session(path, search_config(20, 6, 3, 0, checkpoint_seconds=5, early_stopping=False))
    state, _ = checkpoint.load(path, history=False)
    late = [0.123] * len(SPACE)  # sent after the checkpoint (as merge_into makes it from the in-flight log)
    state.pending.append(Pending(id=state.next_id, genome=late, parents=(-1, -1), operators="random", attempts=1))
    state.next_id += 1
    assert SPACE.key_hash(SPACE.key(late)) not in memory.part(state.memory, "strategy")["seen"].tolist()
    session(path, search_config(30, 6, 3, 0, checkpoint_seconds=5, early_stopping=False), state)
    kept = memory.part(checkpoint.load(path, history=False)[0].memory, "strategy")
    assert SPACE.key_hash(SPACE.key(late)) in kept["seen"].tolist()
