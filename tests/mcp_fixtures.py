"""In-process MCP servers and duck-typed clients shared by the MCP integration tests."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ElicitResult

Calls = Counter[str]


def github_server(calls: Calls, *, modern: bool = False) -> MCPServer:
    """``modern``: tell of changes the 2026-07-28 way (a ``subscriptions/listen`` event)
    instead of with ``notifications/tools/list_changed``."""
    server = MCPServer("github")

    @server.tool()
    def create_issue(repo: str, title: str) -> str:
        """Open a new issue in a GitHub repository."""
        calls["create_issue"] += 1
        return f"opened {title!r} in {repo}"

    @server.tool()
    def search(query: str) -> str:
        """Search code across GitHub repositories."""
        calls["github.search"] += 1
        return f"code matching {query!r}"

    @server.tool()
    def merge_pull_request(repo: str, number: int) -> str:
        """Merge a pull request."""
        calls["merge_pull_request"] += 1
        return f"merged #{number}"

    @server.tool()
    async def enable_releases(ctx: Context) -> str:
        """Turn on the release tools of this server."""

        def publish_release(repo: str, tag: str) -> str:
            calls["publish_release"] += 1
            return f"published {tag}"

        server.add_tool(
            publish_release,
            name="publish_release",
            description="Publish a new release of a repository from a git tag.",
        )
        if modern:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return "release tools enabled"

    return server


def calendar_server(calls: Calls) -> MCPServer:
    server = MCPServer("calendar")

    @server.tool()
    def create_event(title: str, start: str, end: str) -> str:
        """Create a calendar event with a title, a start and an end time."""
        calls["create_event"] += 1
        return f"event {title!r} at {start}"

    @server.tool()
    def search(text: str) -> str:
        """Search calendar events by their text."""
        calls["calendar.search"] += 1
        return f"events matching {text!r}"

    return server


def run(main: Callable[[], Awaitable[None]]) -> None:
    anyio.run(main)


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content)


class PagedClient:
    """A client whose tools come in pages; ``cursors`` are the ``nextCursor`` of each page."""

    def __init__(self, pages: list[list[dict[str, Any]]], cursors: list[str | None]) -> None:
        self.pages, self.cursors = pages, cursors
        self.asked: list[str | None] = []
        self.called: list[tuple[str, dict[str, Any] | None]] = []

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        self.asked.append(cursor)
        page = 0 if cursor is None else self.cursors.index(cursor) + 1
        return {"tools": self.pages[page], "nextCursor": self.cursors[page]}

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        self.called.append((name, arguments))
        return {"content": [{"type": "text", "text": f"ran {name}"}]}


def mcp_tool(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
    }


def found_tools(result: Any) -> list[dict[str, Any]]:
    header, body = text_of(result).split("\n", 1)
    assert header.startswith("Tools found, best first.")
    return list(json.loads(body))


#: A small MCP server over stdio, run as a process by the proxy's end-to-end tests.
UPSTREAM = '''
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

server = MCPServer("notes")

class Folder(BaseModel):
    folder: str

def ask_folder() -> Elicit[Folder]:
    return Elicit("Archive into which folder?", Folder)

@server.tool()
def add_note(title: str, body: str) -> str:
    """Save a new note with a title and a body."""
    return f"saved {title}"

@server.tool()
def delete_note(title: str) -> str:
    """Delete the note with this title."""
    return f"deleted {title}"

@server.tool()
async def archive_notes(folder: Annotated[Folder, Resolve(ask_folder)], ctx: Context) -> str:
    """Move every note into an archive folder the user picks."""
    for step in (1, 2):
        await ctx.report_progress(step, 2, f"step {step}")
    return f"archived into {folder.folder}"

@server.prompt()
def summarize(title: str) -> str:
    """Summarize a note."""
    return f"Summarize the note {title}."

@server.resource("notes://index", name="index")
def index() -> str:
    return "groceries"

server.run("stdio")
'''

PID_WRITING_UPSTREAM = UPSTREAM.replace(
    'server = MCPServer("notes")',
    'import os, sys\nopen(sys.argv[1], "w").write(str(os.getpid()))\n'
    'server = MCPServer("notes", instructions="Notes are kept for 30 days.")',
)


async def answer_folder(_ctx: Any, params: Any) -> ElicitResult:
    """The user's answer to :data:`UPSTREAM`'s ``archive_notes``: pass it as a client's
    ``elicitation_callback``."""
    assert params.message == "Archive into which folder?"
    return ElicitResult(action="accept", content={"folder": "old"})


async def use_notes_through_proxy(client: Any, title: str) -> None:
    """What the end-to-end tests do through a proxy in front of :data:`UPSTREAM`: list its
    two tools, search, call, have a call ask the user (the client must take
    :func:`answer_folder`) and report progress, and reach the upstream's prompt and
    resource."""
    names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["search_tools", "call_tool"]
    found = await client.call_tool("search_tools", {"query": "remove a note"})
    assert [t["name"] for t in found_tools(found)] == ["delete_note"]
    done = await client.call_tool(
        "call_tool", {"name": "delete_note", "arguments": {"title": title}}
    )
    assert text_of(done) == f"deleted {title}"
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    archive = {"name": "archive_notes", "arguments": {}}
    archived = await client.call_tool("call_tool", archive, progress_callback=on_progress)
    assert text_of(archived) == "archived into old"
    assert heard == [(1, 2, "step 1"), (2, 2, "step 2")]
    # Prompts and resources are passed through.
    prompts = (await client.list_prompts()).prompts
    assert [p.name for p in prompts] == ["summarize"]
    prompt = await client.get_prompt("summarize", {"title": title})
    assert prompt.messages[0].content.text == f"Summarize the note {title}."
    index = await client.read_resource("notes://index")
    assert index.contents[0].text == "groceries"
