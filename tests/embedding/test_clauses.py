"""Clause spans and clause vectors pooled from token states."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from toolgate.embedding import models
from toolgate.embedding.clauses import MIN_CLAUSE_TOKENS, clause_spans, clause_vectors, clauses
from toolgate.embedding.embedder import Embedder, TokenStates


def _pieces(text: str) -> list[str]:
    return [text[start:end] for start, end in clause_spans(text)]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("list open pull requests", ["list open pull requests"]),
        ("a; b. c? d! e", ["a", "; b", ". c", "? d", "! e"]),
        ("Search flights AND then book", ["Search flights ", "AND ", "then book"]),
        ("also send it", ["also send it"]),  # a boundary at 0 cuts nothing
        ("brandon's android island", ["brandon's android island"]),  # words, not substrings
        ("查天气\uff0c然后订酒店\u3002", ["查天气", "\uff0c然后订酒店", "\u3002"]),
        # A dot or comma inside a token is a file name or a number, not a boundary.
        ("read report.txt, pay 1,000.50 USD.", ["read report.txt", ", pay 1,000.50 USD", "."]),
        ("", []),
    ],
)
def test_spans_cut_at_punctuation_and_joining_words(text: str, pieces: list[str]) -> None:
    assert _pieces(text) == pieces
    spans = clause_spans(text)
    assert all(start < end for start, end in spans)
    assert all(a[1] == b[0] for a, b in pairwise(spans))
    assert "".join(pieces) == text


def _states(text: str, words: list[str]) -> TokenStates:
    """Fake token states: [CLS], one token per word of ``text`` with state e_i, [SEP]."""
    offsets = [(0, 0)]
    at = 0
    for word in words:
        start = text.index(word, at)
        offsets.append((start, start + len(word)))
        at = start + len(word)
    offsets.append((0, 0))
    dim = len(offsets)
    states = np.eye(dim, dtype=np.float32)
    return TokenStates(vector=np.zeros(dim, np.float32), states=states, offsets=tuple(offsets))


def test_vectors_are_normalised_means_of_each_clause_tokens() -> None:
    text = "find cheap flights, then book a hotel"
    words = ["find", "cheap", "flights", ",", "then", "book", "a", "hotel"]
    tokens = _states(text, words)
    vectors = clause_vectors(tokens, text)
    assert vectors.shape == (2, len(words) + 2)
    # Rows of the identity: token i (1-based after [CLS]) is axis i.
    first = np.zeros(len(words) + 2, np.float32)
    first[1:4] = 1 / np.sqrt(3)
    second = np.zeros(len(words) + 2, np.float32)
    second[5:9] = 1 / 2  # "then book a hotel"; the comma alone is too short a clause
    np.testing.assert_allclose(vectors, [first, second], atol=1e-6)
    assert not vectors[:, [0, -1]].any()  # [CLS] and [SEP] belong to no clause


def test_short_clauses_are_dropped_and_one_clause_gives_none() -> None:
    text = "add 2, and 3 to the total please"
    words = ["add", "2", ",", "and", "3", "to", "the", "total", "please"]
    tokens = _states(text, words)
    # Clauses: "add 2" (2 words), ", " (none: a comma is no word), "and 3 to the total
    # please" (6).
    assert clause_vectors(tokens, text).shape == (0, len(words) + 2)
    assert clause_vectors(tokens, text, min_tokens=1).shape == (2, len(words) + 2)
    assert MIN_CLAUSE_TOKENS == 3


def test_punctuation_is_no_word_of_a_clause() -> None:
    # ", release date" is three tokens but two words: a fragment of the first request, not a
    # request of its own (it took a slot, and BM25 gave it a tool for "release").
    text = "get the film's details, release date, then book two tickets"
    words = ["get", "the", "film", "'", "s", "details", ",", "release", "date", ","]
    words += ["then", "book", "two", "tickets"]
    vectors, texts = clauses(_states(text, words), text)
    assert texts == ("get the film's details", "then book two tickets")
    assert vectors.shape == (2, len(words) + 2)


def test_clauses_end_where_the_tokens_the_model_read_do() -> None:
    # The model reads a long text's first 256 tokens: its clauses, and the clause texts BM25
    # ranks on, end there. Cutting the whole text (a 10 MB message) cost 0.5 s, and its
    # last clause carried the text's whole tail into every route.
    read = "find cheap flights, then book a hotel"
    text = read + " lorem ipsum" * 100_000
    words = ["find", "cheap", "flights", ",", "then", "book", "a", "hotel"]
    vectors, texts = clauses(_states(read, words), text)
    assert texts == ("find cheap flights", "then book a hotel")
    np.testing.assert_array_equal(vectors, clause_vectors(_states(read, words), read))


@pytest.fixture(scope="module")
def int8() -> Embedder:
    models.ensure()
    return Embedder("int8")


def test_each_clause_vector_is_nearest_its_own_intent(int8: Embedder) -> None:
    text = "Find flights from Boston to Paris in May, then book a hotel near the Louvre"
    vectors = clause_vectors(int8.embed_tokens(text), text)
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    intents = int8.embed(["search for flights", "book a hotel room"])
    similarity = vectors @ intents.T
    assert similarity[0, 0] > similarity[0, 1]
    assert similarity[1, 1] > similarity[1, 0]
    whole = int8.embed_tokens(text).vector @ intents.T
    # Each clause is closer to its own intent than the blended whole query is.
    assert similarity[0, 0] > whole[0]
    assert similarity[1, 1] > whole[1]
    single = "what's the weather in Lisbon tomorrow"
    assert clause_vectors(int8.embed_tokens(single), single).shape == (0, 384)
