"""ToolSearch query forms, history texts and the names tools are embedded under."""

from __future__ import annotations

import time

import pytest

from toolgate import InvalidInputError, _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import embedding_texts, humanize
from toolgate.catalog.tool import Tool
from toolgate.routing.history import history_texts
from toolgate.routing.query import outside_code_blocks, parse_query
from toolgate.routing.rows import CatalogRows


def test_select_and_required_terms() -> None:
    assert parse_query("SELECT: a , b,").select == ("a", "b")
    parsed = parse_query("+Slack +post send the notes")
    assert parsed.required_terms == ("slack", "post")
    assert parsed.form == "required"
    assert "send the notes" in parsed.text
    assert parse_query("c++ compiler flags").form == "text"


def test_history_keeps_user_and_tool_turns_most_recent_first() -> None:
    turns = [
        "first",
        {"role": "assistant", "content": "plan"},
        {"role": "tool", "content": [{"type": "text", "text": "42 rows"}]},
        {"role": "user", "content": "latest"},
    ]
    assert history_texts(turns, 2) == ["latest", "42 rows"]
    assert history_texts(turns, 10) == ["latest", "42 rows", "first"]
    with pytest.raises(InvalidInputError, match=r"history\[0\]"):
        history_texts([3], 1)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("get_issueComments", "get issue Comments"),
        ("math.hypot", "math hypot"),
        ("Media_3_FindMovies", "Media 3 Find Movies"),
    ],
)
def test_humanize(name: str, words: str) -> None:
    assert humanize(name) == words


def test_server_is_embedded_only_when_it_tells_servers_apart() -> None:
    one = Catalog.from_tools([{"name": "f", "description": "Does f."}], server="solo")
    assert embedding_texts(one) == ["f: Does f."]
    schema = {"type": "object", "properties": {"n": {"type": "integer", "description": "How many"}}}
    two = Catalog.from_tools(
        [
            {"server": "a", "name": "f", "description": "Does f."},
            {"server": "b", "name": "g", "description": "Does g.", "inputSchema": schema},
        ]
    )
    texts = embedding_texts(two)
    assert texts[0] == "a: f: Does f."
    assert texts[1].startswith("b: g: Does g. Parameters: n")


def test_parameter_text_carries_allowed_values_and_defaults() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {
                "type": "string",
                "description": "Temperature unit.",
                "enum": ["celsius", "fahrenheit"],
                "default": "celsius",
            },
            "genres": {"type": "array", "items": {"type": "string", "enum": ["horror", "jazz"]}},
            "code": {"type": "integer", "enum": list(range(40))},
            "mode": {"type": "string", "default": "fast  lane"},
            "odd": {"enum": [{"a": 1}, None, True]},  # no words: nothing added
            "prompt": {"type": "string", "default": "You are a helpful assistant. " * 5},
        },
    }
    tool = Catalog.from_tools([{"name": "f", "inputSchema": schema}], server="s")["s/f"]
    # BM25 reads the values and string defaults as plain words.
    assert tool.param_text == (
        "unit Temperature unit. celsius fahrenheit celsius genres horror jazz code "
        + " ".join(map(str, range(30)))
        + " mode fast lane odd prompt"
    )
    # The embedding reads the values as a phrase, at most 30 of them, and no defaults.
    assert tool.embedded_param_text == (
        "unit Temperature unit. One of: celsius, fahrenheit. genres One of: horror, jazz. "
        f"code One of: {', '.join(map(str, range(30)))}. mode odd prompt"
    )
    assert embedding_texts(Catalog([tool]))[0].endswith(tool.embedded_param_text)


def test_allowed_values_are_read_as_schema_generators_write_them() -> None:
    schema = {
        "type": "object",
        "$defs": {"Color": {"type": "string", "enum": ["red", "blue"]}},
        "properties": {
            "color": {"$ref": "#/$defs/Color"},
            "size": {"anyOf": [{"enum": ["small", "large"]}, {"type": "null"}]},
            "mode": {"const": "strict"},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Color"}},
            "broken": {"$ref": "#/$defs/Missing"},
        },
    }
    tool = Tool("s", "paint", "Paint a wall.", schema)
    assert tool.embedded_param_text == (
        "color One of: red, blue. size One of: small, large. mode One of: strict. "
        "tags One of: red, blue. broken"
    )


def test_many_selected_names_keep_their_order_each_once() -> None:
    # At the size where keeping the rows found in a list made this quadratic.
    n = 40_000
    bm25 = _toolgate.Bm25.build([(f"tool_{i}", "", "", "s") for i in range(n)])
    rows = CatalogRows([f"s/tool_{i}" for i in range(n)], (), bm25, lambda: ())
    names = [f"tool_{i}" for i in reversed(range(n))] + ["tool_7", "no_such_tool"]
    selected, unknown = rows.selected(names)
    assert selected == list(reversed(range(n)))  # in the order named, each once
    assert unknown == ["no_such_tool"]


@pytest.mark.parametrize(
    "text",
    [
        "```send_email``` to ann about the notes",  # inline code at the start of a line
        "look:\n```send_email``` to ann",
    ],
)
def test_inline_code_opening_a_line_is_no_fenced_block(text: str) -> None:
    # CommonMark: a backtick fence's info string holds no backtick, so "```x```" is inline
    # code wherever it stands; read as an unclosed fence it took the rest of the text.
    assert outside_code_blocks(text) == text


def test_a_longer_fence_closes_a_block() -> None:
    # CommonMark: a closing fence is at least as long as the opening one; read as no close,
    # the block took the request written after it.
    text = "```\nrequests.get(url)\n````\nnow send it with send_email"
    assert outside_code_blocks(text) == "\n\nnow send it with send_email"
    assert outside_code_blocks("~~~~\nx\n~~~\ny") == "\n"  # a shorter one does not


@pytest.mark.parametrize(
    ("text", "left"),
    [
        # A fence in a list item: on the item's line, or indented under it (at any depth).
        ("steps:\n- ```\n  explain_query(sql)\n  ```\nwhy slow?", "steps:\n\n\nwhy slow?"),
        (
            "1. first:\n   - sub:\n\n     ```py\n     explain_query(x)\n     ```\nthanks",
            "1. first:\n   - sub:\n\n\n\nthanks",
        ),
        # In a block quote, closed in it, or left open: the quote's end ends it.
        ("> ```\n> explain_query(sql)\n> ```\nwhy slow?", "\n\nwhy slow?"),
        ("> > ~~~\n> > explain_query(sql)\nwhy slow?", "\n\nwhy slow?"),
    ],
)
def test_a_fence_in_a_list_item_or_a_quote_is_a_code_block(text: str, left: str) -> None:
    # Markdown nests fenced blocks in list items and quotes: a pasted step or quoted reply
    # is pasted material as much as a block at the top level, and names no tool.
    assert outside_code_blocks(text) == left


@pytest.mark.parametrize("quote", ["", "> "])
def test_a_fence_closes_on_a_line_ending_in_cr_lf(quote: str) -> None:
    # A browser's text area and Windows clients end lines with CR LF: the closing fence's
    # line ended in "\r", which no closing fence was, and the block took the request after it.
    lines = ["my script:", "```", "requests.get(url)", "```", "send_email it"]
    left = outside_code_blocks("\r\n".join(quote + line for line in lines))
    assert "send_email it" in left
    assert "requests.get" not in left


@pytest.mark.parametrize(
    ("text", "left"),
    [
        # An item's unclosed fence ends with the item: at the next item less indented.
        ("steps:\n- ```\n  requests.get(url)\n- send_email it", "steps:\n\n\n- send_email it"),
        ("1. ```\n   explain_query(x)\n2. send_email it", "\n\n2. send_email it"),
        ("- a\n  - ```\n    x()\n  - send_email it", "- a\n\n\n  - send_email it"),
        # A line indented as the item's content is the block's, a list item or not.
        ("- ```\n  - x()\n  ```\nsend_email it", "\n\nsend_email it"),
        # A fence out of any list (at most three spaces in) holds list items.
        ("  ```\n- x()\n1. y()\n  ```\nsend_email it", "\n\nsend_email it"),
    ],
)
def test_a_fence_in_a_list_item_ends_with_the_item(text: str, left: str) -> None:
    # Read as open to the end, "- ```" left unclosed took every later item, and the request
    # written in one, where before list fences were read it named its tool.
    assert outside_code_blocks(text) == left


def test_a_quoted_fence_is_closed_only_inside_its_quote() -> None:
    # A fence line after the quote has ended opens a block of its own.
    text = "> ```\n> a\nplease run send_email\n```\nexplain_query(x)\n```"
    assert outside_code_blocks(text) == "\n\nplease run send_email\n\n"


def test_fences_quoted_at_many_depths_read_in_linear_time() -> None:
    # Each depth of quote a fence stands at has its own closing pattern: spelled as the quote
    # repeated, each took a compile as long as its depth, and a query of fences quoted ever
    # deeper (a 100 kB one: 12 s) compiled a pattern per line.
    lines, depth = [], 1
    while sum(map(len, lines)) < 100_000:
        quote = ">" * depth
        lines.append(f"{quote}```\n{quote}explain_query(x)\n{quote}```\n")
        depth += 1
    started = time.perf_counter()
    left = outside_code_blocks("".join(lines) + "please run send_email")
    assert time.perf_counter() - started < 1
    assert left.strip() == "please run send_email"


def test_a_long_run_of_backticks_reads_in_linear_time() -> None:
    # A fence's line holds no other backtick: tried from each shorter run of the backticks,
    # that test read the rest of the line again each time (a 64 kB run: 2.6 s, 128 kB: 21 s).
    text = "`" * 50_000 + " send_email`"
    started = time.perf_counter()
    assert outside_code_blocks(text) == text  # inline code, not a fence
    assert time.perf_counter() - started < 1
