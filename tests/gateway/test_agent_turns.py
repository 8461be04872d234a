"""ToolFilter across an agent's turns: tools deferred to a tool search, tools a conversation
references or is using, and turns that answer the model instead of asking."""

from __future__ import annotations

import tracemalloc
import uuid
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.conftest import SDK_CLIENTS, Served, sent_names
from tests.gateway.fake_upstream import Script
from tests.gateway.test_filter import (
    SPECS,
    TRIP,
    WEATHER,
    anthropic_tools,
    chat_tools,
    responses_tools,
)
from toolgate.embedding.embedder import Embedder
from toolgate.embedding.long_texts import PREFIX_CHARS
from toolgate.errors import CatalogWarning
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.followups import (
    MAX_ID,
    MAX_NAME,
    MAX_NAMES,
    MAX_RESPONSES,
    MAX_TOOLS,
    Recorder,
    ResponseTools,
)
from toolgate.verify import Verdict

# A client-side tool search, as Claude Code declares its own: a plain custom tool.
TOOL_SEARCH = {
    "name": "ToolSearch",
    "description": "Fetch full schema definitions for deferred tools so they can be called.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gate(embedder: Embedder) -> ToolFilter:
    return ToolFilter(embedder=embedder, cache=None)


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("name", t.get("type")) for t in tools]


def _deferred(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**tool, "defer_loading": True} for tool in tools]


def test_a_request_deferring_tools_to_a_search_goes_with_all_its_tools(gate: ToolFilter) -> None:
    # The search tool is an ordinary custom tool: routed out, the model cannot load the
    # deferred ones; and routing the deferred tools saves nothing (they are not in context).
    tools = [TOOL_SEARCH, *anthropic_tools()[:2], *_deferred(anthropic_tools()[2:])]
    request = {"messages": [{"role": "user", "content": TRIP}], "tools": tools}
    filtered = gate.filter(request, top_k=1)
    assert filtered.request["tools"] == tools
    assert filtered.dropped_count == 0
    # A call to a deferred tool the search loaded is a call to a tool the request offered.
    assert gate.verify({"type": "tool_use", "name": "book_hotel", "input": {}}, filtered)
    assert not gate.verify({"type": "tool_use", "name": "play_music", "input": {}}, filtered)


def test_a_server_side_tool_search_keeps_its_deferred_tools(gate: ToolFilter) -> None:
    # Anthropic's regex search, and OpenAI Responses' hosted one, which refuses a request
    # whose deferred tools were all removed ("requires at least one deferred tool").
    regex = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    tools = [regex, *anthropic_tools()[:3], *_deferred(anthropic_tools()[3:])]
    anthropic = {"messages": [{"role": "user", "content": TRIP}], "tools": tools}
    assert gate.filter(anthropic, top_k=1).request["tools"] == tools
    eager = [t for t in responses_tools() if t["name"] in ("get_weather", "book_hotel")]
    later = _deferred([t for t in responses_tools() if t not in eager])
    responses = {"input": TRIP, "tools": [{"type": "tool_search"}, *eager, *later]}
    filtered = gate.filter(responses, top_k=1)
    assert filtered.provider == "openai-responses"
    assert filtered.request["tools"] == responses["tools"]


def test_tools_a_tool_reference_names_are_kept(gate: ToolFilter) -> None:
    # Anthropic expands each tool_reference from the request's tools, and refuses the
    # request ("Tool reference ... not found") when the tool is not there.
    reference = {"type": "tool_reference", "tool_name": "translate_text"}
    searched = {
        "type": "tool_search_tool_result", "tool_use_id": "s1",
        "content": {"type": "tool_search_tool_search_result", "tool_references": [
            {"type": "tool_reference", "tool_name": "read_file"}]},
    }  # fmt: skip
    messages = [
        {"role": "user", "content": "Check what I have saved for my trip to Paris."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {"query": "x"}},
            searched]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [reference]}]},
        {"role": "assistant", "content": "Which dates?"},
        {"role": "user", "content": WEATHER},
    ]  # fmt: skip
    request = {"messages": messages, "tools": [TOOL_SEARCH, *anthropic_tools()]}
    filtered = gate.filter(request, top_k=1)
    assert "get_weather" in filtered.kept
    assert {"translate_text", "read_file"} <= set(filtered.kept)
    assert {"translate_text", "read_file"} <= set(_names(filtered.request["tools"]))
    denied = gate.filter(request, top_k=1, deny=["translate_*"])
    assert "translate_text" not in denied.kept  # the caller's lists still apply


REMINDER = "<system-reminder>The todo list is empty. Keep answers short.</system-reminder>"


def test_a_turn_answering_calls_routes_on_the_request_and_keeps_the_tools_in_use(
    gate: ToolFilter,
) -> None:
    # Claude Code sends its reminders beside the tool results; Gemini clients add a text
    # part beside a functionResponse. Neither is a new request: the task goes on.
    anthropic = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "translate_text", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ERROR: no such language"},
            {"type": "text", "text": REMINDER}]},
    ]  # fmt: skip
    gemini = [
        {"role": "user", "parts": [{"text": WEATHER}]},
        {"role": "model", "parts": [{"functionCall": {"name": "translate_text", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "translate_text", "response": {"error": "?"}}},
            {"text": REMINDER}]},
    ]  # fmt: skip
    declarations = [{"name": t["name"], "description": t["description"]} for t in anthropic_tools()]
    for request in (
        {"messages": anthropic, "tools": anthropic_tools()},
        {"contents": gemini, "tools": [{"functionDeclarations": declarations}]},
    ):
        filtered = gate.filter(request, top_k=1)
        assert filtered.result.query == WEATHER
        # The tool the task is using stays, though the route alone keeps another.
        assert filtered.kept == ("get_weather", "translate_text")


# Claude Code's first user message: the project's CLAUDE.md as a reminder, then the ask.
CLAUDE_MD = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following "
    "context:\n# claudeMd\nContents of /repo/CLAUDE.md (project instructions):\n\n"
    + "- Use pnpm, not npm. Run pnpm test before each commit. Open a GitHub issue for "
    "each flaky test and post the link in the team's Slack channel.\n" * 12 + "</system-reminder>\n"
)


def test_a_reminder_beside_the_users_words_is_not_routed_on(gate: ToolFilter) -> None:
    # The model reads a query's first 256 tokens: with the reminder routed on, they were all
    # CLAUDE.md, and the user's request was never read.
    first = {
        "role": "user",
        "content": [{"type": "text", "text": CLAUDE_MD}, {"type": "text", "text": WEATHER}],
    }
    filtered = gate.filter({"messages": [first], "tools": anthropic_tools()}, top_k=1)
    assert filtered.result.query == WEATHER
    assert filtered.kept == ("get_weather",)
    # Within a text block too, and a message of reminders alone asks nothing.
    inline = {"role": "user", "content": f"{WEATHER}\n{REMINDER}"}
    alone = {"role": "user", "content": [{"type": "text", "text": REMINDER}]}
    filtered = gate.filter({"messages": [inline, alone], "tools": anthropic_tools()}, top_k=1)
    assert filtered.result.query == WEATHER


def test_a_users_words_naming_the_reminder_tag_are_routed_on(gate: ToolFilter) -> None:
    # Reminders are whole elements within one block: a user block that merely names the
    # tag, before a reminder block, kept nothing past the tag (it was matched to the
    # reminder's closing tag), and the ask after it was never read.
    asks = f"Why does a <system-reminder> show up in my prompt? {WEATHER}"
    first = {"role": "user", "content": [
        {"type": "text", "text": CLAUDE_MD}, {"type": "text", "text": asks},
        {"type": "text", "text": REMINDER}]}  # fmt: skip
    filtered = gate.filter({"messages": [first], "tools": anthropic_tools()}, top_k=1)
    assert filtered.result.query == asks
    assert filtered.kept == ("get_weather",)


def test_a_user_message_after_tool_results_is_a_new_request(gate: ToolFilter) -> None:
    # OpenAI Chat answers calls in messages of their own: a user message after them asks.
    chat = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "translate_text", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": "Now book me a hotel room in Lisbon for two nights."},
    ]  # fmt: skip
    filtered = gate.filter({"messages": chat, "tools": chat_tools()}, top_k=1)
    assert filtered.result.query == chat[-1]["content"]
    assert filtered.kept == ("book_hotel",)


def test_an_enforcing_gateway_lets_the_tool_in_use_be_called_again(enforcing: Served) -> None:
    served = enforcing
    client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-client", max_retries=0)
    SDK_CLIENTS.append(client)
    messages = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "translate_text", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ERROR: try again"},
            {"type": "text", "text": REMINDER}]},
    ]  # fmt: skip
    served.fake.script.tool = "translate_text"
    answer = client.messages.create(
        model="m", max_tokens=64, messages=messages, tools=anthropic_tools()
    )
    assert answer.content[0].name == "translate_text"  # not blocked: it was sent
    assert "translate_text" in sent_names(served.fake)


def _output(call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "done"}


def test_a_follow_up_without_user_text_keeps_the_tools_it_is_told(gate: ToolFilter) -> None:
    request = {"input": [_output()], "previous_response_id": "resp_a", "tools": responses_tools()}
    everything = gate.filter(request, top_k=1)
    assert everything.request["tools"] == request["tools"]  # nothing to route on
    followed = gate.filter(request, top_k=1, previous=["translate_text", "get_weather"])
    assert followed.kept == ("get_weather", "translate_text")  # request order
    assert followed.dropped_count == len(request["tools"]) - 2
    assert gate.verify({"name": "translate_text", "arguments": "{}"}, followed)
    assert not gate.verify({"name": "read_file", "arguments": "{}"}, followed)
    asked = {**request, "input": [_output(), {"role": "user", "content": TRIP}]}
    # User text asks anew: routed on it, not on what the earlier response had.
    assert "translate_text" not in gate.filter(asked, top_k=1, previous=["translate_text"]).kept
    # So does an image alone: a new request toolgate cannot read goes with all its tools, not
    # with the few the answer it follows was sent.
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo"}
    shown = {**request, "input": [_output(), {"role": "user", "content": [image]}]}
    assert gate.filter(shown, top_k=1, previous=["translate_text"]).request == shown


def _responses_client(served: Served) -> openai.OpenAI:
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="sk-client", max_retries=0)
    SDK_CLIENTS.append(client)
    return client


@pytest.mark.parametrize("stream", [False, True])
def test_the_gateway_routes_a_follow_up_to_the_tools_of_the_response_it_follows(
    annotating: Served, stream: bool
) -> None:
    served = annotating
    client = _responses_client(served)
    first, second = f"resp_{uuid.uuid4().hex}", f"resp_{uuid.uuid4().hex}"

    def create(**options: Any) -> None:
        if not stream:
            client.responses.create(model="m", tools=responses_tools(), **options)
            return
        with client.responses.create(
            model="m", tools=responses_tools(), stream=True, **options
        ) as events:
            for _ in events:
                pass

    # The model calls a tool the route left out (annotate lets the call through).
    served.fake.script = Script(tool="translate_text", response_id=first)
    create(input=WEATHER)
    routed = sent_names(served.fake)
    assert len(routed) == 3
    assert "translate_text" not in routed
    served.fake.script = Script(tool="get_weather", response_id=second)
    create(input=[_output()], previous_response_id=first)
    followed = sent_names(served.fake)
    assert set(followed) == {*routed, "translate_text"}  # the answered tool joins them
    served.fake.script = Script()
    create(input=[_output()], previous_response_id=second)  # and so on along the loop
    assert sent_names(served.fake) == followed
    create(input=[_output()], previous_response_id=f"resp_{uuid.uuid4().hex}")
    assert len(sent_names(served.fake)) == len(SPECS)  # one it never saw: every tool


def test_response_tools_are_bounded_and_keyed_by_the_upstreams_ids() -> None:
    store = ResponseTools(size=2)
    for n in range(3):
        store.remember(f"resp_{n}", frozenset({f"tool_{n}"}))
    assert len(store) == 2
    assert store.recall({"previous_response_id": "resp_0"}) is None  # the oldest went
    assert store.recall({"previous_response_id": "resp_2"}) == {"tool_2"}
    assert store.recall({"previous_response_id": ["resp_2"]}) is None
    assert store.recall({"input": "hi"}) is None
    record = Recorder(store, frozenset({"get_weather"}))
    # A stream's events other than the response's own carry no id to take (an item's id).
    record.streamed({"type": "response.output_item.added", "item": {"id": "fc_1"}})
    record.called(Verdict(False, error="unknown_tool", name="made_up"))
    assert store.recall({"previous_response_id": "fc_1"}) is None
    record.streamed({"type": "response.created", "response": {"id": "resp_9"}})
    record.called(Verdict(False, error="tool_not_available", name="read_file"))
    assert store.recall({"previous_response_id": "resp_9"}) == {"get_weather", "read_file"}


def test_a_response_record_holds_only_the_catalog_tools_routed(embedder: Embedder) -> None:
    # Provider-side tools (never routed) and one the catalog could not read (kept on every
    # request): none is what a follow-up routes to, and the client decides how many.
    keeping = ToolFilter(embedder=embedder, cache=None, unreadable="keep")
    tools = [
        *responses_tools(),
        {"type": "custom", "name": "run_sql"},
        {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example"},
        {"type": "web_search"},
        {"type": "function", "name": "broken", "parameters": "not a schema"},
    ]
    with pytest.warns(CatalogWarning, match="cannot index"):
        filtered = keeping.filter({"input": WEATHER, "tools": tools}, top_k=2)
    assert "broken" in filtered.kept
    store = ResponseTools()
    record = store.recorder("openai-responses", filtered)
    assert record is not None
    record.answered({"id": "resp_1"})
    record.called(Verdict(True, name="broken"))
    record.called(Verdict(True, name="run_sql"))
    routed = set(filtered.kept) - {"broken"}
    assert len(routed) == 2
    assert store.recall({"previous_response_id": "resp_1"}) == routed


def test_a_response_record_past_its_bounds_is_not_kept() -> None:
    store = ResponseTools()
    names = frozenset(f"tool_{n}" for n in range(MAX_TOOLS))
    store.remember("resp_full", names)
    assert store.recall({"previous_response_id": "resp_full"}) == names
    store.remember("resp_many", names | {"one_more"})
    store.remember("resp_long", frozenset({"t" * (MAX_NAME + 1)}))
    for response_id in ("resp_many", "resp_long"):  # their follow-ups go with every tool
        assert store.recall({"previous_response_id": response_id}) is None
    record = Recorder(store, names)
    record.answered({"id": "resp_grown"})
    assert store.recall({"previous_response_id": "resp_grown"}) == names
    record.called(Verdict(False, error="tool_not_available", name="one_more"))
    assert store.recall({"previous_response_id": "resp_grown"}) is None  # grew past: gone


@pytest.mark.parametrize("per_record", [1, 19, MAX_TOOLS])  # 19: sets at their sparsest
def test_response_records_hold_a_bounded_memory(per_record: int) -> None:
    # The worst a client can make them: names no other record or catalog shares, each as
    # long as kept, under ids as long as kept. Bounded by MAX_NAMES in all.
    tracemalloc.start()
    try:
        store = ResponseTools()
        # The tails formatted once: formatting 640,000 names under tracemalloc took most of
        # the test's time; joined to a head, each name is still a string of its own.
        tails = [f"{k:0{MAX_NAME - 8}d}" for k in range(per_record)]
        for n in range(MAX_RESPONSES):
            head = f"{n:08d}"
            store.remember(f"{n:0{MAX_ID}d}", frozenset([head + tail for tail in tails]))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    names_held = sum(len(names) for names in store._tools.values())
    assert names_held <= MAX_NAMES
    assert len(store) == min(MAX_RESPONSES, MAX_NAMES // per_record)
    assert held < 30_000_000  # the bound the module and docs/design.md state


def test_a_huge_user_message_is_routed_on_what_the_model_reads(gate: ToolFilter) -> None:
    # A pasted 2 MB log stays the routed message on every step of the agent loop: its
    # words were all ranked by BM25 each time (about 1.5 s a step per 10 MB), though the
    # model reads no more than PREFIX_CHARS characters of it.
    text = WEATHER + " log line" * 200_000
    request = {"messages": [{"role": "user", "content": text}], "tools": chat_tools()}
    filtered = gate.filter(request, top_k=2)
    assert filtered.result.query == text[:PREFIX_CHARS]
    assert "get_weather" in filtered.kept


def test_a_latest_turn_without_text_goes_with_all_tools(gate: ToolFilter) -> None:
    # An image (audio, a file) the user sends later in a conversation is a new request that
    # toolgate cannot read: routed on the turn before it ("flights and a hotel"), the request
    # went without the tools the image may ask for, as if the user had asked that again.
    png = "iVBORw0KGgo" * 50
    chat = [
        {"role": "user", "content": TRIP},
        {"role": "assistant", "content": "Booked."},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]},
    ]  # fmt: skip
    responses = [
        {"role": "user", "content": TRIP},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Booked."}]},
        {"role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}]},
    ]  # fmt: skip
    anthropic = [
        {"role": "user", "content": TRIP},
        {"role": "assistant", "content": "Booked."},
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": png}}]},
    ]  # fmt: skip
    gemini = [
        {"role": "user", "parts": [{"text": TRIP}]},
        {"role": "model", "parts": [{"text": "Booked."}]},
        {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": png}}]},
    ]
    declarations = [{"name": t["name"], "description": t["description"]} for t in anthropic_tools()]
    for request in (
        {"messages": chat, "tools": chat_tools()},
        {"input": responses, "tools": responses_tools()},
        {"messages": anthropic, "tools": anthropic_tools()},
        {"contents": gemini, "tools": [{"functionDeclarations": declarations}]},
    ):
        filtered = gate.filter(request, top_k=2)
        assert filtered.result.form == "none"
        assert filtered.request == request
    # Text beside the image is read as ever.
    chat[-1]["content"].append({"type": "text", "text": WEATHER})
    assert gate.filter({"messages": chat, "tools": chat_tools()}, top_k=1).kept == ("get_weather",)


def test_the_sdk_objects_an_agent_loop_appends_are_read(gate: ToolFilter) -> None:
    # messages.append(completion.choices[0].message), or Anthropic's
    # {"role": "assistant", "content": response.content}: the SDKs send those objects as
    # their JSON. One before the routed message was refused ("history[1] must be a string
    # or a mapping"), and a call in one since it was missed, so its tool was dropped.
    from anthropic.types import TextBlock, ToolUseBlock
    from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall

    call = ChatCompletionMessageFunctionToolCall.model_validate(
        {"id": "c1", "type": "function", "function": {"name": "translate_text", "arguments": "{}"}}
    )
    chat = [
        {"role": "user", "content": "Say hello in Portuguese."},
        ChatCompletionMessage(role="assistant", content="Olá!"),
        {"role": "user", "content": WEATHER},
        ChatCompletionMessage(role="assistant", content=None, tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": "ERROR: try again"},
    ]
    filtered = gate.filter({"messages": chat, "tools": chat_tools()}, top_k=1)
    assert filtered.result.query == WEATHER
    assert filtered.kept == ("get_weather", "translate_text")
    assert filtered.request["messages"] == chat  # sent as the caller gave them
    blocks = [
        TextBlock(type="text", text="Let me translate that."),
        ToolUseBlock(type="tool_use", id="t1", name="translate_text", input={}),
    ]
    anthropic = [
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ERROR: try again"}]},
    ]  # fmt: skip
    filtered = gate.filter({"messages": anthropic, "tools": anthropic_tools()}, top_k=1)
    assert filtered.kept == ("get_weather", "translate_text")
