"""Which history turns are blended into the routing query."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgate.embedding.long_texts import PREFIX_CHARS
from toolgate.routing.history import HistoryTurn, _json_prefix, history_texts


def test_responses_items_that_are_not_messages_are_skipped() -> None:
    """Reasoning, tool calls and other role-less Responses items are the model's own steps:
    blended as user text they would steer routing (here, toward deleting a repository) and
    use up a history turn."""
    turns: list[HistoryTurn] = [
        {"role": "user", "content": [{"type": "input_text", "text": "star octo/app"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "plan"}],
            "content": [{"type": "reasoning_text", "text": "delete the repository"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "star", "arguments": "{}"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "content": "results"},
        {"type": "function_call_output", "call_id": "c1", "output": "starred"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done"}],
        },
        # A message item missing its role cannot be told to be the user's.
        {"type": "message", "content": "unattributed"},
    ]
    assert history_texts(turns, 10) == ["starred", "star octo/app"]
    # Skipped items do not use up the turns asked for.
    assert history_texts(turns, 2) == ["starred", "star octo/app"]


@pytest.mark.parametrize(
    ("turn", "text"),
    [
        (
            {"type": "message", "role": "user", "content": "typed user message"},
            "typed user message",
        ),
        ({"role": "user", "content": "bare user message"}, "bare user message"),
        ({"type": "message", "role": "developer", "content": "be brief"}, None),
        ({"role": "assistant", "content": "assistant text"}, None),
        # Gemini lets a single-turn Content leave its role unset: it is the user's.
        ({"parts": [{"text": "no role, no type"}]}, "no role, no type"),
        ("plain string", "plain string"),
        ({"type": "custom_tool_call_output", "call_id": "c2", "output": "patched"}, "patched"),
    ],
)
def test_messages_are_read_by_their_role(turn: HistoryTurn, text: str | None) -> None:
    assert history_texts([turn], 1) == ([] if text is None else [text])


def _deep(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "turn",
    [
        {"type": "function_call_output", "call_id": "c", "output": _deep(1000)},
        {"parts": [{"functionResponse": {"name": "f", "response": {"r": _deep(1000)}}}]},
        {"role": "user", "content": [_deep(1000)]},
        {"role": "user", "content": [{"type": "input_text", "text": _deep(1000)}]},
        {"role": "tool", "content": [{"text": 10**5000}]},
    ],
)
def test_values_too_deep_to_write_out_add_no_text(turn: HistoryTurn) -> None:
    # Written out as text they would raise RecursionError (or ValueError); the provider takes
    # them, so routing leaves them out rather than refusing the request.
    assert history_texts([{"role": "user", "content": "earlier"}, turn], 2) == ["earlier"]


def test_values_nested_past_the_schema_bound_are_still_read() -> None:
    # A tool's output nested 70 deep is valid for every provider: its text is routed on.
    # (A list output is content parts: an object is a value of the tool's own.)
    output = {"type": "function_call_output", "call_id": "c", "output": {"r": _deep(70)}}
    assert history_texts([output], 1) == ['{"r": ' + "[" * 70 + "]" * 70 + "}"]
    response = {"parts": [{"functionResponse": {"name": "f", "response": {"r": _deep(100)}}}]}
    assert history_texts([response], 1) == ['{"r": ' + "[" * 100 + "]" * 100 + "}"]


def test_odd_roles_and_nested_tool_results_do_not_break_the_reader() -> None:
    assert history_texts([{"role": _deep(1000), "content": "x"}], 1) == []
    assert history_texts([{"role": ["user"], "content": "x"}], 1) == []
    block: dict[str, object] = {"type": "tool_result", "content": "deep"}
    for _ in range(600):
        block = {"type": "tool_result", "content": [block]}
    # A tool result holds text and images, never another tool result: one level is read.
    outer = {"type": "tool_result", "content": [{"type": "text", "text": "ok"}, block]}
    assert history_texts([{"role": "user", "content": [outer]}], 1) == ["ok"]


def test_a_type_that_is_no_string_is_not_a_tool_output() -> None:
    # An unhashable "type" cannot be looked up in a set: read as a message by its role.
    turns: list[HistoryTurn] = [
        {"type": ["x"], "role": "user", "content": "earlier"},
        {"type": {"a": 1}, "output": "result"},
    ]
    assert history_texts(turns, 2) == ["earlier"]


class _Stamp:
    """A value JSON has no form for, written as its str()."""

    def __str__(self) -> str:
        return "2026-11-30"


_ROWS = [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(200_000)]


@pytest.mark.parametrize(
    ("turn", "whole"),
    [
        (
            {"type": "function_call_output", "call_id": "c", "output": {"rows": _ROWS}},
            json.dumps({"rows": _ROWS}),
        ),
        (
            {"parts": [{"functionResponse": {"name": "f", "response": {"rows": _ROWS}}}]},
            json.dumps({"rows": _ROWS}),
        ),
        ({"role": "tool", "content": "log line\n" * 1_000_000}, "log line\n" * 1_000_000),
    ],
)
def test_a_huge_tool_result_is_read_no_further_than_the_model_reads(
    turn: HistoryTurn, whole: str
) -> None:
    # The embedder reads no more than PREFIX_CHARS characters of a text: writing out a tool's
    # 10 MB result whole, on every route of the agent loop, cost seconds for nothing.
    assert history_texts([turn], 1) == [whole[:PREFIX_CHARS]]


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, True, None, "x"], "b": {}, "c": []},
        {"日本": "語", "quote": 'a "b" \\ c', "nan": math.nan, "inf": -math.inf},
        {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
        {"items": [{"when": _Stamp()}, ("tuple", 1)]},
    ],
)
def test_a_tool_result_reads_as_its_json(value: object) -> None:
    # Non-ASCII text is read as itself, never as \u escapes the model cannot tell apart.
    expected = json.dumps(value, ensure_ascii=False, default=str)
    output = {"type": "function_call_output", "call_id": "c", "output": value}
    response = {"parts": [{"functionResponse": {"name": "f", "response": value}}]}
    assert history_texts([output], 1) == [expected]
    assert history_texts([response], 1) == [expected]


class _Unit(str, enum.Enum):
    """A str enum whose str() ("_Unit.CELSIUS") is not the string it is ("celsius")."""

    CELSIUS = "celsius"


_KEYS = st.one_of(st.text(max_size=6), st.integers(), st.floats(), st.booleans(), st.none())
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from([_Stamp(), _Unit.CELSIUS, b"raw"]),
)  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(_KEYS, st.just(_Unit.CELSIUS)), inner, max_size=4),
    ),
    max_leaves=16,
)


@given(_VALUES, st.integers(min_value=1, max_value=60))
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_the_json_prefix_is_json_dumps_up_to_the_cut(value: object, limit: int) -> None:
    # Written iteratively to stop at the cut, it must read as json.dumps does up to there:
    # a str enum key was written as its str() ("_Unit.CELSIUS"), not as itself.
    whole = json.dumps(value, ensure_ascii=False, default=str)
    assert _json_prefix(value, limit) == whole[:limit]


def test_a_responses_output_of_content_parts_is_read_as_its_text() -> None:
    # The Responses API takes a tool's output as input_text / input_image / input_file parts,
    # as Anthropic's tool_result takes blocks: their text is read, never the image's base64.
    image = "data:image/png;base64," + "iVBORw0KGgo" * 1000
    parts = [
        {"type": "input_image", "image_url": image},
        {"type": "input_text", "text": "a screenshot of the login page"},
        {"type": "input_file", "filename": "a.pdf", "file_data": "JVBERi0x" * 1000},
    ]
    turns: list[HistoryTurn] = [
        {"type": "function_call_output", "call_id": "c", "output": parts},
        {"type": "custom_tool_call_output", "call_id": "d", "output": parts},
    ]
    assert history_texts(turns, 2) == ["a screenshot of the login page"] * 2


def test_claude_codes_reminders_are_not_blended() -> None:
    # Context the client adds to a user turn (CLAUDE.md, the todo list): blended, it would
    # weigh in every later route of the conversation as if the user had asked it.
    reminder = "<system-reminder>\nContents of CLAUDE.md: use pnpm.\n</system-reminder>\n"
    turns: list[HistoryTurn] = [
        {"role": "user", "content": [{"type": "text", "text": reminder}, {"text": "star app"}]},
        {"role": "user", "content": f"open an issue{reminder}"},
        {"role": "user", "content": reminder},
    ]
    assert history_texts(turns, 3) == ["open an issue", "star app"]


def test_a_turn_naming_the_reminder_tag_keeps_its_words() -> None:
    # A block that names the tag is no reminder: matched across blocks to a reminder's
    # closing tag, the words after the tag were dropped with it.
    reminder = "<system-reminder>\nThe todo list is empty.\n</system-reminder>"
    asks = "what is a <system-reminder>? then star the repo"
    turns: list[HistoryTurn] = [
        {"role": "user", "content": [{"type": "text", "text": asks}, {"text": reminder}]},
        {"role": "tool", "content": [{"type": "text", "text": asks}, {"text": reminder}]},
    ]
    assert history_texts(turns, 2) == [asks, asks]


def test_a_gemini_response_is_read_by_its_output_and_error() -> None:
    # Gemini takes a function's output under "output" and its failure under "error" (the
    # whole response otherwise): read so, the same result blends the same text as a Chat
    # tool message's or an Anthropic tool_result's, not its JSON wrapping.
    def response(value: object) -> HistoryTurn:
        return {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": value}}]}

    assert history_texts([response({"output": "Sunny, 20 C"})], 1) == ["Sunny, 20 C"]
    assert history_texts([response({"error": "city not found"})], 1) == ["city not found"]
    both = {"output": {"rows": 0}, "error": "partial"}
    assert history_texts([response(both)], 1) == ['{"rows": 0} partial']
    assert history_texts([response({"temp": 20})], 1) == ['{"temp": 20}']
