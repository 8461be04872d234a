"""Precondition gating and scopes: gated rows never surface, and the report says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from toolgate import Index

N, D = 400, 16


def required_flags(rng: np.random.Generator) -> list[list[int]]:
    """Per row, zero to three required flags out of 200 (four mask words)."""
    return [
        sorted(rng.choice(200, int(rng.integers(0, 4)), replace=False).tolist()) for _ in range(N)
    ]


def reference(
    vectors: NDArray[np.float32],
    query: NDArray[np.float32],
    required: list[list[int]],
    flags: set[int],
    allow: set[int] | None,
    deny: set[int],
) -> tuple[list[int], NDArray[np.float64], NDArray[np.bool_], NDArray[np.bool_]]:
    """Rows in canonical order with float64 scores, the in-scope mask and the eligible mask."""
    m = vectors.astype(np.float64)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    scores = m @ (query / np.linalg.norm(query))
    in_scope = np.array([(allow is None or r in allow) and r not in deny for r in range(N)])
    satisfied = np.array([set(need) <= flags for need in required])
    order = sorted(range(N), key=lambda r: (-scores[r], r))
    return order, scores, in_scope, in_scope & satisfied


@pytest.mark.parametrize("dtype", ["f32", "int8", "bf16"])
def test_gated_search_matches_reference(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((N, D)).astype(np.float32)
    required = required_flags(rng)
    index = Index.build(tmp_path / "i.tgi", vectors, dtype=dtype, masks=required)
    assert index.mask_words == 4
    for trial in range(20):
        query = rng.standard_normal(D).astype(np.float32)
        flags = set(rng.choice(200, int(rng.integers(0, 150)), replace=False).tolist())
        allow = set(rng.choice(N, 300, replace=False).tolist()) if trial % 2 else None
        deny = set(rng.choice(N, 30, replace=False).tolist()) if trial % 3 else set()
        order, scores, in_scope, eligible = reference(vectors, query, required, flags, allow, deny)
        result = index.search_gated(
            query,
            10,
            flags=sorted(flags),
            allow=None if allow is None else sorted(allow),
            deny=sorted(deny),
        )
        expected = [r for r in order if eligible[r]][:10]
        # Scores here are well separated; ties within f32 rounding are not expected.
        assert result.rows.tolist() == expected
        np.testing.assert_allclose(result.scores, scores[expected], atol=2e-5)
        assert result.n_out_of_scope == int((~in_scope).sum())
        assert result.n_gated == int((in_scope & ~eligible).sum())
        gated_expected = [r for r in order if in_scope[r] and not eligible[r]][:5]
        assert [g.row for g in result.gated] == gated_expected
        for candidate in result.gated:
            assert candidate.missing_flags == sorted(set(required[candidate.row]) - flags)
            assert candidate.score == pytest.approx(scores[candidate.row], abs=2e-5)
        plain = index.search(query, 10, flags=sorted(flags), allow=allow, deny=deny)
        np.testing.assert_array_equal(plain[0], result.rows)


def test_no_flags_means_nothing_satisfied(tmp_path: Path) -> None:
    vectors = np.eye(3, dtype=np.float32)
    index = Index.build(tmp_path / "i.tgi", vectors, masks=[[], [64], [130]])
    rows, _ = index.search(np.ones(3, np.float32), 10)
    assert rows.tolist() == [0]
    rows, _ = index.search(np.ones(3, np.float32), 10, flags=[64, 130, 9999])
    assert rows.tolist() == [0, 1, 2]
    assert index.required_flags(2) == [130]


def test_mask_array_form(tmp_path: Path) -> None:
    masks = np.zeros((3, 2), np.uint64)
    masks[1, 1] = 1 << 63  # flag 127
    index = Index.build(tmp_path / "i.tgi", np.eye(3, dtype=np.float32), masks=masks)
    assert index.required_flags(1) == [127]
    result = index.search_gated(np.array([0, 1, 0], np.float32), 1)
    assert result.rows.tolist() == [0]
    assert [(g.row, g.missing_flags) for g in result.gated] == [(1, [127])]
    assert result.to_dict()["gated"] == [{"row": 1, "score": 1.0, "missing_flags": [127]}]
    assert len(result) == 1
    assert list(result) == [(0, 0.0)]


def test_mask_arrays_of_any_memory_layout(tmp_path: Path) -> None:
    # A field of a packed structured array: 20-byte row strides over 8-byte words, at an
    # address no multiple of 8. Read at the strides rounded down, row 1 required flag 32.
    records = np.zeros(3, dtype=[("tag", "u4"), ("m", "<u8", (2,))])
    records["m"][1, 0] = 1
    masks = records["m"]
    assert masks.strides == (20, 8)
    assert not masks.flags.aligned
    index = Index.build(tmp_path / "i.tgi", np.eye(3, dtype=np.float32), masks=masks)
    assert [index.required_flags(row) for row in range(3)] == [[], [0], []]


def test_threshold_applies_to_the_gated_report(tmp_path: Path) -> None:
    vectors = np.array([[1, 0], [0.6, 0.8], [0, 1]], np.float32)
    index = Index.build(tmp_path / "i.tgi", vectors, masks=[[1], [1], [1]])
    result = index.search_gated(np.array([1, 0], np.float32), None, threshold=0.5)
    assert len(result) == 0
    assert result.n_gated == 3
    assert [g.row for g in result.gated] == [0, 1]
