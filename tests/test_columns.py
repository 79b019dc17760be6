"""Records as columns and back (evolve.runfile.columns): every declared field survives, whatever its values."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.results import KINDS, Outcome, kinds
from evolve.runfile import columns as table
from evolve.search.records import Pending, Record

GENES = 3
text = st.text(max_size=30)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
records = st.builds(
    Record,
    id=st.integers(0, 2**40), genome=st.lists(st.floats(0, 1), min_size=GENES, max_size=GENES),
    parents=st.tuples(st.integers(-1, 99), st.integers(-1, 99)), operators=st.sampled_from(["random", "crossover+mutation", "copy+redo"]),
    worker=st.integers(-1, 9), started=finite, finished=finite,
    status=st.sampled_from(["ok", "error", "stopped", "crashed"]), fitness=st.floats(allow_nan=False),
    metrics=st.dictionaries(st.sampled_from(["val_accuracy", "test_loss", "params", "é"]), finite, max_size=4),
    seconds=finite, epochs_done=st.integers(0, 500), message=text, curve=st.lists(finite, max_size=6),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(records, max_size=12))
def test_records_come_back_from_their_columns(rows):
    assert table.decode(table.encode(rows, Record, GENES), Record) == rows


@settings(max_examples=30, deadline=None)
@given(st.lists(records, max_size=6), st.lists(records, max_size=6))
def test_concatenated_columns_are_the_columns_of_all_rows(a, b):
    joined = table.concatenated([table.encode(a, Record, GENES), table.encode(b, Record, GENES)])
    assert table.decode(joined, Record) == a + b


def test_pending_individuals_come_back_too():
    rows = [Pending(id=4, genome=[0.0, 0.5, 1.0], parents=(1, 2), operators="mutation", attempts=1), Pending(id=5, genome=[0.1] * GENES)]
    assert table.decode(table.encode(rows, Pending, GENES), Pending) == rows
    assert table.decode(table.encode([], Pending, GENES), Pending) == []


def test_every_field_is_declared_with_a_kind_and_a_record_extends_the_outcome():
    assert set(kinds(Record).values()) <= set(KINDS) and set(kinds(Pending).values()) <= set(KINDS)
    assert list(kinds(Record))[: len(kinds(Outcome))] == list(kinds(Outcome))
    columns = table.encode([], Record, GENES)
    assert {"message_length", "curve_length"} <= set(columns) and set(kinds(Record)) <= set(columns)


@pytest.mark.parametrize("damage, says", [
    (lambda c: c.pop("fitness"), "'fitness' is missing"),
    (lambda c: c.__setitem__("worker", c["worker"][:1]), "different lengths"),
    (lambda c: c.__setitem__("curve_length", c["curve_length"] + 1), "curve column does not add up"),
])
def test_columns_that_do_not_fit_together_are_refused(damage, says):
    rows = [Record(id=i, genome=[0.5] * GENES, status="ok", fitness=0.5, curve=[0.1, 0.2]) for i in range(3)]
    columns = table.encode(rows, Record, GENES)
    damage(columns)
    with pytest.raises(ValueError, match=says):
        table.decode(columns, Record)


def test_a_metric_absent_from_a_row_is_nan_in_its_column_and_absent_again_when_read():
    rows = [Record(id=0, genome=[0.5] * GENES, status="ok", fitness=1.0, metrics={"a": 1.0}),
            Record(id=1, genome=[0.5] * GENES, status="error", fitness=-math.inf)]
    columns = table.encode(rows, Record, GENES)
    assert np.isnan(columns["metrics"]["a"][1])
    assert table.decode(columns, Record)[1].metrics == {}


def test_a_record_keeps_every_field_of_its_individual_but_its_attempts_with_the_same_kind():
    from evolve.search.records import SHARED

    pending, record = kinds(Pending), kinds(Record)
    assert set(SHARED) == set(pending) - {"attempts"} and all(record[name] == pending[name] for name in SHARED)
    individual = Pending(id=7, genome=[0.25, 0.5, 0.75], parents=(3, 4), operators="mutation+redo", attempts=1)
    from ensemble.results import failed_evaluation

    r = Record.of(individual, failed_evaluation("boom"), worker=2, started=1.0, finished=2.0)
    assert (r.id, r.genome, r.parents, r.operators, r.worker, r.status, r.message) == (7, [0.25, 0.5, 0.75], (3, 4), "mutation+redo", 2,
                                                                                        "error", "boom")
