"""LearnedRows from Python: a query it cannot score is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from toolgate import InvalidInputError
from toolgate._toolgate import LearnedRows


@pytest.fixture
def learned() -> LearnedRows:
    """Two rows on the axes of a 3-d space, for tools 7 and 2."""
    rows = LearnedRows(3)
    vectors = np.eye(3, dtype=np.float32)[:2]
    rows.push(vectors, np.asarray([7, 2], np.uint32), np.ones(2, np.float32))
    return rows


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ([0.0, np.nan, 1.0], "query holds NaN at position 1; queries must be finite"),
        ([np.inf, 0.0, 0.0], "query holds inf at position 0"),
        ([0.0, 0.0, -np.inf], "query holds -inf at position 2"),
    ],
)
def test_scores_refuse_a_query_that_is_not_finite(
    learned: LearnedRows, query: list[float], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        learned.scores(np.asarray(query, np.float32))


def test_votes_refuse_a_query_that_is_not_finite(learned: LearnedRows) -> None:
    # Scored, a NaN query is NaN against every row: no vote under any floor, and no error.
    with pytest.raises(InvalidInputError, match="query holds NaN at position 0"):
        learned.votes(np.asarray([np.nan, 1.0, 0.0], np.float32), 10, -1.0)


def test_a_finite_query_is_scored(learned: LearnedRows) -> None:
    scores = learned.scores(np.asarray([1.0, 0.0, 0.0], np.float32))
    assert scores.tolist() == pytest.approx([1.0, 0.0], abs=0.01)


@pytest.mark.parametrize("dim", [0, 65_537, 2**60])
def test_a_dimension_no_index_has_is_refused(dim: int) -> None:
    # At 2**60 values a row, push took 16 rows of no values (its length check wrapped to 0),
    # and retain then panicked: a PanicException, which `except Exception` does not catch.
    with pytest.raises(InvalidInputError, match=r"dimension in 1\.\.=65536"):
        LearnedRows(dim)


def test_counts_out_of_range_are_invalid_input(learned: LearnedRows) -> None:
    # pyo3's own conversion raised OverflowError, outside toolgate's error tree.
    query = np.asarray([1.0, 0.0, 0.0], np.float32)
    for call, message in [
        (lambda: LearnedRows(-1), "dim must be an integer >= 0, got -1"),
        (lambda: learned.set_weight(-1, 1.0), "row must be an integer >= 0, got -1"),
        (lambda: learned.set_weight(2**64, 1.0), "no learned row"),
        (lambda: learned.votes(query, -1, 0.0), "neighbours must be an integer >= 0, got -1"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            call()
    assert learned.votes(query, 2**64, 0.5)[0].tolist() == [7]
