"""A search the model asks for is never answered "no tool needed"."""

from __future__ import annotations

import anyio

from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.turns import route_search
from toolgate.routing.router import Router

SCOPE = {"allow": None, "deny": None, "state": None}


def test_a_search_for_chit_chat_still_finds_tools(embedder: Embedder) -> None:
    router = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    assert router.route("🙂").no_tool  # a turn would route nothing
    found = anyio.run(lambda: route_search(router, "🙂", SCOPE, top_k=3, turn_id="t"))
    assert not found.no_tool
    assert len(found) >= 1
