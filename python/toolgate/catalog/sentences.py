"""Where a description's sentences end: the one rule the summary, the sentences that address
the model and a server's boilerplate all read sentences by.

A sentence ends at ``.``, ``!`` or ``?`` and the white space after it, unless the dot ends a
common abbreviation as a word of its own ("e.g. by name" goes on; "a movie. Then" ends), and
at a line break (a list item, an ``Args:`` line). Two rules, one of them splitting at "e.g.",
counted a server's shared sentence as two fragments that no summary was.
"""

from __future__ import annotations

import re

__all__ = ["ABBREVIATIONS", "sentences"]

#: Abbreviations whose dot ends no sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "incl.", "no.", "eg.", "ie.")
# The longest of them and the character before: all an abbreviation test reads before a
# sentence's end, so a sentence of many abbreviations is not read again from its start at
# each (quadratic).
_LONGEST = max(map(len, ABBREVIATIONS)) + 1
# An abbreviation is a word of its own: "movie." ends in "ie.", "casino." in "no.".
_ABBREVIATION = re.compile(
    r"(?<!\w)(?:{})\Z".format("|".join(map(re.escape, ABBREVIATIONS))), re.IGNORECASE
)
# A look-behind, not "[.!?]+\s+": this one backtracked over a long run of dots from each.
_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """``text``'s sentences, each with the white space after it (joined, they are ``text``),
    blank ones left out.

    >>> sentences("Search, e.g. by name. Then more.\\nArgs: q")
    ['Search, e.g. by name. ', 'Then more.\\n', 'Args: q']
    """
    parts, start = [], 0
    for end in _END.finditer(text):
        before = text[max(start, end.start() - _LONGEST) : end.start()]
        if "\n" not in end.group() and _ABBREVIATION.search(before):
            continue
        parts.append(text[start : end.end()])
        start = end.end()
    parts.append(text[start:])
    return [part for part in parts if part.strip()]
