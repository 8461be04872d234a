"""The MCP proxy passes upstream prompts and resources through as they are."""

from __future__ import annotations

import logging
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts import Prompt
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    Completion,
    PromptReference,
    ResourceTemplateReference,
)

from tests.fixtures.mcp import PagedClient, calendar_server, github_server, mcp_tool, run
from toolgate.embedding.embedder import Embedder
from toolgate.integrations.mcp.passthrough import (
    MAX_TEMPLATE_EXPRESSIONS,
    MAX_TEMPLATE_URI_CHARS,
    RESOURCE_NOT_FOUND,
    WARNED_MESSAGES,
    template_matches,
)
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.router import McpRouter


def github_with_extras() -> MCPServer:
    server = github_server(Counter())

    @server.prompt()
    def review(pr: str) -> str:
        """Review a pull request."""
        if pr == "#0":
            raise MCPError(INVALID_PARAMS, "there is no pull request #0")
        return f"Review GitHub pull request {pr} for bugs."

    @server.prompt()
    def triage() -> str:
        """Triage the open issues."""
        return "Label every open issue."

    @server.resource("github://repos", name="repos", description="Your repositories")
    def repos() -> str:
        return "acme/web\nacme/api"

    @server.resource("repo://{owner}/{repo}/readme", name="readme")
    def readme(owner: str, repo: str) -> str:
        return f"# {owner}/{repo}"

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion:
        if isinstance(ref, PromptReference) and ref.name == "review":
            values = ["#7", "#8", "#12"]
        elif isinstance(ref, ResourceTemplateReference) and argument.name == "repo":
            owner = context.arguments.get("owner") if context and context.arguments else None
            values = ["web", "api"] if owner == "acme" else []
        else:
            values = ["acme", "other"]
        return Completion(values=[v for v in values if v.startswith(argument.value)])

    return server


def calendar_with_extras() -> MCPServer:
    server = calendar_server(Counter())

    @server.prompt()
    def review() -> str:
        """Review this week's meetings."""
        return "Which meetings could be emails?"

    @server.resource("calendar://today", name="today")
    def today() -> str:
        return "09:00 stand-up"

    @server.resource("github://repos", name="shadow")  # the same URI as github's
    def shadow() -> str:
        return "calendar's copy"

    return server


async def connected(embedder: Embedder, clients: dict[str, Any]) -> McpProxy:
    router = McpRouter(top_k=3, embedder=embedder, cache=None)
    await router.connect(clients)
    return McpProxy(router)


@asynccontextmanager
async def client_of_both(embedder: Embedder, mode: str) -> AsyncIterator[Client]:
    """A client of the proxy in front of both servers above, on protocol ``mode``."""
    async with (
        Client(github_with_extras()) as github,
        Client(calendar_with_extras()) as calendar,
    ):
        proxy = await connected(embedder, {"github": github, "calendar": calendar})
        async with Client(proxy.server, mode=mode) as client:
            yield client


def text(result: Any) -> str:
    """The text of a prompt's messages or of a resource's contents."""
    if hasattr(result, "messages"):
        return "".join(m.content.text for m in result.messages)
    return "".join(c.text for c in result.contents)


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28, and the handshake era
def test_prompts_of_every_upstream_are_listed_and_got(embedder: Embedder, mode: str) -> None:
    async def main() -> None:
        async with client_of_both(embedder, mode) as client:
            listed = (await client.list_prompts()).prompts
            # A name both servers use is qualified for each; the others are kept.
            names = [p.name for p in listed]
            assert names == ["github__review", "triage", "calendar__review"]
            assert listed[0].description == "Review a pull request."
            assert [a.name for a in listed[0].arguments or []] == ["pr"]

            got = await client.get_prompt("github__review", {"pr": "#7"})
            assert text(got) == "Review GitHub pull request #7 for bugs."
            assert text(await client.get_prompt("calendar__review")) == (
                "Which meetings could be emails?"
            )
            assert text(await client.get_prompt("triage")) == "Label every open issue."

            with pytest.raises(MCPError) as unknown:
                await client.get_prompt("review")
            assert unknown.value.code == INVALID_PARAMS
            assert "Unknown prompt 'review'; prompts: calendar__review" in str(unknown.value)
            # A required argument left out is said plainly (the server's own answer to
            # that, on the 2026-07-28 protocol, is an opaque internal error).
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("github__review")
            assert missing.value.code == INVALID_PARAMS
            assert str(missing.value) == "Prompt 'github__review' needs the argument(s) pr"
            # The upstream's own error passes through as it is.
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("github__review", {"pr": "#0"})
            assert refused.value.code == INVALID_PARAMS
            assert str(refused.value) == "there is no pull request #0"

    run(main)


def archive_server() -> MCPServer:
    """An upstream whose prompt and resource are larger than they should be."""
    server = MCPServer("archive")

    @server.tool()
    def find_box(label: str) -> str:
        """Find an archive box by its label."""
        return f"box {label}"

    @server.prompt()
    def recap() -> str:
        """Recap everything in the archive."""
        return "y" * 5000

    @server.resource("archive://all", name="all")
    def everything() -> str:
        return "x" * 5000

    return server


def test_a_prompt_or_a_read_over_its_servers_limit_is_an_error(embedder: Embedder) -> None:
    async def main() -> None:
        async with Client(archive_server()) as archive:
            router = McpRouter(embedder=embedder, cache=None)
            await router.connect({"archive": archive})
            passthrough = McpProxy(router, max_result_bytes=2048).passthrough
            over = r"is [\d,]+ bytes, more than the 2,048 bytes the proxy passes on"
            with pytest.raises(
                MCPError, match=f"'archive': the answer to prompts/get of 'recap' {over}"
            ):
                await passthrough.get_prompt("recap", None)
            read = "resources/read of 'archive://all'"
            with pytest.raises(MCPError, match=f"'archive': the answer to {read} {over}"):
                await passthrough.read_resource("archive://all")

    run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_resources_are_listed_and_read_from_the_server_that_has_them(
    embedder: Embedder, mode: str
) -> None:
    async def main() -> None:
        async with client_of_both(embedder, mode) as client:
            listed = (await client.list_resources()).resources
            # URIs are passed on unchanged; one two servers list is the first's.
            assert [(r.name, str(r.uri)) for r in listed] == [
                ("repos", "github://repos"),
                ("today", "calendar://today"),
            ]
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["repo://{owner}/{repo}/readme"]

            assert text(await client.read_resource("github://repos")) == "acme/web\nacme/api"
            assert text(await client.read_resource("calendar://today")) == "09:00 stand-up"
            # Listed by no one: the server whose template matches reads it.
            readme = await client.read_resource("repo://acme/web/readme")
            assert text(readme) == "# acme/web"

            with pytest.raises(MCPError) as missing:
                await client.read_resource("calendar://tomorrow")
            assert missing.value.code == RESOURCE_NOT_FOUND
            # Every server with resources was asked, and each answer is named.
            message = str(missing.value)
            assert "No server has resource 'calendar://tomorrow' (github: " in message
            assert "; calendar: " in message

    run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_proxy_offers_no_resource_subscriptions_it_does_not_pass_on(
    embedder: Embedder, mode: str
) -> None:
    async def main() -> None:
        async with client_of_both(embedder, mode) as client:
            resources = client.server_capabilities.resources
            assert resources is not None
            # On 2026-07-28 the SDK offers them because the proxy serves
            # subscriptions/listen, which passes list changes on, not resource updates.
            assert resources.subscribe is False
            assert resources.list_changed is True

    run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_completions_are_asked_of_the_server_that_lists_the_prompt_or_template(
    embedder: Embedder, mode: str
) -> None:
    async def main() -> None:
        async with client_of_both(embedder, mode) as client:

            async def values(
                ref: PromptReference | ResourceTemplateReference,
                name: str,
                value: str,
                context: dict[str, str] | None = None,
            ) -> list[str]:
                result = await client.complete(ref, {"name": name, "value": value}, context)
                return result.completion.values

            # By the name the proxy lists, mapped back to the upstream's own.
            review = PromptReference(type="ref/prompt", name="github__review")
            assert await values(review, "pr", "#") == ["#7", "#8", "#12"]
            assert await values(review, "pr", "#1") == ["#12"]
            readme = ResourceTemplateReference(
                type="ref/resource", uri="repo://{owner}/{repo}/readme"
            )
            assert await values(readme, "owner", "a") == ["acme"]
            # The arguments already chosen reach the upstream too.
            assert await values(readme, "repo", "", {"owner": "acme"}) == ["web", "api"]
            # calendar offers no completions: none are suggested, and nothing fails.
            mine = PromptReference(type="ref/prompt", name="calendar__review")
            assert await values(mine, "day", "") == []

            with pytest.raises(MCPError) as unknown:
                await values(PromptReference(type="ref/prompt", name="review"), "pr", "")
            assert unknown.value.code == INVALID_PARAMS
            assert "Unknown prompt 'review'; prompts: calendar__review" in str(unknown.value)
            nowhere = ResourceTemplateReference(type="ref/resource", uri="repo://{x}")
            with pytest.raises(MCPError) as untemplated:
                await values(nowhere, "x", "")
            assert untemplated.value.code == INVALID_PARAMS
            assert str(untemplated.value) == "No server has the resource template 'repo://{x}'"

    run(main)


def test_a_template_two_servers_list_is_completed_by_the_first_that_completes(
    embedder: Embedder,
) -> None:
    def server(name: str, *, completes: bool) -> MCPServer:
        made = MCPServer(name)

        @made.resource("ticket://{id}", name="ticket")
        def ticket(id: str) -> str:
            return f"{name} ticket {id}"

        if completes:

            @made.completion()
            async def complete(ref: Any, argument: Any, context: Any) -> Completion:
                return Completion(values=[f"{name}-{argument.value}1"])

        return made

    async def main() -> None:
        async with (
            Client(server("plain", completes=False)) as plain,
            Client(server("smart", completes=True)) as smart,
        ):
            proxy = await connected(embedder, {"plain": plain, "smart": smart})
            ref = ResourceTemplateReference(type="ref/resource", uri="ticket://{id}")
            result = await proxy.passthrough.complete(ref, {"name": "id", "value": "4"})
            assert result.completion.values == ["smart-41"]

    run(main)


class ExtrasClient(PagedClient):
    """A duck-typed client with prompts and resources, whose listing can be made to fail."""

    def __init__(self, tag: str, *, broken: bool = False) -> None:
        super().__init__([[mcp_tool(f"{tag}_tool", f"The {tag} tool.")]], [None])
        self.tag, self.broken = tag, broken
        self.gets: list[tuple[str, dict[str, str] | None]] = []
        self.reads: list[str] = []
        self.resource_listings = 0
        self.prompt_listings = 0

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        self.prompt_listings += 1
        if self.broken:
            raise ConnectionError("listing went away")
        prompts = [{"name": f"{self.tag}_prompt"}, {"name": "shared"}, {"description": "no name"}]
        return {"prompts": prompts}

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> Any:
        self.gets.append((name, arguments))
        message = {"role": "user", "content": {"type": "text", "text": f"{name} {arguments}"}}
        return {"messages": [message]}

    async def list_resources(self, cursor: str | None = None) -> dict[str, Any]:
        self.resource_listings += 1
        listed = [{"uri": f"{self.tag}://listed", "name": "listed"}]
        return {"resources": [*listed, {"uri": f"{self.tag}://denied", "name": "denied"}]}

    async def list_resource_templates(self, cursor: str | None = None) -> dict[str, Any]:
        return {
            "resourceTemplates": [{"uriTemplate": f"{self.tag}://items/{{id}}", "name": "item"}]
        }

    async def read_resource(self, uri: str) -> Any:
        self.reads.append(uri)
        if uri.endswith("://denied"):
            raise MCPError(-32001, f"{self.tag} will not show {uri}")
        if not uri.startswith(f"{self.tag}://"):
            raise MCPError(RESOURCE_NOT_FOUND, f"{self.tag} has no {uri}")
        return {"contents": [{"uri": uri, "text": f"{self.tag} read {uri}"}]}


def test_a_failing_or_malformed_listing_hides_only_itself(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        good, bad = ExtrasClient("good"), ExtrasClient("bad", broken=True)
        router = McpRouter(embedder=embedder, cache=None, retry_after=60)
        await router.connect({"good": good, "bad": bad})
        passthrough = McpProxy(router).passthrough
        with caplog.at_level(logging.WARNING, "toolgate.integrations.mcp.passthrough"):
            prompts = await passthrough.list_prompts()
            assert [p["name"] for p in prompts] == ["good_prompt", "shared"]
            await passthrough.list_prompts()
        warned = caplog.text
        assert (
            "MCP server 'bad': prompts/list failed: ConnectionError('listing went away')" in warned
        )
        assert "(its last listing is served; asked again after 60 s)" in warned
        # Malformed items are said once, not on every listing.
        assert warned.count("MCP server 'good': prompts/list item without a string 'name'") == 1
        # A failed server is not asked again before retry_after: no request waits for it.
        assert bad.prompt_listings == 1
        assert good.prompt_listings == 2

        got = await passthrough.get_prompt("good_prompt", {"topic": "x"})
        assert text(got) == "good_prompt {'topic': 'x'}"
        assert good.gets == [("good_prompt", {"topic": "x"})]

    run(main)


class ChangingClient(ExtrasClient):
    """Fails its listings with a new message each time, or lists a new malformed item."""

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        self.prompt_listings += 1
        if self.broken:
            raise ConnectionError(f"listing {self.prompt_listings} went away")
        return {"prompts": [{"description": f"no name, listing {self.prompt_listings}"}]}


def test_what_a_servers_listings_are_warned_of_is_remembered_within_a_bound(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    # Every warning was remembered, each failure's too: a server whose messages change (a
    # count, an id) grew the proxy's memory by one for each listing, for as long as it ran.
    async def main() -> None:
        changing = ChangingClient("changing", broken=True)
        router = McpRouter(embedder=embedder, cache=None, retry_after=0)
        await router.connect({"changing": changing})
        passthrough = McpProxy(router).passthrough
        with caplog.at_level(logging.WARNING, "toolgate.integrations.mcp.passthrough"):
            for _ in range(300):
                await passthrough.list_prompts()
            changing.broken = False
            for _ in range(300):
                await passthrough.list_prompts()
        messages = [r.getMessage() for r in caplog.records]
        assert sum("went away" in m for m in messages) == 300  # each failure is told
        malformed = [m for m in messages if "item without a string 'name'" in m]
        assert len(malformed) == WARNED_MESSAGES  # the first ones, then no more
        # Said once, so that a warning missing from the log is not taken for no fault.
        capped = [m for m in messages if f"{WARNED_MESSAGES} different warnings" in m]
        assert len(capped) == 1
        assert "no more are logged" in capped[0]

    run(main)


class ForgingClient(ExtrasClient):
    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        raise MCPError(INVALID_PARAMS, "no\nWARNING:toolgate:forged\x1b[2J" + "x" * 100_000)


def test_a_servers_failure_is_warned_of_on_one_bounded_line(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    # The server's message was logged as it sent it: its line break wrote a line of its own
    # in the proxy's log, its ESC cleared the terminal, and its length was the server's.
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None, retry_after=60)
        await router.connect({"forging": ForgingClient("forging")})
        with caplog.at_level(logging.WARNING, "toolgate.integrations.mcp.passthrough"):
            await McpProxy(router).passthrough.list_prompts()
        (message,) = [
            r.getMessage() for r in caplog.records if "prompts/list failed" in r.getMessage()
        ]
        assert "failed: no\\nWARNING:toolgate:forged\\x1b[2Jxxx" in message
        assert message.isprintable()
        assert len(message) < 2_000

    run(main)


class LongNamesClient(ExtrasClient):
    """Lists one prompt of a long name, new at each listing, and with ``taking`` the name
    it would be qualified to on the server ``taking`` too."""

    def __init__(self, tag: str, taking: str | None = None) -> None:
        super().__init__(tag)
        self.taking = taking

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        self.prompt_listings += 1
        name = f"{self.prompt_listings}" + "p" * 100_000
        taken = [{"name": f"{self.taking}__{name}"}] if self.taking else []
        return {"prompts": [{"name": name}, *taken]}


def test_a_prompt_left_out_is_warned_of_with_its_names_cut(
    embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    # The names were quoted whole: a server's prompt of a long name left out made a warning
    # as long, and each of the messages remembered (up to WARNED_MESSAGES) held it.
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None, retry_after=0)
        one, other = LongNamesClient("one"), LongNamesClient("other", taking="one")
        await router.connect({"one": one, "other": other})
        passthrough = McpProxy(router).passthrough
        with caplog.at_level(logging.WARNING, "toolgate.integrations.mcp.passthrough"):
            for _ in range(3):
                await passthrough.list_prompts()
        taken = [r.getMessage() for r in caplog.records if "is taken" in r.getMessage()]
        assert len(taken) == 3  # one per listing: each named another prompt
        assert all(len(message) < 2_000 for message in taken)
        assert sum(map(len, passthrough._warned)) < 6_000

    run(main)


def test_a_server_whose_listing_fails_keeps_its_prompts_and_their_names(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        first, second = ExtrasClient("first"), ExtrasClient("second")
        router = McpRouter(embedder=embedder, cache=None, retry_after=0)
        await router.connect({"first": first, "second": second})
        passthrough = McpProxy(router).passthrough
        names = ["first_prompt", "first__shared", "second_prompt", "second__shared"]
        assert [p["name"] for p in await passthrough.list_prompts()] == names
        second.broken = True
        # Its last listing is served, so the other server's names do not change either.
        assert [p["name"] for p in await passthrough.list_prompts()] == names
        # A name qualified once is understood even when the clash is gone.
        assert text(await passthrough.get_prompt("first__first_prompt", None)) == (
            "first_prompt None"
        )
        with pytest.raises(MCPError, match="Unknown prompt 'third__shared'; prompts: first"):
            await passthrough.get_prompt("third__shared", None)

    run(main)


def test_a_resource_is_asked_of_the_servers_likeliest_to_have_it_first(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        first, second = ExtrasClient("first"), ExtrasClient("second")
        proxy = await connected(embedder, {"first": first, "second": second})
        passthrough = proxy.passthrough
        assert text(await passthrough.read_resource("second://listed")) == (
            "second read second://listed"
        )
        assert text(await passthrough.read_resource("second://items/7")) == (
            "second read second://items/7"
        )
        assert first.reads == []  # neither lists the URI nor has a template for it
        # A URI just listed is read from its server without listing again.
        listed = await passthrough.list_resources()
        assert [r["uri"] for r in listed] == [
            "first://listed",
            "first://denied",
            "second://listed",
            "second://denied",
        ]
        assert text(await passthrough.read_resource("first://listed")) == (
            "first read first://listed"
        )
        assert first.resource_listings == second.resource_listings == 3
        # The error of the server that lists the URI is passed on as it is.
        with pytest.raises(MCPError) as denied:
            await passthrough.read_resource("second://denied")
        assert (denied.value.code, str(denied.value)) == (
            -32001,
            "second will not show second://denied",
        )
        # Nobody's: every server is asked in turn, and says so.
        with pytest.raises(MCPError, match="first has no other://x; second: second has no"):
            await passthrough.read_resource("other://x")
        assert first.reads[-1:] == second.reads[-1:] == ["other://x"]

    run(main)


class DyingClient(ExtrasClient):
    """A client whose connection closed: every request fails as the SDK's does."""

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        raise MCPError(CONNECTION_CLOSED, "Connection closed")

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> Any:
        raise MCPError(CONNECTION_CLOSED, "Connection closed")


def test_a_request_to_a_server_that_died_is_made_again_once_it_is_back(
    embedder: Embedder,
) -> None:
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        await router.connect({"notes": DyingClient("notes")})
        restarted: list[str] = []
        fresh = ExtrasClient("notes")

        async def reconnect(server: str, failed: Any) -> bool:
            assert isinstance(failed, DyingClient)  # the client the request failed on
            restarted.append(server)
            await router.replace_client(server, fresh)
            return True

        # It died while idle: the listing that comes before the get finds out.
        proxy = McpProxy(router, reconnect=reconnect)
        got = await proxy.passthrough.get_prompt("notes_prompt", None)
        assert text(got) == "notes_prompt None"
        assert restarted == ["notes"]
        assert fresh.gets == [("notes_prompt", None)]

        async def fail(server: str, failed: Any) -> bool:
            return False

        await router.replace_client("notes", DyingClient("notes"))
        down = McpProxy(router, reconnect=fail).passthrough
        with pytest.raises(MCPError) as unknown:  # not back: the answer says why
            await down.get_prompt("notes_prompt", None)
        assert str(unknown.value) == (
            "Unknown prompt 'notes_prompt'; prompts: none; not answering: notes (Connection closed)"
        )

    run(main)


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        ("repo://{owner}/{repo}/readme", "repo://acme/web/readme", True),
        ("repo://{owner}/{repo}/readme", "repo://acme/web/license", False),
        ("file:///{+path}", "file:///etc/hosts", True),
        ("search://q{?term,page}", "search://q?term=a&page=2", True),
        ("a.b://{x}", "aXb://y", False),  # literal text is literal
        ("repo://{owner}/{repo}", "repo://acme/web", True),
        ("repo://{owner}/{repo}", "repo://acme", False),
        ("x://{a}/y/{b}/y", "x://1/y/y", False),  # pieces do not overlap
        ("x://{a}/y/{b}/y", "x://1/y//y", True),
        ("x://{a}ab{b}ab", "x://ab", False),  # prefix and suffix do not overlap
        ("a{b}a", "a", False),
        ("a{b}a", "aa", True),
        ("plain://text", "plain://text", True),
        ("plain://text", "plain://textual", False),
    ],
)
def test_uri_templates_match_the_uris_they_expand_to(
    template: str, uri: str, matches: bool
) -> None:
    assert template_matches(template, uri) is matches


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the block after ``seconds``, so code that would run for
    minutes fails the test instead (Python's ``re`` checks for signals as it backtracks)."""

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        # Each expression a regular expression's ".*": backtracking past any wait.
        ("x://" + "{a}" * 12 + "!", "x://" + "a" * (MAX_TEMPLATE_URI_CHARS - 4), False),
        ("x://" + "{a}" * 12 + "!", "x://" + "a" * (MAX_TEMPLATE_URI_CHARS - 5) + "!", True),
        (
            "repo://{owner}/{repo}/issues/{number}/comments/{id}.json",
            "repo://" + "/issues//comments/" * 3000 + "x",
            False,
        ),
        (
            "repo://{owner}/{repo}/issues/{number}/comments/{id}.json",
            "repo://" + "/issues//comments/" * 3000 + "x.json",
            True,
        ),
    ],
)
def test_a_hostile_uri_is_matched_in_linear_time(template: str, uri: str, matches: bool) -> None:
    with deadline(5):
        matched = template_matches(template, uri)
    assert matched is matches


def test_uris_and_templates_past_the_bounds_match_nothing() -> None:
    too_long = "x://" + "a" * MAX_TEMPLATE_URI_CHARS
    assert template_matches("x://{a}", too_long) is False
    many = "x://" + "{a}/" * (MAX_TEMPLATE_EXPRESSIONS + 1)
    assert template_matches(many, "x://" + "a/" * (MAX_TEMPLATE_EXPRESSIONS + 1)) is False


def docs_server(*, modern: bool) -> MCPServer:
    """A server whose ``add_glossary`` tool adds a prompt and tells of it, the 2026-07-28
    way (a listen-stream event) when ``modern``, else with a notification."""
    server = MCPServer("docs")

    @server.prompt()
    def outline(topic: str) -> str:
        """Outline a document."""
        return f"Outline {topic}."

    @server.tool()
    async def add_glossary(ctx: Context) -> str:
        """Add the glossary prompt."""

        def glossary() -> str:
            return "List the terms."

        server.add_prompt(Prompt.from_function(glossary, name="glossary"))
        if modern:
            await ctx.notify_prompts_changed()
        else:
            await ctx.session.send_prompt_list_changed()
        return "added"

    return server


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
def test_an_upstream_change_is_passed_on_to_the_proxys_clients(
    embedder: Embedder, upstream_mode: str, client_mode: str
) -> None:
    async def main() -> None:
        router = McpRouter(embedder=embedder, cache=None)
        proxy: McpProxy | None = None

        async def heard(notice: Any) -> None:
            if proxy is not None:
                await proxy.heard("docs", notice)

        handler = router.message_handler("docs", then=heard)
        upstream = docs_server(modern=upstream_mode == "auto")
        notices: list[str] = []
        changed = anyio.Event()

        async def client_handler(message: Any) -> None:
            notices.append(type(message).__name__)
            changed.set()

        async with (
            Client(upstream, mode=upstream_mode, message_handler=handler) as docs,
            anyio.create_task_group() as group,
        ):
            await router.connect({"docs": docs})
            proxy = McpProxy(router)
            if upstream_mode == "auto":
                await group.start(partial(router.watch, "docs", prompts=True))
            async with Client(
                proxy.server, mode=client_mode, message_handler=client_handler
            ) as client:
                # Changed by someone else, while no request of this client is under way, and
                # before it made any: an earlier-protocol client is known from its handshake
                # (which the proxy takes in a moment after the client has sent it).
                with anyio.fail_after(5):
                    while client_mode == "legacy" and not proxy._legacy_clients:
                        await anyio.sleep(0.01)
                with anyio.fail_after(10):
                    if client_mode == "auto":  # told on its listen stream
                        async with client.listen(prompts_list_changed=True) as events:
                            await docs.call_tool("add_glossary", {})
                            event = await events.__anext__()
                        assert type(event).__name__ == "PromptsListChanged"
                    else:  # told by notification
                        await docs.call_tool("add_glossary", {})
                        await changed.wait()
                        assert notices == ["PromptListChangedNotification"]
                        capabilities = client.server_capabilities
                        assert capabilities.prompts is not None
                        assert capabilities.prompts.list_changed  # as its handshake said
                prompts = (await client.list_prompts()).prompts
                assert [p.name for p in prompts] == ["outline", "glossary"]
            group.cancel_scope.cancel()

    run(main)


class HangingClient(ExtrasClient):
    """A client whose server never answers a read or a prompts listing."""

    async def read_resource(self, uri: str) -> Any:
        await anyio.sleep_forever()

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        self.prompt_listings += 1
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def test_a_server_that_never_answers_holds_nothing_up(embedder: Embedder) -> None:
    async def main() -> None:
        hung, fine = HangingClient("hung"), ExtrasClient("fine")
        router = McpRouter(embedder=embedder, cache=None, list_timeout=0.2, retry_after=60)
        await router.connect({"hung": hung, "fine": fine})
        passthrough = McpProxy(router).passthrough
        with anyio.fail_after(5):
            # Its listing times out once, then is not waited for again before retry_after.
            assert [p["name"] for p in await passthrough.list_prompts()] == [
                "fine_prompt",
                "shared",
            ]
            await passthrough.list_prompts()
            assert hung.prompt_listings == 1
            # A read nobody lists asks it on the off chance, for list_timeout at most.
            with pytest.raises(MCPError) as missing:
                await passthrough.read_resource("other://x")
        assert "hung: no answer within 0.2 s; fine: fine has no other://x" in str(missing.value)

    run(main)
