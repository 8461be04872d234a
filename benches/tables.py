"""Markdown tables for the benches' printed and generated results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A markdown table of ``columns`` (missing or ``None`` cells show as n/a)."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:,.4g}" if abs(value) < 10 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
