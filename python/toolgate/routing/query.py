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

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from toolgate.errors import InvalidInputError
from toolgate.unicode import trimmed, well_formed

__all__ = [
    "ParsedQuery",
    "outside_code_blocks",
    "parse_query",
    "query_text",
    "reads_as_words",
    "trimmed",
]

_SELECT_PREFIX = "select:"
# A term starts with a letter, so "+46 70 123 45 67" and "2 +2" stay plain text.
_REQUIRED_TERM = re.compile(r"(?:^|\s)\+([^\W\d]\S*)")
# A fenced code block as Markdown (CommonMark) reads one: a line opening with three or more
# backticks or tildes, to a line closing with as many or more of the same, or to the end when
# none does. A backtick fence's line holds no other backtick: "```name```", even at the start
# of a line, is inline code, not a block. The fence may stand in list items and block quotes
# (their markers before it, "- ```", "> ```", or indented under an item at any depth): a step
# or a quoted reply pasted is code as much as a block at the top level. The fence is the whole
# run of backticks ("(?!`)"): else each shorter run was tried, each reading the rest of the
# line again for a backtick (quadratic in a long run: 128 kB of them took 21 s).
_OPENING = re.compile(
    r"^(?P<containers>(?:[ \t]*(?:>|(?:[-+*]|\d{1,9}[.)])(?=[ \t])))*)[ \t]*"
    r"(?P<fence>`{3,}(?!`)(?![^\n]*`)|~{3,})",
    re.MULTILINE,
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


def outside_code_blocks(text: str) -> str:
    """``text`` with its fenced code blocks left out (each read as a line break).

    A block is what the user pasted (their script, a log), not what they ask for: a tool
    name called in it (``requests.get(url)``) does not name the tool the request wants.
    """
    if "``" not in text and "~~" not in text:
        return text
    kept: list[str] = []
    at = 0
    while (opening := _OPENING.search(text, at)) is not None:
        kept += [text[at : opening.start()], "\n"]
        at = _block_end(text, opening)
    return "".join([*kept, text[at:]])


def _block_end(text: str, opening: re.Match[str]) -> int:
    """Where the fenced block ``opening`` starts ends: at the end of its closing fence's line,
    before the first line out of the block quote or the list item it stands in (CommonMark
    ends an unclosed block with its container), or at the end of ``text``. One search, not a
    loop over the block's lines: a pasted log runs to many thousands of them."""
    fence, containers = opening["fence"], opening["containers"]
    line_end = text.find("\n", opening.end())
    if line_end == -1:
        return len(text)
    depth = containers.count(">")
    # A list item's content is indented to the fence's column: a fence after a list marker,
    # or one indented four spaces or more, which only an item's content is. (Not a fence at
    # most three spaces in: a top-level block holds list items.)
    column = opening.start("fence") - opening.start()
    listed = not depth and (containers.strip() != "" or column >= 4)
    end = _block_close(fence[0], len(fence), depth, column if listed else 0)
    found = end.search(text, line_end + 1)
    if found is None:
        return len(text)
    # An empty match is the first line out of the container: the block ends before its break.
    return found.end() if found.end() > found.start() else found.start() - 1


@functools.lru_cache(maxsize=64)
def _block_close(char: str, length: int, depth: int, column: int) -> re.Pattern[str]:
    """The line that closes a block fenced with ``length`` of ``char``, ``depth`` block quotes
    deep: its closing fence, or (quoted) the first line out of the quote, or (in a list item
    whose content starts at ``column``) the first item less indented than that."""
    # "\r": a line may end in CR LF (a browser's text area, a Windows client).
    fence = rf"[ \t>]*{re.escape(char)}{{{length},}}[ \t]*\r?$"
    if column:
        # Only an item: a line less indented that is not one may be code pasted carelessly.
        item = rf"(?= {{0,{column - 1}}}(?:[-+*]|\d{{1,9}}[.)])(?:[ \t]|\r?$))"
        return re.compile(rf"^(?:{fence}|{item})", re.MULTILINE)
    if not depth:
        return re.compile("^" + fence, re.MULTILINE)
    # A counted repeat, not the quote spelled ``depth`` times: that pattern took a compile as
    # long as its depth, one per depth a query's fences stand at (a 100 kB query: 12 s).
    quoted = rf"(?:[ \t]*>){{{depth}}}"
    return re.compile(rf"^(?:(?!{quoted})|{quoted}{fence})", re.MULTILINE)


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
