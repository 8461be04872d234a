"""McpRouter learning from use: a forwarded call is feedback for its turn's query, and a
call of a tool a ``tool_search`` found is feedback for the search's words."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fixtures.mcp import Calls, PagedClient, github_server, mcp_tool, run
from tests.integrations.mcp.router_helpers import anthropic_call
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.router import McpRouter
from toolgate.integrations.mcp.serve import CLOSE_GRACE, _Serving
from toolgate.integrations.mcp.upstreams import Upstreams
from toolgate.routing.feedback import LearnedMemory
from toolgate.routing.learned_store import SqliteStore, StoreError, StoreWarning


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
            assert await router.drain(timeout=10)  # learning is queued, off the call
            assert len(memory) == 1

            found = await router.search("merge the pull request number 7")
            assert "github/merge_pull_request" in found.ids
            merged = await router.call_any(
                anthropic_call("merge_pull_request", {"repo": "acme/web", "number": 7})
            )
            assert merged.forwarded
            assert calls["merge_pull_request"] == 1
            assert await router.drain(timeout=10)
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


def test_a_turn_with_no_text_teaches_nothing_whatever_its_promotions_id(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        router = McpRouter(top_k=2, embedder=embedder, cache=None, learn=":memory:")
        tools = [
            mcp_tool("list_events", "List calendar events."),
            mcp_tool("delete_all", "Delete every calendar event."),
        ]
        await router.connect({"calendar": PagedClient([tools], [None])})
        asked = await router.tools("what is on my calendar tomorrow")
        image_only = await router.tools("", include=["calendar/delete_all"])
        # Turns are kept by the promotion's id, which CPython gives again to a new object
        # once the old one is freed: here the image-only turn's promotion takes it over.
        router._turns[id(image_only)] = router._turns.pop(id(asked))
        outcome = await router.call(anthropic_call("delete_all", {}), image_only)
        assert outcome.forwarded
        assert await router.drain(timeout=10)
        memory = router.router.memory
        assert memory is not None
        assert len(memory) == 0  # not "what is on my calendar tomorrow" -> delete_all

    run(main)


async def _notes_router(embedder: Embedder) -> tuple[McpRouter, PagedClient]:
    """A learning router connected to one notes server holding ``add_note``."""
    router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=":memory:")
    notes = PagedClient([[mcp_tool("add_note", "Save a new note.")]], [None])
    await router.connect({"notes": notes})
    return router, notes


async def _change_notes(router: McpRouter, notes: PagedClient) -> LearnedMemory:
    """Add a tool to the notes server and list it: the memory of the tools as they are now."""
    notes.pages[0].append(mcp_tool("archive_note", "Archive a note."))
    router.mark_changed("notes")
    await router.update()
    memory = router.router.memory
    assert memory is not None
    return memory


def test_the_last_search_alone_is_kept_and_learns_after_the_servers_changed(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        router, notes = await _notes_router(embedder)
        for n in range(20):  # each search after the server changed: a new catalog version
            notes.pages[0].append(mcp_tool(f"tag_note_{n}", "Tag a note."))
            router.mark_changed("notes")
            assert (await router.search("save a note")).ids == ["notes/add_note"]
        assert router._last_search is not None
        assert router._last_search.query == "save a note"
        # The server changes once more between the search and the call: the lesson goes to
        # the tools as they are now, which later routes read.
        memory = await _change_notes(router, notes)
        outcome = await router.call_any(anthropic_call("add_note", {}))
        assert outcome.forwarded
        assert await router.drain(timeout=10)
        assert len(memory) == 1

    run(main)


def test_a_call_after_its_server_changed_teaches_the_tools_as_they_are_now(
    embedder: Embedder,
) -> None:
    # The turn's router (an older catalog version, which no route reads again) learned it.
    async def main() -> None:
        router, notes = await _notes_router(embedder)
        turn = await router.tools("save a note about the meeting", pool="full")
        assert turn.active_ids == ("notes/add_note",)
        memory = await _change_notes(router, notes)
        assert (await router.call(anthropic_call("add_note", {}), turn)).forwarded
        assert await router.drain(timeout=10)
        assert len(memory) == 1
        lifted = router.router.route("save a note about the meeting")
        assert lifted.tools[0].id == "notes/add_note"
        assert lifted.tools[0].reason == "learned"

    run(main)


class _Locked(SqliteStore):
    """A store another process holds locked past the busy timeout."""

    def _insert(self, sql: str, args: Any) -> int:
        raise StoreError("cannot write the learned memory: database is locked")


def test_a_store_that_fails_after_the_call_went_upstream_loses_no_result(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    calls: Calls = Counter()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=_Locked(":memory:"))
        async with Client(github_server(calls)) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="full")
            issue = anthropic_call("create_issue", {"repo": "acme/web", "title": "crash"})
            outcome = await router.call(issue, promotion)
            assert outcome.forwarded
            assert outcome.result is not None
            assert not outcome.result.is_error
            await router.search("merge the pull request number 7")
            merge = anthropic_call("merge_pull_request", {"repo": "acme/web", "number": 7})
            merged = await router.call_any(merge)
            assert merged.forwarded
            assert await router.drain(timeout=10)

    with caplog.at_level(logging.WARNING, logger="toolgate.integrations.mcp.router"):
        run(main)
    assert (calls["create_issue"], calls["merge_pull_request"]) == (1, 1)
    warned = [r for r in caplog.records if "database is locked" in r.getMessage()]
    assert len(warned) == 1  # once per kind of failure, not once per call


class _Blocking(SqliteStore):
    """A store whose writes wait until ``release`` is set, as behind another process's
    write lock (or a database that does not answer)."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.release = threading.Event()
        self.writing = threading.Event()  # set once a write waits

    def _insert(self, sql: str, args: Any) -> int:
        self.writing.set()
        self.release.wait(timeout=60)  # each test sets it as it ends
        return super()._insert(sql, args)


def test_a_calls_result_never_waits_for_the_store(embedder: Embedder) -> None:
    store = _Blocking()

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=store)
        async with Client(github_server(Counter())) as github:
            await router.connect({"github": github})
            promotion = await router.tools("open an issue in acme/web", pool="full")
            memory = router.router.memory
            assert memory is not None
            issue = anthropic_call("create_issue", {"repo": "acme/web", "title": "crash"})
            outcome = await router.call(issue, promotion)
            assert outcome.forwarded
            assert len(memory) == 0  # returned while the store still holds the lesson
            store.release.set()
            assert await router.drain(timeout=10)
            assert len(memory) == 1

    try:
        run(main)
    finally:
        store.release.set()


def test_lessons_a_stalled_store_holds_at_close_are_dropped_and_counted(
    embedder: Embedder,
) -> None:
    store = _Blocking()

    async def main() -> None:
        async with _stalled(embedder, store, ("one", "two", "three")) as router:
            # The worker holds "one" in the stalled store: the two waiting are dropped.
            assert not await router.aclose(timeout=0.2)
            assert router.lessons_dropped == 2
            await _open_issue(router, "four")  # closed: not learned
            assert router.lessons_dropped == 3

    try:
        run(main)
    finally:
        store.release.set()


def test_a_stalled_store_holds_the_proxys_stop_up_no_longer_than_its_grace(
    embedder: Embedder,
) -> None:
    store = _Blocking()

    async def main() -> None:
        async with _stalled(embedder, store, ("one", "two")) as router:
            async with anyio.create_task_group() as group:
                serving = _Serving(group, router, {}, Upstreams([]), timeout=1.0)
                with anyio.fail_after(CLOSE_GRACE + 20):  # far short of the stall
                    await serving.close_upstreams()
            assert router.lessons_dropped == 1  # "one" held by the store, "two" dropped

    try:
        run(main)
    finally:
        store.release.set()


@contextlib.asynccontextmanager
async def _stalled(
    embedder: Embedder, store: _Blocking, titles: tuple[str, ...]
) -> AsyncIterator[McpRouter]:
    """A router learning into ``store``, connected to GitHub, that opened an issue for each
    of ``titles``; yielded once the store's worker is stalled on the first lesson."""
    router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=store)
    async with Client(github_server(Counter())) as github:
        await router.connect({"github": github})
        for title in titles:
            await _open_issue(router, title)
        assert await anyio.to_thread.run_sync(store.writing.wait, 10)
        yield router


async def _open_issue(router: McpRouter, title: str) -> None:
    """Routes a request to open an issue titled ``title`` and forwards the model's call."""
    promotion = await router.tools(f"open an issue titled {title}", pool="full")
    issue = anthropic_call("create_issue", {"repo": "acme/web", "title": title})
    assert (await router.call(issue, promotion)).forwarded


class _Down(SqliteStore):
    """A store whose database does not answer until ``up`` is set."""

    up = False

    def use(self, scope: str, user: object, **bounds: Any) -> list[str]:
        if not self.up:
            raise StoreError("the learned memory at postgresql://db/x: gone")
        return super().use(scope, user, **bounds)


def test_a_router_let_go_without_aclose_stops_its_learning_thread(embedder: Embedder) -> None:
    # A host making a router per session, and dropping it without aclose, kept a thread per
    # router for ever, holding the last lesson's router: its index and the store's files.
    before = set(threading.enumerate())
    learning: list[threading.Thread] = []

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=":memory:")
        async with Client(github_server(Counter())) as github:
            await router.connect({"github": github})
            await _open_issue(router, "crash")
            assert await router.drain(timeout=10)
        new = set(threading.enumerate()) - before
        learning.extend(t for t in new if t.name == "toolgate-learning")

    run(main)
    assert learning  # the router's worker, started by its lesson
    gc.collect()  # the router's parts refer to it: a cycle
    for thread in learning:
        thread.join(timeout=10)
    assert not [thread for thread in learning if thread.is_alive()]


def test_a_failing_learned_store_leaves_the_tools_routed_without_it(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Down(":memory:")
    memories: list[object] = []

    async def main() -> None:
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=store)
        async with Client(github_server(Counter())) as github:
            await router.connect({"github": github})  # the store is down: routed without it
            memories.append(router.router.memory)
            await router.tools("open an issue in acme/web")
            memories.append(router.router.memory)
            store.up = True
            await router.tools("open an issue in acme/web")
            memories.append(router.router.memory)  # not tried again before retry_s passes
            router._catalogs.learning.retry_s = 0.0  # type: ignore[union-attr]
            await router.search("merge the pull request number 7")
            memories.append(router.router.memory)

    with caplog.at_level(logging.WARNING, logger="toolgate.integrations.mcp.router"):
        run(main)
    assert memories[:3] == [None, None, None]
    assert memories[3] is not None  # learning again once the store answers
    failures = [r for r in caplog.records if "learned store failed" in r.getMessage()]
    assert len(failures) == 1


def test_a_store_down_after_connect_fails_no_turn_after_a_server_changed(
    embedder: Embedder,
) -> None:
    store = _Down(":memory:")
    store.up = True

    async def main() -> None:
        weather = PagedClient([[mcp_tool("get_forecast", "Get the weather forecast.")]], [None])
        router = McpRouter(top_k=1, embedder=embedder, cache=None, learn=store)
        await router.connect({"weather": weather})
        assert router.router.memory is not None
        store.up = False  # the database went away
        weather.pages[0].append(mcp_tool("get_air_quality", "Get the air quality index."))
        router.mark_changed("weather")
        with pytest.warns(StoreWarning, match="routes without what was learned"):
            promotion = await router.tools("air quality index in Oslo")
        assert promotion.active_ids == ("weather/get_air_quality",)
        assert router.router.memory is None

    run(main)
