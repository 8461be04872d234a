"""A tool call as a provider SDK hands it back (a pydantic model: openai's
``ChatCompletionMessageToolCall``, anthropic's ``ToolUseBlock``), checked by each of toolgate's
verifiers, which read such objects (docs/api.md, "ToolFilter")."""

from __future__ import annotations

from typing import Any

from toolgate import Promotion, Router, ToolFilter, Verdict, verify_call
from toolgate.gateway import FilteredRequest
from toolgate.integrations.mcp import McpRouter


class ToolUseBlock:
    """Stands for the SDK's class: no Mapping, a ``model_dump`` giving its JSON."""

    def model_dump(self, **options: Any) -> dict[str, Any]:
        return {"type": "tool_use", "id": "toolu_1", "name": "get_me", "input": {}}


def checked(router: Router, promotion: Promotion, call: ToolUseBlock) -> list[Verdict]:
    return [router.verify(call, promotion), verify_call(router.catalog, promotion, call)]


def filtered(gate: ToolFilter, request: FilteredRequest, call: ToolUseBlock) -> Verdict:
    return gate.verify(call, request)


async def forwarded(router: McpRouter, promotion: Promotion, call: ToolUseBlock) -> bool:
    outcome = await router.call(call, promotion)
    return outcome.verdict.ok and (await router.call_any(call)).verdict.ok
