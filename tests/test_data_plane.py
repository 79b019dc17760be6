"""The streaming data plane under real MPI: pretend nodes so that several leaders really broadcast,
chunk sizes that do not divide the arrays, a small message limit standing in for the 2 GiB one,
checksums that catch a flipped byte, and compressed input; and shard mode (each pretend node its own
part of train): parts disjoint and covering, the same bytes on every rank of a node, val and test
whole, the fingerprint of replicate mode, the root's memory bounded, and end-to-end runs."""
import json
import os
import re
import subprocess
import sys
import zlib

import h5py
import numpy as np
import pytest
from conftest import MPI_PROGRAMS, ROOT, blob_splits, evens_cmd, launch, tiny_search, write_blobs, write_regression

from data_bcast import load_dataset, write_dataset
from data_bcast.broadcast import fingerprint
from data_bcast.layout import ArraySpec, plan_chunks, plan_layout
from ensemble.problem import Regression
from evolve.runfile import checkpoint

pytestmark = pytest.mark.mpi


def run_prog(ranks, program, *args, env=None, timeout=120):
    return launch(ranks, [sys.executable, os.path.join(MPI_PROGRAMS, program), *args], timeout=timeout, env=env)


def expected_fingerprint(path, **kw):
    _, arrays = load_dataset(path, **kw)
    return fingerprint({name: zlib.crc32(a.tobytes()) for name, a in arrays.items()})


@pytest.mark.parametrize("ranks, nodes", [(2, 2), (3, 2), (4, 2), (4, 3)])
@pytest.mark.parametrize("limit", ["", "700"])
def test_pretend_nodes_get_identical_bytes_and_the_fingerprint_verifies(tmp_path, ranks, nodes, limit):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 17), n=(101, 13, 7), classes=5)
    env = {"EVENS_SIMULATED_NODES": str(nodes), "EVENS_MAX_MESSAGE_BYTES": limit}
    proc = run_prog(ranks, "prog_broadcast.py", path, "shared", "1000", env=env)  # 1000 divides no array
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["same_data"] and report["worker_opens"] == 0
    assert report["leaders"] == nodes  # every pretend node's leader took part in the broadcast
    assert report["stats"]["fingerprint"] == expected_fingerprint(path)
    chunks = report["stats"]["chunks"]
    assert chunks == len(plan_chunks(plan_layout([ArraySpec(*s) for s in _specs(path)]), int(limit or 1000)))


def _specs(path):
    from data_bcast.h5file import inspect_file

    return [s.as_tuple() for s in inspect_file(path).specs]


def test_the_holdout_streams_too(tmp_path):
    path = write_blobs(tmp_path / "t.h5", sample_shape=(6,), n=(300,), splits=("train",))
    proc = run_prog(3, "prog_broadcast.py", path, "shared", "256", env={"EVENS_SIMULATED_NODES": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["stats"]["fingerprint"] == expected_fingerprint(path)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_flipped_byte_is_caught_by_the_leaders_on_every_rank(tmp_path, ranks):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 17), n=(101, 13, 7), classes=5)
    env = {"EVENS_SIMULATED_NODES": str(ranks), "EVENS_MAX_MESSAGE_BYTES": "1000", "EVENS_TEST_FLIP_CHUNK": "3"}
    proc = run_prog(ranks, "prog_bad_data.py", path, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every rank raised the same DataError
    assert "the data arrived damaged: chunk 3 of train/x" in proc.stdout
    assert re.search(r"\(rank [1-9]\d* on [^)]+\)", proc.stdout), proc.stdout  # where: a leader that received it, not the root


def test_compressed_and_chunked_input_gives_the_same_arrays(tmp_path):
    splits = blob_splits((1, 8, 8), (200, 50, 50), classes=4, dtype=np.uint8)
    plain = tmp_path / "plain.h5"
    packed = tmp_path / "packed.h5"
    with h5py.File(plain, "w") as f, h5py.File(packed, "w") as g:
        for split, (x, y) in splits.items():
            f[f"{split}/x"], f[f"{split}/y"] = x, y
            g.create_dataset(f"{split}/x", data=x, chunks=(7, 1, 8, 8), compression="gzip", compression_opts=6, shuffle=True)
            g.create_dataset(f"{split}/y", data=y, chunks=(13,), compression="lzf")
    assert expected_fingerprint(str(packed)) == expected_fingerprint(str(plain))
    proc = run_prog(3, "prog_broadcast.py", str(packed), "shared", "999", env={"EVENS_SIMULATED_NODES": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["stats"]["fingerprint"] == expected_fingerprint(str(plain))


# Shard mode: each pretend node gets its own round-robin part of train; val and test stay whole.


def run_shards(path, ranks, nodes, *, chunk="1000", mode="shared", root_trains="1", limit=""):
    env = {"EVENS_SIMULATED_NODES": str(nodes), "EVENS_MAX_MESSAGE_BYTES": limit}
    proc = run_prog(ranks, "prog_shard.py", path, mode, chunk, root_trains, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_shards(path, report, nodes_with_shards):
    """Every rank holds exactly its node's rows of train, bit for bit; the nodes' parts are disjoint and
    cover train; val and test are whole everywhere; nobody but the root opened the file."""
    _, truth = load_dataset(path)
    crc = {name: zlib.crc32(a.tobytes()) for name, a in truth.items()}
    ranks = report["ranks"]
    by_node = {}
    for fact in ranks:
        by_node.setdefault(fact["node"], []).append(fact)
        assert fact["opened"] == [] and fact["shards"] == nodes_with_shards
        for name in ("val/x", "val/y", "test/x", "test/y"):
            assert fact["checksums"][name] == crc[name], (fact["rank"], name)
        rows = np.array(fact["members"], dtype=np.int64)
        for name in ("train/x", "train/y"):
            assert fact["shapes"][name] == [len(rows)] + list(truth[name].shape[1:])
            assert fact["checksums"][name] == zlib.crc32(truth[name][rows].tobytes()), (fact["rank"], name)
    for facts in by_node.values():  # one node, one shard, the same bytes on each of its ranks
        assert len({(f["shard"], json.dumps(f["checksums"], sort_keys=True)) for f in facts}) == 1
    shards = {facts[0]["shard"]: facts[0]["members"] for facts in by_node.values() if facts[0]["shard"] >= 0}
    assert sorted(shards) == list(range(nodes_with_shards))
    dealt = sorted(r for members in shards.values() for r in members)
    assert dealt == list(range(len(truth["train/y"])))  # disjoint (no row twice) and covering (every row)
    assert report["stats"]["fingerprint"] == expected_fingerprint(path)  # the same as replicate mode's
    return by_node


@pytest.mark.parametrize("ranks, nodes", [(2, 2), (3, 2), (3, 3), (4, 2), (4, 3), (4, 4)])
def test_shards_are_disjoint_cover_train_and_every_rank_of_a_node_sees_its_bytes(tmp_path, ranks, nodes):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 17), n=(101, 13, 7), classes=5)
    report = run_shards(path, ranks, nodes)  # 1000-byte chunks divide no array, nor a node's part of one
    by_node = check_shards(path, report, nodes)
    assert len(by_node) == nodes
    assert all(f["sees_leader_write"] for f in report["ranks"])  # one shared host copy per node
    assert report["stats"]["shards"] == nodes and report["stats"]["chunks"] > nodes


def test_shards_with_a_small_message_limit_rows_bigger_than_a_chunk_and_private_copies(tmp_path):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 17), n=(101, 13, 7), classes=5)
    check_shards(path, run_shards(path, 4, 2, limit="700"), 2)  # chunks of 700 bytes: 3 rows of 204 each
    check_shards(path, run_shards(path, 3, 2, chunk="150"), 2)  # each 204-byte row goes in two pieces
    report = run_shards(path, 4, 2, mode="private")
    check_shards(path, report, 2)
    assert [f["sees_leader_write"] for f in report["ranks"]] == [True, True, False, False]  # private copies


def test_a_node_holding_only_the_root_gets_no_shard_when_the_root_does_not_train(tmp_path):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(6,), n=(300,), splits=("train",))  # val and test held out
    report = run_shards(path, 3, 3, chunk="256", root_trains="0")  # the root is alone on its pretend node
    by_node = check_shards(path, report, 2)
    assert by_node[0][0]["shard"] == -1 and by_node[0][0]["shapes"]["train/x"] == [0, 6]
    # With workers beside it, the root's node keeps its shard.
    check_shards(path, run_shards(path, 3, 2, chunk="256", root_trains="0"), 2)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_flipped_byte_in_a_shard_is_caught_on_every_rank(tmp_path, ranks):
    path = write_blobs(tmp_path / "d.h5", sample_shape=(3, 17), n=(101, 13, 7), classes=5)
    env = {"EVENS_SIMULATED_NODES": str(ranks), "EVENS_MAX_MESSAGE_BYTES": "1000", "EVENS_TEST_FLIP_CHUNK": "3"}
    proc = run_prog(ranks, "prog_bad_data.py", path, "shard", env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every rank raised the same DataError
    assert "the data arrived damaged: chunk 3 of train/x" in proc.stdout
    assert re.search(r"\(rank [1-9]\d* on [^)]+\)", proc.stdout), proc.stdout  # where: a leader that received it, not the root


@pytest.mark.parametrize("ranks, nodes", [(3, 3), (4, 4)])
def test_too_few_training_rows_for_the_nodes_is_one_error_on_every_rank(tmp_path, ranks, nodes):
    path = str(tmp_path / "d.h5")
    rows = 2 * nodes - 1  # one node would get a single row; training needs two
    write_dataset(path, {split: (np.ones((n, 4), np.float32), np.arange(n) % 2) for split, n in (("train", rows), ("val", 5), ("test", 5))})
    env = {"EVENS_SIMULATED_NODES": str(nodes)}
    proc = run_prog(ranks, "prog_bad_data.py", path, "shard", env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every rank raised the same DataError, none hung
    assert f"train has {rows} rows, too few for the {nodes} nodes" in proc.stdout and "(each needs at least 2)" in proc.stdout


def evens_report(run_dir):
    out = subprocess.run(evens_cmd() + ["report", run_dir, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.e2e
def test_a_run_in_shard_mode_finishes_on_pretend_nodes(tmp_path):
    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30), classes=3)
    out = str(tmp_path / "run")
    args = ["run", "--out", out, "--set", f"data.path='{data}'", "--set", "data.mode='shard'", "--set", "data.chunk_mb=1",
            "--set", "search.evaluations=6", "--set", "ensemble.size=3", *tiny_search()]
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    proc = launch(4, evens_cmd() + [args[0], str(cfg), *args[1:]], timeout=240, cwd=ROOT, env={"EVENS_SIMULATED_NODES": "3"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shard mode: each of 3 nodes holds about 30 of the 90 training rows" in proc.stderr
    result = evens_report(out)
    assert result["evaluations"] == 6 and 0 <= result["ensemble"]["test_accuracy"] <= 1


@pytest.mark.e2e
def test_a_shard_mode_regression_resumes_in_replicate_mode_on_other_nodes(tmp_path):
    """The fingerprint and the targets' standardisation are the whole split's, so a run sharded over
    two nodes resumes, unsharded, on one: the resume's checks of the data accept it."""
    data = write_regression(tmp_path / "reg.h5", n=(91, 30, 30))
    cfg = tmp_path / "reg.toml"
    cfg.write_text(f'[data]\npath = "{data}"\nmode = "shard"\n')
    out = str(tmp_path / "reg")
    proc = launch(3, evens_cmd() + ["run", str(cfg), "--out", out, "--set", "search.evaluations=4", *tiny_search("['mlp']")],
                  timeout=240, cwd=ROOT, env={"EVENS_SIMULATED_NODES": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shard mode: each of 2 nodes holds about 45 of the 91 training rows" in proc.stderr
    with h5py.File(data, "r") as f:
        whole = f["train/y"][...]
    _, info = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    assert info.data["problem"] == Regression.from_targets(whole).to_dict()  # the whole split's, bit for bit
    assert info.data["problem"] != Regression.from_targets(whole[::2]).to_dict()  # not one node's
    again = launch(3, evens_cmd() + ["run", "--resume", out, "--set", "data.mode='replicate'", "--set", "search.evaluations=6"],
                   timeout=240, cwd=ROOT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert evens_report(out)["evaluations"] == 6


@pytest.mark.e2e
def test_evens_run_refuses_a_bad_mode_and_too_few_rows_for_the_nodes_in_one_line(tmp_path):
    data = str(tmp_path / "tiny.h5")
    write_dataset(data, {split: (np.ones((n, 4), np.float32), np.arange(n) % 2) for split, n in (("train", 5), ("val", 4), ("test", 4))})
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n')
    cases = {"data.mode='bogus'": "data.mode must be one of replicate, shard, got 'bogus'",
             "data.mode='shard'": "train has 5 rows, too few for the 3 nodes that data.mode = \"shard\" gives a part each"}
    for n, (override, expected) in enumerate(cases.items()):
        proc = launch(4, evens_cmd() + ["run", str(cfg), "--out", str(tmp_path / f"run{n}"), "--set", override], timeout=120, cwd=ROOT,
                      env={"EVENS_SIMULATED_NODES": "3"})
        errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
        assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr


@pytest.mark.parametrize("nodes, root_part", [(3, 0.0), (2, 0.5)])
def test_the_root_never_holds_the_whole_training_split(tmp_path, nodes, root_part):
    """48 MiB of train in 1 MiB chunks: the root's peak memory grows by its own node's part (none when
    it is alone on its node, half on two nodes) and a few chunks, never by the whole split (57 MiB on one node)."""
    rows, features = 12288, 1024
    x = np.random.default_rng(0).normal(size=(rows, features)).astype(np.float32)
    path = str(tmp_path / "big.h5")
    write_dataset(path, {"train": (x, np.arange(rows) % 2), "val": (x[:64], np.arange(64) % 2), "test": (x[:64], np.arange(64) % 2)})
    report = run_shards(path, 3, nodes, chunk=str(1 << 20), root_trains="0")
    train_bytes = x.nbytes
    growth = report["ranks"][0]["peak_growth_bytes"]
    assert growth < root_part * train_bytes + 16 * (1 << 20), (growth, train_bytes)  # measured: 8.6 and 33 MiB


def test_compressed_input_gives_the_same_shards(tmp_path):
    splits = blob_splits((1, 8, 8), (200, 50, 50), classes=4, dtype=np.uint8)
    packed = tmp_path / "packed.h5"
    with h5py.File(packed, "w") as g:
        for split, (x, y) in splits.items():
            g.create_dataset(f"{split}/x", data=x, chunks=(7, 1, 8, 8), compression="gzip", compression_opts=6, shuffle=True)
            g.create_dataset(f"{split}/y", data=y, chunks=(13,), compression="lzf")
    report = run_shards(str(packed), 3, 2, chunk="999")
    check_shards(str(packed), report, 2)  # against h5py's own decompression of the same file
    _, truth = load_dataset(str(packed))
    assert np.array_equal(truth["train/x"], splits["train"][0])  # which is the data that was written


def test_the_populator_maps_a_fresh_buffers_pages_without_changing_what_they_hold():
    """Background page population runs while data streams in: it must never write to the buffer."""
    import resource

    from data_bcast.broadcast import Populator

    def first_writes_fault(populate: bool) -> int:
        buffer = np.empty(48 << 20, dtype=np.uint8)
        buffer[: 5 << 20] = 7  # data already there, as a chunk that arrived before the thread got to it
        if populate:
            populator = Populator(buffer)
            if not populator.start():
                pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
            populator.thread.join()  # let it finish the whole buffer
            populator.join()
            assert (buffer[: 5 << 20] == 7).all() and not buffer[5 << 20 :].any()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        buffer[5 << 20 :: 4096] = 1  # a first write to each page
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    unpopulated, populated = first_writes_fault(False), first_writes_fault(True)
    assert unpopulated >= 8 and populated * 4 < unpopulated, (unpopulated, populated)
    assert not Populator(np.empty(100, np.uint8), 10, 10).start()  # an empty range starts nothing
