"""verify and ToolFilter with the SDKs' own objects, as a new user hands them over."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import ToolUseBlock
from google.genai import types
from openai.types.chat import ChatCompletionMessageCustomToolCall, ChatCompletionMessageToolCall
from openai.types.responses import ResponseCustomToolCall, ResponseFunctionToolCall

from tests.gateway.test_filter import SPECS, WEATHER, anthropic_tools, chat_tools, responses_tools
from toolgate import InvalidInputError
from toolgate.embedding.embedder import Embedder
from toolgate.formats.calls import parse_tool_call
from toolgate.gateway.filter import ToolFilter


def _sdk_calls(name: str, city: Any) -> list[Any]:
    arguments = f'{{"city": {city!r}}}'.replace("'", '"')
    return [
        ChatCompletionMessageToolCall(
            id="call_1", type="function", function={"name": name, "arguments": arguments}
        ),
        ResponseFunctionToolCall(
            type="function_call", call_id="call_1", name=name, arguments=arguments
        ),
        ToolUseBlock(type="tool_use", id="toolu_1", name=name, input={"city": city}),
        types.FunctionCall(id="call_1", name=name, args={"city": city}),
        types.Part(function_call=types.FunctionCall(name=name, args={"city": city})),
    ]


@pytest.mark.parametrize("index", range(5))
def test_sdk_call_objects_parse_as_their_json(index: int) -> None:
    call = parse_tool_call(_sdk_calls("get_weather", "Lisbon")[index])
    assert (call.name, call.arguments, call.problem) == ("get_weather", {"city": "Lisbon"}, None)


@pytest.fixture(scope="module")
def tool_filter(embedder: Embedder) -> ToolFilter:
    return ToolFilter(embedder=embedder, cache=None)


def test_tool_filter_verify_takes_sdk_objects(tool_filter: ToolFilter) -> None:
    request = {"messages": [{"role": "user", "content": WEATHER}], "tools": chat_tools()}
    filtered = tool_filter.filter(request, top_k=2)
    assert "get_weather" in filtered.kept
    assert "send_email" not in filtered.kept
    for call in _sdk_calls("get_weather", "Lisbon"):
        assert tool_filter.verify(call, filtered).ok, call
    for call in _sdk_calls("send_email", "Lisbon"):
        assert tool_filter.verify(call, filtered).error == "tool_not_available"
    for call in _sdk_calls("get_weather", 5):
        assert tool_filter.verify(call, filtered).error == "invalid_arguments"
    assert tool_filter.verify({"name": "nope", "arguments": {}}, filtered).error == "unknown_tool"
    with pytest.raises(InvalidInputError, match=r"what ToolFilter\.filter returned"):
        tool_filter.verify({"name": "get_weather"}, request)  # type: ignore[arg-type]


def test_verify_when_nothing_was_routed_goes_by_name(tool_filter: ToolFilter) -> None:
    request = {"messages": [{"role": "system", "content": "hi"}], "tools": chat_tools()}
    filtered = tool_filter.filter(request, top_k=2)
    assert filtered.result.form == "none"
    assert tool_filter.verify(_sdk_calls("send_email", "x")[0], filtered).ok
    verdict = tool_filter.verify({"name": "send_emial", "arguments": "{}"}, filtered)
    assert (verdict.error, verdict.closest) == ("unknown_tool", "send_email")


def _declarations() -> list[types.FunctionDeclaration]:
    return [types.FunctionDeclaration(name=n, description=d) for n, d, _ in SPECS]


def test_tool_filter_takes_google_genai_request_objects(tool_filter: ToolFilter) -> None:
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=_declarations())], temperature=0.2,
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
            mode="ANY", allowed_function_names=["translate_text"])),
    )  # fmt: skip
    # generate_content's keyword arguments, with SDK objects inside, come back in kind.
    for contents in (WEATHER, [types.Content(role="user", parts=[types.Part(text=WEATHER)])]):
        request = {"model": "gemini-x", "contents": contents, "config": config}
        filtered = tool_filter.filter(request, top_k=2)
        out = filtered.request
        assert out["model"] == "gemini-x"
        assert out["contents"] is contents
        assert isinstance(out["config"], types.GenerateContentConfig)
        names = [d.name for d in out["config"].tools[0].function_declarations]
        assert "get_weather" in names
        assert "translate_text" in names
        assert len(names) == 3
        assert out["config"].temperature == 0.2
        assert out["config"].tool_config.function_calling_config.mode == "ANY"
        assert tool_filter.verify(types.FunctionCall(name="get_weather", args={}), filtered).ok
    as_dicts = tool_filter.filter({**request, "config": config.model_dump()}, top_k=2).request
    assert isinstance(as_dicts["config"], dict)


def get_weather(city: str) -> str:
    """Get the current weather and a 7-day forecast for a city."""
    return f"sunny in {city}"


def send_email(to: str, subject: str) -> str:
    """Send an email to a recipient with a subject and a body."""
    return f"sent to {to}"


def read_file(path: str) -> str:
    """Read a text file from the local disk."""
    return path


def _contents_forms() -> list[Any]:
    return [WEATHER, [types.Content(role="user", parts=[types.Part(text=WEATHER)])]]


@pytest.mark.parametrize("form", range(2))
def test_python_functions_in_config_tools_are_routed_and_come_back(
    tool_filter: ToolFilter, form: int
) -> None:
    # google-genai's automatic function calling: config.tools holds the functions themselves.
    config = types.GenerateContentConfig(tools=[send_email, get_weather, read_file])
    request = {"model": "gemini-x", "contents": _contents_forms()[form], "config": config}
    filtered = tool_filter.filter(request, top_k=1)
    assert filtered.kept == ("get_weather",)
    (kept,) = filtered.request["config"].tools
    assert kept is get_weather  # the SDK runs the very function it is given
    wrong = types.FunctionCall(name="get_weather", args={"town": "Lisbon"})
    assert tool_filter.verify(wrong, filtered).error == "invalid_arguments"
    left_out = types.FunctionCall(name="read_file", args={"path": "a"})
    assert tool_filter.verify(left_out, filtered).error == "tool_not_available"


def test_functions_beside_tool_objects_keep_their_kinds(tool_filter: ToolFilter) -> None:
    declared = types.Tool(function_declarations=_declarations()[1:])  # all but get_weather
    for config in (
        types.GenerateContentConfig(tools=[get_weather, declared]),
        {"tools": [get_weather, declared.model_dump(by_alias=True, exclude_none=True)]},
    ):
        request = {"model": "gemini-x", "contents": WEATHER, "config": config}
        filtered = tool_filter.filter(request, top_k=1, include=["send_email"])
        assert set(filtered.kept) == {"get_weather", "send_email"}
        out = filtered.request["config"]
        tools = out["tools"] if isinstance(out, dict) else out.tools
        assert tools[0] is get_weather
        declared_kept = types.Tool.model_validate(tools[1]).function_declarations or []
        assert [d.name for d in declared_kept] == ["send_email"]


def test_unrouted_functions_come_back_as_given(tool_filter: ToolFilter) -> None:
    config = types.GenerateContentConfig(tools=[get_weather, read_file])
    image_only = [types.Content(role="user", parts=[types.Part(inline_data=types.Blob(
        mime_type="image/png", data=b"x"))])]  # fmt: skip
    request = {"model": "gemini-x", "contents": image_only, "config": config}
    out = tool_filter.filter(request, top_k=1).request["config"].tools
    assert out == [get_weather, read_file]


class _Callable:
    def __call__(self, city: str) -> str:
        return city


def test_a_tool_google_genai_cannot_declare_is_refused_by_name(tool_filter: ToolFilter) -> None:
    config = types.GenerateContentConfig(tools=[get_weather, _Callable()])
    request = {"model": "gemini-x", "contents": WEATHER, "config": config}
    with pytest.raises(InvalidInputError, match=r"config\.tools\[1\] is a _Callable"):
        tool_filter.filter(request, top_k=1)


_GRAMMAR = {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}}


def test_calls_to_the_tools_sent_that_are_no_function_tools_pass(tool_filter: ToolFilter) -> None:
    # Anthropic's client tools and OpenAI's custom tools are the application's to run, but
    # routing leaves them alone and their input is no JSON object of a schema of theirs.
    client_tools = [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1024,
         "display_height_px": 768},
        {"type": "memory_20250818", "name": "memory"},
    ]  # fmt: skip
    messages = [{"role": "user", "content": WEATHER}]
    request = {"messages": messages, "tools": [*anthropic_tools(), *client_tools]}
    routed = tool_filter.filter(request, top_k=2)
    unrouted = tool_filter.filter({**request, "tool_choice": {"type": "none"}})
    assert routed.result.form == "text"
    assert unrouted.result.form == "none"
    for filtered in (routed, unrouted):
        for tool in client_tools:
            call = ToolUseBlock(type="tool_use", id="toolu_1", name=tool["name"], input={})
            verdict = tool_filter.verify(call, filtered)
            assert (verdict.ok, verdict.name, verdict.call_id) == (True, tool["name"], "toolu_1")
    bash = ToolUseBlock(type="tool_use", id="toolu_1", name="bash", input={"command": "ls"})
    alone = tool_filter.filter({"messages": messages, "tools": anthropic_tools()}, top_k=2)
    assert tool_filter.verify(bash, alone).error == "unknown_tool"  # not sent: not passed
    assert tool_filter.verify(_sdk_calls("send_email", "x")[2], routed).error == (
        "tool_not_available"
    )
    chat_custom = {"type": "custom", "custom": {"name": "run_sql", "format": _GRAMMAR}}
    chat = tool_filter.filter({"messages": messages, "tools": [*chat_tools(), chat_custom]})
    call = ChatCompletionMessageCustomToolCall(
        id="call_1", type="custom", custom={"name": "run_sql", "input": "select 1"}
    )
    assert tool_filter.verify(call, chat).ok
    custom = {"type": "custom", "name": "run_sql", "format": _GRAMMAR}
    responses = tool_filter.filter({"input": WEATHER, "tools": [*responses_tools(), custom]})
    item = ResponseCustomToolCall(
        type="custom_tool_call", call_id="call_1", name="run_sql", input="select 1"
    )
    assert tool_filter.verify(item, responses).ok
    assert not tool_filter.verify(
        item, tool_filter.filter({"input": WEATHER, "tools": responses_tools()})
    )


def test_a_custom_key_beside_a_plain_call_is_not_read_as_a_custom_call() -> None:
    call = parse_tool_call({"name": "get_weather", "arguments": {}, "custom": {"trace": 1}})
    assert (call.name, call.problem) == ("get_weather", None)
