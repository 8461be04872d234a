"""A description's markup read as text: HTML tags, Markdown headings, links and emphasis.

MCP servers write descriptions for a web page as often as for a model: ``<br>``, ``**bold**``,
``[the docs](https://...)``, a ``## tool_name`` heading over the prose. The router reads the
words, not the markup: the summary (a tool's first sentence) was the heading that repeats the
name, and tags and link addresses were BM25 terms and embedded tokens. docs/design.md, "What a
tool's row embeds".
"""

from __future__ import annotations

import html
import re

__all__ = ["plain_text", "prose", "titles"]

# Only HTML's own elements: "<owner>/<repo>" or "<id>" in a description is a placeholder,
# which says what the tool takes, and stays.
_ELEMENTS = (
    "a|abbr|b|blockquote|br|code|dd|del|div|dl|dt|em|h[1-6]|hr|i|img|kbd|li|ol|p|pre|s|"
    "small|span|strong|sub|sup|table|tbody|td|th|thead|tr|u|ul"
)
# A tag's attributes each have a value (href="...", src=x): "x<b and y>c" is a comparison,
# which a tag with bare attributes would read as <b and y>.
_ATTRIBUTES = (
    r"(?:\s+[\w:.-]{1,40}\s*=\s*(?:\"[^\"<>]{0,300}\"|'[^'<>]{0,300}'|[^\s\"'<>=]{1,300})){0,20}"
    r"\s*/?>"
)
# Tags that end a line where they stand (a block, a break); the others are only removed.
_BLOCK_TAG = re.compile(
    r"</?(?:br|p|div|li|ul|ol|tr|table|hr|h[1-6]|blockquote|pre|dl|dt|dd)\b" + _ATTRIBUTES,
    re.IGNORECASE,
)
_INLINE_TAG = re.compile(rf"</?(?:{_ELEMENTS})\b{_ATTRIBUTES}", re.IGNORECASE)
# ![alt](url) and [text](url): the words, not the address.
_LINK = re.compile(r"!?\[([^\[\]\n]{0,200})\]\([^()\s]{0,500}(?:\s+\"[^\"\n]{0,200}\")?\)")
# "__" is emphasis only at a word's edge (Markdown's rule): "my__special__field" is a name.
_EMPHASIS = re.compile(r"\*\*(?=\S)([^\n]{0,300}?\S)\*\*|(?<!\w)__(?=\S)([^\n]{0,300}?\S)__(?!\w)")
_CODE = re.compile(r"`([^`\n]{1,300})`")
# The heading's closing marks are cut in Python: a lazy group before ``[ \t#]*$`` retried that
# tail from every character of the line, quadratic in a long one. One mark before a
# lower-case word is prose, not a heading: "# of items", "# results per page" (the number
# sign), "# when asked, ..." (a comment). A heading's text is a title ("# Orders") or a name
# ("# list_orders", "# listOrders": a word going on in "_" or a capital); two marks or more
# are a heading whatever follows.
_HEADING = re.compile(r"^[ \t]{0,3}(?:#{2,6}|#(?![ \t]+[a-z]+(?!\w)))[ \t]+(.*)$", re.MULTILINE)


def plain_text(text: str) -> str:
    """``text`` without its HTML tags and Markdown marks; line structure kept.

    A heading becomes a paragraph of its own, a block tag a line break.

    >>> plain_text("## search_issues\\nFind **open** issues.<br>See [docs](https://x.io).")
    'search_issues\\n\\nFind open issues.\\nSee docs.'
    >>> plain_text("GET repos/<owner>/<repo>")
    'GET repos/<owner>/<repo>'
    """
    if not any(mark in text for mark in "<#[*_`&"):
        return text.strip()
    text = _BLOCK_TAG.sub("\n", text)
    text = _INLINE_TAG.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text)
    text = _CODE.sub(r"\1", text)
    text = _HEADING.sub(lambda m: "\n" + m.group(1).rstrip(" \t#") + "\n", text)
    text = html.unescape(text)
    # Collapse the blank lines the substitutions leave, keeping paragraph breaks (line by
    # line: a pattern for blanks before a break rescans a long run from each of its blanks).
    text = "\n".join(line.rstrip(" \t") for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _title_lines(text: str) -> tuple[list[str], list[str]]:
    """``text``'s leading heading lines (and the blank lines between them), and the rest."""
    lines = text.strip().splitlines()
    start = 0
    while start < len(lines) and (not lines[start].strip() or _HEADING.match(lines[start])):
        start += 1
    return lines[:start], lines[start:]


def titles(text: str) -> list[str]:
    """The headings :func:`prose` leaves out of ``text``, read as text.

    >>> titles("## get_weather\\n\\nCurrent weather for a city.")
    ['get_weather']
    >>> titles("# Get weather")
    []
    """
    if not _HEADING.search(text):
        return []
    heads, rest = _title_lines(text)
    if not plain_text("\n".join(rest)):
        return []
    return [plain_text(line) for line in heads if line.strip()]


def prose(text: str) -> str:
    """``text`` as :func:`plain_text` reads it, its leading headings left out when prose
    follows them: a title over a description names the tool, which its name already does.

    >>> prose("## get_weather\\n\\nCurrent weather for a city.")
    'Current weather for a city.'
    >>> prose("# Get weather")
    'Get weather'
    """
    if not _HEADING.search(text):
        return plain_text(text)
    rest = plain_text("\n".join(_title_lines(text)[1]))
    return rest or plain_text(text)
