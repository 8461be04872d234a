"""Keyword-stuffed descriptions: lists, repeated words and frames found, real prose left alone."""

from __future__ import annotations

import json

import pytest
from benches.stuffing import hostile_tools

from tests.shared_data import CATALOGS, DATA, require
from toolgate.catalog.addressing import described_text
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.keyword_lists import (
    FRAME_MIN,
    LIST_MIN_ITEMS,
    REPEAT_MIN,
    listed_items,
    repeated_frame,
    repeated_word,
    stuffed_keywords,
)
from toolgate.routing.outline import addressing_rows

NOUNS = [f"noun{i}" for i in range(40)]


def test_a_list_is_stuffed_from_its_bar() -> None:
    short = "Handles " + ", ".join(NOUNS[: LIST_MIN_ITEMS - 1]) + "."
    long = "Handles " + ", ".join(NOUNS[:LIST_MIN_ITEMS]) + " and more."
    assert listed_items(short) == LIST_MIN_ITEMS - 1
    assert stuffed_keywords(short) == []
    assert listed_items(long) == LIST_MIN_ITEMS
    assert stuffed_keywords(long) == [f"a list of {LIST_MIN_ITEMS} items"]


def test_a_long_item_closing_a_list_counts_as_its_last_item() -> None:
    closed = "Handles " + ", ".join(NOUNS[: LIST_MIN_ITEMS - 1]) + ", and noun99 of a repository."
    assert listed_items(closed) == LIST_MIN_ITEMS
    assert listed_items("Lists issues, pull requests, commits and tags of a repository.") == 3


def test_items_of_clauses_or_of_several_sentences_make_no_list() -> None:
    clauses = ", ".join(f"then it reads the {noun} file" for noun in NOUNS[:20])
    assert listed_items(clauses) <= 1
    sentences = ". ".join(", ".join(NOUNS[i : i + 5]) for i in range(0, 20, 5))
    assert listed_items(sentences) == 5


def test_a_word_repeated_within_one_sentence() -> None:
    stuffed = " ".join(["issues", "commits"] * REPEAT_MIN) + " in a repository."
    assert repeated_word(stuffed) == REPEAT_MIN
    assert stuffed_keywords(stuffed) == [f"a word {REPEAT_MIN} times in one sentence"]
    # Over many sentences, or as function words, repetition is ordinary prose.
    spread = " ".join(f"Reads the issue number {i}." for i in range(REPEAT_MIN * 2))
    assert repeated_word(spread) == 1
    assert repeated_word("the " * 50 + "end") == 1


def test_one_frame_repeated_over_most_sentences() -> None:
    frames = " ".join(f"This tool lets you read {noun}." for noun in NOUNS[:FRAME_MIN])
    assert repeated_frame(frames) == FRAME_MIN
    assert stuffed_keywords(frames) == [f"one sentence frame {FRAME_MIN} times"]
    # The same opening in a minority of the sentences is a manual's habit.
    mixed = frames + " " + " ".join(f"Then {noun} is written back." for noun in NOUNS[:10])
    assert repeated_frame(mixed) == 0


@pytest.mark.parametrize("style", ["vocabulary", "repeated", "long"])
def test_the_benchs_stuffed_styles_are_found(style: str) -> None:
    tools = hostile_tools(style, 50)
    assert all(stuffed_keywords(described_text(t["description"])) for t in tools)


def test_no_description_of_the_dev_sets_or_githubs_server_is_stuffed() -> None:
    github = CATALOGS / "github-mcp-server.tools-list.json"
    sets = [DATA / "eval" / name / "tools.jsonl" for name in ("bfcl-single-turn", "metatool")]
    require(github, *sets)
    descriptions = [tool["description"] for tool in json.loads(github.read_text())["tools"]]
    for path in sets:
        descriptions += [json.loads(line)["description"] for line in path.read_text().splitlines()]
    assert [d for d in descriptions if stuffed_keywords(described_text(d))] == []


def test_a_stuffed_tool_is_a_flagged_row() -> None:
    catalog = Catalog.load(
        {
            "s": {
                "tools": [
                    {"name": "list_issues", "description": "List issues in a repository."},
                    {"name": "hub", "description": "GitHub: " + ", ".join(NOUNS) + "."},
                ]
            }
        }
    )
    assert addressing_rows(catalog) == (1,)


def test_hostile_text_stays_linear() -> None:
    text = ", ".join(["x"] * 500_000) + ". " + "word " * 500_000
    assert listed_items(text) == 500_000
    assert repeated_word(text) == 500_000
