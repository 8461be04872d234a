"""Score fusion against float64 numpy references."""

from __future__ import annotations

from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgate._toolgate import fuse
from toolgate.errors import InvalidInputError

SIZES = [0, 1, 2, 63, 64, 65, 10_001]


def ref_minmax(x: np.ndarray, top: int) -> np.ndarray:
    x = x.astype(np.float64)
    if x.size == 0:
        return x
    hi = x.max()
    ordered = np.sort(x)[::-1]
    lo = ordered[-1] if top == 0 or top >= x.size else ordered[top - 1]
    if hi == lo:
        flat: np.ndarray = np.where(x >= hi, 1.0 if hi > 0 else 0.0, 0.0)
        return flat
    scaled: np.ndarray = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    return scaled


def ref_divmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if x.size == 0 or x.max() <= 0:
        return np.zeros_like(x)
    scaled: np.ndarray = np.clip(x / x.max(), 0.0, 1.0)
    return scaled


def ref_normalise(x: np.ndarray, name: str, top: int) -> np.ndarray:
    if name == "raw":
        return x.astype(np.float64)
    if name == "minmax":
        return ref_minmax(x, top)
    return ref_divmax(x)


def ref_rrf(dense: np.ndarray, sparse: np.ndarray, alpha: float, k: float, top: int) -> np.ndarray:
    out = np.zeros(dense.size)
    for scores, weight, positive_only in ((dense, alpha, False), (sparse, 1 - alpha, True)):
        candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(scores.size)
        values = scores[candidates].astype(np.float64)
        # A row's rank is 1 + the rows scoring above it (tied rows share it); the best
        # ``top`` ranks get in, with every row tied at the cut.
        above = values.size - np.searchsorted(np.sort(values), values, side="right")
        kept = above < top if top else np.ones(values.size, dtype=bool)
        out[candidates[kept]] += weight / (k + above[kept] + 1)
    return out


def signals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-0.2, 0.9, n).astype(np.float32)
    sparse = np.where(rng.random(n) < 0.3, rng.gamma(2.0, 3.0, n), 0.0).astype(np.float32)
    return dense, sparse


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
    ("method", "dense_norm", "sparse_norm"),
    [
        ("minmax", "minmax", "minmax"),
        ("divmax", "raw", "divmax"),
        ("minmax+divmax", "minmax", "divmax"),
        ("raw+minmax", "raw", "minmax"),
        ("divmax+raw", "divmax", "raw"),
    ],
)
@pytest.mark.parametrize("top", [0, 1, 10, 100])
def test_weighted_fusion_matches_numpy(
    n: int, method: str, dense_norm: str, sparse_norm: str, top: int
) -> None:
    dense, sparse = signals(n, seed=n + top)
    alpha = 0.65
    got = fuse(dense, sparse, alpha=alpha, method=method, top=top)
    want = alpha * ref_normalise(dense, dense_norm, top) + (1 - alpha) * ref_normalise(
        sparse, sparse_norm, top
    )
    assert got.dtype == np.float32
    assert got.shape == (n,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("top", [0, 5, 100])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_rrf_matches_reference(n: int, top: int, alpha: float) -> None:
    dense, sparse = signals(n, seed=7 * n + top)
    got = fuse(dense, sparse, alpha=alpha, method="rrf", top=top, rrf_k=60.0)
    np.testing.assert_allclose(got, ref_rrf(dense, sparse, alpha, 60.0, top), rtol=1e-5, atol=1e-8)


# Few distinct values, so ties are common (BM25 gives runs of one score), zeros of both signs.
_SCORE = st.sampled_from([0.0, -0.0, 1e-7, 0.1, 0.5, 1.0, -0.3, 2.5, 7.0])
_METHODS = ["minmax", "divmax", "rrf", "raw+raw", "minmax+divmax", "divmax+minmax"]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.tuples(_SCORE, _SCORE), max_size=40),
    st.sampled_from([0.0, 0.35, 1.0]),
    st.sampled_from(_METHODS),
    st.integers(0, 45),
    st.randoms(use_true_random=False),
)
def test_fusion_matches_numpy_on_generated_scores(
    pairs: list[tuple[float, float]], alpha: float, method: str, top: int, rng: Random
) -> None:
    dense = np.asarray([d for d, _ in pairs], dtype=np.float32)
    sparse = np.asarray([s for _, s in pairs], dtype=np.float32)
    got = fuse(dense, sparse, alpha=alpha, method=method, top=top, rrf_k=1.0)
    if method == "rrf":
        want = ref_rrf(dense, sparse, alpha, 1.0, top)
    else:
        named = {"minmax": "minmax+minmax", "divmax": "raw+divmax"}.get(method, method)
        dense_norm, sparse_norm = named.split("+")
        want = alpha * ref_normalise(dense, dense_norm, top)
        want += (1 - alpha) * ref_normalise(sparse, sparse_norm, top)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # A row's fused score does not depend on its place in the catalog.
    order = list(range(len(pairs)))
    rng.shuffle(order)
    shuffled = fuse(dense[order], sparse[order], alpha=alpha, method=method, top=top, rrf_k=1.0)
    np.testing.assert_array_equal(shuffled, got[order])


def test_rrf_ties_share_a_rank() -> None:
    # A row's score must not depend on where the catalog puts it among rows it ties with.
    dense = np.array([0.5, 0.5, 0.5, 0.9, 0.1], dtype=np.float32)
    sparse = np.zeros(5, dtype=np.float32)
    got = fuse(dense, sparse, alpha=1.0, method="rrf", top=3, rrf_k=0.0)
    np.testing.assert_allclose(got, [1 / 2, 1 / 2, 1 / 2, 1.0, 0.0])


def test_rrf_does_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(4)
    # BM25 gives runs of one score (one term matched in documents of one length).
    dense = rng.choice([0.2, 0.4, 0.5, 0.7], 300).astype(np.float32)
    sparse = rng.choice([0.0, 1.5, 2.5], 300).astype(np.float32)
    perm = rng.permutation(300)
    got = fuse(dense, sparse, alpha=0.5, method="rrf", top=20)
    shuffled = fuse(dense[perm], sparse[perm], alpha=0.5, method="rrf", top=20)
    np.testing.assert_array_equal(shuffled, got[perm])


def test_ties_and_flat_signals() -> None:
    dense = np.full(5, 0.4, dtype=np.float32)
    sparse = np.zeros(5, dtype=np.float32)
    # A flat positive signal carries evidence for every row; an all-zero BM25 carries none.
    got = fuse(dense, sparse, alpha=0.5, method="minmax")
    np.testing.assert_allclose(got, np.full(5, 0.5))
    np.testing.assert_array_equal(fuse(sparse, sparse, alpha=0.5, method="divmax"), sparse)


def test_alpha_extremes_select_one_signal() -> None:
    dense, sparse = signals(200, seed=3)
    np.testing.assert_allclose(
        fuse(dense, sparse, alpha=1.0, method="minmax", top=0), ref_minmax(dense, 0), atol=1e-6
    )
    np.testing.assert_allclose(
        fuse(dense, sparse, alpha=0.0, method="divmax"), ref_divmax(sparse), atol=1e-6
    )


def test_inputs_are_not_modified() -> None:
    dense, sparse = signals(100, seed=5)
    before = (dense.copy(), sparse.copy())
    fuse(dense, sparse, alpha=0.5, method="rrf")
    fuse(dense, sparse, alpha=0.5, method="minmax", top=10)
    np.testing.assert_array_equal(dense, before[0])
    np.testing.assert_array_equal(sparse, before[1])


def test_readonly_arrays_are_accepted() -> None:
    dense, sparse = signals(10, seed=1)
    dense.flags.writeable = False
    sparse.flags.writeable = False
    assert fuse(dense, sparse, alpha=0.5).shape == (10,)


F32 = np.zeros(4, dtype=np.float32)


@pytest.mark.parametrize(
    ("dense", "sparse", "kwargs", "message"),
    [
        (F32, np.zeros(3, dtype=np.float32), {}, "differ in length: dense 4, sparse 3"),
        (np.array([0, np.nan, 0, 0], dtype=np.float32), F32, {}, r"dense\[1\] is NaN"),
        (F32, np.array([0, 0, np.inf, 0], dtype=np.float32), {}, r"sparse\[2\] is inf"),
        (F32, F32, {"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
        (F32, F32, {"alpha": float("nan")}, "alpha must be in"),
        (F32, F32, {"method": "cosine"}, 'unknown fusion method "cosine"'),
        (F32, F32, {"method": "minmax+zscore"}, "unknown fusion method"),
        (F32, F32, {"top": -1}, "top must be >= 0"),
        (F32, F32, {"method": "rrf", "rrf_k": -1.0}, "RRF k must be finite and >= 0"),
        (np.zeros(4), F32, {}, "dense must be a 1-D float32 numpy array, got array of dtype"),
        (F32, [0.0, 0.0, 0.0, 0.0], {}, "sparse must be a 1-D float32 numpy array, got list"),
        (np.zeros((2, 2), dtype=np.float32), F32, {}, "ndim 2"),
        (np.zeros(8, dtype=np.float32)[::2], F32, {}, "np.ascontiguousarray"),
    ],
)
def test_bad_input_is_rejected(
    dense: object, sparse: object, kwargs: dict[str, object], message: str
) -> None:
    options: dict[str, object] = {"alpha": 0.5, **kwargs}
    with pytest.raises(InvalidInputError, match=message):
        fuse(dense, sparse, **options)  # type: ignore[arg-type]


def test_a_top_past_64_bits_is_every_row() -> None:
    # pyo3's conversion to i64 raised OverflowError, outside toolgate's error tree.
    dense, sparse = np.asarray([0.1, 0.9], np.float32), np.asarray([1.0, 0.0], np.float32)
    everything = fuse(dense, sparse, alpha=0.5, top=0)
    np.testing.assert_array_equal(fuse(dense, sparse, alpha=0.5, top=2**64), everything)
    with pytest.raises(InvalidInputError, match="top must be >= 0"):
        fuse(dense, sparse, alpha=0.5, top=-(2**64))
