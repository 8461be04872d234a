"""`toolgate.Index` against a float64 numpy reference: every dtype, odd sizes, edge cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from toolgate import Index, InvalidInputError

DTYPES = ["f32", "int8", "bf16"]
# Scores are exact f32 dot products of normalised vectors: close to float64 up to rounding.
SCORE_TOL = 2e-5


def normalised64(vectors: NDArray[np.float32]) -> NDArray[np.float64]:
    """Rows scaled to unit length in float64; zero rows stay zero."""
    m = vectors.astype(np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


def reference_scores(
    vectors: NDArray[np.float32], query: NDArray[np.float32]
) -> NDArray[np.float64]:
    """Cosine of the query against every row, in float64."""
    q = query.astype(np.float64)
    norm = np.linalg.norm(q)
    return normalised64(vectors) @ (q / norm if norm > 0 else q)


def assert_valid_top_k(
    rows: NDArray[np.int64],
    scores: NDArray[np.float32],
    reference: NDArray[np.float64],
    k: int,
    eligible: NDArray[np.bool_] | None = None,
    threshold: float | None = None,
) -> None:
    """The result is a correct top-k of `reference` up to f32 rounding, in canonical order."""
    eligible = np.ones(len(reference), bool) if eligible is None else eligible
    passing = eligible & (reference >= threshold - SCORE_TOL if threshold is not None else True)
    assert rows.dtype == np.int64
    assert scores.dtype == np.float32
    assert len(rows) == len(scores)
    assert len(np.unique(rows)) == len(rows)
    assert eligible[rows].all()
    np.testing.assert_allclose(scores, reference[rows], atol=SCORE_TOL, rtol=0)
    order = np.lexsort((rows, -scores.astype(np.float64)))
    np.testing.assert_array_equal(order, np.arange(len(rows)), "not score desc, row asc")
    if threshold is not None:
        assert (scores >= threshold).all()
    strict_pass = eligible & (reference >= threshold + SCORE_TOL if threshold is not None else True)
    expected_len = min(k, int(passing.sum()))
    assert min(k, int(strict_pass.sum())) <= len(rows) <= expected_len
    if len(rows) and len(rows) < int(passing.sum()):
        left_out = np.setdiff1d(np.flatnonzero(passing), rows)
        assert reference[left_out].max() <= scores.min() + SCORE_TOL


def random_vectors(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float32]:
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [1, 7, 97, 384])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 10_001])
def test_search_matches_float64_reference(tmp_path: Path, dtype: str, d: int, n: int) -> None:
    rng = np.random.default_rng(n * 1000 + d)
    vectors = random_vectors(rng, n, d)
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype)
    assert (len(index), index.dim, index.dtype) == (n, d, dtype)
    for _ in range(3):
        query = rng.standard_normal(d).astype(np.float32)
        reference = reference_scores(vectors, query)
        for k in (1, 10, n + 3):
            rows, scores = index.search(query, k)
            assert_valid_top_k(rows, scores, reference, k)
        exact = index.rescore(query, np.arange(n))
        np.testing.assert_allclose(exact, reference, atol=SCORE_TOL, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scores_are_within_the_stored_precision(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(7)
    vectors = random_vectors(rng, 500, 97)
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype)
    query = rng.standard_normal(97).astype(np.float32)
    scores = index.scores(query)
    assert scores.dtype == np.float32
    assert scores.shape == (500,)
    # int8: half a step of 1/127 of the largest component per value; bf16: 2^-9 relative.
    tolerance = {"f32": SCORE_TOL, "int8": 0.02, "bf16": 0.01}[dtype]
    np.testing.assert_allclose(scores, reference_scores(vectors, query), atol=tolerance, rtol=0)


def clustered_with_near_ties(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float32]:
    """Rows a hair apart around a few centres, plus exact duplicates: scores that int8 and
    bf16 cannot tell apart, so the exact re-scoring has to decide."""
    centres = rng.standard_normal((4, d))
    rows = centres[rng.integers(0, 4, n)] + rng.standard_normal((n, d)) * 1e-3
    rows[rng.integers(0, n, n // 10)] = rows[0]
    return rows.astype(np.float32)


@pytest.mark.parametrize("dtype", ["int8", "bf16"])
def test_quantized_top_k_equals_f32_top_k(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(11)
    for trial in range(40):
        n, d = int(rng.integers(1, 3000)), int(rng.choice([7, 97, 384]))
        vectors = clustered_with_near_ties(rng, n, d) if trial % 2 else random_vectors(rng, n, d)
        exact = Index.build(tmp_path / f"f{trial}.tgi", vectors, dtype="f32")
        quantized = Index.build(tmp_path / f"q{trial}.tgi", vectors, dtype=dtype)
        query = (vectors[rng.integers(0, n)] + rng.standard_normal(d) * 0.01).astype(np.float32)
        for k in (1, 10, 50):
            rows_f, scores_f = exact.search(query, k)
            rows_q, scores_q = quantized.search(query, k)
            np.testing.assert_array_equal(rows_q, rows_f, f"trial {trial} k={k}")
            np.testing.assert_array_equal(scores_q, scores_f, f"trial {trial} k={k}")
        threshold = float(scores_f[min(5, len(scores_f) - 1)])
        for limit in (None, 3):
            a = exact.search(query, limit, threshold=threshold)
            b = quantized.search(query, limit, threshold=threshold)
            np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_break_by_row(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(3)
    base = random_vectors(rng, 1, 33)[0]
    vectors = np.stack([base * (1 + i % 3) for i in range(20)])  # all the same direction
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype)
    rows, scores = index.search(base, 7)
    np.testing.assert_array_equal(rows, np.arange(7))
    assert len(set(scores.tolist())) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_rows_and_zero_query(tmp_path: Path, dtype: str) -> None:
    vectors = np.zeros((5, 8), np.float32)
    vectors[2, 3] = -2.0
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype)
    query = np.zeros(8, np.float32)
    query[3] = 1.0
    rows, scores = index.search(query, 10)
    np.testing.assert_array_equal(rows, [0, 1, 3, 4, 2])
    np.testing.assert_array_equal(scores, [0, 0, 0, 0, -1])
    rows, scores = index.search(np.zeros(8, np.float32), 2)
    np.testing.assert_array_equal(rows, [0, 1])
    np.testing.assert_array_equal(scores, [0, 0])


def test_empty_index(tmp_path: Path) -> None:
    index = Index.build(tmp_path / "i.tgi", np.zeros((0, 5), np.float32), model_id="m")
    reopened = Index.open(tmp_path / "i.tgi")
    for ix in (index, reopened):
        rows, scores = ix.search(np.ones(5, np.float32), 3)
        assert rows.shape == (0,)
        assert scores.shape == (0,)
        assert ix.scores(np.ones(5, np.float32)).shape == (0,)
        assert len(ix) == 0
        assert ix.model_id == "m"


@pytest.mark.parametrize("dtype", DTYPES)
def test_threshold_alone_and_with_k(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(5)
    vectors = random_vectors(rng, 2000, 24)
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype)
    query = rng.standard_normal(24).astype(np.float32)
    reference = reference_scores(vectors, query)
    for threshold in (0.3, 0.5, 0.99):
        rows, scores = index.search(query, None, threshold=threshold)
        assert_valid_top_k(rows, scores, reference, len(reference), threshold=threshold)
        rows, scores = index.search(query, 4, threshold=threshold)
        assert_valid_top_k(rows, scores, reference, 4, threshold=threshold)


def test_fortran_ordered_vectors_build_the_same_index(tmp_path: Path) -> None:
    vectors = random_vectors(np.random.default_rng(4), 50, 8)
    fortran = Index.build(tmp_path / "f.tgi", np.asfortranarray(vectors))
    plain = Index.build(tmp_path / "c.tgi", vectors)
    for query in vectors[:5]:
        np.testing.assert_array_equal(fortran.search(query, 3)[0], plain.search(query, 3)[0])
        np.testing.assert_array_equal(fortran.search(query, 3)[1], plain.search(query, 3)[1])


def packed_field(values: NDArray[np.float32]) -> NDArray[np.float32]:
    """`values` as a field of a packed structured array: byte strides that are no multiple of
    4, at an odd address, as `np.fromfile` with a packed record dtype gives them."""
    records = np.zeros(len(values), dtype=[("tag", "u1"), ("v", "<f4", values.shape[1:])])
    records["v"] = values
    return records["v"]


def test_vectors_of_any_memory_layout_build_the_same_index(tmp_path: Path) -> None:
    vectors = random_vectors(np.random.default_rng(5), 6, 4)
    packed = packed_field(vectors)
    assert packed.strides == (17, 4)
    offset = np.frombuffer(b"\0" + vectors.tobytes(), np.float32, offset=1).reshape(6, 4)
    assert not packed.flags.aligned
    assert not offset.flags.aligned
    plain = Index.build(tmp_path / "c.tgi", vectors).vectors(range(6))
    for name, layout in (("packed", packed), ("offset", offset)):
        built = Index.build(tmp_path / f"{name}.tgi", layout).vectors(range(6))
        np.testing.assert_array_equal(built, plain, err_msg=name)


def test_batch_equals_single_queries(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    vectors = random_vectors(rng, 3000, 97)
    index = Index.build(tmp_path / "i.tgi", vectors, dtype="int8")
    queries = random_vectors(rng, 6, 97)
    batch = index.search_batch(queries, 5, threshold=0.0)
    assert len(batch) == 6
    for query, (rows, scores) in zip(queries, batch, strict=True):
        single = index.search(query, 5, threshold=0.0)
        np.testing.assert_array_equal(rows, single[0])
        np.testing.assert_array_equal(scores, single[1])
    assert index.search_batch(np.zeros((0, 97), np.float32)) == []


def test_parallel_scan_equals_serial(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    vectors = clustered_with_near_ties(rng, 20_000, 16)
    Index.build(tmp_path / "i.tgi", vectors, dtype="int8")
    serial = Index.open(tmp_path / "i.tgi")
    parallel = Index.open(tmp_path / "i.tgi", threads=4)
    assert parallel.threads == 4
    query = vectors[17]
    for k in (1, 10, 1000):
        np.testing.assert_array_equal(parallel.search(query, k)[0], serial.search(query, k)[0])
    np.testing.assert_array_equal(parallel.scores(query), serial.scores(query))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_queries_are_rejected(tmp_path: Path, bad: float) -> None:
    index = Index.build(tmp_path / "i.tgi", np.eye(4, dtype=np.float32))
    query = np.ones(4, np.float32)
    query[2] = bad
    with pytest.raises(InvalidInputError, match="position 2"):
        index.search(query)
    with pytest.raises(InvalidInputError, match="query 1 holds"):
        index.search_batch(np.stack([np.ones(4, np.float32), query]))
    with pytest.raises(InvalidInputError, match="finite"):
        index.scores(query)


def test_bad_arguments_raise_invalid_input(tmp_path: Path) -> None:
    index = Index.build(tmp_path / "i.tgi", np.eye(4, dtype=np.float32))
    query = np.ones(4, np.float32)
    cases = [
        (lambda: index.search(np.ones(5, np.float32)), "dimension 4"),
        (lambda: index.search(np.ones(4)), "float32"),
        (lambda: index.search([1.0, 2.0, 3.0, 4.0]), "float32"),
        (lambda: index.search(np.ones((4, 2), np.float32)[:, 0]), "ascontiguousarray"),
        (lambda: index.search(query, 0), "k must be"),
        (lambda: index.search(query, -3), "k must be"),
        (lambda: index.search(query, threshold=float("nan")), "NaN"),
        (lambda: index.search(query, allow=[4]), "allow contains row 4"),
        (lambda: index.search(query, deny=[-1]), "deny contains row -1"),
        (lambda: index.search(query, flags=[-1]), "flags contains -1"),
        (lambda: index.search(query, flags="ab"), "flags must be"),
        (lambda: index.search_batch(np.ones((2, 3), np.float32)), "dimension 3"),
        # Whole multiples of the dimension, where one query is expected: never a batch.
        (lambda: index.search(np.ones(8, np.float32)), "8 values, the index has dimension 4"),
        (lambda: index.search_gated(np.ones(8, np.float32)), "8 values"),
        (lambda: index.scores(np.ones(8, np.float32)), "8 values"),
        (lambda: index.scores(np.ones(20, np.float32)), "20 values"),
        (lambda: index.rescore(np.ones(8, np.float32), [0]), "8 values"),
        # Fortran order is contiguous, but not row after row.
        (lambda: index.search_batch(np.asfortranarray(np.eye(4, 4, dtype=np.float32)[:2])), "C-"),
        (lambda: index.rescore(query, [9]), "row 9"),
        (lambda: Index.build(tmp_path / "x", np.ones(4, np.float32)), "2-D"),
        (lambda: Index.build(tmp_path / "x", np.ones((2, 0), np.float32)), "dimension"),
        (lambda: Index.build(tmp_path / "x", np.eye(2, dtype=np.float32), dtype="f16"), "f16"),
        (lambda: Index.build(tmp_path / "x", np.full((2, 2), np.nan, np.float32)), r"\[0, 0\]"),
        (lambda: Index.build(tmp_path / "x", np.eye(2, dtype=np.float32), ids=[1]), "ids has"),
        (lambda: Index.build(tmp_path / "x", np.eye(2, dtype=np.float32), masks=[[1]]), "masks"),
        # Refused before the masks are packed: 200 rows of 2^26 words would abort the process.
        (
            lambda: Index.build(
                tmp_path / "x", np.ones((200, 2), np.float32), masks=[[2**32 - 1]] * 200
            ),
            "row 0 requires flag 4294967295.*at most 65536 flags",
        ),
    ]
    for call, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            call()
    assert not (tmp_path / "x").exists()
    for options in ({"threads": 0}, {"threads": -1}, {"expected_dim": -4}):
        with pytest.raises(InvalidInputError, match="must be a positive integer"):
            Index.open(tmp_path / "i.tgi", **options)


def test_a_misaligned_query_is_refused_with_the_remedy_that_works(tmp_path: Path) -> None:
    index = Index.build(tmp_path / "i.tgi", np.eye(4, dtype=np.float32))
    query = np.frombuffer(b"\0" + np.ones(4, np.float32).tobytes(), np.float32, offset=1)
    # C-contiguous: np.ascontiguousarray returns it as it is, still misaligned.
    assert np.ascontiguousarray(query).flags.c_contiguous
    assert not np.ascontiguousarray(query).flags.aligned
    with pytest.raises(InvalidInputError, match=r"query is not aligned.*np\.array\(query\)"):
        index.search(query)
    assert index.search(np.array(query), 2)[0].tolist() == [0, 1]


def test_metadata_round_trips(tmp_path: Path) -> None:
    vectors = np.eye(3, 6, dtype=np.float32) * 5
    ids = np.array([10, 2**63 + 5, 7], np.uint64)
    built = Index.build(tmp_path / "i.tgi", vectors, dtype="bf16", model_id="minilm-l6 ü", ids=ids)
    index = Index.open(str(tmp_path / "i.tgi"), expected_dim=6)
    assert index.model_id == "minilm-l6 ü"
    assert index.path == tmp_path / "i.tgi" == built.path
    np.testing.assert_array_equal(index.ids, ids)
    assert index.ids.dtype == np.uint64
    assert index.mask_words == 0
    assert "rows=3" in repr(index)
    np.testing.assert_array_equal(Index.build(tmp_path / "j", vectors).ids, [0, 1, 2])


def test_rebuild_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "i.tgi"
    old = Index.build(path, np.eye(4, dtype=np.float32))
    Index.build(path, -np.eye(4, dtype=np.float32))
    query = np.array([1, 0, 0, 0], np.float32)
    # The open mapping keeps the old file; a new open sees the new one.
    assert old.search(query, 1)[1][0] == pytest.approx(1.0)
    assert Index.open(path).search(query, 1)[1][0] == pytest.approx(0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.tgi"]
