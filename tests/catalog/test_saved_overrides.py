"""Load-time overrides survive a router's save and reopen.

A catalog loaded with ``overrides=`` (pins, preconditions) applies them again when a server's
tools are replaced (``notifications/tools/list_changed``). A router reopened with
:meth:`Router.open` must do the same as the router that was saved: otherwise the pinned tool
and the ``requires.tools`` gate silently disappear on the first refresh.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tests.routing.sealed import reseal
from toolgate import CatalogError, IndexFormatError
from toolgate.catalog.catalog import Catalog, CatalogWarning
from toolgate.routing.router import Router
from toolgate.routing.store import saved_overrides

# One MCP server's tools/list, replayed unchanged through replace_server below.
TOOLS_LIST: dict[str, Any] = {
    "tools": [
        {"name": "get_me", "description": "Details of the authenticated GitHub user."},
        {"name": "create_branch", "description": "Create a new branch in a GitHub repository."},
        {
            "name": "create_pull_request",
            "description": "Open a new pull request from a branch in a GitHub repository.",
        },
        {"name": "list_issues", "description": "List the issues of a GitHub repository."},
    ]
}
OVERRIDES: dict[str, Any] = {
    "create_pull_request": {"requires": {"tools": ["github/create_branch"]}},
    "github/list_issues": {"scopes": ["github:read"], "tags": ["read"]},
    "get_me": {"pinned": True},
}
GATED = "github/create_pull_request"


def _catalog(overrides: dict[str, Any] | None = OVERRIDES) -> Catalog:
    return Catalog.from_mcp(TOOLS_LIST, server="github", overrides=overrides)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Router, Path]:
    """A router built (and saved) from the overridden catalog, and its directory."""
    path = tmp_path_factory.mktemp("overrides") / "router"
    return Router.from_catalog(_catalog(), path=path, cache=None), path


def _copy(router: Router, tmp_path: Path) -> Path:
    """A private copy of the saved router, for tests that edit its files."""
    path = tmp_path / "copy"
    router.save(path)
    return path


def _edit(path: Path, **fields: Any) -> None:
    """Rewrite JSON file ``path`` with ``fields`` set (a value of None removes the field)."""
    data = json.loads(path.read_text())
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))
    reseal(path.parent)


def _answers(router: Router) -> list[tuple[list[str], list[str]]]:
    """Routed and gated ids, with an empty state, for queries that touch the overrides."""
    queries = ["select:create_pull_request", "open a pull request", "who am I"]
    results = [router.route(q, state={}) for q in queries]
    return [(r.ids, [g.id for g in r.gated_out]) for r in results]


def test_reopened_router_replaces_a_server_like_the_saved_one(saved: tuple[Router, Path]) -> None:
    built, path = saved
    opened = Router.open(path)
    fresh = built.replace_server("github", TOOLS_LIST)
    again = opened.replace_server("github", TOOLS_LIST)
    # The same tools/list with the same overrides is the same catalog: nothing changed.
    assert again.catalog.version == fresh.catalog.version == built.catalog.version
    assert again.catalog.pinned_ids == ("github/get_me",)
    assert again.catalog[GATED].requires_tools == ("github/create_branch",)
    assert again.catalog["github/list_issues"].scopes == ("github:read",)
    assert _answers(again) == _answers(fresh)
    gated = again.route("select:create_pull_request", state={})
    assert GATED not in gated.ids
    assert [g.id for g in gated.gated_out] == [GATED]
    # Once the precondition is met the tool is admitted again.
    met = {"tools_run": ["github/create_branch"]}
    assert GATED in again.route("select:create_pull_request", state=met).ids
    assert opened.catalog.overrides == again.catalog.overrides == OVERRIDES


def test_a_refreshed_router_saves_its_catalogs_overrides(
    saved: tuple[Router, Path], tmp_path: Path
) -> None:
    built, _ = saved
    refreshed = built.refresh(_catalog(), path=tmp_path / "refreshed")
    opened = Router.open(tmp_path / "refreshed")
    again = opened.replace_server("github", TOOLS_LIST)
    assert again.catalog.version == refreshed.catalog.version
    assert again.catalog.pinned_ids == ("github/get_me",)
    assert _answers(again) == _answers(refreshed.replace_server("github", TOOLS_LIST))


def test_resaving_a_reopened_router_keeps_the_overrides(
    saved: tuple[Router, Path], tmp_path: Path
) -> None:
    _, path = saved
    Router.open(path).save(tmp_path / "resaved")
    again = Router.open(tmp_path / "resaved").replace_server("github", TOOLS_LIST)
    assert again.catalog.pinned_ids == ("github/get_me",)
    assert again.catalog[GATED].requires_tools == ("github/create_branch",)


def test_a_router_saved_before_overrides_were_kept_still_opens(
    saved: tuple[Router, Path], tmp_path: Path
) -> None:
    path = _copy(saved[0], tmp_path)
    _edit(path / "catalog.json", overrides=None)
    _edit(path / "router.json", overrides_digest=None)
    opened = Router.open(path)
    # The saved tools keep what the overrides did to them; there are just none to replay.
    assert opened.catalog.overrides == {}
    assert opened.catalog.pinned_ids == ("github/get_me",)
    assert opened.route("select:create_pull_request", state={}).ids == ["github/get_me"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["get_me"], r"overrides must be an object .* not list"),
        ({"get_me": True}, r"override 'get_me' must be an object .* not bool"),
        ({"get_me": {"tags": [1, None, [{"x": {}}]], "pinned": [True, 1.5, "x"]}}, None),
    ],
)
def test_bad_saved_overrides_name_the_file_and_the_entry(
    saved: tuple[Router, Path], tmp_path: Path, overrides: Any, message: str | None
) -> None:
    path = _copy(saved[0], tmp_path)
    _edit(path / "catalog.json", overrides=overrides)
    opened = Router.open(path)  # the catalog loads on first use, not at open
    if message is None:
        # Well-formed JSON but not the overrides router.json was written with.
        message = r"overrides are not the ones router\.json was written with"
    with pytest.raises(IndexFormatError, match=r"catalog\.json: .*" + message):
        _ = opened.catalog


def test_bad_saved_overrides_are_caught_without_a_digest_too(
    saved: tuple[Router, Path], tmp_path: Path
) -> None:
    path = _copy(saved[0], tmp_path)
    _edit(path / "catalog.json", overrides={"get_me": {"pinned": True}, "list_issues": "read"})
    _edit(path / "router.json", overrides_digest=None)
    with pytest.raises(IndexFormatError, match=r"catalog\.json: bad saved overrides: .*'list_"):
        _ = Router.open(path).catalog


def test_overrides_json_cannot_hold_are_refused_when_the_catalog_loads() -> None:
    # Overrides for a tool not in the catalog yet wait for a later refresh, so they are saved
    # too, and must be JSON: a set has no JSON form that would come back as a set. The load
    # says so, not the first router built from the catalog.
    bad = {**OVERRIDES, "merge_pull_request": {"tags": {"write"}}}
    with pytest.raises(CatalogError, match=r"override 'merge_pull_request'\.tags is a set"):
        _catalog(bad)
    # Lenient, the bad entry is dropped with a warning and the others kept.
    with pytest.warns(CatalogWarning, match="skipped a bad override: override 'merge_pull"):
        catalog = Catalog.from_mcp(TOOLS_LIST, server="github", overrides=bad, lenient=True)
    assert set(catalog.overrides) == set(OVERRIDES)


def test_a_catalogs_overrides_cannot_be_edited_through_it() -> None:
    catalog = _catalog(OVERRIDES)
    view = catalog.overrides
    with pytest.raises(TypeError):
        view["x"] = {}  # type: ignore[index]
    first = next(iter(view))
    view[first]["pinned"] = "edited"  # a copy: the catalog keeps its own
    assert catalog.overrides[first].get("pinned") != "edited"


def test_mappings_and_tuples_are_saved_in_their_json_form(
    saved: tuple[Router, Path], tmp_path: Path
) -> None:
    built, _ = saved
    # Only an override no tool matches yet can hold a tuple (x-toolgate rejects it on a tool).
    blocks = {"merge_pull_request": MappingProxyType({"pinned": True, "tags": ("write",)})}
    built.refresh(_catalog({**OVERRIDES, **blocks}), path=tmp_path / "json")
    saved_form = json.loads((tmp_path / "json" / "catalog.json").read_text())["overrides"]
    assert saved_form == {**OVERRIDES, "merge_pull_request": {"pinned": True, "tags": ["write"]}}
    assert Router.open(tmp_path / "json").catalog.overrides == saved_form


def test_catalog_from_saved_keeps_overrides_for_replace_server() -> None:
    catalog = _catalog()
    saved = [tool.to_dict() for tool in catalog]
    restored = Catalog.from_saved(saved, qualify=catalog.qualify, overrides=OVERRIDES)
    assert restored.version == catalog.version
    assert restored.overrides == OVERRIDES
    replayed = restored.replace_server("github", TOOLS_LIST)
    assert replayed.version == catalog.version
    assert replayed.overrides == OVERRIDES


def test_saved_overrides_digest_ignores_key_order_and_rejects_non_json() -> None:
    forward, digest = saved_overrides(OVERRIDES)
    backward, same = saved_overrides(dict(reversed(OVERRIDES.items())))
    assert forward == backward == OVERRIDES
    assert digest == same
    assert saved_overrides({})[1] != digest
    with pytest.raises(ValueError, match=r"override 'x'\.requires\.tools\[1\] is nan"):
        saved_overrides({"x": {"requires": {"tools": ["a", math.nan]}}})
    with pytest.raises(ValueError, match=r"override key 3 is not a string"):
        saved_overrides({3: {}})
