"""Sentences a server repeats in most of its tools' descriptions: its boilerplate.

A server often opens every description with the same preamble ("This tool is part of the Acme
API v3. All requests require authentication. Rate limits apply."). It tells its tools apart
from no other tool of the server, yet it was each tool's summary (the first sentence) and the
first words of each embedded description, ahead of what the tool does. docs/design.md,
"Catalogs written as servers write them".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from toolgate.catalog.addressing import description_sentences
from toolgate.catalog.tool import Tool

__all__ = ["BOILERPLATE_MIN_TOOLS", "BOILERPLATE_SHARE", "boilerplate"]

#: A server's sentence is boilerplate when at least this share of its tools says it...
BOILERPLATE_SHARE = 0.5
#: ... and at least this many: two tools alike are a pair, or copies (docs/design.md, "Near
#: copies move down"), not a server's habit.
BOILERPLATE_MIN_TOOLS = 3


def boilerplate(tools: Iterable[Tool]) -> dict[str, frozenset[str]]:
    """Each server's boilerplate sentences (stripped, as
    :func:`~toolgate.catalog.addressing.description_sentences` splits them)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    sizes: Counter[str] = Counter()
    for tool in tools:
        sizes[tool.server] += 1
        counts[tool.server].update(set(description_sentences(tool.description)))
    shared: dict[str, frozenset[str]] = {}
    for server, count in counts.items():
        bar = max(BOILERPLATE_MIN_TOOLS, BOILERPLATE_SHARE * sizes[server])
        common = frozenset(s for s, n in count.items() if n >= bar)
        if common:
            shared[server] = common
    return shared
