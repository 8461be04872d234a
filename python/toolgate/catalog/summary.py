"""A tool's summary: the first sentence of its description, within a token cap."""

from __future__ import annotations

import re

from toolgate.catalog.markup import prose
from toolgate.catalog.names import split_name
from toolgate.catalog.sentences import sentences
from toolgate.formats.tokens import count_text

__all__ = ["SUMMARY_MAX_TOKENS", "derive_summary", "first_sentence"]


#: The longest summary, in cl100k tokens (the Tool Attention paper's budget per summary).
SUMMARY_MAX_TOKENS = 60


def first_sentence(text: str) -> str:
    """The first sentence (or first line) of ``text``, whitespace collapsed.

    >>> first_sentence("Get a file. Use it for reading.")
    'Get a file.'
    >>> first_sentence("Search, e.g. by name. Then more.")
    'Search, e.g. by name.'
    """
    stripped = text.strip()
    paragraph = re.split(r"\n\s*\n|\n(?=\s*[-*#])", stripped, maxsplit=1)[0]
    line = " ".join(paragraph.split())
    first = sentences(line)  # where the boilerplate and addressing read sentences to end
    return first[0].strip() if first else line


def _truncate_to_tokens(text: str, limit: int, encoding: str) -> str:
    if count_text(text, encoding) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    # Binary search for the most words whose text, plus an ellipsis, fits the limit.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_text(" ".join(words[:mid]) + "…", encoding) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        chars = len(text)
        while chars > 0 and count_text(text[:chars] + "…", encoding) > limit:
            chars //= 2
        return text[:chars] + "…"
    return " ".join(words[:lo]) + "…"


def derive_summary(name: str, description: str, *, encoding: str = "cl100k_base") -> str:
    """The description's first sentence, cut to :data:`SUMMARY_MAX_TOKENS` tokens, read past
    its markup and a title over it (:func:`~toolgate.catalog.markup.prose`).

    A tool without a description is summarised by its name in words (``get_track_info`` ->
    ``get track info``).
    """
    sentence = first_sentence(prose(description)) or split_name(name)
    return _truncate_to_tokens(sentence, SUMMARY_MAX_TOKENS, encoding)
