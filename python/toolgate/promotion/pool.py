"""Phase 1: what the model is told of the tools it does not see in full.

The digest is the default: the catalog's size and one line per server (its most frequent
name words), largest servers first, cut at :data:`DIGEST_MAX_TOKENS` with the rest counted
on one line, beside a ``tool_search`` tool. Its size does not grow with the catalog, so a
prompt pays for discovery the same at 100 tools as at 10,000. The full pool lists every
tool's name and summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import name_words
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.formats.tokens import count_text
from toolgate.memo import Memo
from toolgate.promotion.active_set import ANY_SCOPE, Scope, tools_in_scope

__all__ = ["DIGEST_KEYWORDS", "DIGEST_MAX_TOKENS", "render_pool"]


#: Most tokens the digest takes, whatever the catalog's size: the servers that do not fit are
#: counted on one line, so discovery costs the same at 100 tools as at 10,000.
DIGEST_MAX_TOKENS = 80


#: Most keywords the digest gives per server.
DIGEST_KEYWORDS = 4


_POOL_MODES = ("auto", "full", "digest", "none")


# A pool line ("- name: summary\n") is never under four tokens.
_MIN_LINE_TOKENS = 4


# Tokens kept free for the line that counts the servers left out.
_REST_LINE_TOKENS = 8


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
    return [w for w in name_words(name) if w not in _STOP_WORDS and not w.isdigit()]


def _render_full(tools: Sequence[Tool]) -> str:
    lines = [
        f"Tools available ({len(tools)}). Full definitions are attached for the ones "
        "you can call this turn; ask for another by name if you need it."
    ]
    lines.extend(f"- {t.exposed_name}: {t.summary}" for t in tools)
    return "\n".join(lines)


def _server_line(server: str, tools: Sequence[Tool]) -> str:
    """``- server: keyword, ...``: the words its tools' names use most, what it is for."""
    words = Counter(w for t in tools for w in dict.fromkeys(_name_words(t.name)))
    top = [w for w, _ in sorted(words.items(), key=lambda kv: -kv[1])[:DIGEST_KEYWORDS]]
    return f"- {server}: {', '.join(top)}" if top else f"- {server}"


def _render_digest(tools: Sequence[Tool], search_name: str, encoding: str) -> str:
    by_server: dict[str, list[Tool]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, []).append(tool)
    servers = "server" if len(by_server) == 1 else "servers"
    size = f"{len(tools):,} tools on {len(by_server):,} {servers}"
    lines = [f"{size}; call {search_name} for any not attached:"]
    room = DIGEST_MAX_TOKENS - count_text(lines[0] + "\n", encoding) - _REST_LINE_TOKENS
    ordered = sorted(by_server.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    listed = 0
    for server, server_tools in ordered:
        line = _server_line(server, server_tools)
        room -= count_text(line + "\n", encoding)
        if room < 0:
            break
        lines.append(line)
        listed += 1
    rest = ordered[listed:]
    if rest:
        lines.append(f"- {len(rest):,} more {'server' if len(rest) == 1 else 'servers'}")
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
            text = _render_digest(tools_in_scope(catalog, *scope), search_name, encoding)
        return text, count_text(text, encoding) if text else 0

    return _POOLS.get((catalog.version, mode, search_name, encoding, scope), render)


def choose_pool(
    catalog: Catalog,
    pool: str,
    search_name: str,
    encoding: str,
    scope: Scope = ANY_SCOPE,
    *,
    search_tokens: int = 0,
) -> tuple[str, str, int]:
    """The pool mode, text and tokens for ``pool``; ``"auto"`` takes whichever of the digest
    (with its ``tool_search`` tool, ``search_tokens``) and the full pool costs less, which is
    the full pool only for a handful of tools."""
    if pool not in _POOL_MODES:
        raise InvalidInputError(f"pool must be one of {', '.join(_POOL_MODES)}, got {pool!r}")
    render = partial(render_pool, catalog, search_name=search_name, encoding=encoding, scope=scope)
    if pool != "auto":
        return (pool, *render(pool))
    digest, digest_tokens = render("digest")
    if len(tools_in_scope(catalog, *scope)) * _MIN_LINE_TOKENS < digest_tokens + search_tokens:
        # Few enough tools that listing them all may cost less than the digest and its tool.
        text, tokens = render("full")
        if tokens < digest_tokens + search_tokens:
            return "full", text, tokens
    return "digest", digest, digest_tokens
