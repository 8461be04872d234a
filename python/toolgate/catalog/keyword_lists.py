"""Keyword-stuffed descriptions: text written for the router's scores, not for a reader.

A server that wants its tools in every route need not address the model: it can pile up a
domain's vocabulary instead, as a long comma list of nouns, the same few words many times
over, or one sentence frame repeated with the nouns swapped. Each raises BM25 and drags the
tool's embedding towards every request of the domain. A tool whose indexed description does
any of these is flagged, as one that addresses the model is
(:mod:`toolgate.catalog.addressing`), and ranks weighed down (``RouterConfig.addressing_weight``).

The bars are set above what real catalogs write: no list of GitHub's server, BFCL or
MetaTool has more than 8 items, and a real description repeats a word over its sentences,
rarely within one. Only the text the router indexes is read (``described_text``), so a long
manual past its cut does not count. Plain string operations, linear in the text.
docs/design.md, "Keyword stuffing".
"""

from __future__ import annotations

from collections import Counter

__all__ = [
    "FRAME_WORDS",
    "LIST_MIN_ITEMS",
    "REPEAT_MIN",
    "listed_items",
    "repeated_frame",
    "repeated_word",
    "stuffed_keywords",
]

#: Items of one comma list from which it is a stuffed vocabulary.
LIST_MIN_ITEMS = 15
#: Times one word occurs in one sentence from which the sentence is stuffed.
REPEAT_MIN = 6
#: Words that open a sentence frame; a frame opening at least :data:`FRAME_MIN` sentences,
#: and half of them, is stuffed.
FRAME_WORDS = 4
FRAME_MIN = 5
#: Words of a list item at most: a list of nouns, not of clauses.
_ITEM_MAX_WORDS = 3

_STOPWORDS = frozenset((
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "for", "from", "if", "in",
    "into", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "with", "you",
    "your",
))  # fmt: skip
_SENTENCE_ENDS = ".!?;:\n()[]"


def _sentences(text: str) -> list[str]:
    """``text`` cut at every sentence or clause end (a list never spans one)."""
    for end in _SENTENCE_ENDS:
        text = text.replace(end, ".")
    return [part.strip() for part in text.split(".") if part.strip()]


def _words(text: str) -> list[str]:
    return [w.strip("'\"`*,").casefold() for w in text.split() if w.strip("'\"`*,")]


def listed_items(text: str) -> int:
    """Items of the longest comma list of short items in ``text``; a long item at either end
    of the list counts as one (the words around a list are not items).

    >>> listed_items("Lists issues, pull requests, commits and tags of a repository.")
    3
    """
    best = 0
    for sentence in _sentences(text):
        run = short = 0  # items of the current list, and how many of them are short
        for item in sentence.split(","):
            words = item.split()
            if words and words[0].casefold() in ("and", "or"):
                words = words[1:]
            if 1 <= len(words) <= _ITEM_MAX_WORDS:
                run, short = run + 1, short + 1
            elif words:
                # A long item may still end a list of short ones ("... and tags of a
                # repository"), and open the next ("It handles issues, ...").
                if short:
                    best = max(best, run + 1)
                run, short = 1, 0
            else:
                run = short = 0
            best = max(best, run)
    return best


def repeated_word(text: str) -> int:
    """Most times one word (not a function word) occurs within one sentence of ``text``.

    >>> repeated_word("Issues issues issues. Pull requests.")
    3
    """
    best = 0
    for sentence in _sentences(text):
        counts = Counter(w for w in _words(sentence) if len(w) > 2 and w not in _STOPWORDS)
        if counts:
            best = max(best, counts.most_common(1)[0][1])
    return best


def repeated_frame(text: str) -> int:
    """Sentences of ``text`` that open with its most common first :data:`FRAME_WORDS` words,
    when those are at least half its sentences (else 0).

    >>> repeated_frame("This tool lets you read issues. This tool lets you read tags.")
    2
    """
    openings = [tuple(words[:FRAME_WORDS]) for words in map(_words, _sentences(text))]
    framed = Counter(o for o in openings if len(o) == FRAME_WORDS)
    if not framed:
        return 0
    count = framed.most_common(1)[0][1]
    return count if 2 * count >= len(openings) else 0


def stuffed_keywords(text: str) -> list[str]:
    """What makes ``text`` keyword-stuffed, one phrase per sign found (empty: none).

    >>> stuffed_keywords("GitHub: " + ", ".join(f"noun{i}" for i in range(15)) + ".")
    ['a list of 15 items']
    >>> stuffed_keywords("Lists the issues of a repository, newest first.")
    []
    """
    signs = []
    if (items := listed_items(text)) >= LIST_MIN_ITEMS:
        signs.append(f"a list of {items} items")
    if (times := repeated_word(text)) >= REPEAT_MIN:
        signs.append(f"a word {times} times in one sentence")
    if (frames := repeated_frame(text)) >= FRAME_MIN:
        signs.append(f"one sentence frame {frames} times")
    return signs
