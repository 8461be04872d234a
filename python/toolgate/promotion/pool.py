"""Phase 1: what the model is told of the tools it does not see in full."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import split_name
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.formats.tokens import count_text
from toolgate.memo import Memo
from toolgate.promotion.active_set import ANY_SCOPE, Scope, tools_in_scope
from toolgate.promotion.budget import Budget

__all__ = ["DIGEST_MAX_SERVERS", "FULL_POOL_MAX_TOKENS", "render_pool"]


#: Largest full summary pool ``pool="auto"`` keeps; past it the per-server digest is used.
#: Kept below Claude Code's ToolSearch index, the reference point (docs/design.md).
FULL_POOL_MAX_TOKENS = 6_000


#: Most servers the digest lists one by one; the rest are counted on one line.
DIGEST_MAX_SERVERS = 150


#: Most keywords the digest gives per server.
DIGEST_KEYWORDS = 8


_POOL_MODES = ("auto", "full", "digest", "none")


# A pool line ("- name: summary\n") is never under four tokens.
_MIN_LINE_TOKENS = 4


_STOP_WORDS = {
    "get",
    "list",
    "create",
    "update",
    "delete",
    "set",
    "add",
    "remove",
    "the",
    "a",
    "an",
    "of",
    "to",
    "by",
    "for",
    "and",
    "or",
    "in",
    "on",
    "with",
    "from",
    "all",
}


def _name_words(name: str) -> list[str]:
    return [w for w in split_name(name).split() if w not in _STOP_WORDS and not w.isdigit()]


def _render_full(tools: Sequence[Tool]) -> str:
    lines = [
        f"Tools available ({len(tools)}). Full definitions are attached for the ones "
        "you can call this turn; ask for another by name if you need it."
    ]
    lines.extend(f"- {t.exposed_name}: {t.summary}" for t in tools)
    return "\n".join(lines)


def _render_digest(tools: Sequence[Tool], search_name: str) -> str:
    by_server: dict[str, list[Tool]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, []).append(tool)
    lines = [
        f"Tool catalog: {len(tools)} tools on {len(by_server)} servers. Full definitions are "
        f"attached for the tools you can call this turn; call {search_name} to find others."
    ]
    ordered = sorted(by_server.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for server, tools in ordered[:DIGEST_MAX_SERVERS]:
        words = Counter(w for t in tools for w in dict.fromkeys(_name_words(t.name)))
        top = [w for w, _ in sorted(words.items(), key=lambda kv: -kv[1])[:DIGEST_KEYWORDS]]
        lines.append(f"- {server} ({len(tools)} tools): {', '.join(top)}")
    rest = ordered[DIGEST_MAX_SERVERS:]
    if rest:
        lines.append(f"- and {len(rest)} more servers with {sum(len(t) for _, t in rest)} tools")
    return "\n".join(lines)


_POOLS: Memo[tuple[str, str, str, str, Scope], tuple[str, int]] = Memo(32)


def render_pool(
    catalog: Catalog,
    mode: str,
    *,
    search_name: str = "tool_search",
    encoding: str = "cl100k_base",
    scope: Scope = ANY_SCOPE,
) -> tuple[str, int]:
    """The phase-1 text for ``mode`` (``"full"``, ``"digest"`` or ``"none"``) and its tokens.

    The pool names only the tools ``scope`` (allow and deny patterns) admits: a tool a deny
    list shuts out is not even mentioned. Memoised per catalog version and scope: the pool
    only changes when they do.
    """

    def render() -> tuple[str, int]:
        if mode == "none":
            text = ""
        elif mode == "full":
            text = _render_full(tools_in_scope(catalog, *scope))
        else:
            text = _render_digest(tools_in_scope(catalog, *scope), search_name)
        return text, count_text(text, encoding) if text else 0

    return _POOLS.get((catalog.version, mode, search_name, encoding, scope), render)


def choose_pool(
    catalog: Catalog,
    pool: str,
    budget: Budget | None,
    search_name: str,
    encoding: str,
    scope: Scope = ANY_SCOPE,
) -> tuple[str, str, int]:
    if pool not in _POOL_MODES:
        raise InvalidInputError(f"pool must be one of {', '.join(_POOL_MODES)}, got {pool!r}")
    render = partial(render_pool, catalog, search_name=search_name, encoding=encoding, scope=scope)
    if pool != "auto":
        return (pool, *render(pool))
    limit = FULL_POOL_MAX_TOKENS
    if budget is not None and budget.max_context_tokens is not None:
        limit = min(limit, budget.max_context_tokens // 2)
    if len(tools_in_scope(catalog, *scope)) * _MIN_LINE_TOKENS > limit:
        # Too many tools for any full pool to fit: skip rendering and counting it.
        return ("digest", *render("digest"))
    text, tokens = render("full")
    if tokens <= limit:
        return "full", text, tokens
    return ("digest", *render("digest"))
