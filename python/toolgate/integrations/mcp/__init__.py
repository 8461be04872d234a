"""MCP hosts and proxies: route each turn over the tools of live MCP servers.

Needs the MCP SDK (``pip install "toolgate-router[mcp]"``). :class:`McpRouter` is the host side;
``toolgate mcp-proxy`` (:mod:`toolgate.integrations.mcp.serve`) serves it to other clients.
"""

from toolgate.integrations import needs_extra

with needs_extra("mcp"):  # every module of the package is imported after this one
    from toolgate.integrations.mcp.router import CallOutcome, McpClient, McpRouter, UpstreamCall

__all__ = ["CallOutcome", "McpClient", "McpRouter", "UpstreamCall"]
