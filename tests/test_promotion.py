"""Asynchronous successive halving: rungs on a network's own epochs, and promotions as ASHA makes them."""
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.engine.promotion import RungTable, rung_count, rung_epochs


def test_rungs_are_shares_of_the_networks_own_epochs():
    assert rung_count(3, 1 / 9) == 3 and rung_count(3, 1.0) == 1 and rung_count(2, 1 / 8) == 4 and rung_count(4, 0.1) == 2
    assert rung_epochs(27, 3, 1 / 9) == [3, 9, 27]
    assert rung_epochs(300, 3, 1 / 9) == [33, 100, 300]
    assert rung_epochs(5, 3, 1 / 9) == [1, 2, 5]
    assert rung_epochs(1, 3, 1 / 9) == [1, 1, 1]  # never fewer than one epoch, never fewer than the rung below
    assert rung_epochs(12, 3, 1.0) == [12]
    for bad in ((1, 0.5), (3, 0.0), (3, 1.5)):
        with pytest.raises(ValueError, match="eta >= 2"):
            rung_count(*bad)


def brute_promotable(results: dict[int, list], promoted: dict[int, set], eta: int) -> list[tuple]:
    """ASHA's rule by brute force: per rung, the best n // eta by (fitness, -loss, -id), less those promoted and the failed."""
    out = []
    for rung, rows in results.items():
        best = sorted(rows, key=lambda r: (r[1], -r[2], -r[0]), reverse=True)[: len(rows) // eta]
        out += [(rung, i) for i, f, _ in best if i not in promoted[rung] and math.isfinite(f)]
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(2, 4), st.integers(0, 10_000))
def test_the_table_promotes_what_asha_says_highest_rung_first_and_each_network_once(eta, rungs, seed):
    rng = random.Random(seed)
    table = RungTable(eta, rungs)
    results = {r: [] for r in range(rungs - 1)}
    promoted = {r: set() for r in range(rungs - 1)}
    at = {}  # network -> its rung now
    next_id = 0
    for _ in range(120):
        if rng.random() < 0.5 or not at:  # a new network's first result
            ident, rung = next_id, 0
            next_id += 1
        else:  # a result of a network promoted earlier
            waiting = [i for i, r in at.items() if r is not None]
            if not waiting:
                continue
            ident = rng.choice(waiting)
            rung = at[ident]
        fitness = rng.choice([rng.random(), rng.random(), round(rng.random(), 1), -math.inf])  # ties and failures too
        loss = rng.random()
        at[ident] = None
        table.add(rung, ident, fitness, loss)
        if rung < rungs - 1:
            results[rung].append((ident, fitness, loss))
        if rng.random() < 0.6:
            expected = brute_promotable(results, promoted, eta)
            got = table.promotion()
            if not expected:
                assert got is None
                continue
            top_rung = max(r for r, _ in expected)
            best = max((i for r, i in expected if r == top_rung), key=lambda i: next((f, -l, -i) for j, f, l in results[top_rung] if j == i))
            assert got == (best, top_rung + 1)
            promoted[top_rung].add(best)
            at[best] = top_rung + 1
    assert sum(o["promoted"] for o in table.occupancy()) == sum(len(p) for p in promoted.values())
    assert [o["results"] for o in table.occupancy()] == [len(results[r]) for r in range(rungs - 1)]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(2, 4), st.integers(0, 10_000), st.integers(0, 150))
def test_a_table_restored_from_its_memory_goes_on_as_the_table_itself(eta, rungs, seed, cut):
    """A resume that reads no history rebuilds the table from RungTable.memory: from then on, it takes the same results
    and makes the same promotions as the table that lived through them (ties, failures and promotions made included)."""
    rng = random.Random(seed)
    tables = [RungTable(eta, rungs)]
    at, next_id = {}, 0
    for step in range(150):
        if step == cut:
            tables.append(RungTable.restored(eta, rungs, {k: v.copy() for k, v in tables[0].memory().items()}))
        waiting = [i for i, r in at.items() if r is not None]
        if rng.random() < 0.5 or not waiting:
            ident, rung, next_id = next_id, 0, next_id + 1
        else:
            ident = rng.choice(waiting)
            rung = at[ident]
        fitness, loss = rng.choice([rng.random(), round(rng.random(), 1), -math.inf]), rng.choice([rng.random(), 0.5])
        at[ident] = None
        for table in tables:
            table.add(rung, ident, fitness, loss)
        for _ in range(rng.choice([0, 1, 2])):
            made = [table.promotion() for table in tables]
            assert all(m == made[0] for m in made)
            if made[0] is not None:
                at[made[0][0]] = made[0][1]
        assert all(t.occupancy() == tables[0].occupancy() and t.due() == tables[0].due() for t in tables)


def test_a_rung_promotes_as_soon_as_it_has_eta_results_and_never_a_failure():
    table = RungTable(3, 3)
    table.add(0, 0, 0.5, 1.0)
    table.add(0, 1, 0.9, 1.0)
    assert table.promotion() is None  # 2 results: the best third of them is none
    table.add(0, 2, 0.7, 1.0)
    assert table.promotion() == (1, 1) and table.promotion() is None
    for ident in (3, 4, 5):
        table.add(0, ident, -math.inf, math.inf)  # failures count, and push nobody up
    assert table.promotion() == (2, 1)  # 6 results: the best two, #1 (promoted) and #2
    table.mark_promoted(0, 0)
    for ident in (6, 7, 8):
        table.add(0, ident, -math.inf, math.inf)
    assert table.promotion() is None  # #0 is third best of 9, but it was promoted already (a resume says so)


def test_ties_on_fitness_go_to_the_lower_loss_then_the_earlier_id():
    table = RungTable(2, 2)
    table.add(0, 7, 0.8, 0.30)
    table.add(0, 3, 0.8, 0.20)
    assert table.promotion() == (3, 1)
    table.add(0, 9, 0.8, 0.30)
    table.add(0, 8, 0.8, 0.30)
    assert table.promotion() == (7, 1)  # best two of four: #3 (lowest loss), then #7 (the earliest of the equal ones)


def test_a_worker_is_offered_the_promotions_it_holds_or_that_no_worker_holds_and_any_worker_the_rest():
    held = {0: (1,), 1: (2,), 3: (1,), 4: (2,)}  # network -> the workers holding it paused
    table = RungTable(eta=3, rungs=2, holders=lambda ident: held.get(ident, ()))
    for ident, fitness in enumerate([0.9, 0.8, 0.05, 0.1, 0.2, 0.3]):
        table.add(0, ident, fitness, 0.0)  # six results: the best two (0 and 1) are promotable
    assert table.promotion(holder=2) == (1, 1)  # worker 2 holds network 1, not the better network 0
    assert table.promotion(holder=2) is None and table.promotion(holder=3) is None  # network 0 waits for worker 1
    for ident, fitness in ((6, 0.5), (7, 0.4), (8, 0.35)):
        table.add(0, ident, fitness, 0.0)  # nine results: the best three (0, 1 and 6) are promotable
    assert table.promotion(holder=3) == (6, 1)  # held by none: anyone's
    assert table.promotion() == (0, 1)  # any worker may take one held elsewhere, when asked so
    assert table.promotion(holder=1) is None and not table.due()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 0.5, -math.inf])),
                          st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 0.5, math.inf])),
                          st.integers(0, 2**40)), min_size=2, max_size=6, unique_by=lambda t: t[2]))
def test_a_key_packed_into_one_integer_ranks_as_the_tuple_it_stands_for(rows):
    """The rung tables keep each result as one integer (promotion._key): the order of (fitness, minus the loss, minus
    the id) with a failure's fitness and a missing loss counted as -inf and -0.0 as 0.0, and it gives back its parts."""
    from evolve.engine.promotion import _ident, _key, _packed, _parts

    def as_tuple(f, l, i):
        return (f if math.isfinite(f) else -math.inf, -l if not math.isnan(l) else -math.inf, -i)

    by_key = sorted(rows, key=lambda t: _key(*t))
    assert [as_tuple(*t) for t in by_key] == sorted(as_tuple(*t) for t in rows)
    for f, l, i in rows:
        key = _key(f, l, i)
        assert _ident(key) == _ident(-key) == i
        parts = _parts(key)
        assert parts == as_tuple(f, l, i) and _packed(parts[0], parts[1], -parts[2]) == key


def test_the_master_remembers_the_holders_of_the_latest_paused_networks_only():
    """Where most networks stay paused below a rung's top for good, the holders kept are bounded: the least recently
    paused are forgotten first (as a worker's cache drops them), and a forgotten one's promotion goes to any worker."""
    from evolve.engine.promotion import Halving

    halving = Halving(3, 1 / 9)
    halving.holders_max = 4
    for network in range(10):
        halving.hold(network, -1, worker=network % 3 + 1)
    halving.hold(7, 0, worker=2)  # held again (another part): the latest now
    assert list(halving.holders) == [6, 8, 9, 7]
    assert halving.holder(9, -1) == 1 and halving.holder(2, -1) is None
    assert halving.part_for(2, [-1], worker=1, workers={1, 2, 3}) is None  # no holder known: any worker takes it
