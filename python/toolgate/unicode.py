"""Text that may not be valid Unicode (lone surrogates), and text that shows nothing at its ends.

A Python ``str`` can hold a surrogate code point on its own (``json.loads`` of a reply cut off in
the middle of an emoji gives one), and nothing downstream accepts it: UTF-8 encoding, the
tokenizers, the Rust core. Text to route or embed is repaired (each lone surrogate becomes
U+FFFD, the replacement character); text that names something (a tool name) is refused by its
caller with :func:`lone_surrogate_at`, and a message quoting one shows it escaped
(:func:`surrogates_escaped`).
"""

from __future__ import annotations

__all__ = ["lone_surrogate_at", "printable", "surrogates_escaped", "trimmed", "well_formed"]

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


def lone_surrogate_at(text: str) -> int | None:
    """The index of the first surrogate code point in ``text`` that pairs with nothing."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def well_formed(text: str) -> str:
    """``text`` with every unpaired surrogate replaced by U+FFFD.

    A high and low surrogate written one after the other are joined into their character, as
    a UTF-16 decoder would.

    >>> well_formed("post the \\ud83d message") == "post the \\ufffd message"
    True
    >>> well_formed("\\ud83d\\ude00")
    '😀'
    """
    if lone_surrogate_at(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def surrogates_escaped(text: str) -> str:
    """``text`` with every surrogate code point written as its escape, for a message: one
    that holds a lone surrogate cannot be printed or logged as UTF-8.

    >>> print(surrogates_escaped("caf\\udce9.json: name 'a\\ud800'"))
    caf\\udce9.json: name 'a\\ud800'
    """
    if lone_surrogate_at(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def printable(text: str, limit: int) -> str:
    """``text`` for one line of a message or a log, cut to ``limit`` characters: each
    character that does not print (a line break, ESC, a direction mark, a lone surrogate)
    written as its escape, so that a caller's text cannot forge a line or drive a terminal.

    >>> print(printable("bad\\nERROR forged\\x1b[31m", 80))
    bad\\nERROR forged\\x1b[31m
    >>> printable("x" * 10, 4)
    'xxxx...'
    """
    shown = text[:limit]
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    return shown if len(text) <= limit else f"{shown}..."


def trimmed(text: str) -> str:
    """``text`` without the whitespace and invisible characters at its ends, so a query of
    nothing else (a zero-width space, a direction mark) is empty, as a blank one is.

    >>> trimmed("\\u200b list issues \\u200e")
    'list issues'
    """
    return text.strip(_BLANK)
