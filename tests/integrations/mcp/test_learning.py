"""McpRouter learning from use: a forwarded call is feedback for its turn's query, and a
call of a tool a ``tool_search`` found is feedback for the search's words."""

from __future__ import annotations

from collections import Counter

from mcp import Client

from tests.fixtures.mcp import Calls, github_server, run
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
