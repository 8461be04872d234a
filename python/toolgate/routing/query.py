"""ToolSearch query forms: ``select:a,b``, ``+term`` and plain text.

The forms come from Claude Code's ToolSearch: ``select:Read,Edit`` fetches tools by name,
``+slack send`` requires ``slack`` in the tool's id (its server or name: ToolSearch's MCP tool
names carry their server) and ranks by the remaining terms, anything else is a plain query.
The terms filter what is ranked; tools named in the query and pinned tools stay in.

A person's words may start with "select:" too ("select: a good issue template please"):
:func:`reads_as_words` tells such entries from names, and the router reads a ``select:``
whose entries name no tool and read as words as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toolgate.errors import InvalidInputError
from toolgate.unicode import well_formed

__all__ = ["ParsedQuery", "parse_query", "query_text", "reads_as_words", "trimmed"]

_SELECT_PREFIX = "select:"
# A term starts with a letter, so "+46 70 123 45 67" and "2 +2" stay plain text.
_REQUIRED_TERM = re.compile(r"(?:^|\s)\+([^\W\d]\S*)")
# Whitespace and the invisible format characters a pasted or generated text carries at its
# ends: zero-width space, joiners and direction marks (U+200B-U+200F), bidi embeddings and
# isolates, word joiner (U+2060-U+2064), byte order mark, soft hyphen.
# str.strip takes a set of characters, so the whitespace goes in too (every str.isspace
# character is below U+3001); stripping stays linear, as a regex anchored at the end is not.
_BLANK = "".join(
    [
        *(c for c in map(chr, range(0x3001)) if c.isspace()),
        "\u00ad",
        *map(chr, range(0x200B, 0x2010)),
        *map(chr, range(0x202A, 0x202F)),
        *map(chr, range(0x2060, 0x2065)),
        *map(chr, range(0x2066, 0x206A)),
        "\ufeff",
    ]
)


@dataclass(frozen=True)
class ParsedQuery:
    """A query split into its ToolSearch parts.

    ``select`` holds the names of a ``select:`` query (and nothing else is set then);
    ``required_terms`` the ``+term`` words, lower-cased; ``text`` what is left to rank by.
    """

    text: str
    select: tuple[str, ...] = ()
    required_terms: tuple[str, ...] = ()

    @property
    def form(self) -> str:
        """``"select"``, ``"required"`` or ``"text"``."""
        if self.select:
            return "select"
        return "required" if self.required_terms else "text"


def parse_query(query: str, *, forms: bool = True) -> ParsedQuery:
    """Split ``query`` into a :class:`ParsedQuery`; with ``forms=False`` all of it is text.

    >>> parse_query("select:get_issue, list_issues").select
    ('get_issue', 'list_issues')
    >>> parse_query("+slack send a message").required_terms
    ('slack',)
    """
    _check_str(query)
    stripped = trimmed(query)
    if not forms:  # a user's own words, where "select:" or "+1" is just text
        return ParsedQuery(text=stripped)
    if stripped.lower().startswith(_SELECT_PREFIX):
        entries = stripped[len(_SELECT_PREFIX) :].split(",")
        names = tuple(name for name in map(trimmed, entries) if name)
        if not names:
            raise InvalidInputError(f"'select:' query names no tool: {query!r}")
        return ParsedQuery(text="", select=names)
    required = tuple(term.lower() for term in _REQUIRED_TERM.findall(stripped))
    if not required:
        return ParsedQuery(text=stripped)
    rest = _REQUIRED_TERM.sub(" ", stripped)
    # The required terms still describe the intent, so they stay in the ranking text too.
    text = " ".join([*required, rest.strip()]).strip()
    return ParsedQuery(text=text, required_terms=required)


def trimmed(text: str) -> str:
    """``text`` without the whitespace and invisible characters at its ends, so a query of
    nothing else (a zero-width space, a direction mark) is empty, as a blank one is.

    >>> trimmed("\\u200b list issues \\u200e")
    'list issues'
    """
    return text.strip(_BLANK)


def query_text(query: str) -> str:
    """``query`` as the router reads it: a str (else an :class:`InvalidInputError`) with each
    lone surrogate replaced, since neither the tokenizers nor the core take one.

    >>> query_text("open \\ud800 issue") == "open \\ufffd issue"
    True
    """
    _check_str(query)
    return well_formed(query)


def _check_str(query: object) -> None:
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a str, got {type(query).__name__}")


def reads_as_words(names: Sequence[str]) -> bool:
    """Whether the entries of a ``select:`` read as words rather than tool names: one of them
    holds white space, which the name a model calls a tool by never does.

    >>> reads_as_words(("a good issue template please",)), reads_as_words(("get_issue",))
    (True, False)
    """
    return any(len(name.split()) > 1 for name in names)
