"""ToolFilter end to end on small requests of every provider shape, with the real model."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from toolgate import Budget, CatalogError, CatalogWarning, InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.formats import tokens
from toolgate.gateway.filter import FilteredRequest, ToolFilter
from toolgate.routing.router import Router, RouterConfig

# name, description, parameter names (all strings)
SPECS = [
    ("get_weather", "Get the current weather and a 7-day forecast for a city.", ["city"]),
    ("search_flights", "Search flights between two airports on a given date.", ["origin", "to"]),
    ("send_email", "Send an email to a recipient with a subject and a body.", ["to", "subject"]),
    ("create_event", "Create a calendar event with a title, start and end time.", ["title"]),
    ("convert_currency", "Convert an amount of money from one currency to another.", ["amount"]),
    ("read_file", "Read a text file from the local disk.", ["path"]),
    ("book_hotel", "Book a hotel room in a city for a range of nights.", ["city", "nights"]),
    ("translate_text", "Translate text from one language into another.", ["text"]),
]
WEATHER = "Will it rain in Lisbon tomorrow? I need to know before I go out."
TRIP = "Find me flights from Berlin to Paris next Friday and book a hotel room there."


def _schema(params: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": {p: {"type": "string"} for p in params}}


def chat_tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "description": d, "parameters": _schema(p)}}
        for n, d, p in SPECS
    ]


def responses_tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": n, "description": d, "parameters": _schema(p)}
        for n, d, p in SPECS
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": n, "description": d, "input_schema": _schema(p)} for n, d, p in SPECS]


def gemini_declarations() -> list[dict[str, Any]]:
    return [
        {"name": n, "description": d, "parameters": {"type": "OBJECT", "properties": {}}}
        for n, d, _ in SPECS
    ]


def _tags(specs: list[tuple[str, str, list[str]]]) -> str:
    return "".join(
        f"<toolname>{n}</toolname>\n<tooldescription>{d}</tooldescription>\n" for n, d, _ in specs
    )


def chat_request(query: str = WEATHER, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": "You are a travel assistant."}]
    messages.append({"role": "user", "content": [{"type": "text", "text": query}]})
    return {"model": "gpt-4o", "messages": messages, "tools": chat_tools(), **extra}


@pytest.fixture(scope="module")
def gate(embedder: Embedder) -> ToolFilter:
    return ToolFilter(embedder=embedder, cache=None)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each Router.from_catalog call's embedder, in order."""
    calls: list[Any] = []
    original = Router.from_catalog

    def spy(catalog: Any, **options: Any) -> Router:
        calls.append(options["embedder"])
        return original(catalog, **options)

    monkeypatch.setattr(Router, "from_catalog", spy)
    return calls


def _without(request: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in keys}


def test_openai_chat_keeps_the_routed_tools_in_request_order(gate: ToolFilter) -> None:
    request = chat_request(TRIP)
    filtered = gate.filter(request, top_k=2)
    assert filtered.provider == "openai"
    assert filtered.kept == ("search_flights", "book_hotel")
    assert [t["function"]["name"] for t in filtered.request["tools"]] == list(filtered.kept)
    assert filtered.request["tools"][0] is request["tools"][1]  # as given, not re-serialised
    assert filtered.request["tools"][1] is request["tools"][6]
    assert _without(filtered.request, "tools") == _without(request, "tools")
    assert filtered.dropped_count == 6
    assert sorted(filtered.result.ids) == ["default/book_hotel", "default/search_flights"]
    assert len(filtered) == 2
    assert list(filtered) == ["search_flights", "book_hotel"]
    assert filtered.to_dict()["kept"] == ["search_flights", "book_hotel"]


def test_openai_responses_keeps_builtin_tools_in_place(gate: ToolFilter) -> None:
    tools = responses_tools()
    tools.insert(3, {"type": "web_search"})
    message = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": WEATHER}],
    }
    request = {"model": "gpt-4o", "input": [message], "tools": tools, "store": False}
    filtered = gate.filter(request, top_k=1)
    assert filtered.provider == "openai-responses"
    assert filtered.request["tools"] == [tools[0], {"type": "web_search"}]
    assert filtered.kept == ("get_weather",)
    assert filtered.dropped_count == 7
    assert _without(filtered.request, "tools") == _without(request, "tools")
    plain = gate.filter({"input": WEATHER, "tools": tools}, top_k=1)
    assert plain.request["tools"] == filtered.request["tools"]


def test_anthropic_tool_choice_forces_a_tool_and_server_tools_stay(gate: ToolFilter) -> None:
    tools = [*anthropic_tools(), {"type": "web_search_20250305", "name": "web_search"}]
    messages = [
        {"role": "user", "content": "What's the weather like in Oslo this week?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "?"}]},
    ]
    choice = {"type": "tool", "name": "translate_text"}
    request = {"model": "claude", "max_tokens": 512, "messages": messages, "tools": tools}
    filtered = gate.filter({**request, "tool_choice": choice}, top_k=1)
    assert filtered.provider == "anthropic"
    # A user turn holding only a tool result does not ask anything: the earlier one does.
    assert filtered.result.query == "What's the weather like in Oslo this week?"
    assert filtered.kept == ("get_weather", "translate_text")
    assert filtered.request["tools"] == [tools[0], tools[7], tools[8]]
    assert filtered.request["tool_choice"] == choice
    assert gate.filter(request, top_k=1).kept == ("get_weather",)


def test_max_tools_counts_the_routed_and_chosen_tools_not_provider_tools(gate: ToolFilter) -> None:
    # The rule of Router.promote: the tools offered for calling that routing chose count, a
    # forced one first (never dropped); tools routing does not choose (web_search) do not.
    tools = [*anthropic_tools(), {"type": "web_search_20250305", "name": "web_search"}]
    messages = [{"role": "user", "content": WEATHER}]
    request = {"model": "claude", "max_tokens": 512, "messages": messages, "tools": tools}
    forced = {**request, "tool_choice": {"type": "tool", "name": "translate_text"}}
    filtered = gate.filter(forced, top_k=3, budget=Budget(max_tools=2))
    assert filtered.kept == ("get_weather", "translate_text")
    assert filtered.request["tools"][-1] == tools[-1]
    assert filtered.budget is not None
    assert filtered.budget.usage["tools"] == 2


def test_pinned_tools_are_routed_and_never_dropped_by_the_budget(gate: ToolFilter) -> None:
    request = chat_request()
    one = Budget(max_tools=1)
    # Included, the budget's one slot goes to the best tool; pinned, both stay (the budget's
    # decision says it broke its cap), as pinned tools do in Router.promote.
    included = gate.filter(request, top_k=3, include=["translate_text", "read_file"], budget=one)
    assert len(included.kept) == 1
    pinned = gate.filter(request, top_k=3, pinned=["translate_text", "read_file"], budget=one)
    assert set(pinned.kept) == {"translate_text", "read_file"}
    assert pinned.budget is not None
    assert pinned.budget.status == "block"
    # Still under the state and the lists, as any included name.
    denied = gate.filter(request, top_k=3, pinned=["read_file"], deny=["read_*"], budget=one)
    assert "read_file" not in denied.kept
    with pytest.raises(InvalidInputError, match="pinned must be a list"):
        gate.filter(request, pinned="read_file")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_token_cap_holds_for_the_tokens_the_request_carries(
    gate: ToolFilter, provider: str
) -> None:
    # As in Router.promote: a provider's fixed cost of sending tools (Anthropic's tool-use
    # prompt, OpenAI's namespace header) is schema tokens, and the tools are counted as they
    # are sent. Summing each tool's own count left both out: 906 tokens sent under a 600 cap.
    messages = [{"role": "user", "content": TRIP}]
    if provider == "anthropic":
        request = {"model": "claude", "max_tokens": 9, "messages": messages}
        request["tools"] = anthropic_tools()
    else:
        request = {"model": "gpt-4o", "messages": messages, "tools": chat_tools()}
    whole = gate.filter(request, top_k=3).request["tools"]
    cap = tokens.count_tools(whole, provider) - 1
    filtered = gate.filter(request, top_k=3, budget=Budget(max_schema_tokens=cap))
    assert filtered.budget is not None
    sent = tokens.count_tools(filtered.request.get("tools", []), provider)
    assert sent <= filtered.budget.usage["schema_tokens"] <= cap
    assert filtered.budget.status == "warn"
    assert 0 < len(filtered.kept) < len(whole)


def test_gemini_rewrites_declaration_lists_and_keeps_builtins(gate: ToolFilter) -> None:
    declarations = gemini_declarations()
    tools = [
        {"functionDeclarations": declarations[:4]},
        {"googleSearch": {}},
        {"function_declarations": declarations[4:]},
    ]
    contents = [{"role": "user", "parts": [{"text": "Book me a hotel room in Rome for 3 nights"}]}]
    calling = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read_file"]}}
    request = {"contents": contents, "tools": tools, "toolConfig": calling}
    filtered = gate.filter(request, top_k=1)
    assert filtered.provider == "gemini"
    assert filtered.kept == ("read_file", "book_hotel")
    assert filtered.request["tools"] == [
        {"googleSearch": {}},
        {"function_declarations": [declarations[5], declarations[6]]},
    ]
    assert filtered.request["tools"][0] is tools[1]
    assert _without(filtered.request, "tools") == _without(request, "tools")


def test_gemini_snake_case_json_schemas_are_read_compacted_and_checked(gate: ToolFilter) -> None:
    # google-genai sends FunctionDeclaration.parameters_json_schema (and the schema of each
    # Python function given as a tool) under its snake_case name.
    declarations = [
        {"name": n, "description": d, "parameters_json_schema": {**_schema(p), "title": n}}
        for n, d, p in SPECS
    ]
    contents = [{"role": "user", "parts": [{"text": WEATHER}]}]
    request = {"contents": contents, "tools": [{"functionDeclarations": declarations}]}
    filtered = gate.filter(request, top_k=1)
    (sent,) = filtered.request["tools"][0]["functionDeclarations"]
    assert sorted(sent) == ["description", "name", "parameters_json_schema"]
    assert "title" not in sent["parameters_json_schema"]
    wrong = gate.verify({"name": "get_weather", "args": {"city": 5}}, filtered)
    assert wrong.error == "invalid_arguments"


def test_gemini_tool_config_under_both_spellings_is_refused(gate: ToolFilter) -> None:
    contents = [{"role": "user", "parts": [{"text": WEATHER}]}]
    calling = {"functionCallingConfig": {"mode": "ANY"}}
    request = {
        "contents": contents,
        "tools": [{"functionDeclarations": gemini_declarations()}],
        "toolConfig": calling,
        "tool_config": calling,
    }
    with pytest.raises(InvalidInputError, match="both 'toolConfig' and 'tool_config'"):
        gate.filter(request, top_k=1)


def test_text_tags_keep_only_the_routed_tags(gate: ToolFilter) -> None:
    content = f"Tools:\n{_tags(SPECS)}<userq>{WEATHER}</userq>"
    request = {"messages": [{"role": "user", "content": content}], "model": "m"}
    filtered = gate.filter(request, top_k=1)
    assert filtered.provider == "text_tags"
    assert filtered.kept == ("get_weather",)
    assert filtered.dropped_count == 7
    rewritten = filtered.request["messages"][0]["content"]
    assert rewritten == (
        f"Tools:\n<toolname>get_weather</toolname>\n<tooldescription>{SPECS[0][1]}"
        f"</tooldescription>\n<userq>{WEATHER}</userq>"
    )
    assert filtered.result.query == WEATHER


def test_text_tags_in_the_callers_query_route_a_request_without_input(gate: ToolFilter) -> None:
    # A Responses request may hold no input (a stored prompt): nothing to rewrite.
    request = {"model": "m", "prompt": {"id": "pmpt_1"}}
    query = f"{_tags(SPECS)}<userq>{WEATHER}</userq>"
    filtered = gate.filter(request, shape="openai-responses", query=query, top_k=1)
    assert filtered.kept == ("get_weather",)
    assert filtered.request == request


def test_text_tags_without_userq_route_on_the_rest_of_the_message(gate: ToolFilter) -> None:
    content = (
        "<toolname>read_file</toolname><tooldescription>Read a file.</tooldescription>"
        "<toolname>get_weather</toolname><tooldescription>Weather in a city.</tooldescription>"
        "Is it sunny in Madrid?"
    )
    filtered = gate.filter({"input": content}, top_k=1)
    assert filtered.result.query == "Is it sunny in Madrid?"
    assert filtered.request["input"] == (
        "<toolname>get_weather</toolname><tooldescription>Weather in a city.</tooldescription>"
        "Is it sunny in Madrid?"
    )


@pytest.mark.parametrize(
    "request_",
    [
        {**chat_request(), "tool_choice": "none"},
        {
            "contents": [{"parts": [{"text": WEATHER}]}],
            "toolConfig": {"function_calling_config": {"mode": "none"}},
            "tools": [{"functionDeclarations": gemini_declarations()}],
        },
        {"messages": [{"role": "user", "content": WEATHER}]},
        {"input": WEATHER, "tools": [{"type": "web_search"}]},
        {"messages": [{"role": "system", "content": "Be brief."}], "tools": chat_tools()},
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ],
            "tools": chat_tools(),
        },
    ],
    ids=[
        "tool_choice-none",
        "gemini-mode-none",
        "no-tools",
        "only-builtins",
        "system-only",
        "image-only",
    ],
)
def test_requests_with_nothing_to_route_come_back_unchanged(
    gate: ToolFilter, request_: dict[str, Any]
) -> None:
    filtered = gate.filter(request_)
    assert filtered.request == request_
    assert filtered.request is not request_
    assert filtered.result.ids == []
    assert filtered.result.form == "none"
    assert filtered.kept == ()
    assert filtered.dropped_count == 0


def test_when_no_tool_is_kept_the_tool_keys_go(gate: ToolFilter) -> None:
    request = {**chat_request("hello there"), "tool_choice": "auto", "parallel_tool_calls": False}
    filtered = gate.filter(request, threshold=0.99)
    assert filtered.kept == ()
    assert filtered.dropped_count == len(SPECS)
    assert _without(request, "tools", "tool_choice", "parallel_tool_calls") == filtered.request


def test_earlier_turns_are_the_history(gate: ToolFilter, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    route = Router.route

    def spy(self: Router, query: str, **options: Any) -> Any:
        seen.append(options["history"])
        return route(self, query, **options)

    monkeypatch.setattr(Router, "route", spy)
    request = chat_request("and now post it to Bob")
    earlier = [
        {"role": "user", "content": "draft an email"},
        {"role": "assistant", "content": "ok"},
    ]
    request["messages"][1:1] = earlier
    gate.filter(request, top_k=1)
    assert seen == [request["messages"][:3]]


def _every_shape() -> list[dict[str, Any]]:
    gemini_tools = [{"functionDeclarations": gemini_declarations()}, {"googleSearch": {}}]
    tag_text = f"{_tags(SPECS)}<userq>{TRIP}</userq>"
    return [
        chat_request(TRIP, tool_choice={"type": "function", "function": {"name": "send_email"}}),
        {"input": [{"role": "user", "content": TRIP}], "tools": responses_tools()},
        {"messages": [{"role": "user", "content": TRIP}], "tools": anthropic_tools()},
        {"contents": [{"role": "user", "parts": [{"text": TRIP}]}], "tools": gemini_tools},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": tag_text}]}]},
    ]


@pytest.mark.parametrize("index", range(5))
def test_the_input_request_is_never_modified(gate: ToolFilter, index: int) -> None:
    request = _every_shape()[index]
    before = copy.deepcopy(request)
    filtered = gate.filter(request, top_k=2)
    assert request == before
    assert filtered.request != request


def test_one_router_per_tools_array_least_recently_used_first_out(
    embedder: Embedder, builds: list[Any]
) -> None:
    gate = ToolFilter(embedder=embedder, cache=None, max_catalogs=1)
    gate.filter(chat_request(WEATHER), top_k=1)
    gate.filter(chat_request(TRIP), top_k=1)
    assert len(builds) == 1  # same tools, another query: no new router
    fewer = {**chat_request(), "tools": chat_tools()[:4]}
    gate.filter(fewer, top_k=1)
    assert len(builds) == 2
    gate.filter(chat_request(), top_k=1)  # evicted by the other array
    assert len(builds) == 3


def test_the_routers_kept_are_bounded_by_their_arrays_bytes_too(
    embedder: Embedder, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A built catalog holds several times its array: max_catalogs arrays of the largest
    # bodies a gateway takes would hold tens of GB.
    from toolgate.gateway import indexes

    arrays = [chat_tools()[:count] for count in (4, 5, 6)]
    sizes = [indexes.keyed(tools, "openai")[1] for tools in arrays]
    monkeypatch.setattr(indexes, "MAX_CACHED_BYTES", sizes[1] + sizes[2])
    gate = ToolFilter(embedder=embedder, cache=None, max_catalogs=8)
    for tools in arrays[:2]:
        gate.filter({**chat_request(), "tools": tools}, top_k=1)
    assert len(gate._indexes._routers) == 2
    gate.filter({**chat_request(), "tools": arrays[2]}, top_k=1)  # the first goes
    assert len(gate._indexes._routers) == 2
    gate.filter({**chat_request(), "tools": arrays[1]}, top_k=1)
    assert len(builds) == 3
    gate.filter({**chat_request(), "tools": arrays[0]}, top_k=1)
    assert len(builds) == 4
    monkeypatch.setattr(indexes, "MAX_CACHED_BYTES", 1)  # the newest stays, however large
    gate.filter({**chat_request(), "tools": chat_tools()}, top_k=1)
    assert len(gate._indexes._routers) == 1
    gate.filter({**chat_request(), "tools": chat_tools()}, top_k=1)
    assert len(builds) == 5


def test_the_layouts_kept_are_bounded_by_their_arrays_bytes_too(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each layout keeps the compacted entries its array's turns sent, up to the whole array:
    # bounded by count alone, max_catalogs layouts of the largest bodies outlived the
    # routers the byte bound evicts.
    from toolgate.gateway import indexes

    arrays = [chat_tools()[:count] for count in (4, 5, 6)]
    sizes = [indexes.keyed(tools, "openai")[1] for tools in arrays]
    monkeypatch.setattr(indexes, "MAX_CACHED_BYTES", sizes[1] + sizes[2])
    gate = ToolFilter(embedder=embedder, cache=None, max_catalogs=8)
    for tools in arrays:
        gate.filter({**chat_request(), "tools": tools}, top_k=1)
    assert len(gate._layouts) == len(gate._indexes._routers) == 2
    monkeypatch.setattr(indexes, "MAX_CACHED_BYTES", 1)  # the newest stays, however large
    gate.filter({**chat_request(), "tools": chat_tools()}, top_k=1)
    assert len(gate._layouts) == 1


def test_the_default_embedder_is_made_once_and_shared(
    embedder: Embedder, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def make(precision: str, *, progress: bool) -> Embedder:
        made.append(f"{precision} progress={progress}")
        return embedder

    monkeypatch.setattr("toolgate.gateway.filter.default_embedder", make)
    gate = ToolFilter(cache=None)
    gate.filter(chat_request(), top_k=1)
    gate.filter({**chat_request(), "tools": chat_tools()[:3]}, top_k=1)
    assert made == ["int8 progress=False"]
    assert builds == [embedder, embedder]


def test_bad_tools_are_named_not_dropped(gate: ToolFilter) -> None:
    tools = chat_tools()
    tools[2] = {"type": "function", "function": {"description": "no name"}}
    with pytest.raises(CatalogError, match=r"tools\[2\]"):
        gate.filter({**chat_request(), "tools": tools})


def _bad(**changes: Any) -> dict[str, Any]:
    return {**chat_request(), **changes}


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (["not", "a", "dict"], "request must be a JSON object, got list"),
        (
            {"prompt": "hi", "tools": []},
            r"expected an OpenAI Chat .*got keys \['prompt', 'tools'\]",
        ),
        ({"messages": [], "input": "hi"}, "got both 'messages' and 'input'"),
        (_bad(messages="hi"), "'messages' must be a list of messages, got str"),
        (_bad(tools={"type": "function"}), "'tools' must be a list, got dict"),
        (_bad(tools=[*chat_tools(), "web_search"]), r"tools\[8\] must be a JSON object, got str"),
        (_bad(tool_choice={"type": "function", "name": "nope"}), "names 'nope', which no"),
        ({"input": "<toolname>a</toolname><userq> </userq>"}, r"input\[0\] has <toolname> tags"),
    ],
    ids=[
        "not-a-mapping",
        "unknown-shape",
        "two-shapes",
        "messages-not-list",
        "tools-not-list",
        "tool-not-object",
        "unknown-tool-choice",
        "tags-without-question",
    ],
)
def test_bad_requests_are_named(gate: ToolFilter, request_: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        gate.filter(request_)


def test_a_schema_nested_past_the_limit_is_a_bad_tool_named(gate: ToolFilter) -> None:
    """Nested far past any real schema (and the interpreter's recursion limit for a walk
    that recursed): the array gets no cache key, and the catalog names the tool."""
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"type": "object", "properties": {"a": deep}}
    tools = [*chat_tools(), {"type": "function", "function": {"name": "deep", "parameters": deep}}]
    with pytest.raises(CatalogError, match=r"tools\[8\] default/deep: .*nesting deeper than 64"):
        gate.filter({**chat_request(), "tools": tools})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"include": 5}, "include must be a list of tool ids or names, got int"),
        ({"allow": 5}, "allow/deny must be a list of patterns, got 5"),
        ({"deny": None, "allow": 3.5}, "allow/deny must be a list of patterns, got 3.5"),
        ({"wait": "no"}, "wait must be True or False, got a str"),
        ({"pinned": ["a\ud800"]}, r"pinned entries .*\(a lone surrogate at character 1\)"),
    ],
)
def test_bad_options_are_named(gate: ToolFilter, options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        gate.filter(chat_request(), **options)


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_catalogs_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_catalogs must be an integer >= 1"):
        ToolFilter(max_catalogs=value)


def test_threads_agree_with_one_thread(embedder: Embedder, builds: list[Any]) -> None:
    queries = [WEATHER, TRIP, "email Alice the report", "what is 20 euros in yen", "read notes.txt"]
    makers: list[Callable[[str], dict[str, Any]]] = [
        chat_request,
        lambda q: {"input": q, "tools": responses_tools()},
        lambda q: {"messages": [{"role": "user", "content": q}], "tools": anthropic_tools()},
    ]
    requests = [make(q) for make in makers for q in queries]

    def run(gate: ToolFilter, request: dict[str, Any]) -> FilteredRequest:
        return gate.filter(request, top_k=2)

    sequential = ToolFilter(embedder=embedder, cache=None)
    expected = [run(sequential, r) for r in requests]
    builds.clear()
    shared = ToolFilter(embedder=embedder, cache=None)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda r: run(shared, r), requests * 4))
    assert [(r.request, r.kept) for r in results] == [(e.request, e.kept) for e in expected] * 4
    # One router per tools array as the request gives it (three shapes), each built once
    # however many threads race for it.
    assert len(builds) == len(makers)


def test_user_text_is_never_read_as_a_query_form(gate: ToolFilter) -> None:
    for text in ("Select: a hotel in Rome for me", "Pros: +cheap +fast. " + TRIP):
        filtered = gate.filter(chat_request(text), top_k=2)
        assert filtered.result.form == "text"
        assert len(filtered.kept) == 2
    # A bare "select:" is a word that asks for nothing: read as text, it needs no tool.
    bare = gate.filter(chat_request("select:"), top_k=2)
    assert bare.result.form == "text"
    assert bare.no_tool
    assert bare.kept == ()


@pytest.mark.parametrize("invisible", ["  ", "\u200b", "\ufeff\u200e"])
def test_a_turn_of_invisible_characters_is_passed_over_as_a_blank_one(
    gate: ToolFilter, invisible: str
) -> None:
    # route() reads a query of only these as empty: the gateway must not route on it and
    # fail the request, but ask the last user turn with text, as it does for a blank one.
    request = chat_request(WEATHER)
    request["messages"] += [
        {"role": "assistant", "content": "Which city?"},
        {"role": "user", "content": invisible},
    ]
    filtered = gate.filter(request, top_k=1)
    assert filtered.kept == gate.filter(chat_request(WEATHER), top_k=1).kept
    with pytest.raises(InvalidInputError, match="query must be a non-empty string"):
        gate.filter(chat_request(), query=invisible)


def test_choices_naming_builtins_or_allowed_tools_are_honoured(gate: ToolFilter) -> None:
    tools = [{"type": "web_search_20250305", "name": "web_search"}, *anthropic_tools()]
    request = {
        "messages": [{"role": "user", "content": WEATHER}],
        "tools": tools,
        "tool_choice": {"type": "tool", "name": "web_search"},
    }
    assert gate.filter(request, top_k=1).request["tools"][0] == tools[0]
    allowed = {"type": "function", "function": {"name": "read_file"}}
    chat = chat_request(
        tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [allowed]}}
    )
    assert "read_file" in gate.filter(chat, top_k=1).kept
    flat = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "read_file"}],
    }
    responses = {"input": WEATHER, "tools": responses_tools(), "tool_choice": flat}
    assert "read_file" in gate.filter(responses, top_k=1).kept


def test_functions_in_a_responses_namespace_stay_and_their_calls_pass(gate: ToolFilter) -> None:
    # A namespace groups tools the request sends whole: routing leaves it alone, so its
    # functions may be chosen and called (their calls name the function, and the namespace).
    inner = {"type": "function", "name": "get_customer", "parameters": {"type": "object"}}
    namespace = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [inner]}
    request = {"input": WEATHER, "tools": [*responses_tools(), namespace]}
    choice = {"type": "function", "name": "get_customer"}
    filtered = gate.filter({**request, "tool_choice": choice}, top_k=1)
    assert filtered.request["tools"][-1] == namespace
    assert filtered.request["tool_choice"] == choice
    call = {"type": "function_call", "call_id": "c1", "name": "get_customer", "namespace": "crm",
            "arguments": "{}"}  # fmt: skip
    assert gate.verify(call, filtered).ok
    assert gate.verify({"name": "crm.get_customer", "arguments": {}}, filtered).ok  # a stream's
    assert gate.verify({**call, "name": "send_email"}, filtered).error == "tool_not_available"
    # A function of the same name outside the namespace is routed, and checked, as any is.
    outside = {"type": "function", "name": "get_customer", "description": "Find a customer."}
    twice = gate.filter({"input": WEATHER, "tools": [*request["tools"], outside]}, top_k=1)
    assert "get_customer" not in twice.kept
    assert gate.verify({**call, "namespace": None}, twice).error == "tool_not_available"
    assert gate.verify(call, twice).ok
    chosen = gate.filter({"input": WEATHER, "tools": [*request["tools"], outside],
                          "tool_choice": choice}, top_k=1)  # fmt: skip
    assert "get_customer" in chosen.kept


def test_the_callers_lists_hold_for_a_responses_namespaces_functions(gate: ToolFilter) -> None:
    # A namespace goes whole, unrouted, but its functions are function tools: the lists cut
    # one they shut out (named bare or as namespace.name) from a copy of the namespace, drop a
    # namespace left empty, and its call is refused, whether the request was routed or not.
    members = [
        {"type": "function", "name": name, "parameters": {"type": "object"}}
        for name in ("send_email", "read_inbox")
    ]
    namespace = {"type": "namespace", "name": "mail", "description": "Mail.", "tools": members}
    request = {"input": WEATHER, "tools": [*responses_tools()[:2], namespace]}
    given = copy.deepcopy(request)
    call = {"type": "function_call", "call_id": "c1", "name": "send_email", "namespace": "mail",
            "arguments": "{}"}  # fmt: skip
    cut = {**namespace, "tools": members[1:]}
    for shape in (request, {**request, "tool_choice": "none"}):
        for lists in (
            {"deny": ["send_email"]},
            {"deny": ["MAIL.send_*"]},
            {"allow": ["get_weather", "search_flights", "mail.read_inbox"]},
        ):
            filtered = gate.filter(shape, top_k=2, **lists)
            assert filtered.request["tools"][-1] == cut, lists
            assert gate.verify(call, filtered).error == "tool_not_available"
            stream = {"name": "mail.send_email", "arguments": {}}  # as a stream names it
            assert gate.verify(stream, filtered).error == "tool_not_available"
            assert gate.verify({**call, "name": "read_inbox"}, filtered).ok
            assert filtered.dropped_count == gate.filter(shape, top_k=2).dropped_count + 1
        emptied = gate.filter(shape, top_k=2, allow=["get_weather", "search_flights"])
        assert all(t["type"] == "function" for t in emptied.request["tools"])
        assert gate.verify({**call, "name": "read_inbox"}, emptied).error == "tool_not_available"
    assert request == given  # the caller's namespace is copied, never cut in place
    choice = {"type": "function", "name": "send_email"}
    with pytest.raises(InvalidInputError, match="'send_email', which the allow / deny lists"):
        gate.filter({**request, "tool_choice": choice}, deny=["mail.send_email"])
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [choice]}
    with pytest.raises(InvalidInputError, match="'send_email', which the allow / deny lists"):
        gate.filter({**request, "tool_choice": allowed, "input": []}, deny=["send_email"])


def test_an_allowed_glob_over_names_admits_no_member_through_its_namespaces_name(
    gate: ToolFilter,
) -> None:
    # allow=["get_*"] meant the get_ tools, but read against "get_admin.delete_everything"
    # its * ran over the dot and let a namespace's every member through; a pattern without
    # a dot names a member by its bare name alone (a dotted one, "get_admin.*", admits them).
    members = [
        {"type": "function", "name": name, "parameters": {"type": "object"}}
        for name in ("delete_everything", "get_users")
    ]
    namespace = {"type": "namespace", "name": "get_admin", "description": "Admin.",
                 "tools": members}  # fmt: skip
    request = {"input": WEATHER, "tools": [*responses_tools()[:2], namespace]}
    call = {"type": "function_call", "call_id": "c1", "name": "delete_everything",
            "namespace": "get_admin", "arguments": "{}"}  # fmt: skip
    for shape in (request, {**request, "tool_choice": "none"}):
        filtered = gate.filter(shape, top_k=2, allow=["get_*"])
        assert filtered.request["tools"][-1] == {**namespace, "tools": members[1:]}
        assert gate.verify(call, filtered).error == "tool_not_available"
        assert gate.verify({**call, "name": "get_users"}, filtered).ok
        whole = gate.filter(shape, top_k=2, allow=["get_*", "get_admin.*"])
        assert whole.request["tools"][-1] == namespace
    # A deny list still errs toward denying: its glob reads the qualified name too.
    denied = gate.filter(request, top_k=2, deny=["get_*"])
    assert all(t.get("name") != "get_admin" for t in denied.request["tools"])


def test_the_lists_are_read_once_over_every_namespace_of_a_request(
    gate: ToolFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lists were resolved anew for each namespace (a pattern matcher built three times
    # over its few members): 20,000 one-member namespaces took 4 to 8 s where as many plain
    # functions took 1 s. A request's namespaces are read together.
    from toolgate.gateway import namespaces

    reads: list[int] = []
    real = namespaces.shut_out_read

    def counted(tools: Any, allow: Any, deny: Any) -> set[int]:
        reads.append(len(tools))
        return real(tools, allow, deny)

    monkeypatch.setattr(namespaces, "shut_out_read", counted)
    member = {"type": "function", "name": "send_email", "parameters": {"type": "object"}}
    spaces = [
        {"type": "namespace", "name": f"mail{n}", "description": "Mail.", "tools": [member]}
        for n in range(40)
    ]
    request = {"input": WEATHER, "tools": [*responses_tools()[:2], *spaces]}
    for shape in (request, {**request, "tool_choice": "none"}):
        reads.clear()
        filtered = gate.filter(shape, top_k=2, deny=["mail3*"])
        kept = [t["name"] for t in filtered.request["tools"] if t["type"] == "namespace"]
        assert kept == [f"mail{n}" for n in range(40) if not str(n).startswith("3")]
        assert len(reads) <= 3


def test_a_call_naming_a_responses_namespace_itself_is_unknown(gate: ToolFilter) -> None:
    # A namespace groups functions; its own name is no tool the model can call.
    inner = {"type": "function", "name": "get_customer", "parameters": {"type": "object"}}
    namespace = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [inner]}
    request = {"input": WEATHER, "tools": [*responses_tools(), namespace]}
    call = {"type": "function_call", "call_id": "c1", "name": "crm", "arguments": "{}"}
    routed = gate.filter(request, top_k=1)
    unrouted = gate.filter({**request, "tool_choice": "none"})
    for filtered in (routed, unrouted):
        assert gate.verify(call, filtered).error == "unknown_tool"
        assert gate.verify({"name": "crm", "arguments": {}}, filtered).error == "unknown_tool"
        assert gate.verify({**call, "name": "get_customer", "namespace": "crm"}, filtered).ok


def test_a_required_choice_among_a_namespaces_functions_needs_no_routed_tool(
    gate: ToolFilter,
) -> None:
    # A namespace goes whole, unrouted: a required call its allowed_tools point at can be made
    # when routing keeps no function tool, as for an MCP server or a custom tool.
    inner = {"type": "function", "name": "get_customer", "parameters": {"type": "object"}}
    namespace = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [inner]}
    allowed = [{"type": "function", "name": "get_customer"}]
    choice = {"type": "allowed_tools", "mode": "required", "tools": allowed}
    request = {"input": WEATHER, "tools": [*responses_tools(), namespace], "tool_choice": choice}
    filtered = gate.filter(request, allow=["crm.*"])  # the namespace's functions alone
    assert filtered.request["tools"] == [namespace]
    assert filtered.request["tool_choice"] == choice
    with pytest.raises(InvalidInputError, match="requires a tool call"):
        gate.filter({**request, "tools": responses_tools(), "tool_choice": "required"},
                    deny=["*"])  # fmt: skip
    # A plain "required" too: the namespace's functions left can take the call, routed or not
    # (refused when routing kept no function tool, though the unrouted request passed).
    required = {**request, "tool_choice": "required"}
    for allow in (["crm.*"], ["get_customer"]):
        assert gate.filter(required, allow=allow).request["tools"] == [namespace]
    with pytest.raises(InvalidInputError, match="requires a tool call"):
        gate.filter(required, deny=["*"])  # the namespace's functions too


def test_a_gemini_builtin_beside_dropped_declarations_stays(gate: ToolFilter) -> None:
    declarations = gemini_declarations()
    reader = [d for d in declarations if d["name"] == "read_file"]
    others = [d for d in declarations if d["name"] != "read_file"]
    tools = [
        {"functionDeclarations": reader},
        {"functionDeclarations": others, "codeExecution": {}},
    ]
    parts = [{"text": "read the file notes.txt"}]
    request = {"contents": [{"role": "user", "parts": parts}], "tools": tools}
    kept = gate.filter(request, top_k=1).request["tools"]
    assert kept == [tools[0], {"codeExecution": {}}]


def test_the_anthropic_cache_marker_moves_to_the_last_kept_tool(gate: ToolFilter) -> None:
    tools = anthropic_tools()
    tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": tools}
    kept = gate.filter(request, top_k=1).request["tools"]
    assert tools[-1]["name"] not in [t["name"] for t in kept]
    assert kept[-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in kept[:-1])


def test_the_cache_marker_moves_off_a_denied_tool_when_nothing_is_routed(
    gate: ToolFilter,
) -> None:
    tools = anthropic_tools()
    tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
    request = {
        "messages": [{"role": "user", "content": WEATHER}],
        "tools": tools,
        "tool_choice": {"type": "none"},
    }
    kept = gate.filter(request, deny=[tools[-1]["name"]]).request["tools"]
    assert [t["name"] for t in kept] == [t["name"] for t in tools[:-1]]
    assert kept[-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in kept[:-1])


def test_the_cache_marker_never_moves_onto_a_deferred_tool(gate: ToolFilter) -> None:
    # Anthropic refuses a tool holding both defer_loading and cache_control (400): the
    # marker of a denied tool goes to the last kept tool loaded up front.
    search = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    eager = anthropic_tools()[:2]
    eager[-1] = {**eager[-1], "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    deferred = [{**t, "defer_loading": True} for t in anthropic_tools()[2:]]
    tools = [search, *eager, *deferred]
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": tools}
    kept = gate.filter(request, deny=[eager[-1]["name"]]).request["tools"]
    assert [t["name"] for t in kept] == [t["name"] for t in tools if t is not eager[-1]]
    marked = [t["name"] for t in kept if "cache_control" in t]
    assert marked == [eager[0]["name"]]
    assert kept[1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_text_between_a_tag_name_and_its_description_goes_with_the_tool(gate: ToolFilter) -> None:
    text = (
        "<toolname>get_weather</toolname>\nWeather tool:\n<tooldescription>Forecast for a city"
        "</tooldescription>\n<toolname>read_file</toolname>\n<tooldescription>Read a file"
        "</tooldescription>\n<userq>read the file notes.txt</userq>"
    )
    request = {"messages": [{"role": "user", "content": text}]}
    out = gate.filter(request, top_k=1).request["messages"][0]["content"]
    for gone in ("get_weather", "Weather tool", "Forecast"):
        assert gone not in out
    assert "<toolname>read_file</toolname>" in out


def test_a_tools_array_seen_before_is_not_read_again(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.formats import openai

    reads: list[str] = []
    real = openai.parse_tool
    monkeypatch.setattr(openai, "parse_tool", lambda *a: reads.append(a[1]) or real(*a))
    fresh = ToolFilter(embedder=embedder, cache=None)
    fresh.filter(chat_request(WEATHER), top_k=2)
    assert len(reads) == len(chat_tools())
    fresh.filter(chat_request(TRIP), top_k=2)
    assert len(reads) == len(chat_tools())  # served by the cached router


def test_the_cached_layouts_and_routers_hold_nothing_of_the_array(embedder: Embedder) -> None:
    """A tools array may be megabytes: once its request is done only the index stays."""
    import gc
    import weakref

    class Entry(dict[str, Any]):  # a plain dict cannot be weakly referenced
        pass

    fresh = ToolFilter(embedder=embedder, cache=None)
    request = chat_request(WEATHER)
    request["tools"] = [Entry(tool) for tool in request["tools"]]
    entries = [weakref.ref(tool) for tool in request["tools"]]
    assert fresh.filter(request, top_k=2).kept
    # The array was keyed and cached.
    assert len(fresh._layouts) == len(fresh._indexes._routers) == 1
    del request
    gc.collect()
    assert [ref() for ref in entries] == [None] * len(entries)


def test_tools_arrays_are_keyed_by_content_and_reader() -> None:
    from types import MappingProxyType

    from toolgate.gateway.indexes import digest as _digest

    tools = chat_tools()
    assert _digest(tools, "openai") == _digest(copy.deepcopy(tools), "openai")
    assert _digest(tools, "openai") != _digest(tools, "anthropic")  # read another way
    changed = copy.deepcopy(tools)
    changed[3]["function"]["description"] += " "
    assert _digest(changed, "openai") != _digest(tools, "openai")
    assert _digest([1], "openai") != _digest([1.0], "openai") != _digest([True], "openai")
    # JSON text writes NaN and the infinities as null, and has no 65-bit integers.
    keys = {_digest([value], "openai") for value in (None, math.nan, math.inf, -math.inf)}
    assert len(keys) == 4
    assert _digest([2**70], "openai") != _digest([2**70 + 1], "openai")
    assert _digest(["null"], "openai") != _digest([None], "openai")
    # Many "null"s in strings before a null value: the value is still told from NaN's null.
    words = [{"type": "null"}] * 100
    assert _digest([*words, None], "openai") != _digest([*words, math.nan], "openai")
    assert _digest(None, "openai") != _digest(math.nan, "openai")
    # A client library's own mapping type is keyed by its content, not by its address.
    proxied = [MappingProxyType(tool) for tool in tools]
    assert _digest(proxied, "openai") == _digest(tools, "openai")
    other = [MappingProxyType(tool) for tool in changed]
    assert _digest(other, "openai") != _digest(proxied, "openai")

    class Opaque:  # no JSON form: no key, so never a cached router that is not its own
        pass

    assert _digest([*tools, {"type": "custom", "handle": Opaque()}], "openai") is None

    @dataclasses.dataclass
    class Declared:  # read as an object, not as the dict its fields would make
        type: str = "function"

    assert _digest([Declared()], "openai") is None


class _Frozen(Mapping[str, Any]):
    """A client library's own mapping type: its repr is the default one, with an address."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_mapping_tools_get_their_own_router_each(gate: ToolFilter) -> None:
    from toolgate.gateway.indexes import digest as _digest

    keys = set()
    for n, (name, _, _) in enumerate(SPECS[:4]):
        one = [_Frozen(chat_tools()[n])]
        key = _digest(one, "openai")
        assert key is not None
        keys.add(key)
        forced = {"type": "function", "function": {"name": name}}
        request = {**chat_request(), "tools": one, "tool_choice": forced}
        assert gate.filter(request, top_k=1).kept == (name,)
    assert len(keys) == 4


def test_str_enums_from_a_model_dump_are_keyed_as_their_values() -> None:
    import enum

    from toolgate.gateway.indexes import digest as _digest

    class Kind(str, enum.Enum):
        OBJECT = "object"

    dumped = chat_tools()
    for tool in dumped:
        tool["function"]["parameters"]["type"] = Kind.OBJECT
    assert _digest(dumped, "openai") == _digest(chat_tools(), "openai")


def test_the_same_array_read_as_another_provider_is_read_again(gate: ToolFilter) -> None:
    declarations = [{"functionDeclarations": gemini_declarations()[:4]}]
    gemini_request = {"contents": [{"role": "user", "parts": [{"text": WEATHER}]}]}
    assert gate.filter({**gemini_request, "tools": declarations}, top_k=1).kept
    anthropic_request = {"messages": [{"role": "user", "content": WEATHER}], "tools": declarations}
    with pytest.raises(CatalogError, match=r"tools\[0\]"):
        gate.filter(anthropic_request, top_k=1)


def test_a_failed_build_leaves_no_lock_behind(gate: ToolFilter) -> None:
    for n in range(5):
        tools = chat_tools()
        tools[2] = {"type": "function", "function": {"description": f"no name {n}"}}
        with pytest.raises(CatalogError):
            gate.filter({**chat_request(), "tools": tools})
    assert gate._indexes._building == {}


def test_a_request_that_will_not_wait_for_a_build_gets_a_toolgate_error(
    embedder: Embedder,
) -> None:
    """IndexInProgress is in toolgate's error tree (``except ToolgateError`` sees it), and
    once the build it names ends the same request is filtered as the builder's was."""
    import threading
    import time

    from tests.gateway.conftest import CountingEmbedder
    from toolgate import ToolgateError
    from toolgate.gateway import IndexInProgress

    release = threading.Event()
    held = CountingEmbedder(embedder, hold=release)  # the first build waits for it
    gate = ToolFilter(embedder=held, cache=None)  # type: ignore[arg-type]
    with ThreadPoolExecutor(1) as pool:
        builder = pool.submit(gate.filter, chat_request(), top_k=2)
        try:
            while held.batch_texts == 0:  # the builder is indexing now
                assert not builder.done(), builder.exception()
                time.sleep(0.01)
            with pytest.raises(ToolgateError, match="another thread is indexing") as busy:
                gate.filter(chat_request(), top_k=2, wait=False)
            assert isinstance(busy.value, IndexInProgress)
            assert not busy.value.done.done()
        finally:
            release.set()
        built = builder.result(60)
    assert busy.value.done.result(60) is None
    indexed = held.batch_texts
    again = gate.filter(chat_request(), top_k=2, wait=False)
    assert (again.kept, again.request) == (built.kept, built.request)
    assert held.batch_texts == indexed  # the builder's index, not a second build


def test_a_chat_request_with_only_custom_tools_is_left_as_chat(gate: ToolFilter) -> None:
    custom = {"type": "custom", "custom": {"name": "run_sql", "description": "Free-form SQL."}}
    filtered = gate.filter({**chat_request(), "tools": [custom]}, top_k=1)
    assert filtered.provider == "openai"
    assert filtered.request["tools"] == [custom]  # not a function tool: never routed, kept


def test_unreadable_tools_are_errors_or_kept_as_asked(embedder: Embedder) -> None:
    tools = chat_tools()
    tools[4] = {"type": "function", "function": {"description": "no name"}}
    request = {**chat_request(), "tools": tools}
    with pytest.raises(CatalogError, match=r"tools\[4\]"):
        ToolFilter(embedder=embedder, cache=None).filter(request, top_k=1)
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    with pytest.warns(CatalogWarning, match=r"cannot index 1 of the request's tools.*tools\[4\]"):
        filtered = keeping.filter(request, top_k=1)
    assert filtered.request["tools"] == [tools[0], tools[4]]
    assert filtered.positions == (0, 4)
    assert filtered.dropped_count == 6
    again = keeping.filter(request, top_k=1)  # the cached router: no second warning
    assert again.positions == (0, 4)
    with pytest.raises(InvalidInputError, match='unreadable must be "error" or "keep"'):
        ToolFilter(unreadable="drop")  # type: ignore[arg-type]


def test_keep_mode_warns_of_a_bounded_number_of_unreadable_tools(embedder: Embedder) -> None:
    # Each was listed: a request of 5,000 nameless tools was a warning of 300 kB, written
    # to stderr (and kept in the warnings registry) for each such tools array sent.
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    nameless = {"type": "function", "function": {"description": "no name"}}
    request = {**chat_request(), "tools": [*chat_tools()[:3], *[nameless] * 5_000]}
    with pytest.warns(CatalogWarning, match="cannot index 5000 of") as caught:
        filtered = keeping.filter(request, top_k=1)
    assert len(filtered.positions) == 5_001  # all kept, as before
    message = str(caught[0].message)
    assert message.endswith("and 4,980 more")
    assert len(message) < 2_000


def _registered_warnings() -> int:
    return sum(
        len(getattr(m, "__warningregistry__", None) or ()) for m in list(sys.modules.values())
    )


def test_keep_mode_keeps_nothing_of_each_warning(embedder: Embedder) -> None:
    # Python's warnings registry keeps the text of each warning it has shown, to show it
    # once: a client sending tools arrays with a new unreadable tool each grew it by one
    # warning per request, for as long as the process ran.
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        before = _registered_warnings()
        for n in range(20):
            bad = {"type": "function", "function": {"name": f"bad_{n}", "parameters": 5}}
            keeping.filter({**chat_request(), "tools": [*chat_tools()[:3], bad]}, top_k=1)
        assert _registered_warnings() - before < 5
    assert len(caught) == 20  # each still told


def test_keep_mode_tells_unreadable_tags_on_one_line_apart(embedder: Embedder) -> None:
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    huge = "Read files. " + "More. " * 3000
    line = "".join(
        f"<toolname>{n}</toolname><tooldescription>{d}</tooldescription>"
        for n, d in [*((n, d) for n, d, _ in SPECS[:3]), ("read_file", huge)]
    )
    request = {"messages": [{"role": "user", "content": f"{line}<userq>{WEATHER}</userq>"}]}
    with pytest.warns(CatalogWarning, match="cannot index 1 of"):
        filtered = keeping.filter(request, top_k=1)
    assert filtered.kept == ("get_weather", "read_file")
    assert filtered.dropped_count == 2


def test_keep_mode_names_no_nameless_tool_and_passes_odd_declarations(
    embedder: Embedder,
) -> None:
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    tools = [*chat_tools()[:3], {"type": "function", "function": {"description": "no name"}}]
    with pytest.warns(CatalogWarning):
        filtered = keeping.filter({**chat_request(), "tools": tools}, top_k=1)
    assert filtered.kept == ("get_weather",)  # the nameless tool is kept, under no name
    assert filtered.positions == (0, 3)
    odd = [{"functionDeclarations": {"a": 1}}, {"functionDeclarations": gemini_declarations()}]
    request = {"contents": [{"role": "user", "parts": [{"text": WEATHER}]}], "tools": odd}
    with pytest.warns(CatalogWarning):
        kept = keeping.filter(request, top_k=1).request["tools"]
    assert kept[0] == odd[0]  # passed on as given, not sliced
    assert [d["name"] for d in kept[1]["functionDeclarations"]] == ["get_weather"]


def test_enum_keys_are_keyed_as_their_values() -> None:
    import enum

    from toolgate.gateway.indexes import digest as _digest

    class Key(str, enum.Enum):
        TYPE = "type"

    tools = [{Key.TYPE: "function", "function": {"name": "f"}}]
    assert _digest(tools, "openai") == _digest(
        [{"type": "function", "function": {"name": "f"}}], "openai"
    )


def test_the_callers_lists_apply_to_unreadable_and_chosen_tools(embedder: Embedder) -> None:
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    huge = {
        "type": "function",
        "function": {"name": "delete_repo", "description": "Delete. " + "More. " * 3000},
    }
    request = {**chat_request(), "tools": [*chat_tools()[:3], huge]}
    with pytest.warns(CatalogWarning):
        assert keeping.filter(request, top_k=1).kept == ("get_weather", "delete_repo")
    assert keeping.filter(request, top_k=1, deny=["delete_*"]).kept == ("get_weather",)
    assert keeping.filter(request, top_k=1, allow=["get_weather"]).kept == ("get_weather",)
    chosen = {
        **chat_request(),
        "tool_choice": {"type": "function", "function": {"name": "send_email"}},
    }
    gate = ToolFilter(embedder=embedder, cache=None)
    assert gate.filter(chosen, top_k=1).kept == ("get_weather", "send_email")
    with pytest.raises(InvalidInputError, match="names 'send_email', which the allow / deny"):
        gate.filter(chosen, top_k=1, deny=["send_*"])
    with pytest.raises(InvalidInputError, match="allow/deny pattern must be a non-empty string: 1"):
        gate.filter(chat_request(), top_k=1, allow=["get_weather", 1])  # type: ignore[list-item]
    # A generator of patterns is read once by routing and once for the choice.
    kept = gate.filter(chosen, top_k=1, deny=(p for p in ["read_*"])).kept
    assert kept == ("get_weather", "send_email")


@pytest.mark.parametrize(
    "request_",
    [
        {**chat_request(), "tool_choice": "none"},
        {"messages": [{"role": "system", "content": "Be brief."}], "tools": chat_tools()},
        {
            "messages": [{"role": "user", "content": WEATHER}],
            "tools": [*anthropic_tools()[:1], {**anthropic_tools()[2], "defer_loading": True}],
        },
        {
            "contents": [{"parts": [{"text": WEATHER}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
            "tools": [{"functionDeclarations": gemini_declarations()}],
        },
        {
            "input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}],
            "tools": responses_tools(),
        },
    ],
    ids=["tool_choice-none", "system-only", "deferred", "gemini-mode-none", "results-only"],
)
def test_the_callers_lists_hold_when_nothing_is_routed(
    gate: ToolFilter, request_: dict[str, Any]
) -> None:
    # A request that is not routed still must not offer, nor pass a call to, a denied tool.
    filtered = gate.filter(request_, deny=["send_*"])
    assert "send_email" not in str(filtered.request["tools"])
    assert "get_weather" in str(filtered.request["tools"])
    assert filtered.dropped_count == 1
    assert not gate.verify({"name": "send_email", "arguments": {}}, filtered)
    assert gate.verify({"name": "get_weather", "arguments": {}}, filtered)
    allowed = gate.filter(request_, allow=["get_weather"])
    assert not gate.verify({"name": "send_email", "arguments": {}}, allowed)
    # Tools declared where the gateway cannot read them: a shut-out name still fails.
    stored = gate.filter({"input": WEATHER, "prompt": {"id": "p"}}, deny=["send_*"])
    assert gate.verify({"name": "get_weather", "arguments": {}}, stored)
    denied = gate.verify({"name": "send_email", "arguments": {}}, stored)
    assert denied.error == "tool_not_available"


def test_a_choice_of_a_shut_out_tool_is_refused_when_nothing_is_routed(gate: ToolFilter) -> None:
    deferred = {
        "messages": [{"role": "user", "content": WEATHER}],
        "tools": [*anthropic_tools()[:3], {**anthropic_tools()[3], "defer_loading": True}],
        "tool_choice": {"type": "tool", "name": "send_email"},
    }
    with pytest.raises(InvalidInputError, match="names 'send_email', which the allow / deny"):
        gate.filter(deferred, deny=["send_*"])


def test_lists_leaving_only_deferred_tools_are_refused(gate: ToolFilter) -> None:
    # Claude Code's search tool is a plain custom tool: shut out with every other eager one,
    # the request would hold deferred tools alone, which Anthropic refuses (400, "All tools
    # have defer_loading set") in words that blame the client.
    search = {"name": "ToolSearch", "description": "Load deferred tools.", "input_schema": {}}
    deferred = [{**t, "defer_loading": True} for t in anthropic_tools()]
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": [search, *deferred]}
    with pytest.raises(InvalidInputError, match=r"loads up front \('ToolSearch'\)"):
        gate.filter(request, allow=["get_weather", "send_email"])
    kept = gate.filter(request, deny=["send_email"]).request["tools"]
    names = [t["name"] for t in deferred if t["name"] != "send_email"]
    assert [t["name"] for t in kept] == ["ToolSearch", *names]


def test_the_refusal_of_lists_leaving_only_deferred_tools_names_a_few(
    gate: ToolFilter,
) -> None:
    # The eager tools shut out are the client's, any number of them: the 400 and the log line
    # name a few and count the rest (2,000 made a message of 128 kB).
    eager = [
        {"name": f"tool_{i:04}", "description": "A tool.", "input_schema": {}} for i in range(2000)
    ]
    deferred = [{**t, "defer_loading": True} for t in anthropic_tools()]
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": [*eager, *deferred]}
    with pytest.raises(InvalidInputError) as refused:
        gate.filter(request, allow=["get_weather"])
    message = str(refused.value)
    assert "'tool_0000'" in message
    assert "and 1,995 more" in message
    assert "'tool_1999'" not in message
    assert len(message) < 1000


def test_a_hosted_tool_search_goes_with_the_last_deferred_tool(gate: ToolFilter) -> None:
    # OpenAI refuses a hosted tool_search with nothing deferred to search: once the lists
    # shut out every deferred tool, it goes too.
    eager, deferred = responses_tools()[:2], responses_tools()[2:]
    tools = [{"type": "tool_search"}, *eager, *({**t, "defer_loading": True} for t in deferred)]
    request = {"input": WEATHER, "tools": tools}
    kept = gate.filter(request, allow=["get_weather", "search_flights"]).request["tools"]
    assert kept == eager
    some = gate.filter(request, deny=["send_email"]).request["tools"]
    assert some[0] == {"type": "tool_search"}
    assert "send_email" not in str(some)
    members = [{**t, "defer_loading": True} for t in deferred]
    namespace = {"type": "namespace", "name": "mail", "description": "Mail.", "tools": members}
    grouped = gate.filter({**request, "tools": [*tools, namespace]}, allow=["get_*", "mail.*"])
    assert grouped.request["tools"][0] == {"type": "tool_search"}  # the namespace defers some
    # The lists hold for a namespace's functions: one left with none goes, and its search.
    emptied = gate.filter({**request, "tools": [*tools, namespace]}, allow=["get_*"]).request
    assert [t.get("name") for t in emptied["tools"]] == ["get_weather"]
    client = {"type": "tool_search", "execution": "client"}
    searched = gate.filter({**request, "tools": [client, *tools[1:]]}, allow=["get_*"]).request
    assert searched["tools"][0] == client  # the client searches what it likes


def test_a_tool_choice_naming_a_dropped_tool_search_is_refused(gate: ToolFilter) -> None:
    # The hosted tool_search goes with the last deferred tool; a tool choice naming it would
    # then name a tool the request no longer holds, which OpenAI refuses: say so instead.
    eager, deferred = responses_tools()[:2], responses_tools()[2:]
    tools = [{"type": "tool_search"}, *eager, *({**t, "defer_loading": True} for t in deferred)]
    search = {"type": "tool_search"}
    weather = {"type": "function", "name": "get_weather"}
    for choice in (
        {"type": "allowed_tools", "mode": "required", "tools": [search]},
        {"type": "allowed_tools", "mode": "auto", "tools": [search, weather]},
        search,
    ):
        request = {"input": WEATHER, "tools": tools, "tool_choice": choice}
        with pytest.raises(InvalidInputError, match="tool choice names the hosted tool_search"):
            gate.filter(request, allow=["get_weather", "search_flights"])
        # While a deferred tool is left, the search and the choice stay as they were.
        kept = gate.filter(request, deny=["send_email"]).request
        assert kept["tools"][0] == search
        assert kept["tool_choice"] == choice


def test_the_callers_lists_hold_for_legacy_functions(gate: ToolFilter) -> None:
    # OpenAI Chat's legacy "functions" are offered too: a denied one must not be.
    functions = [
        {"name": "drop_database", "description": "Drops a database.", "parameters": {}},
        {"name": "read_file", "description": "Reads a file.", "parameters": {}},
    ]
    request = {"messages": [{"role": "user", "content": "wipe prod"}], "functions": functions}
    filtered = gate.filter(request, deny=["drop_*"], shape="openai")
    assert filtered.request["functions"] == functions[1:]
    assert filtered.dropped_count == 1
    assert not gate.verify({"name": "drop_database", "arguments": "{}"}, filtered)
    assert gate.verify({"name": "read_file", "arguments": "{}"}, filtered)
    none_left = gate.filter({**request, "function_call": "auto"}, deny=["*"], shape="openai")
    assert "functions" not in none_left.request
    assert "function_call" not in none_left.request
    assert none_left.dropped_count == 2
    forced = {**request, "function_call": {"name": "drop_database"}}
    with pytest.raises(InvalidInputError, match="names 'drop_database', which the allow / deny"):
        gate.filter(forced, deny=["drop_*"], shape="openai")
    kept = gate.filter(forced, deny=["read_*"], shape="openai").request
    assert kept["function_call"] == {"name": "drop_database"}
    assert kept["functions"] == functions[:1]


def test_the_callers_lists_hold_for_legacy_functions_beside_routed_tools(
    gate: ToolFilter,
) -> None:
    functions = [
        {"name": "drop_database", "description": "Drops a database.", "parameters": {}},
        {"name": "read_file", "description": "Reads a file.", "parameters": {}},
    ]
    request = {**chat_request("what's the weather in Paris?"), "functions": functions}
    filtered = gate.filter(request, deny=["drop_*"], top_k=1)
    assert filtered.kept  # the tools were routed
    assert filtered.request["functions"] == functions[1:]


def test_a_call_to_a_legacy_function_sent_beside_routed_tools_passes(gate: ToolFilter) -> None:
    # The legacy functions go unrouted: a call to one the request still sent passes, as on a
    # request not routed; a shut-out one does not.
    functions = [
        {"name": "drop_database", "description": "Drops a database.", "parameters": {}},
        {"name": "lookup_order", "description": "Looks an order up.", "parameters": {}},
    ]
    request = {**chat_request(), "functions": functions}
    filtered = gate.filter(request, deny=["drop_*"], top_k=1)
    assert filtered.kept == ("get_weather",)
    call = {"function_call": {"name": "lookup_order", "arguments": "{}"}}
    assert gate.verify(call, filtered).ok
    assert gate.verify({"function_call": {"name": "drop_database"}}, filtered).error


@pytest.mark.parametrize("routed", [True, False])
def test_a_call_to_a_shut_out_tool_or_legacy_function_is_not_available(
    gate: ToolFilter, routed: bool
) -> None:
    # The request had the tool, the lists took it out: the same verdict whether it was
    # routed or not, a tools entry or a legacy function; a name it never had is unknown.
    functions = [
        {"name": "drop_database", "description": "Drops a database.", "parameters": {}},
        {"name": "lookup_order", "description": "Looks an order up.", "parameters": {}},
    ]
    request = {**chat_request(), "functions": functions}
    if not routed:
        request["tool_choice"] = "none"  # nothing to route: every tool goes, but the shut
    filtered = gate.filter(request, deny=["drop_*", "book_*"], top_k=1)
    assert bool(filtered.kept) == routed
    for name in ("drop_database", "book_hotel"):
        verdict = gate.verify({"name": name, "arguments": "{}"}, filtered)
        assert (name, verdict.error) == (name, "tool_not_available")
        assert "is not available" in verdict.message
    assert gate.verify({"name": "drop_tables", "arguments": "{}"}, filtered).error == (
        "unknown_tool"
    )


# A generated schema: a title on every property, a null default, a padded description.
GENERATED = {
    "type": "object",
    "title": "get_weatherArguments",
    "properties": {
        "city": {"type": "string", "title": "City", "description": "  The  city.  "},
        "units": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    },
    "required": ["city"],
    "additionalProperties": False,
}
COMPACT = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city."},
        "units": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["city"],
}


def _weather_first(tools: list[dict[str, Any]], generated: dict[str, Any]) -> list[dict[str, Any]]:
    tools[0] = {**tools[0], **generated}
    return tools


def test_kept_tools_are_compacted_in_every_shape_unless_told_not_to(
    gate: ToolFilter, embedder: Embedder
) -> None:
    chat = chat_tools()
    chat[0]["function"] = {**chat[0]["function"], "parameters": GENERATED}
    request = chat_request(WEATHER, tools=chat)
    filtered = gate.filter(request, top_k=2)
    sent = {t["function"]["name"]: t["function"] for t in filtered.request["tools"]}
    assert sent["get_weather"]["parameters"] == COMPACT
    assert request["tools"][0]["function"]["parameters"] == GENERATED  # not modified

    anthropic = _weather_first(anthropic_tools(), {"input_schema": GENERATED})
    anthropic[0]["cache_control"] = {"type": "ephemeral"}
    message = {"role": "user", "content": WEATHER}
    claude = {"model": "claude", "max_tokens": 9, "messages": [message], "tools": anthropic}
    kept = gate.filter(claude, top_k=2).request["tools"]
    weather = next(t for t in kept if t["name"] == "get_weather")
    assert weather["input_schema"] == {**COMPACT, "additionalProperties": False}
    assert weather["cache_control"] == {"type": "ephemeral"}

    plain = ToolFilter(embedder=embedder, cache=None, compact=False)
    as_given = plain.filter(request, top_k=2).request["tools"]
    assert as_given[0] is request["tools"][0]


def test_a_tools_array_is_compacted_once_and_each_request_gets_its_own_copy(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.gateway import layouts

    gate = ToolFilter(embedder=embedder, cache=None)  # its own: no array seen before
    walked: list[str] = []
    compact = layouts.compact_entry

    def counting(entry: Any, provider: str) -> Any:
        walked.append(entry["function"]["name"])
        return compact(entry, provider)

    monkeypatch.setattr(layouts, "compact_entry", counting)
    chat = chat_tools()
    chat[0]["function"] = {**chat[0]["function"], "parameters": GENERATED}
    first = gate.filter(chat_request(WEATHER, tools=chat), top_k=2)
    assert sorted(walked) == sorted(first.kept)
    first.request["tools"][0]["function"]["parameters"]["properties"].clear()
    again = gate.filter(chat_request(WEATHER, tools=copy.deepcopy(chat)), top_k=2)
    assert sorted(walked) == sorted(first.kept)  # the same array: nothing walked again
    sent = {t["function"]["name"]: t["function"] for t in again.request["tools"]}
    assert sent["get_weather"]["parameters"] == COMPACT  # not what the first caller changed


def test_a_request_that_needs_no_tool_is_sent_without_tools(gate: ToolFilter) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "🙂"}]}
    filtered = gate.filter({**request, "tools": chat_tools()})
    assert filtered.no_tool
    assert filtered.kept == ()
    assert "tools" not in filtered.request  # providers refuse an empty tools array
    assert filtered.to_dict()["no_tool"] is True
    chosen = {"type": "function", "function": {"name": "read_file"}}
    forced = gate.filter({**request, "tools": chat_tools(), "tool_choice": chosen})
    assert forced.no_tool
    assert forced.kept == ("read_file",)  # the tool choice still wins
    asked = gate.filter(
        {**request, "messages": [{"role": "user", "content": WEATHER}], "tools": chat_tools()}
    )
    assert not asked.no_tool
    assert "get_weather" in asked.kept


CHIT_CHAT = [{"role": "user", "content": "🙂"}]


@pytest.mark.parametrize(
    ("request_", "kept_key"),
    [
        ({"messages": CHIT_CHAT, "tools": chat_tools(), "tool_choice": "required"}, "tools"),
        ({"messages": CHIT_CHAT, "tools": anthropic_tools(), "tool_choice": {"type": "any"}},
         "tools"),
        ({"contents": [{"role": "user", "parts": [{"text": "🙂"}]}],
          "tools": [{"functionDeclarations": gemini_declarations()}],
          "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}, "tools"),
        ({"input": "🙂", "tools": responses_tools(), "tool_choice": {
            "type": "allowed_tools", "mode": "required",
            "tools": [{"type": "function", "name": "read_file"}]}}, "tools"),
    ],
)  # fmt: skip
def test_a_request_that_requires_a_call_keeps_tools(
    gate: ToolFilter, request_: dict[str, Any], kept_key: str
) -> None:
    filtered = gate.filter(request_, top_k=3)
    assert not filtered.no_tool  # the client asked for a call: "no tool" is not an answer
    assert filtered.kept
    assert filtered.request[kept_key]
    choice_key = "toolConfig" if "toolConfig" in request_ else "tool_choice"
    assert filtered.request[choice_key] == request_[choice_key]
    bare = gate.filter(_without(request_, "tool_choice", "toolConfig"), top_k=3)
    assert bare.no_tool
    assert not bare.kept


@pytest.mark.parametrize("spelling", ["camel", "snake"])
def test_a_gemini_request_left_with_built_in_tools_alone_loses_its_function_config(
    gate: ToolFilter, spelling: str
) -> None:
    # The Gemini API and Vertex AI refuse a function calling config beside no function
    # declarations: "Function calling config is set without function_declarations".
    config, calling = (
        ("toolConfig", "functionCallingConfig") if spelling == "camel"
        else ("tool_config", "function_calling_config")
    )  # fmt: skip
    request = {
        "contents": [{"role": "user", "parts": [{"text": "🙂"}]}],
        "tools": [{"googleSearch": {}}, {"functionDeclarations": gemini_declarations()}],
        config: {calling: {"mode": "AUTO"}, "retrievalConfig": {"languageCode": "en"}},
    }
    chatting = gate.filter(request, top_k=3)
    assert chatting.no_tool
    assert chatting.request["tools"] == [{"googleSearch": {}}]
    assert chatting.request[config] == {"retrievalConfig": {"languageCode": "en"}}  # kept
    denied = gate.filter({**request, config: {calling: {"mode": "AUTO"}}}, deny=["*"])
    assert denied.request["tools"] == [{"googleSearch": {}}]
    assert config not in denied.request  # nothing else in it: it goes
    routed = gate.filter({**request, "contents": [{"role": "user", "parts": [{"text": WEATHER}]}]})
    assert "get_weather" in routed.kept
    assert routed.request[config] == request[config]  # a function still declared: untouched


def test_a_required_call_that_routing_leaves_no_tool_for_is_refused(gate: ToolFilter) -> None:
    request = {"messages": CHIT_CHAT, "tools": chat_tools(), "tool_choice": "required"}
    with pytest.raises(InvalidInputError, match="requires a tool call, but routing kept none"):
        gate.filter(request, deny=["*"])


def test_a_required_call_among_tools_routing_never_drops_is_not_refused(gate: ToolFilter) -> None:
    # allowed_tools may limit a required call to an MCP server, a custom or a built-in tool:
    # routing keeps those whatever it keeps of the function tools, so the call can be made.
    grammar = {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}}
    mcp = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"}
    custom = {"type": "custom", "name": "run_sql", "format": grammar}
    tools = [*responses_tools(), mcp, custom]
    for allowed in ([{"type": "mcp", "server_label": "deepwiki"}], [{"type": "image_generation"}],
                    [{"type": "custom", "name": "run_sql"}]):  # fmt: skip
        choice = {"type": "allowed_tools", "mode": "required", "tools": allowed}
        request = {"input": CHIT_CHAT, "tools": tools, "tool_choice": choice}
        filtered = gate.filter(request, deny=["*"])
        assert filtered.kept == ()
        assert filtered.request["tools"] == [mcp, custom]
        assert filtered.request["tool_choice"] == choice
    chat_custom = {"type": "custom", "custom": {"name": "run_sql", "format": grammar}}
    listed = [{"type": "custom", "custom": {"name": "run_sql"}}]
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": listed}}
    chat = {"messages": CHIT_CHAT, "tools": [*chat_tools(), chat_custom], "tool_choice": choice}
    assert gate.filter(chat, deny=["*"]).request["tools"] == [chat_custom]
    # Any tool allowed, the request left with no function tool is still refused.
    with pytest.raises(InvalidInputError, match="requires a tool call, but routing kept none"):
        gate.filter({"input": CHIT_CHAT, "tools": tools, "tool_choice": "required"}, deny=["*"])


def test_a_conversation_that_called_tools_keeps_them_when_routing_keeps_none(
    gate: ToolFilter,
) -> None:
    messages = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Lisbon"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
            {"type": "text", "text": "🙂"}]},
    ]  # fmt: skip
    # A floor no tool passes, as a "no tool needed" answer or a strict threshold leaves it.
    filtered = gate.filter({"messages": messages, "tools": anthropic_tools()}, threshold=0.99)
    assert filtered.result.ids == []
    # Anthropic refuses tool_use blocks with no tools: the one called stays declared.
    assert filtered.kept == ("get_weather",)
    assert [t["name"] for t in filtered.request["tools"]] == ["get_weather"]
    chat = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {"role": "user", "content": "🙂"},
    ]  # fmt: skip
    chat_request_ = {"messages": chat, "tools": chat_tools()}
    assert gate.filter(chat_request_, threshold=0.99).kept == ("get_weather",)
    denied = gate.filter(
        {"messages": messages, "tools": anthropic_tools()}, threshold=0.99, deny=["get_*"]
    )
    assert denied.kept == ()
    assert "tools" not in denied.request


def test_odd_names_and_keys_are_refused_or_passed_over_not_crashed_on(gate: ToolFilter) -> None:
    odd_builtin = {"type": "web_search_20250305", "name": ["not", "a", "name"]}
    filtered = gate.filter({"messages": [{"role": "user", "content": WEATHER}],
                            "tools": [*anthropic_tools(), odd_builtin]}, top_k=2)  # fmt: skip
    assert odd_builtin in filtered.request["tools"]  # a provider-side tool is kept as given
    with pytest.raises(InvalidInputError, match=r"got keys \['1', 'model'\]"):
        gate.filter({1: "x", "model": "m"})  # type: ignore[dict-item]


def test_calls_to_tools_declared_out_of_the_tools_array_are_checked_or_let_through(
    gate: ToolFilter,
) -> None:
    legacy = {"messages": [{"role": "user", "content": WEATHER}], "functions": [
        {"name": "get_weather", "parameters": _schema(["city"])}]}  # fmt: skip
    filtered = gate.filter(legacy)
    assert gate.verify({"function_call": {"name": "get_weather", "arguments": "{}"}}, filtered)
    wrong = gate.verify({"function_call": {"name": "send_email", "arguments": "{}"}}, filtered)
    assert wrong.error == "unknown_tool"
    # Tools held in a cached content or a stored prompt: the gateway cannot see them.
    for elsewhere in (
        {"contents": [{"role": "user", "parts": [{"text": WEATHER}]}], "cachedContent": "c/1"},
        {"input": WEATHER, "prompt": {"id": "pmpt_1"}},
    ):
        unseen = gate.filter(elsewhere)
        assert gate.verify({"name": "get_weather", "args": {}}, unseen)
        assert gate.verify({"args": {}}, unseen).error == "malformed_call"
    plain = gate.filter({"input": WEATHER})  # no tools anywhere: a call is to no tool
    assert gate.verify({"name": "get_weather", "arguments": {}}, plain).error == "unknown_tool"


def test_the_endpoints_shape_reads_a_body_that_does_not_tell_its_own(gate: ToolFilter) -> None:
    # A Responses request may take its whole conversation from a stored prompt: no input.
    stored = {"model": "m", "prompt": {"id": "pmpt_1", "variables": {"city": "Lisbon"}}}
    filtered = gate.filter(stored, shape="openai-responses")
    assert filtered.request == stored
    assert (filtered.provider, filtered.result.form) == ("openai-responses", "none")
    with_tools = {**stored, "tools": responses_tools()}
    filtered = gate.filter(with_tools, shape="openai-responses", deny=["send_*"])
    assert len(filtered.request["tools"]) == len(SPECS) - 1  # nothing to route on
    # A Chat body without Chat tools is no Anthropic one on a Chat endpoint.
    chat = {"messages": [{"role": "user", "content": WEATHER}]}
    assert gate.filter(chat).provider == "anthropic"
    assert gate.filter(chat, shape="openai").provider == "openai"
    with pytest.raises(InvalidInputError, match="expected an OpenAI Chat"):
        gate.filter({"prompt": {"id": "p"}}, shape="openai")
    with pytest.raises(InvalidInputError, match="shape must be one of"):
        gate.filter(chat, shape="bedrock")


@pytest.mark.parametrize(
    "text",
    [
        "Explain what the <toolname> element means in this prompt format.",
        "Why does <toolname>foo</toolname> break my XML parser?",
        "Compare <toolname>a</toolname><tooldescription>A thing.</tooldescription> with "
        "<toolname>b</toolname>, which has none.",
    ],
)
def test_words_that_mention_a_tag_are_not_a_tag_catalog(gate: ToolFilter, text: str) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    filtered = gate.filter(request)
    assert filtered.provider != "text_tags"
    assert filtered.request == request  # forwarded as written


def test_a_custom_tool_call_is_checked_by_name_routed_or_not(gate: ToolFilter) -> None:
    # A custom tool's input is free text: a call to one the request never had is an unknown
    # tool (what enforce blocks), not a malformed call, whether the request was routed or not.
    custom = {"type": "custom", "custom": {"name": "run_sql", "description": "Run SQL."}}
    request = chat_request(tools=[*chat_tools(), custom])
    sent = {"id": "c1", "type": "custom", "custom": {"name": "run_sql", "input": "select 1"}}
    stray = {"id": "c2", "type": "custom", "custom": {"name": "rm_rf", "input": "/"}}
    unrouted = gate.filter({**request, "tool_choice": "none"})
    for filtered in (gate.filter(request, top_k=1), unrouted):
        assert gate.verify(sent, filtered).ok
        assert gate.verify(stray, filtered).error == "unknown_tool"


def test_a_tool_choice_of_none_is_not_dropped_while_mcp_servers_offer_tools(
    gate: ToolFilter,
) -> None:
    # Anthropic's first MCP connector declares its tools in mcp_servers, not in the tools, and
    # refuses a tool choice without tools: when the lists leave no tool entry, dropping a
    # choice of none would let the model call the servers' tools the client shut off.
    servers = [{"type": "url", "url": "https://wiki.example/mcp", "name": "wiki"}]
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": anthropic_tools(),
               "mcp_servers": servers, "tool_choice": {"type": "none"}}  # fmt: skip
    with pytest.raises(InvalidInputError, match="mcp_servers"):
        gate.filter(request, deny=["*"])
    # A server whose tools are off offers none: the choice goes with the tools, as usual.
    off = [{**servers[0], "tool_configuration": {"enabled": False}}]
    filtered = gate.filter({**request, "mcp_servers": off}, deny=["*"])
    assert "tool_choice" not in filtered.request
    assert "tools" not in filtered.request
    # An auto choice means the same dropped: it goes, and so does plain tools' none.
    auto = gate.filter({**request, "tool_choice": {"type": "auto"}}, deny=["*"])
    assert "tool_choice" not in auto.request
    assert "tool_choice" not in gate.filter(_without(request, "mcp_servers"), deny=["*"]).request


def test_a_required_choice_is_refused_when_the_lists_shut_out_an_unrouted_requests_tools(
    gate: ToolFilter,
) -> None:
    # As on the routed path: dropping the choice with the tools would turn a required call
    # into text. A request with no user text to route on goes unrouted.
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    anthropic = {"messages": [{"role": "user", "content": [image]}], "tools": anthropic_tools(),
                 "tool_choice": {"type": "any"}}  # fmt: skip
    chat = {"messages": [{"role": "system", "content": "Help."}], "tools": chat_tools(),
            "tool_choice": "required"}  # fmt: skip
    for request in (anthropic, chat):
        with pytest.raises(InvalidInputError, match="requires a tool call"):
            gate.filter(request, deny=["*"])
        assert gate.filter(request, deny=["send_email"]).request["tool_choice"]


def test_a_filter_and_its_results_refuse_pickling_saying_what_to_do(gate: ToolFilter) -> None:
    """A filtered request holds the router its tools were indexed into: pickling it failed
    on the index, with no word of what to send instead."""
    filtered = gate.filter(chat_request(WEATHER), top_k=2)
    for bound, hint in [(gate, "ToolFilter("), (filtered, "filtered.request")]:
        name = type(bound).__name__
        said = rf"^cannot pickle or deep-copy a toolgate {name}: .*{re.escape(hint)}"
        for copied in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError, match=said):
                copied(bound)
    # What it names does travel.
    assert pickle.loads(pickle.dumps(filtered.request)) == filtered.request
    assert pickle.loads(pickle.dumps(filtered.result)) == filtered.result
    assert copy.copy(filtered) == filtered


def test_a_filter_routes_as_the_saved_router_whose_config_it_is_given(tmp_path: Path) -> None:
    """docs/api.md: ``ToolFilter(config=Router.open(dir).config)`` carries what ``toolgate
    calibrate --save dir`` fitted (the LangChain middleware through ``tool_filter=``),
    row centring, a build setting, included."""
    fitted = dataclasses.replace(
        RouterConfig(), alpha=0.2, threshold=0.2, row_centring=0.75, name_weight=0.6,
        no_tool_threshold=0.3,
    )  # fmt: skip
    Router.from_tools(chat_tools(), config=fitted).save(tmp_path / "fitted")
    saved = Router.open(tmp_path / "fitted")
    gate, plain = ToolFilter(config=saved.config), ToolFilter()
    differs = False
    for query in (WEATHER, TRIP, "thanks, that is all", "convert 20 euros and translate hello"):
        filtered = gate.filter(chat_request(query), top_k=3)
        routed = saved.route(query, top_k=3)
        assert set(filtered.kept) == {saved.catalog[i].name for i in routed.ids}
        assert filtered.no_tool == routed.no_tool
        default = plain.filter(chat_request(query), top_k=3)
        differs |= (filtered.kept, filtered.no_tool) != (default.kept, default.no_tool)
    assert differs
