"""One turn of an MCP host: toolgate routes over a live MCP server's tools, checks the model's
call, and forwards it to the server (``pip install "toolgate-router[mcp]"``).

The server runs in this process here (``Client(server)``); yours would be
``Client(url)`` or ``Client(StdioServerParameters(...))``. Runs offline: the model's reply
(Anthropic Messages here; any provider's works) is written out below.
"""

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer

from toolgate.integrations.mcp import CallOutcome, McpRouter

server = MCPServer("github")


@server.tool()
def create_issue(repo: str, title: str) -> str:
    """Open an issue in a repository."""
    return f"opened {title!r} in {repo}"


@server.tool()
def get_me() -> str:
    """Get my user profile."""
    return "octocat"


async def main() -> tuple[dict[str, object], CallOutcome]:
    router = McpRouter(top_k=3)
    async with Client(server, message_handler=router.message_handler("github")) as github:
        await router.connect({"github": github})
        user = "open an issue in acme/web about the flaky login test"
        promotion = await router.tools(user, format="anthropic")
        request = {"system": promotion.pool_text, "tools": promotion.request_tools()}
        reply = {  # the model's last content block, for a request with `request` in it
            "type": "tool_use",
            "id": "toolu_1",
            "name": "create_issue",
            "input": {"repo": "acme/web", "title": "Flaky login test"},
        }
        outcome = await router.call(reply, promotion)  # checked, then sent to the server
        # outcome.result is the CallToolResult to send back as the tool_result.
        return request, outcome


request, outcome = anyio.run(main)
print(outcome.verdict, outcome.server)
