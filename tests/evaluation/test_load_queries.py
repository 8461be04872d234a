"""Reading a labelled queries file: every line route() would refuse is named up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgate.errors import InvalidInputError
from toolgate.evaluation.evaluate import load_queries


def problems_of(tmp_path: Path, row: dict) -> str:
    """The error :func:`load_queries` raises for a file of ``row`` after a good line."""
    path = tmp_path / "queries.jsonl"
    good = {"query": "weather", "gold": ["get_weather"]}
    path.write_text(f"{json.dumps(good)}\n{json.dumps(row)}\n")
    with pytest.raises(InvalidInputError) as error:
        load_queries(path)
    return str(error.value)


@pytest.mark.parametrize(
    ("gold", "said"),
    [
        (5, "'gold' must be a list, got int"),
        ("get_weather", "'gold' must be a list, got str"),
        ([None], "gold[0] must be a string, got NoneType"),
        (["get_weather", ["a"]], "gold[1] must be a string, got list"),
        ([{"name": "a"}], "gold[0] must be a string, got dict"),
        ([7], "gold[0] must be a string, got int"),
    ],
)
def test_gold_is_a_list_of_names(tmp_path: Path, gold: object, said: str) -> None:
    """A gold entry that is no string would be compared as its text ('None'): refused."""
    assert f"line 2: {said}" in problems_of(tmp_path, {"query": "a", "gold": gold})


@pytest.mark.parametrize("query", ["  ", "\u200b", "\ufeff\u200e"])
def test_an_empty_query_is_refused(tmp_path: Path, query: str) -> None:
    assert "line 2: query is empty" in problems_of(tmp_path, {"query": query})


@pytest.mark.parametrize("query", ["select:", "select: , ,"])
def test_a_select_query_naming_no_tool_is_refused(tmp_path: Path, query: str) -> None:
    assert "line 2: 'select:' query names no tool" in problems_of(tmp_path, {"query": query})


@pytest.mark.parametrize(
    ("turn", "said"),
    [
        ({"role": "user", "content": 5}, "history[1]['content'] must be a string"),
        (
            {"role": "tool", "content": [{"type": "tool_result", "content": {"a": 1}}]},
            "history[1]['content'] must be a string",
        ),
    ],
)
def test_a_history_turn_route_cannot_read_is_refused(tmp_path: Path, turn: dict, said: str) -> None:
    assert f"line 2: {said}" in problems_of(tmp_path, {"query": "a", "history": ["hi", turn]})


def test_turns_route_reads_or_skips_are_accepted(tmp_path: Path) -> None:
    """An assistant's turn is skipped by route(), whatever its content: no error either."""
    path = tmp_path / "queries.jsonl"
    history = [{"role": "assistant", "content": 5}, {"role": "user", "content": None}]
    path.write_text(json.dumps({"query": "+slack post it", "gold": [], "history": history}))
    (item,) = load_queries(path)
    assert item.history == tuple(history)
