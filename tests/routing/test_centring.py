"""Tool rows centred on their catalog: built, saved, reopened and refreshed on one offset."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.routing.sealed import write_sealed
from toolgate import IndexFormatError, InvalidInputError
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import embedding_views
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.embedding.normalise import normalised
from toolgate.evaluation.calibrate import fit_row_centring
from toolgate.evaluation.evaluate import LabelledQuery
from toolgate.routing.build import embed_tools
from toolgate.routing.centring import (
    SMALL_CATALOG,
    centred,
    centring_offset,
    offset_numbers,
    uncentred,
)
from toolgate.routing.router import Router, RouterConfig

unit_rows = (
    arrays(
        np.float32,
        st.tuples(st.integers(1, 40), st.just(8)),
        elements=st.floats(-1, 1, width=32),
    )
    .filter(lambda rows: bool((np.linalg.norm(rows, axis=1) > 1e-3).all()))
    .map(normalised)
)


@given(unit_rows, st.floats(0, 1))
@settings(max_examples=60, deadline=None)
def test_centred_rows_are_unit_rows_less_a_shrunk_share_of_their_mean(
    rows: np.ndarray, share: float
) -> None:
    offset = centring_offset(rows, share)
    out = centred(rows, offset)
    norms = np.linalg.norm(out, axis=1)
    assert np.allclose(norms[norms > 0], 1.0, atol=1e-5)
    if share == 0.0:
        assert offset is None
        assert np.array_equal(out, rows)
        return
    assert offset is not None
    n = len(rows)
    expected = share * n / (n + SMALL_CATALOG) * rows.astype(np.float64).mean(axis=0)
    assert np.allclose(offset, expected, atol=1e-6)


@given(unit_rows, st.floats(0, 1))
@settings(max_examples=60, deadline=None)
def test_uncentred_gives_back_the_rows_that_were_centred(rows: np.ndarray, share: float) -> None:
    offset = centring_offset(rows, share)
    back = uncentred(centred(rows, offset), offset)
    assert np.allclose(back, rows, atol=2e-5)


def test_a_small_catalog_is_centred_less_than_a_large_one() -> None:
    row = normalised(np.array([[3.0, 4.0]]))
    small, large = (centring_offset(np.repeat(row, n, axis=0), 1.0) for n in (2, 2000))
    assert small is not None
    assert large is not None
    # Of two near copies, the mean is the tools themselves: barely taken out.
    assert np.linalg.norm(small) < 0.06 < 0.98 < np.linalg.norm(large) <= 1.0


def test_offset_numbers_read_back_as_the_same_float32_values() -> None:
    offset = np.random.default_rng(3).normal(scale=1e-2, size=384).astype(np.float32)
    numbers = offset_numbers(offset)
    assert all(isinstance(number, float) for number in numbers)
    assert np.array_equal(np.asarray(json.loads(json.dumps(numbers)), np.float32), offset)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return demo_catalog()


def test_the_index_holds_the_centred_rows(catalog: Catalog, embedder: Embedder) -> None:
    raw = embed_tools(embedder, embedding_views(catalog), None)
    every = range(len(catalog))
    plain = Router.from_catalog(
        catalog, config=RouterConfig(row_centring=0.0), embedder=embedder, cache=None
    )
    assert np.allclose(plain._parts.index.vectors(every), raw, atol=1e-6)
    assert plain._parts.offset is None
    router = Router.from_catalog(catalog, embedder=embedder, cache=None)
    offset = centring_offset(raw, RouterConfig().row_centring)
    assert offset is not None
    assert router._parts.offset is not None
    assert np.allclose(router._parts.offset, offset)
    assert np.allclose(router._parts.index.vectors(every), centred(raw, offset), atol=1e-6)
    assert not np.allclose(router._parts.index.vectors(every), raw, atol=1e-3)


def test_a_saved_router_reopens_on_the_same_offset(
    catalog: Catalog, embedder: Embedder, tmp_path: Path
) -> None:
    router = Router.from_catalog(catalog, embedder=embedder, cache=None, path=tmp_path / "r")
    reopened = Router.open(tmp_path / "r", embedder=embedder)
    assert reopened.config.row_centring == RouterConfig().row_centring
    assert reopened._parts.offset is not None
    assert router._parts.offset is not None
    assert np.array_equal(reopened._parts.offset, router._parts.offset)
    with pytest.raises(InvalidInputError, match="row_centring set how the index was built"):
        router.with_config(RouterConfig(row_centring=0.25))


def test_a_refresh_is_centred_as_a_build_of_the_new_catalog_is(
    catalog: Catalog, embedder: Embedder
) -> None:
    # Two servers first, then the rest added: the rows end centred on the whole catalog's
    # mean, not on the first servers'. (A catalog of one server embeds no server names, so
    # its tools' texts would change when a second server came.)
    first = Catalog.from_tools([t.to_dict() for t in catalog if t.server in ("github", "slack")])
    counting = _Counting(embedder)
    router = Router.from_catalog(first, embedder=counting, cache=None)  # type: ignore[arg-type]
    counting.texts.clear()
    refreshed = router.refresh(catalog)
    kept = {text for views in embedding_views(first) for text in views}
    assert not kept & set(counting.texts)  # the kept tools are read back, not embedded
    built = Router.from_catalog(catalog, embedder=embedder, cache=None)
    assert refreshed._parts.offset is not None
    assert built._parts.offset is not None
    assert np.allclose(refreshed._parts.offset, built._parts.offset, atol=1e-6)
    every = range(len(catalog))
    assert np.allclose(
        refreshed._parts.index.vectors(every), built._parts.index.vectors(every), atol=1e-5
    )


def test_a_router_saved_before_centring_reads_as_uncentred(
    catalog: Catalog, embedder: Embedder, tmp_path: Path
) -> None:
    config = RouterConfig(row_centring=0.0)
    Router.from_catalog(catalog, config=config, embedder=embedder, cache=None, path=tmp_path)
    manifest = tmp_path / "router.json"
    data = json.loads(manifest.read_text())
    assert "row_offset" not in data
    del data["config"]["row_centring"]  # as a manifest written before the setting
    write_sealed(manifest, data)
    old = Router.open(tmp_path, embedder=embedder)
    assert old.config.row_centring == 0.0
    assert old._parts.offset is None
    refreshed = old.refresh(catalog)  # and stays so when refreshed
    assert refreshed._parts.offset is None


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        ("zero", "row_offset is a str, not a list"),
        ([0.1, "x"], r"row_offset\[1\] 'x' is not a finite number"),
        ([0.1, 1], r"row_offset\[1\] 1 is not a finite number"),
        ([0.1, 1e999], r"row_offset\[1\] inf is not a finite number"),
        ([0.1, 0.2], "row_offset has 2 values for rows of 384"),
        ([0.1] * 384, "row_offset has length 1.96, not under 1 as centring writes it"),
    ],
)
def test_a_malformed_offset_is_an_index_format_error(
    catalog: Catalog, embedder: Embedder, tmp_path: Path, offset: object, message: str
) -> None:
    Router.from_catalog(catalog, embedder=embedder, cache=None, path=tmp_path)
    manifest = tmp_path / "router.json"
    data = json.loads(manifest.read_text())
    data["row_offset"] = offset
    write_sealed(manifest, data)
    with pytest.raises(IndexFormatError, match=message):
        Router.open(tmp_path, embedder=embedder)


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_row_centring_must_be_a_share(share: object) -> None:
    with pytest.raises(InvalidInputError, match="row_centring must be in \\[0, 1\\]"):
        RouterConfig(row_centring=share)  # type: ignore[arg-type]


def test_router_parts_compare_without_comparing_the_offset_array(
    catalog: Catalog, embedder: Embedder
) -> None:
    parts = Router.from_catalog(catalog, embedder=embedder, cache=None)._parts
    assert parts.offset is not None
    # Arrays compared by == have no truth value (the same object is not compared at all).
    assert parts == replace(parts, offset=parts.offset.copy())


class _Counting:
    """Wraps the real embedder and records every text it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.texts = inner, list[str]()
        self.model_id, self.dim = inner.model_id, inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_recentred_is_the_router_built_at_that_share_without_a_model_run(
    catalog: Catalog, embedder: Embedder
) -> None:
    every = range(len(catalog))
    counting = _Counting(embedder)
    router = Router.from_catalog(catalog, embedder=counting, cache=None)  # type: ignore[arg-type]
    plain = Router.from_catalog(
        catalog, config=RouterConfig(row_centring=0.0), embedder=embedder, cache=None
    )
    counting.texts.clear()
    again = router.recentred(0.0)
    tool_texts = {text for views in embedding_views(catalog) for text in views}
    assert not tool_texts & set(counting.texts)  # read back from the index, not embedded
    assert again.config == plain.config
    assert again._parts.offset is None
    assert np.allclose(
        again._parts.index.vectors(every), plain._parts.index.vectors(every), atol=1e-5
    )
    back = plain.recentred(RouterConfig().row_centring)
    assert back._parts.offset is not None
    assert router._parts.offset is not None
    assert np.allclose(back._parts.offset, router._parts.offset, atol=1e-6)
    query = "merge the approved pull request"
    assert back.route(query, top_k=5).ids == router.route(query, top_k=5).ids
    with pytest.raises(InvalidInputError, match="row_centring must be in"):
        router.recentred(2.0)


def test_calibrate_takes_another_centring_only_when_it_ranks_better(
    catalog: Catalog, embedder: Embedder
) -> None:
    router = Router.from_catalog(catalog, embedder=embedder, cache=None)
    queries = [
        LabelledQuery("1", "merge the approved pull request", ("merge_pull_request",)),
        LabelledQuery("2", "post the build status to #eng", ("send_message",)),
        LabelledQuery("3", "which tables hold the orders", ("list_tables",)),
        LabelledQuery("4", "hello there", ()),
    ]
    kept, points, _ = fit_row_centring(router, queries, top_k=3, margin=1.0)
    assert kept is router
    assert [p.row_centring for p in points] == [0.5, 0.0, 0.75]
    assert all(0.0 <= p.ndcg <= 1.0 and 0.0 <= p.complete <= 1.0 for p in points)
    # z=0: the margin alone judges (ranking_choice tests the noise rule).
    taken, points, _ = fit_row_centring(router, queries, top_k=3, margin=-1.0, z=0.0)
    best = max(points, key=lambda p: (p.ndcg, p.row_centring == 0.5))
    assert taken.config.row_centring == best.row_centring
    with pytest.raises(InvalidInputError, match="has gold tools; calibrate needs at least one"):
        fit_row_centring(router, queries[3:], top_k=3)
