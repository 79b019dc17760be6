"""The duplicate check's set of network keys, by 64-bit hash (evolve.search.keyset)."""
import random

from evolve.search import keyset
from evolve.search.keyset import KeySet


def test_it_answers_as_a_set_of_the_keys_across_merges():
    rng = random.Random(0)
    keys = [(rng.random(), rng.choice(["relu", "gelu"]), rng.randrange(8)) for _ in range(3 * keyset.MERGE_AT + 17)]
    held, reference = KeySet(), set()
    for i, key in enumerate(keys):
        if i % 3:
            held.add(key)
            reference.add(key)
        if i % 500 == 0:  # asked between merges too
            assert all((k in held) == (k in reference) for k in keys[: i + 1])
    assert all((k in held) == (k in reference) for k in keys)
    assert len(held) == len(reference)
    held.update(list(reference)[:100])  # adding what it holds changes nothing
    assert len(held) == len(reference)


def test_it_holds_a_key_in_under_eighteen_bytes():
    held = KeySet((i, float(i) / 7, "conv") for i in range(200_000))
    assert len(held) == 200_000 and (5, 5 / 7, "conv") in held and (5, 5 / 7, "dense") not in held
    assert held.nbytes < 18 * 200_000


def test_a_key_hashes_the_same_in_every_process_so_a_run_file_can_keep_the_set():
    """SearchSpace.key_hash: Python salts string hashes per process; a key's hash must not depend on it."""
    import subprocess
    import sys

    from conftest import ROOT

    program = ("from evolve.search.space_config import parse_space; s = parse_space({}).for_sample_shape((1, 8, 8)); "
               "print(s.key_hash(s.key([0.3] * len(s))), s.key_hash(s.key([0.7] * len(s))))")
    outs = {subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, check=True,
                           env={"PYTHONPATH": ROOT, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "random")}
    assert len(outs) == 1 and len(set(next(iter(outs)).split())) == 2


def test_merges_keep_the_hashes_sorted_each_once_as_numpy_unique_would():
    """The merge inserts the waiting hashes into the sorted array (not np.union1d, slow where np.unique hashes)."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from evolve.search.keyset import sorted_unique

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(-5, 5), max_size=40), max_size=6))
    def check(batches):
        held, reference = KeySet(hasher=int), set()
        for batch in batches:
            held.add_hashes(np.asarray(batch, dtype=np.int64))
            held._merge()  # each batch merged on its own, holding some of what is merged already
            reference.update(batch)
            assert held.hashes().tolist() == sorted(reference)
            assert sorted_unique(np.asarray(batch, dtype=np.int64)).tolist() == np.unique(np.asarray(batch, dtype=np.int64)).tolist()
        assert all(h in held for h in reference) and (len(held) == len(reference))

    check()
