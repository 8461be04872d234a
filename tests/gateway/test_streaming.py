"""The stream reader's view of tool calls: every call seen, whatever the server's dialect."""

from __future__ import annotations

import json
from typing import Any

from toolgate.formats.calls import answer_tool_calls, call_name
from toolgate.gateway.streaming import CallWatcher, SseEvent


def _chat_chunk(*calls: dict[str, Any], finish: str | None = None) -> SseEvent:
    choice = {"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": finish}
    return SseEvent(None, {"choices": [choice]})


def _watch(events: list[SseEvent]) -> tuple[list[str], list[str]]:
    watcher = CallWatcher("openai")
    started: list[str] = []
    finished: list[Any] = []
    for event in events:
        names, calls = watcher.see(event)
        started += names
        finished += calls
    finished += watcher.finish()
    return started, [call_name(call) for call in finished]


def test_chat_calls_without_an_index_are_told_apart_by_id() -> None:
    first = {"id": "a", "function": {"name": "get_weather", "arguments": "{}"}}
    second = {"id": "b", "function": {"name": "send_email", "arguments": '{"to"'}}
    rest = {"function": {"arguments": ': "bob"}'}}  # no id: the last call goes on
    started, finished = _watch([_chat_chunk(first, second), _chat_chunk(rest, finish="stop")])
    assert started == ["get_weather", "send_email"]
    assert finished == ["get_weather", "send_email"]
    watcher = CallWatcher("openai")
    for event in [_chat_chunk(first, second), _chat_chunk(rest, finish="stop")]:
        _, calls = watcher.see(event)
    assert calls[-1]["function"]["arguments"] == '{"to": "bob"}'


def test_a_chat_call_named_after_its_first_delta_is_still_checked() -> None:
    opened = {"index": 0, "id": "a", "function": {"arguments": ""}}
    named = {"index": 0, "function": {"name": "send_email", "arguments": "{}"}}
    started, finished = _watch([_chat_chunk(opened), _chat_chunk(named, finish="tool_calls")])
    assert started == ["send_email"]
    assert finished == ["send_email"]


def test_a_legacy_function_call_is_checked_as_a_tool_call_is() -> None:
    # Azure's older API versions stream a request's legacy "functions" call this way: its
    # name must reach the check before the client sees it, as a tool call's does.
    def chunk(function_call: dict[str, Any], finish: str | None = None) -> SseEvent:
        choice = {"index": 0, "delta": {"function_call": function_call}, "finish_reason": finish}
        return SseEvent(None, {"choices": [choice]})

    watcher = CallWatcher("openai")
    started, _ = watcher.see(chunk({"name": "send_email", "arguments": ""}))
    assert started == ["send_email"]
    assert watcher.see(chunk({"arguments": '{"to": '})) == ([], [])
    _, finished = watcher.see(chunk({"arguments": '"bob"}'}, finish="function_call"))
    assert [call_name(call) for call in finished] == ["send_email"]
    assert finished[0]["function"]["arguments"] == '{"to": "bob"}'


def test_odd_chat_indexes_and_gemini_parts_do_not_break_the_reader() -> None:
    odd = {"index": [1], "id": "a", "function": {"name": "get_weather"}}
    assert _watch([_chat_chunk(odd)])[0] == ["get_weather"]
    watcher = CallWatcher("gemini")
    part = {"candidates": [{"content": {"parts": [{"functionCall": "not an object"}]}}]}
    assert watcher.see(SseEvent(None, part))[0] == [""]  # no name: the verdict says malformed


def test_a_gemini_stream_read_whole_has_the_calls_of_every_response() -> None:
    def response(name: str) -> dict[str, Any]:
        call = {"functionCall": {"name": name, "args": {}}}
        return {"candidates": [{"content": {"role": "model", "parts": [call]}}]}

    calls = answer_tool_calls([response("get_weather"), response("send_email")], "gemini")
    assert [call_name(call) for call in calls] == ["get_weather", "send_email"]
    assert answer_tool_calls(response("get_weather"), "gemini") == calls[:1]


def test_only_cr_and_lf_end_an_event_line() -> None:
    # Raw U+2028, U+0085, form feeds... are legal in JSON strings; SSE splits only on CR / LF.
    for odd in ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1e"]:
        data = {"name": "send_email", "args": {"body": f"a{odd}b"}}
        raw = ("event: call\r\ndata: " + json.dumps(data, ensure_ascii=False) + "\r\n\r\n").encode()
        event = SseEvent.parse(raw)
        assert event.name == "call"
        assert event.data == data
    two = SseEvent.parse(b'data: {"a":\rdata: 1}\n\n')
    assert two.data == {"a": 1}


def test_odd_anthropic_indexes_do_not_break_the_reader() -> None:
    watcher = CallWatcher("anthropic")
    block = {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}
    for index in [[0], {"a": 1}, None, "0"]:
        start = {"type": "content_block_start", "index": index, "content_block": block}
        assert watcher.see(SseEvent("content_block_start", start)) == (["get_weather"], [])
        delta = {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": "{}"}}  # fmt: skip
        assert watcher.see(SseEvent("content_block_delta", delta)) == ([], [])
        stop = {"type": "content_block_stop", "index": index}
        _, finished = watcher.see(SseEvent("content_block_stop", stop))
        assert [call_name(call) for call in finished] == ["get_weather"]
        assert finished[0]["input"] == "{}"


def test_a_streamed_chat_custom_tool_call_is_read_as_a_whole_answer_holds_it() -> None:
    # A custom tool's call streams under "custom", its input free text: checked as the same
    # call in a whole answer is, not skipped (enforce would miss a custom tool not sent) nor
    # read as a function call without a name (malformed).
    opened = {"index": 0, "id": "c", "type": "custom", "custom": {"name": "run_sql", "input": ""}}
    more = {"index": 0, "custom": {"input": "select 1"}}
    function = {"index": 1, "id": "f", "function": {"name": "get_weather", "arguments": "{}"}}
    events = [_chat_chunk(opened), _chat_chunk(more, function, finish="tool_calls")]
    assert _watch(events) == (["run_sql", "get_weather"], ["run_sql", "get_weather"])
    watcher = CallWatcher("openai")
    streamed = [call for event in events for call in watcher.see(event)[1]]
    whole_call = {"id": "c", "type": "custom", "custom": {"name": "run_sql", "input": "select 1"}}
    message = {"role": "assistant", "tool_calls": [whole_call, {**function, "type": "function"}]}
    whole = answer_tool_calls({"choices": [{"index": 0, "message": message}]}, "openai")
    assert streamed[0] == whole[0] == whole_call
    # An empty "custom" some servers echo beside a function's delta is no custom call.
    echoed = {**function, "index": 0, "custom": {}}
    assert _watch([_chat_chunk(echoed, finish="tool_calls")]) == (["get_weather"], ["get_weather"])


def test_a_responses_custom_tool_call_is_read_whole_and_streamed() -> None:
    item = {"type": "custom_tool_call", "id": "ctc", "call_id": "c", "name": "run_sql",
            "input": "select 1"}  # fmt: skip
    assert answer_tool_calls({"output": [item]}, "openai-responses") == [item]
    watcher = CallWatcher("openai-responses")
    added = {"type": "response.output_item.added", "item": {**item, "input": ""}}
    assert watcher.see(SseEvent(None, added)) == (["run_sql"], [])
    done = {"type": "response.output_item.done", "item": item}
    assert watcher.see(SseEvent(None, done)) == ([], [item])


def test_a_streamed_call_into_a_responses_namespace_is_named_with_it() -> None:
    item = {"type": "function_call", "name": "get_customer", "namespace": "crm", "arguments": ""}
    added = {"type": "response.output_item.added", "item": item}
    assert CallWatcher("openai-responses").see(SseEvent(None, added)) == (["crm.get_customer"], [])
