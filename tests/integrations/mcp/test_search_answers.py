"""A search the model asks for is never answered "no tool needed", and its unknown names are
told within bounds."""

from __future__ import annotations

import anyio
import pytest

from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp import answers
from toolgate.integrations.mcp.answers import LISTED_NAMES, SUGGESTED_NAMES, unknown_names_note
from toolgate.integrations.mcp.turns import route_search
from toolgate.routing.router import Router

SCOPE = {"allow": None, "deny": None, "state": None}


def test_a_search_for_chit_chat_still_finds_tools(embedder: Embedder) -> None:
    router = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    assert router.route("🙂").no_tool  # a turn would route nothing
    found = anyio.run(lambda: route_search(router, "🙂", SCOPE, top_k=3, turn_id="t"))
    assert not found.no_tool
    assert len(found) >= 1


def test_unknown_names_get_a_bounded_note(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each suggestion is an edit distance to every tool: a select: of hundreds of made-up
    # names must not cost one per name.
    catalog = demo_catalog()
    looked_up: list[str] = []
    closest = answers.closest_name

    def counted(name: str, candidates: list[str]) -> str | None:
        looked_up.append(name)
        return closest(name, candidates)

    monkeypatch.setattr(answers, "closest_name", counted)
    made_up = [f"get_isue_{i}" for i in range(500)]
    note = unknown_names_note([*made_up, made_up[0]], catalog)
    assert looked_up == made_up[:SUGGESTED_NAMES]
    listed = note.removeprefix("No tool is named: ").removesuffix(".").split(", ")
    assert [part.split(" ")[0] for part in listed[:LISTED_NAMES]] == made_up[:LISTED_NAMES]
    assert listed[LISTED_NAMES:] == [f"and {500 - LISTED_NAMES} more"]
    assert unknown_names_note(["get_isue"], catalog) == (
        "No tool is named: get_isue (did you mean 'get_issue'?)."
    )
