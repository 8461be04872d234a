"""McpRouter learning from use: a forwarded call is feedback for its turn's query, and a
call of a tool a ``tool_search`` found is feedback for the search's words."""

from __future__ import annotations

from collections import Counter

from mcp import Client

from tests.fixtures.mcp import Calls, PagedClient, github_server, mcp_tool, run
from tests.integrations.mcp.router_helpers import anthropic_call
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.router import McpRouter


def test_a_forwarded_call_teaches_the_router(embedder: Embedder) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=":memory:")
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="full")
            memory = router.router.memory
            assert memory is not None
            assert len(memory) == 0
            outcome = await router.call(
                anthropic_call("create_issue", {"repo": "acme/web", "title": "crash"}), promotion
            )
            assert outcome.forwarded
            assert len(memory) == 1

            found = await router.search("merge the pull request number 7")
            assert "github/merge_pull_request" in found.ids
            merged = await router.call_any(
                anthropic_call("merge_pull_request", {"repo": "acme/web", "number": 7})
            )
            assert merged.forwarded
            assert calls["merge_pull_request"] == 1
            assert len(memory) == 2

    run(main)


def test_no_learning_unless_asked(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None)
        async with Client(github_server(Counter())) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="full")
            await router.call(
                anthropic_call("create_issue", {"repo": "acme/web", "title": "crash"}), promotion
            )
            assert router.router.memory is None

    run(main)


def test_searches_are_kept_for_the_current_tools_only(embedder: Embedder) -> None:
    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=":memory:")
        notes = PagedClient([[mcp_tool("add_note", "Save a new note.")]], [None])
        await router.connect({"notes": notes})
        for n in range(20):  # each search after the server changed: a new catalog version
            notes.pages[0].append(mcp_tool(f"tag_note_{n}", "Tag a note."))
            router.mark_changed("notes")
            assert (await router.search("save a note")).ids == ["notes/add_note"]
        assert len(router._searches) == 1
        memory = router.router.memory
        assert memory is not None
        outcome = await router.call_any(anthropic_call("add_note", {}))
        assert outcome.forwarded
        assert len(memory) == 1  # the last search still learns from the call

    run(main)
