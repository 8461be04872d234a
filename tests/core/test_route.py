"""The core's route call from Python: its typed outcome, the select mode, the +term filter."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgate import InvalidInputError, _toolgate
from toolgate._toolgate import Bm25, Index, RouteOutcome

DOCS = [
    {"name": "read_file", "description": "read a file"},
    {"name": "write_file", "description": "write a file"},
    {"name": "delete_file", "description": "delete a file"},
    {"name": "list_dir", "description": "list a directory"},
]


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Index, Bm25]:
    """Four tools on the axes of a 4-d space; tool 2 requires flag 0."""
    index = Index.build(tmp_path / "m.tgm", np.eye(4, dtype=np.float32), masks=[[], [], [0], []])
    return index, Bm25.build(DOCS)


def rows(array: list[int]) -> np.ndarray:
    return np.asarray(array, dtype=np.uint32)


def route(parts: tuple[Index, Bm25], vector: list[float], **options: object) -> RouteOutcome:
    index, bm25 = parts
    query = np.asarray(vector, dtype=np.float32)
    settings: dict[str, object] = {"alpha": 0.5, "method": "minmax", "top": 0, "k": 2}
    return _toolgate.route(index, bm25, query, "file", **(settings | options))  # type: ignore[arg-type]


def test_the_outcome_is_read_by_name(parts: tuple[Index, Bm25]) -> None:
    vector = [0.1, 0.2, 1.0, 0.3]
    outcome = route(parts, vector, forced=rows([3]), deny=rows([1]))
    assert [r.row for r in outcome.forced] == [3]
    assert [r.row for r in outcome.ranked] == [0]
    assert (outcome.n_gated, outcome.n_out_of_scope) == (1, 1)
    (gated,) = outcome.gated
    assert (gated.row, gated.missing_flags) == (2, [0])
    index, bm25 = parts
    dense = index.scores(np.asarray(vector, dtype=np.float32))
    sparse = bm25.scores("file")
    fused = _toolgate.fuse(dense, sparse, alpha=0.5, method="minmax", top=0)
    best = outcome.ranked[0]
    assert (best.fused, best.dense, best.bm25) == (fused[0], dense[0], sparse[0])
    assert best.dense == pytest.approx(0.1 / np.sqrt(0.01 + 0.04 + 1.0 + 0.09), abs=1e-6)
    assert best.copy_of is None
    assert gated.fused == fused[2]
    with pytest.raises(AttributeError):
        outcome.n_gated = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        best.row = 1  # type: ignore[misc]
    assert repr(outcome) == "RouteOutcome(forced=1, ranked=1, n_gated=1, n_out_of_scope=1, gated=1)"


def test_rankable_rows_filter_the_ranking_and_not_the_scope_count(
    parts: tuple[Index, Bm25],
) -> None:
    outcome = route(parts, [1.0, 1.0, 1.0, 1.0], k=4, forced=rows([3]), rankable=rows([1, 2]))
    assert [r.row for r in outcome.forced] == [3]
    assert [r.row for r in outcome.ranked] == [1]
    assert (outcome.n_gated, outcome.n_out_of_scope) == (1, 0)
    narrowed = route(parts, [1.0, 1.0, 1.0, 1.0], k=4, rankable=rows([1]), allow=rows([0, 1]))
    assert [r.row for r in narrowed.ranked] == [1]
    assert (narrowed.n_gated, narrowed.n_out_of_scope) == (0, 2)
    with pytest.raises(InvalidInputError, match="rankable contains row 7"):
        route(parts, [1.0, 0.0, 0.0, 0.0], rankable=rows([7]))


def test_each_clause_comes_back_ranked_as_a_route_of_its_own(parts: tuple[Index, Bm25]) -> None:
    clauses = np.asarray([[0.0, 1.0, 0.1, 0.0], [0.0, 0.1, 0.0, 1.0]], dtype=np.float32)
    texts = ["write a file", "list a directory"]
    options: dict[str, object] = {"forced": rows([0]), "deny": rows([2])}
    outcome = route(
        parts, [0.5, 0.5, 0.5, 0.5], k=3, clauses=clauses, clause_texts=texts, clause_k=2,
        lifted=rows([1]), **options,
    )  # fmt: skip
    assert [r.row for r in outcome.forced] == [0, 1], "a lifted row comes back as forced"
    index, bm25 = parts
    for clause, vector, text in zip(outcome.clauses, clauses, texts, strict=True):
        alone = _toolgate.route(
            index, bm25, vector, text, alpha=0.5, method="minmax", top=0, k=2, **options
        )  # type: ignore[arg-type]
        assert [(r.row, r.fused, r.dense, r.bm25) for r in clause] == [
            (r.row, r.fused, r.dense, r.bm25) for r in alone.ranked
        ]
    assert [[r.row for r in clause] for clause in outcome.clauses] == [[1, 3], [3, 1]]
    assert repr(outcome).endswith(", clauses=2)")
    assert route(parts, [1.0, 0.0, 0.0, 0.0], clauses=clauses, clause_texts=texts).clauses == []
    with pytest.raises(InvalidInputError, match="1 clause texts for 2 clause vectors"):
        route(parts, [1.0, 0.0, 0.0, 0.0], clauses=clauses, clause_texts=texts[:1], clause_k=1)


def test_select_keeps_the_order_given_and_scores_nothing(parts: tuple[Index, Bm25]) -> None:
    index, bm25 = parts
    outcome = _toolgate.route_select(index, bm25, rows([3, 2, 0, 3, 1]), deny=rows([1]))
    assert [(r.row, r.fused, r.dense, r.bm25) for r in outcome.forced] == [
        (3, 0.0, 0.0, 0.0),
        (0, 0.0, 0.0, 0.0),
    ]
    assert outcome.ranked == []
    assert [(g.row, g.missing_flags) for g in outcome.gated] == [(2, [0])]
    assert (outcome.n_gated, outcome.n_out_of_scope) == (1, 1)
    unlocked = _toolgate.route_select(index, bm25, rows([2, 1]), flags=rows([0]))
    assert [r.row for r in unlocked.forced] == [2, 1]
    with pytest.raises(InvalidInputError, match="forced row 4 is out of range"):
        _toolgate.route_select(index, bm25, rows([4]))
    with pytest.raises(InvalidInputError, match="not C-contiguous"):
        _toolgate.route_select(index, bm25, rows([0, 1, 2, 3])[::2])


def test_a_gated_forced_row_is_reported_past_stronger_gated_rows(tmp_path: Path) -> None:
    # Five gated rows score above the forced one but below the one ranked row: they are not
    # reported (they would not have been active), and they must not push out the forced row.
    vectors = np.asarray([[1.0, 0.0]] + [[0.8, 0.6]] * 5 + [[0.0, 1.0]], dtype=np.float32)
    index = Index.build(tmp_path / "m.tgm", vectors, masks=[[]] + [[1]] * 6)
    bm25 = Bm25.build([{"name": f"tool_{row}"} for row in range(7)])
    outcome = _toolgate.route(
        index, bm25, np.asarray([1.0, 0.0], np.float32), "", alpha=1.0, method="minmax", top=0,
        k=1, forced=rows([6]),
    )  # fmt: skip
    assert [r.row for r in outcome.ranked] == [0]
    assert outcome.n_gated == 6
    assert [(g.row, g.missing_flags) for g in outcome.gated] == [(6, [1])]


@st.composite
def _gated_catalogs(draw: st.DrawFn) -> tuple[np.ndarray, list[list[int]], list[int], int]:
    """Up to 12 rows on a few directions, most of them gated, some forced, and a k."""
    n = draw(st.integers(1, 12))
    directions = st.sampled_from([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]])
    vectors = np.asarray(draw(st.lists(directions, min_size=n, max_size=n)), dtype=np.float32)
    masks = draw(st.lists(st.sampled_from([[], [1], [1, 70]]), min_size=n, max_size=n))
    forced = draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
    return vectors, masks, forced, draw(st.integers(1, 4))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_gated_catalogs())
def test_the_gated_report_holds_the_best_rows_that_would_have_been_active(
    catalog: tuple[np.ndarray, list[list[int]], list[int], int],
) -> None:
    vectors, masks, forced, k = catalog
    n = len(masks)
    with tempfile.TemporaryDirectory() as directory:  # a fixture would be shared by examples
        index = Index.build(Path(directory) / "m.tgm", vectors, masks=masks)
        bm25 = Bm25.build([{"name": f"tool_{row}"} for row in range(n)])
        query = np.asarray([1.0, 0.0], np.float32)
        outcome = _toolgate.route(
            index, bm25, query, "", alpha=1.0, method="minmax", top=0, k=k, forced=rows(forced)
        )
        fused = _toolgate.fuse(index.scores(query), bm25.scores(""), alpha=1.0, top=0)
    ranked = [r.fused for r in outcome.ranked]
    cutoff = min(ranked) if len(ranked) == k else -np.inf
    # Reference: every gated row that would have been forced, or ranked among the active
    # rows; the best five (the core's GATED_REPORT_LEN) of them, fused score descending,
    # then row ascending.
    active = [row for row in range(n) if masks[row] and (row in forced or fused[row] >= cutoff)]
    want = sorted(active, key=lambda row: (-fused[row], row))[:5]
    assert [g.row for g in outcome.gated] == want
    assert outcome.n_gated == sum(1 for mask in masks if mask)


# Every array argument of route, route_select and dense_signal, each given a wrong value: an
# InvalidInputError names the argument, what it must be and what it got.
_BAD_ARRAYS = [
    ("vector", np.zeros(4), "vector must be a 1-D float32 array, got an array of float64"),
    ("vector", np.zeros((1, 4), np.float32), r"vector must be .* with shape \(1, 4\)"),
    ("vector", [0.0, 1.0, 0.0, 0.0], "vector must be a 1-D float32 array, got list"),
    ("vector", np.zeros(3, np.float32), "vector has 3 values, the index has dimension 4"),
    ("vector", np.zeros(8, np.float32)[::2], "vector is not C-contiguous"),
    *(
        (arg, np.arange(2), f"{arg} must be a 1-D uint32 array, got an array of int64")
        for arg in ("flags", "allow", "deny", "forced", "rankable", "lifted", "demoted")
    ),
    ("forced", np.zeros((1, 2), np.uint32), r"forced must be .* with shape \(1, 2\)"),
    ("clauses", np.zeros(4, np.float32), r"clauses must be a 2-D float32 array, got .*\(4,\)"),
    ("clauses", np.zeros((1, 4)), "clauses must be a 2-D float32 array, got an array of float64"),
]


@pytest.mark.parametrize(("arg", "value", "message"), _BAD_ARRAYS)
def test_route_names_an_array_argument_of_the_wrong_kind(
    parts: tuple[Index, Bm25], arg: str, value: object, message: str
) -> None:
    index, bm25 = parts
    given: dict[str, object] = {"vector": np.asarray([1, 0, 0, 0], np.float32), arg: value}
    vector = given.pop("vector")
    settings: dict[str, object] = {"alpha": 0.5, "method": "minmax", "top": 0, "k": 2}
    with pytest.raises(InvalidInputError, match=message):
        _toolgate.route(index, bm25, vector, "file", **(settings | given))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arg", "value", "message"),
    [
        ("rows", np.asarray([0, 1]), "rows must be a 1-D uint32 array, got an array of int64"),
        ("rows", [0, 1], "rows must be a 1-D uint32 array, got list"),
        ("rows", None, "rows must be a 1-D uint32 array, got NoneType"),
        ("flags", np.zeros(1, np.float32), "flags must be a 1-D uint32 array, got an array of"),
        ("allow", np.zeros((1, 1), np.uint32), r"allow must be .* with shape \(1, 1\)"),
        ("deny", np.zeros(2, np.int32), "deny must be a 1-D uint32 array, got an array of int32"),
    ],
)
def test_route_select_names_an_array_argument_of_the_wrong_kind(
    parts: tuple[Index, Bm25], arg: str, value: object, message: str
) -> None:
    index, bm25 = parts
    given: dict[str, object] = {"rows": rows([0]), arg: value}
    selected = given.pop("rows")
    with pytest.raises(InvalidInputError, match=message):
        _toolgate.route_select(index, bm25, selected, **given)  # type: ignore[arg-type]


@pytest.mark.parametrize("arg", ["top", "k", "clause_k"])
@pytest.mark.parametrize("value", [-1, 2**64])
def test_route_names_a_count_out_of_range(parts: tuple[Index, Bm25], arg: str, value: int) -> None:
    # pyo3's own conversion raised OverflowError, outside toolgate's error tree.
    if value < 0:
        with pytest.raises(InvalidInputError, match=f"{arg} must be an integer >= 0, got -1"):
            route(parts, [1, 0, 0, 0], **{arg: value})
    else:  # past 64 bits, as good as the largest count
        route(parts, [1, 0, 0, 0], **{arg: value})


@pytest.mark.parametrize(
    ("cosine", "clauses", "message"),
    [
        (np.zeros(4), np.zeros((1, 4), np.float32), "cosine must be a 1-D float32 array, got an"),
        (np.zeros((2, 2), np.float32), np.zeros((1, 4), np.float32), r"shape \(2, 2\)"),
        (np.zeros(4, np.float32), np.zeros(4, np.float32), "clauses must be a 2-D float32 array"),
        (np.zeros(4, np.float32), None, "clauses must be a 2-D float32 array, got NoneType"),
    ],
)
def test_dense_signal_names_an_array_argument_of_the_wrong_kind(
    parts: tuple[Index, Bm25], cosine: object, clauses: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        _toolgate.dense_signal(parts[0], cosine, clauses, 0.1)  # type: ignore[arg-type]


def test_test_hooks_live_in_a_private_submodule() -> None:
    import toolgate._toolgate._testing as imported
    from toolgate._toolgate import _testing

    assert imported is _testing
    assert _testing.available_isas()[-1] == "serial"
    assert not hasattr(_toolgate, "_scan")
    assert not hasattr(_toolgate, "analyze_text")
