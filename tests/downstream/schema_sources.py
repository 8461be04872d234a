"""Each documented form of ``schema_source`` (docs/api.md, "promote") type-checks, a
callable's parameter is known to be the tool id, and anything else is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgate import Promotion, Router, RouteResult, promote_tools
from toolgate.promotion.schema_source import McpSchemaSource


class Fetcher:
    def fetch(self, tool_id: str) -> dict[str, Any]:
        return {"type": "object"}


def promotions(
    router: Router, result: RouteResult, schemas: dict[str, dict[str, Any]]
) -> list[Promotion]:
    listing = McpSchemaSource("github", lambda: {"tools": []})
    return [
        router.promote(result, schema_source=lambda tool_id: schemas[tool_id.lower()]),
        router.promote(result, schema_source=Path("schemas")),
        router.promote(result, schema_source="catalog.json"),
        router.promote(result, schema_source=Fetcher()),
        router.promote(result, schema_source=listing),
        promote_tools(router.catalog, result, schema_source=schemas.__getitem__),
        router.promote(result, schema_source=42),  # type: ignore[arg-type]
    ]
