"""Scoring kernels: every available instruction set against a float64 numpy reference."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from toolgate import InvalidInputError, ToolgateError
from toolgate._toolgate import _testing

DIMS = (1, 7, 97, 384)
ROW_COUNTS = (0, 1, 63, 64, 65, 10_001)
UNIT_ROUNDOFF = float(np.finfo(np.float32).eps) / 2

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@pytest.fixture(params=_testing.available_isas())
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test once per instruction set the CPU has, forced, then restores detection."""
    name: str = request.param
    _testing.force_isa(name)
    assert _testing.active_isa() == name
    yield name
    _testing.force_isa(None)


def gamma(n: int) -> float:
    """Higham's bound on the relative error of an n-term f32 sum in any order."""
    return n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)


def assert_within_rounding(
    got: F32, query: F32, rows: F64, *, extra_terms: int = 0, slack: F64 | None = None
) -> None:
    """Asserts `got` equals `rows @ query` up to the worst-case f32 rounding of the sum, plus
    `slack` per row for approximations made on purpose."""
    terms = rows * query.astype(np.float64)
    exact = terms.sum(axis=1)
    bound = gamma(query.shape[0] + 2 + extra_terms) * np.abs(terms).sum(axis=1)
    bound += np.finfo(np.float32).tiny
    if slack is not None:
        bound += slack
    assert got.dtype == np.float32
    assert got.shape == exact.shape
    worst = np.abs(got.astype(np.float64) - exact) - bound
    assert (worst <= 0).all(), f"row {int(worst.argmax())} exceeds the rounding bound"


def random_vectors(rng: np.random.Generator, n: int, dim: int) -> F32:
    return rng.standard_normal((n, dim), dtype=np.float32)


def to_bf16(values: F32) -> npt.NDArray[np.uint16]:
    """Truncates f32 to bf16 bits, independently of the crate's own conversion."""
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(bits: npt.NDArray[np.uint16]) -> F64:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def int8_query_rounding(query: F32, codes: npt.NDArray[np.int8], scales: F32) -> F64:
    """What the integer int8 kernels may add per row by rounding the query to i16 steps of
    max|q| / 32767: half a step per code (plus slack for the division), and three roundings
    of the converted integer sum."""
    max_q = float(np.abs(query).max(initial=0.0))
    step = max_q / 32767 * (0.5 + 1 / 1024)
    code_sums: F64 = np.abs(codes.astype(np.float64)).sum(axis=1)
    per_unit_scale = code_sums * step + gamma(3) * 127 * codes.shape[1] * max_q * 1.001
    slack: F64 = scales.astype(np.float64) * per_unit_scale
    return slack


def quantize(rows: F32) -> tuple[npt.NDArray[np.int8], F32]:
    """Symmetric per-row int8: scale = max|x| / 127, round to nearest, clamp."""
    scales = (np.abs(rows).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scales == 0, np.float32(1), scales)
    codes = np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8)
    return codes, scales


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("n", ROW_COUNTS)
def test_f32_scan_matches_float64(isa: str, dim: int, n: int) -> None:
    rng = np.random.default_rng(dim * 100_003 + n)
    query = random_vectors(rng, 1, dim)[0]
    rows = random_vectors(rng, n, dim)
    assert_within_rounding(_testing.scan(query, rows), query, rows.astype(np.float64))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("n", ROW_COUNTS)
def test_int8_scan_matches_float64(isa: str, dim: int, n: int) -> None:
    rng = np.random.default_rng(dim * 100_003 + n + 1)
    query = random_vectors(rng, 1, dim)[0]
    codes = rng.integers(-127, 128, size=(n, dim), dtype=np.int8)
    scales = rng.uniform(0, 0.01, size=n).astype(np.float32)
    got = _testing.scan(query, codes, dtype="int8", scales=scales)
    # The multiply by the scale is one more rounding on top of the sum.
    rows = codes.astype(np.float64) * scales.astype(np.float64)[:, None]
    slack = int8_query_rounding(query, codes, scales)
    assert_within_rounding(got, query, rows, extra_terms=1, slack=slack)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("n", ROW_COUNTS)
def test_bf16_scan_matches_float64(isa: str, dim: int, n: int) -> None:
    rng = np.random.default_rng(dim * 100_003 + n + 2)
    query = random_vectors(rng, 1, dim)[0]
    bits = to_bf16(random_vectors(rng, n, dim))
    assert_within_rounding(_testing.scan(query, bits, dtype="bf16"), query, from_bf16(bits))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("pad", [3, 17])
def test_padded_rows_score_only_the_first_dim_columns(isa: str, dim: int, pad: int) -> None:
    rng = np.random.default_rng(dim + pad)
    query = random_vectors(rng, 1, dim)[0]
    padded = random_vectors(rng, 65, dim + pad)
    got = _testing.scan(query, padded, padded=True)
    assert_within_rounding(got, query, padded[:, :dim].astype(np.float64))
    codes, scales = quantize(padded)
    got = _testing.scan(query, codes, dtype="int8", scales=scales, padded=True)
    dequantized = codes[:, :dim].astype(np.float64) * scales.astype(np.float64)[:, None]
    slack = int8_query_rounding(query, codes[:, :dim], scales)
    assert_within_rounding(got, query, dequantized, extra_terms=1, slack=slack)
    bits = to_bf16(padded)
    got = _testing.scan(query, bits, dtype="bf16", padded=True)
    assert_within_rounding(got, query, from_bf16(bits[:, :dim]))


@pytest.mark.parametrize("magnitude", [1e17, 1e-20, 0.0])
def test_extreme_magnitudes_and_zero_rows(isa: str, magnitude: float) -> None:
    rng = np.random.default_rng(7)
    query = (random_vectors(rng, 1, 97)[0] * np.float32(magnitude)).astype(np.float32)
    rows = (random_vectors(rng, 70, 97) * np.float32(magnitude)).astype(np.float32)
    rows[3] = 0
    got = _testing.scan(query, rows)
    assert np.isfinite(got).all()
    assert got[3] == 0
    assert_within_rounding(got, query, rows.astype(np.float64))


def test_ties_score_identically(isa: str) -> None:
    rng = np.random.default_rng(8)
    query = random_vectors(rng, 1, 384)[0]
    row = random_vectors(rng, 1, 384)
    got = _testing.scan(query, np.repeat(row, 67, axis=0))
    assert (got == got[0]).all()


@pytest.mark.parametrize("dtype", ["f32", "int8", "bf16"])
def test_batch_equals_single_queries(isa: str, dtype: str) -> None:
    rng = np.random.default_rng(9)
    queries = random_vectors(rng, 7, 97)
    vectors = random_vectors(rng, 3000, 97)
    codes, scales = quantize(vectors)
    stored: dict[str, npt.NDArray[Any]] = {"f32": vectors, "int8": codes, "bf16": to_bf16(vectors)}
    rows = stored[dtype]
    scale_arg = scales if dtype == "int8" else None
    batch = _testing.scan_batch(queries, rows, dtype=dtype, scales=scale_arg)
    assert batch.shape == (7, 3000)
    for q, query in enumerate(queries):
        single = _testing.scan(query, rows, dtype=dtype, scales=scale_arg)
        np.testing.assert_array_equal(batch[q], single)


def test_empty_batch_and_empty_matrix(isa: str) -> None:
    rows = np.zeros((0, 8), dtype=np.float32)
    assert _testing.scan_batch(np.zeros((3, 8), dtype=np.float32), rows).shape == (3, 0)
    none = _testing.scan_batch(np.zeros((0, 8), dtype=np.float32), np.ones((4, 8), np.float32))
    assert none.shape == (0, 4)


@pytest.mark.parametrize("dim", DIMS)
def test_int8_error_bound_holds_against_f32_scores(isa: str, dim: int) -> None:
    rng = np.random.default_rng(10 + dim)
    query = random_vectors(rng, 1, dim)[0]
    query /= np.linalg.norm(query)
    rows = random_vectors(rng, 2000, dim)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    codes, scales = quantize(rows)
    approx = _testing.scan(query, codes, dtype="int8", scales=scales)
    exact = rows.astype(np.float64) @ query.astype(np.float64)
    f32_scores = _testing.scan(query, rows)
    bounds = np.array([_testing.i8_error_bound(query, float(s)) for s in scales])
    assert (np.abs(approx - f32_scores) <= bounds).all()
    assert (np.abs(approx - exact) <= bounds).all()
    # The bound is about half a quantisation step per element, not far beyond it.
    assert (bounds <= 0.53 * scales * np.abs(query).sum()).all()


def test_dot_and_read_probe_match_float64(isa: str) -> None:
    rng = np.random.default_rng(11)
    for length in (1, 15, 16, 17, 97, 384, 1000):
        a, b = random_vectors(rng, 2, length)
        dot = np.array([_testing.dot(a, b)], dtype=np.float32)
        assert_within_rounding(dot, a, b[None, :].astype(np.float64))
        total = np.array([_testing.read_probe(a)], dtype=np.float32)
        assert_within_rounding(total, np.ones(length, np.float32), a[None, :].astype(np.float64))
    matrix = random_vectors(rng, 65, 97)
    total = matrix.astype(np.float64).sum()
    bound = gamma(matrix.size) * np.abs(matrix.astype(np.float64)).sum()
    assert abs(_testing.read_probe(matrix) - total) <= bound


def test_threads_agree_with_single_thread() -> None:
    rng = np.random.default_rng(12)
    queries = random_vectors(rng, 16, 384)
    rows = random_vectors(rng, 5000, 384)
    expected = [_testing.scan(query, rows) for query in queries]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda query: _testing.scan(query, rows), queries))
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got, want)


class TestBadInput:
    """Every misuse is an InvalidInputError that names what is wrong."""

    query = np.ones(8, dtype=np.float32)
    rows = np.ones((4, 8), dtype=np.float32)

    def test_non_contiguous_rows_ask_for_ascontiguousarray(self) -> None:
        strided = np.ones((4, 16), dtype=np.float32)[:, ::2]
        with pytest.raises(InvalidInputError, match="ascontiguousarray"):
            _testing.scan(self.query, strided)

    def test_fortran_ordered_rows_ask_for_ascontiguousarray(self) -> None:
        # Contiguous, but column after column: read as rows it would score the wrong values.
        with pytest.raises(InvalidInputError, match="not C-contiguous"):
            _testing.scan(self.query, np.asfortranarray(self.rows))
        with pytest.raises(InvalidInputError, match="not C-contiguous"):
            _testing.scan_batch(np.asfortranarray(np.ones((2, 8), np.float32)), self.rows)

    def test_dimension_mismatch_names_both_dimensions(self) -> None:
        with pytest.raises(InvalidInputError, match="dimension 8 but rows have dimension 9"):
            _testing.scan(self.query, np.ones((4, 9), dtype=np.float32))
        with pytest.raises(InvalidInputError, match="dimension 8 but rows have dimension 7"):
            _testing.scan(self.query, np.ones((4, 7), dtype=np.float32), padded=True)

    @pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
    def test_non_finite_query_is_rejected(self, value: float) -> None:
        query = self.query.copy()
        query[5] = value
        with pytest.raises(InvalidInputError, match=r"query\[5\]"):
            _testing.scan(query, self.rows)
        queries = np.ones((3, 8), dtype=np.float32)
        queries[2, 1] = value
        with pytest.raises(InvalidInputError, match=r"queries\[2, 1\]"):
            _testing.scan_batch(queries, self.rows)

    def test_wrong_dtypes_name_the_expected_type(self) -> None:
        with pytest.raises(InvalidInputError, match=r"float32.*float64"):
            _testing.scan(self.query.astype(np.float64), self.rows)
        with pytest.raises(InvalidInputError, match="2-D int8"):
            _testing.scan(self.query, self.rows, dtype="int8", scales=np.ones(4, np.float32))
        with pytest.raises(InvalidInputError, match="'f32', 'int8' or 'bf16'"):
            _testing.scan(self.query, self.rows, dtype="f16")
        with pytest.raises(InvalidInputError, match="list"):
            _testing.scan([1.0] * 8, self.rows)  # type: ignore[arg-type]

    def test_scales_are_checked(self) -> None:
        codes = np.ones((4, 8), dtype=np.int8)
        with pytest.raises(InvalidInputError, match="needs scales"):
            _testing.scan(self.query, codes, dtype="int8")
        with pytest.raises(InvalidInputError, match="3 scales for 4 rows"):
            _testing.scan(self.query, codes, dtype="int8", scales=np.ones(3, np.float32))
        with pytest.raises(InvalidInputError, match="only apply to dtype='int8'"):
            _testing.scan(self.query, self.rows, scales=np.ones(4, np.float32))

    def test_zero_dimension_query_is_rejected(self) -> None:
        with pytest.raises(InvalidInputError, match="dimension 0"):
            _testing.scan(np.ones(0, np.float32), np.ones((4, 0), np.float32))

    def test_dot_lengths_must_match(self) -> None:
        with pytest.raises(InvalidInputError, match="a has 8 elements but b has 7"):
            _testing.dot(self.query, np.ones(7, np.float32))

    def test_unknown_and_unavailable_isas(self) -> None:
        with pytest.raises(InvalidInputError, match='unknown instruction set "sse9"'):
            _testing.force_isa("sse9")
        missing = [
            name for name in ("avx512", "avx2", "neon") if name not in _testing.available_isas()
        ]
        for name in missing:
            with pytest.raises(InvalidInputError, match=f"{name} is not available"):
                _testing.force_isa(name)
        assert issubclass(InvalidInputError, ToolgateError)
        assert _testing.active_isa() in _testing.available_isas()
