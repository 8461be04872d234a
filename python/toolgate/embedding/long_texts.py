"""Tokenizing a long text no further than the model reads it.

The model reads a text's first :data:`~toolgate.embedding.embedder.MAX_TOKENS` tokens, but the
tokenizer normalises and splits the whole text before it truncates, at about 130 bytes of
memory and a few microseconds per character: a 4 MB query took 530 MB and 7 s, a 4 MB run of
Japanese 43 s. So a long text is tokenized by prefixes, each four times the last, until one
holds the kept tokens and more: those tokens are then the whole text's, with the same offsets.

The words a prefix holds are the whole text's words but its last one, which the cut may have
split (the normaliser works character by character, and words end at white space and
punctuation), so a prefix whose kept tokens all come from words before its last one tokenizes
as the whole text does. A text whose kept tokens run past :data:`PREFIX_CHARS` characters
(hundreds of characters per token: runs of white space or control characters, words far
longer than any the vocabulary splits) is read up to there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = ["FIRST_PREFIX_CHARS", "PREFIX_CHARS", "encode", "encode_all"]

#: The first prefix tried; texts up to this long are tokenized whole, as they always were.
FIRST_PREFIX_CHARS = 4096
#: The longest prefix tokenized: 512 characters per kept token.
PREFIX_CHARS = 131_072


def encode(tokenizer: Tokenizer, text: str) -> Encoding:
    """``tokenizer.encode(text)`` (a tokenizer that truncates), reading no more of ``text``
    than its kept tokens need, and at most :data:`PREFIX_CHARS` characters of it."""
    size = FIRST_PREFIX_CHARS
    while size < len(text):
        encoding = tokenizer.encode(text[:size])
        if size >= PREFIX_CHARS or _holds_kept_tokens(encoding):
            return encoding
        size = min(4 * size, PREFIX_CHARS)
    return tokenizer.encode(text)


def encode_all(tokenizer: Tokenizer, texts: Sequence[str]) -> list[Encoding]:
    """:func:`encode` of each text: short ones in one batch (the tokenizer's threads), long
    ones by prefixes."""
    short = [text for text in texts if len(text) <= FIRST_PREFIX_CHARS]
    batch = iter(tokenizer.encode_batch(short))
    return [
        next(batch) if len(text) <= FIRST_PREFIX_CHARS else encode(tokenizer, text)
        for text in texts
    ]


def _holds_kept_tokens(encoding: Encoding) -> bool:
    """Whether the tokens ``encoding`` kept all come from words before the last word of its
    text (its overflowing tokens reach a later word than the kept ones)."""
    if not encoding.overflowing:
        return False
    kept = [word for word in encoding.word_ids if word is not None]
    rest = [word for part in encoding.overflowing for word in part.word_ids if word is not None]
    return bool(kept) and bool(rest) and max(kept) < max(rest)
