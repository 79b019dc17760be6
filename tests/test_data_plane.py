"""The streaming data plane under real MPI: pretend nodes so that several leaders really broadcast,
chunk sizes that do not divide the arrays, a small message limit standing in for the 2 GiB one,
checksums that catch a flipped byte, and compressed input."""
import json
import os
import sys
import zlib

import h5py
import numpy as np
import pytest

from conftest import MPI_PROGRAMS, blob_splits, launch, write_blobs
from data_bcast.broadcast import fingerprint
from data_bcast.h5file import load_dataset
from data_bcast.layout import ArraySpec, plan_chunks, plan_layout

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
    assert "the data arrived damaged on rank" in proc.stdout and "chunk 3 of train/x" in proc.stdout


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
