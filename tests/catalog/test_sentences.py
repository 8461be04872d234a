"""Where a description's sentences end."""

from __future__ import annotations

from toolgate.catalog.sentences import sentences
from toolgate.catalog.tool import Tool


def test_a_word_ending_like_an_abbreviation_ends_its_sentence() -> None:
    # "movie." ends in "ie.", "casino." in "no.", "Winnipeg." in "eg.": an abbreviation is a
    # word of its own, or the summary ran on into the next sentence.
    for word in ("movie", "casino", "Winnipeg"):
        described = f"Finds a {word}. Then rates it."
        assert sentences(described) == [f"Finds a {word}. ", "Then rates it."]
        assert Tool(server="s", name="t", description=described).summary == f"Finds a {word}."
    # The abbreviations themselves still go on, after a bracket or at the start too.
    assert sentences("No. 5 (e.g. this). Then (i.e. that) more.") == [
        "No. 5 (e.g. this). ",
        "Then (i.e. that) more.",
    ]
