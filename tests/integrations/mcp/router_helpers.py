"""What the McpRouter tests share: a billing server's tools in three pages, and a tool call
in the form Anthropic's API gives it."""

from __future__ import annotations

from typing import Any

from tests.fixtures.mcp import mcp_tool


def anthropic_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}


PAGES = [
    [mcp_tool("list_invoices", "List the invoices of a customer.")],
    [mcp_tool("refund_payment", "Refund a card payment in full or in part.")],
    [mcp_tool("create_customer", "Create a customer record.")],
]
