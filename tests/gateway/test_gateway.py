"""The gateway driven by the real openai, anthropic and google-genai clients against a fake
upstream on loopback: what the upstream receives, what the application gets back."""

from __future__ import annotations

import logging
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.gateway.conftest import SDK_CLIENTS, Served, metric, sent_names
from tests.gateway.fake_upstream import serving
from tests.gateway.test_filter import (
    SPECS,
    WEATHER,
    anthropic_tools,
    chat_tools,
    gemini_declarations,
    responses_tools,
)
from toolgate.gateway.answers import _summary
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import GatewayConfig, Upstream
from toolgate.gateway.streaming import CallWatcher, SseEvent
from toolgate.verify import Verdict

USER = [{"role": "user", "content": WEATHER}]


def _openai(served: Served, **options: Any) -> openai.OpenAI:
    client = openai.OpenAI(
        base_url=served.url + "/v1", api_key="sk-client", max_retries=0, **options
    )
    SDK_CLIENTS.append(client)
    return client


def _anthropic(served: Served) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-client", max_retries=0)
    SDK_CLIENTS.append(client)
    return client


def _genai(served: Served) -> genai.Client:
    # Kept referenced: a collected genai Client closes the transport its .models still uses.
    client = genai.Client(api_key="g-client", http_options={"base_url": served.url})
    SDK_CLIENTS.append(client)
    return client


def genai_config() -> types.GenerateContentConfig:
    """The weather tools as google-genai declares them, its automatic calling off."""
    declarations = [types.FunctionDeclaration(name=n, description=d) for n, d, _ in SPECS]
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


# ---- filtering, as each SDK sends ----


def test_openai_chat_forwards_only_the_routed_tools(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "get_weather"
    raw = _openai(served).chat.completions.with_raw_response.create(
        model="m", messages=USER, tools=chat_tools()
    )
    answer = raw.parse()
    assert answer.choices[0].message.tool_calls[0].function.name == "get_weather"
    sent = sent_names(served.fake)
    assert "get_weather" in sent
    assert len(sent) == 3
    assert raw.headers["x-toolgate-tools"] == f"3/{len(SPECS)}"
    assert raw.headers["x-toolgate-tool-calls"] == "ok"
    assert served.fake.received[-1].path == "/v1/chat/completions"
    assert served.fake.received[-1].headers["authorization"] == "Bearer sk-client"


def test_openai_responses_anthropic_and_gemini_are_filtered(annotating: Served) -> None:
    served = annotating
    _openai(served).responses.create(model="m", input=WEATHER, tools=responses_tools())
    assert "get_weather" in sent_names(served.fake)
    assert len(sent_names(served.fake)) == 3
    _anthropic(served).messages.create(
        model="m", max_tokens=16, messages=USER, tools=anthropic_tools()
    )
    assert served.fake.received[-1].path == "/v1/messages"
    headers = served.fake.received[-1].headers
    # This SDK version sends its key as a bearer token; older ones in x-api-key.
    assert "sk-ant-client" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    assert "get_weather" in sent_names(served.fake)
    assert len(sent_names(served.fake)) == 3
    _genai(served).models.generate_content(model="g", contents=WEATHER, config=genai_config())
    assert served.fake.received[-1].path.endswith("/models/g:generateContent")
    assert served.fake.received[-1].headers["x-goog-api-key"] == "g-client"
    assert "get_weather" in sent_names(served.fake)
    assert len(sent_names(served.fake)) == 3


def test_a_request_that_needs_no_tool_goes_without_tools_and_says_so(
    annotating: Served,
) -> None:
    served = annotating
    before = metric(served, "toolgate_gateway_no_tool_total", endpoint="openai")
    raw = _openai(served).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "🙂"}], tools=chat_tools()
    )
    assert "tools" not in served.fake.received[-1].body
    assert raw.headers["x-toolgate-no-tool"] == "1"
    assert raw.headers["x-toolgate-tools"] == f"0/{len(SPECS)}"
    assert metric(served, "toolgate_gateway_no_tool_total", endpoint="openai") == before + 1
    raw = _openai(served).chat.completions.with_raw_response.create(
        model="m", messages=USER, tools=chat_tools()
    )
    assert "x-toolgate-no-tool" not in raw.headers
    assert metric(served, "toolgate_gateway_no_tool_total", endpoint="openai") == before + 1


def test_every_header_and_metric_of_the_gateway_is_documented() -> None:
    # Read from the source: what an operator can see, in headers or on /metrics, is in api.md.
    root = Path(__file__).resolve().parents[2]
    source = "".join(p.read_text("utf-8") for p in (root / "python/toolgate/gateway").glob("*.py"))
    api = (root / "docs" / "api.md").read_text("utf-8")
    section = api.split("\n## HTTP gateway", 1)[1].split("\n## ", 1)[0]
    headers = set(re.findall(r"\"(x-toolgate-[a-z-]+)\"", source))
    metrics = set(re.findall(r"\"(toolgate_gateway_[a-z_]+)\"", source))
    assert {"x-toolgate-no-tool", "x-toolgate-tools"} <= headers
    assert {"toolgate_gateway_no_tool", "toolgate_gateway_requests"} <= metrics
    assert sorted(h for h in headers if h not in section) == []
    assert sorted(m for m in metrics if f"{m}_total" not in section and m not in section) == []


def test_top_k_header_asks_for_fewer_and_state_headers_are_read(annotating: Served) -> None:
    served = annotating
    client = _openai(served, default_headers={"x-toolgate-top-k": "1"})
    client.chat.completions.create(model="m", messages=USER, tools=chat_tools())
    assert sent_names(served.fake) == ["get_weather"]
    client = _openai(served, default_headers={"x-toolgate-top-k": "50"})  # capped at 3
    client.chat.completions.create(model="m", messages=USER, tools=chat_tools())
    assert len(sent_names(served.fake)) == 3


# ---- streaming ----


def test_streams_pass_through_event_by_event(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "get_weather"
    served.fake.script.args = {"city": "Lisbon"}
    chunks = list(
        _openai(served).chat.completions.create(
            model="m", messages=USER, tools=chat_tools(), stream=True
        )
    )
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert calls[0][0].function.name == "get_weather"
    assert "".join(c[0].function.arguments for c in calls) == '{"city": "Lisbon"}'
    with _anthropic(served).messages.stream(
        model="m", max_tokens=16, messages=USER, tools=anthropic_tools()
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].name == "get_weather"
    assert final.content[0].input == {"city": "Lisbon"}
    events = list(
        _openai(served).responses.create(
            model="m", input=WEATHER, tools=responses_tools(), stream=True
        )
    )
    assert events[-1].type == "response.completed"
    parts = list(
        _genai(served).models.generate_content_stream(
            model="g", contents=WEATHER, config=genai_config()
        )
    )
    assert parts[-1].function_calls[0].name == "get_weather"
    assert metric(served, "toolgate_gateway_tool_calls_total", endpoint="gemini", verdict="ok")


def test_a_slow_stream_reaches_the_client_before_it_ends(annotating: Served) -> None:
    served = annotating
    # The fake sends its first event, then the rest only once the client has it.
    served.fake.script.hold_after = 1
    try:
        client = _openai(served, timeout=10)  # one holding the first event back times out
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        first = next(iter(stream))
        assert first.choices[0].delta.content == "Sun"
        served.fake.script.hold.set()
        rest = list(stream)
    finally:
        served.fake.script.hold.set()
    assert [c.choices[0].delta.content for c in rest][:1] == ["ny."]


GEMINI_BODY = {
    "contents": [{"role": "user", "parts": [{"text": WEATHER}]}],
    "tools": [{"functionDeclarations": gemini_declarations()}],
}
GEMINI_STREAM = "/v1beta/models/g:streamGenerateContent"


def test_a_gemini_stream_without_sse_reaches_the_client_response_by_response(
    annotating: Served,
) -> None:
    # Without ?alt=sse Google streams a JSON array, one response at a time: a REST client
    # reading it gets each response as it comes, not the whole array at its end.
    served = annotating
    served.fake.script.tool = "get_weather"
    served.fake.script.args = {"city": "Lisbon"}
    # The fake sends the array's first response, then the rest only once the client has it.
    served.fake.script.hold_after = 1
    before = metric(served, "toolgate_gateway_tool_calls_total", endpoint="gemini", verdict="ok")
    url = served.url + GEMINI_STREAM
    try:
        with httpx.stream("POST", url, json=GEMINI_BODY, timeout=10) as response:
            pieces = response.iter_bytes()
            # The first response, whole, in however many reads: a gateway waiting for more
            # before passing it on times out.
            first = next(pieces)
            while not _is_json(first.lstrip(b"[")):
                first += next(pieces)
            served.fake.script.hold.set()
            whole = first + b"".join(pieces)
    finally:
        served.fake.script.hold.set()
    answers = orjson.loads(whole)
    assert orjson.loads(first.lstrip(b"[")) == answers[0]
    assert answers[0]["candidates"][0]["content"]["parts"][0]["text"].startswith("Let me check")
    call = answers[1]["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call == {"name": "get_weather", "args": {"city": "Lisbon"}}
    after = metric(served, "toolgate_gateway_tool_calls_total", endpoint="gemini", verdict="ok")
    assert after == before + 1


def _is_json(raw: bytes) -> bool:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True


def test_enforce_ends_a_gemini_stream_without_sse_with_an_error_response(
    enforcing: Served,
) -> None:
    served = enforcing
    served.fake.script.tool = "send_email"  # in the request, but routed out for WEATHER
    response = httpx.post(served.url + GEMINI_STREAM, json=GEMINI_BODY, timeout=10)
    answers = response.json()  # still a JSON array: the error is its last element
    assert answers[0]["candidates"][0]["content"]["parts"][0]["text"].startswith("Let me check")
    assert len(answers) == 2  # the call never reached the client
    assert "toolgate: the model called 'send_email'" in answers[1]["error"]["message"]


def test_client_gone_mid_stream_closes_the_upstream_stream(annotating: Served) -> None:
    served = annotating
    served.fake.script.delay = 0.5
    # Its own words: a stream an earlier test left may close while this one is read.
    messages = [{"role": "user", "content": f"{WEATHER} (request {uuid.uuid4()})"}]
    with httpx.stream(
        "POST", served.url + "/v1/chat/completions",
        json={"model": "m", "messages": messages, "stream": True}, timeout=10,
    ) as response:  # fmt: skip
        next(response.iter_raw())

    def closed() -> list[Any]:
        return [b for b in served.fake.closed if isinstance(b, dict) and b["messages"] == messages]

    deadline = time.monotonic() + 10
    while not closed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(closed()) == 1


# ---- verification of the answer's tool calls ----


@pytest.mark.parametrize("stream", [False, True])
def test_enforce_blocks_a_call_to_a_tool_not_sent_for_every_sdk(
    enforcing: Served, stream: bool
) -> None:
    served = enforcing
    served.fake.script.tool = "send_email"  # in the request, but routed out for WEATHER
    before = metric(served, "toolgate_gateway_answers_blocked_total", endpoint="openai")
    with pytest.raises(openai.APIError, match="send_email"):
        list(_consume(_openai(served).chat.completions.create(
            model="m", messages=USER, tools=chat_tools(), stream=stream)))  # fmt: skip
    after = metric(served, "toolgate_gateway_answers_blocked_total", endpoint="openai")
    assert after == before + 1
    responses = _openai(served).responses
    with pytest.raises(openai.APIError, match="send_email"):
        list(
            _consume(
                responses.create(**_body(input=WEATHER, tools=responses_tools()), stream=stream)
            )
        )
    messages = _anthropic(served).messages
    with pytest.raises(anthropic.APIError, match="send_email"):
        list(
            _consume(
                messages.create(
                    **_body(max_tokens=16, messages=USER, tools=anthropic_tools()), stream=stream
                )
            )
        )
    gemini = _genai(served).models
    call = gemini.generate_content_stream if stream else gemini.generate_content
    with pytest.raises(genai_errors.APIError, match="send_email"):
        list(_consume(call(model="g", contents=WEATHER, config=genai_config())))


def _body(**options: Any) -> dict[str, Any]:
    return {"model": "m", **options}


def _consume(answer: Any) -> Any:
    return answer if hasattr(answer, "__iter__") and not hasattr(answer, "model_dump") else [answer]


def test_enforce_lets_a_call_to_a_tool_sent_through(enforcing: Served) -> None:
    served = enforcing
    served.fake.script.tool = "get_weather"
    answer = _anthropic(served).messages.create(
        model="m", max_tokens=16, messages=USER, tools=anthropic_tools()
    )
    assert answer.content[0].name == "get_weather"


# Anthropic's client tools: the application runs them, but their schema is Anthropic's.
CLIENT_TOOLS = [
    {"type": "bash_20250124", "name": "bash"},
    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    {"type": "memory_20250818", "name": "memory"},
]


@pytest.mark.parametrize("stream", [False, True])
def test_enforce_lets_a_call_to_an_anthropic_client_tool_through(
    enforcing: Served, stream: bool
) -> None:
    served = enforcing
    served.fake.script.tool = "bash"
    served.fake.script.args = {"command": "ls"}
    messages = _anthropic(served).messages
    tools = [*anthropic_tools(), *CLIENT_TOOLS]
    body = _body(max_tokens=16, messages=USER, stream=stream)
    answer = list(_consume(messages.create(**body, tools=tools)))
    assert answer
    sent = served.fake.received[-1].body["tools"]
    assert sent[-len(CLIENT_TOOLS) :] == CLIENT_TOOLS
    assert len(sent) < len(tools)  # routed: function tools were left out
    # A call to a client tool the request did not send is still blocked.
    with pytest.raises(anthropic.APIError, match="bash"):
        list(_consume(messages.create(**body, tools=anthropic_tools())))


def test_annotate_names_the_failed_calls_in_a_header_and_ametric(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "send_email"
    before = metric(
        served, "toolgate_gateway_tool_calls_total", endpoint="openai",
        verdict="tool_not_available",
    )  # fmt: skip
    raw = _openai(served).chat.completions.with_raw_response.create(
        model="m", messages=USER, tools=chat_tools()
    )
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "send_email"
    assert raw.headers["x-toolgate-tool-calls"] == "tool_not_available=send_email"
    after = metric(
        served, "toolgate_gateway_tool_calls_total", endpoint="openai",
        verdict="tool_not_available",
    )  # fmt: skip
    assert after == before + 1


def test_a_models_tool_name_can_neither_add_a_header_nor_lose_the_answer(
    annotating: Served,
) -> None:
    served = annotating
    served.fake.script.tool = "evil\r\nSet-Cookie: pwned=1\x00\u00e9, x"
    body = {"model": "m", "messages": USER, "tools": chat_tools()}
    answer = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200
    assert "set-cookie" not in answer.headers
    assert answer.headers["x-toolgate-tool-calls"] == (
        "unknown_tool=evil%0D%0ASet-Cookie:%20pwned=1%00%C3%A9%2C%20x"
    )


def test_a_models_long_tool_names_are_cut_for_the_header(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "\u00e9" * 5000
    body = {"model": "m", "messages": USER, "tools": chat_tools()}
    answer = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.headers["x-toolgate-tool-calls"] == "unknown_tool=" + "%C3%A9" * 20 + "..."


def test_the_failed_calls_header_counts_the_calls_past_its_bound() -> None:
    names = [f"t{i:03}" + "x" * 200 for i in range(50)]
    failed = [Verdict(ok=False, error="unknown_tool", name=name) for name in names]
    header = _summary(failed)
    assert len(header) <= 1024
    assert header.endswith(", 43 more")


def test_annotate_checks_arguments_of_a_streamed_call(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "get_weather"
    served.fake.script.args = {"city": 5}  # the schema says string
    labels = {"endpoint": "anthropic", "verdict": "invalid_arguments"}
    before = metric(served, "toolgate_gateway_tool_calls_total", **labels)
    with _anthropic(served).messages.stream(
        model="m", max_tokens=16, messages=USER, tools=anthropic_tools()
    ) as stream:
        stream.get_final_message()
    assert metric(served, "toolgate_gateway_tool_calls_total", **labels) == before + 1


# ---- bad input and faults ----


def test_a_responses_request_from_a_stored_prompt_alone_goes_upstream(
    enforcing: Served,
) -> None:
    served = enforcing
    body = {"model": "m", "prompt": {"id": "pmpt_1"}, "tools": responses_tools()}
    answer = httpx.post(served.url + "/v1/responses", json=body, timeout=60)
    assert answer.status_code == 200
    assert served.fake.received[-1].body == body  # nothing to route on: as it came


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1beta/models/m:generateContent",
         '{"contents": [{"role": "user", "parts": [{"text": "weather in Lisbon"}]}],'
         ' "tools": [{"functionDeclarations": [{"name": "get_weather"}]}],'
         ' "toolConfig": {"functionCallingConfig": {"mode": DEEP}}}'),
        ("/v1/responses",
         '{"input": [{"type": "function_call_output", "call_id": "c", "output": DEEP},'
         ' {"role": "user", "content": "weather in Lisbon"}], "tools": TOOLS}'),
        ("/v1/chat/completions",
         '{"messages": [{"role": DEEP, "content": "x"}, {"role": "user", "content": [DEEP]},'
         ' {"role": "user", "content": "weather in Lisbon"}], "tools": CHAT}'),
    ],
)  # fmt: skip
def test_values_nested_a_thousand_deep_are_no_server_error(
    annotating: Served, path: str, body: str
) -> None:
    deep = "[" * 1000 + "]" * 1000  # orjson reads up to 1,024 levels
    tools = orjson.dumps(responses_tools()).decode()
    chat = orjson.dumps(chat_tools()).decode()
    content = body.replace("DEEP", deep).replace("TOOLS", tools).replace("CHAT", chat)
    headers = {"content-type": "application/json"}
    answer = httpx.post(annotating.url + path, content=content, headers=headers, timeout=60)
    assert answer.status_code in (200, 400)
    if answer.status_code == 400:
        assert "nest" in answer.text  # named, whether reading the history or writing the body


def test_bad_input_is_a_4xx_naming_the_problem_and_never_reaches_upstream(
    annotating: Served,
) -> None:
    served = annotating
    url = served.url + "/v1/chat/completions"
    bad_json = httpx.post(
        url, content=b'{"messages": [', headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert "not valid JSON" in bad_json.json()["error"]["message"]
    not_object = httpx.post(url, json=[1, 2])
    assert not_object.status_code == 400
    assert "got list" in not_object.json()["error"]["message"]
    unreadable = httpx.post(
        url,
        json={"messages": USER, "tools": [{"type": "function", "function": {"description": "x"}}]},
    )
    assert unreadable.status_code == 400
    assert "tools[0]" in unreadable.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="tools"):
        _anthropic(served).messages.create(
            model="m", max_tokens=16, messages=USER, tools=[{"name": "x", "input_schema": 3}]
        )
    assert served.fake.received == []


def test_a_body_past_max_body_bytes_is_413_unread_and_never_reaches_upstream(
    fake: tuple[Any, str], shared_filter: Any
) -> None:
    upstream, url = fake
    config = GatewayConfig(upstreams={"openai": Upstream(url)}, max_body_bytes=1000)
    body = {"messages": USER, "tools": chat_tools()}
    assert len(orjson.dumps(body)) > 1000
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        declared = httpx.post(base + "/v1/chat/completions", json=body)
        # Chunked, with no length declared: counted as it arrives.
        chunked = httpx.post(
            base + "/v1/chat/completions",
            content=iter([orjson.dumps(body)[:600], orjson.dumps(body)[600:]]),
        )
        small = httpx.post(base + "/v1/chat/completions", json={"messages": USER})
    for answer in (declared, chunked):
        assert answer.status_code == 413
        assert "larger than 1,000 bytes" in answer.json()["error"]["message"]
    assert small.status_code == 200
    assert len(upstream.received) == 1


def test_upstream_errors_pass_through_with_status_and_headers(annotating: Served) -> None:
    served = annotating
    served.fake.script.status = 503
    response = httpx.post(
        served.url + "/v1/chat/completions", json={"messages": USER, "tools": chat_tools()}
    )
    assert response.status_code == 503
    assert response.headers["x-upstream"] == "yes"
    assert response.json() == {"error": {"message": "upstream says no", "type": "server_error"}}


def test_an_upstream_reset_mid_stream_is_an_error_not_a_hang(annotating: Served) -> None:
    served = annotating
    served.fake.script.reset_after = 1
    with pytest.raises(openai.APIError, match="broke off"):
        list(_openai(served).chat.completions.create(model="m", messages=USER, stream=True))


def test_a_fault_reading_a_stream_ends_it_with_an_error_event(
    annotating: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug of the gateway's own mid-stream must not cut the client's stream without a word.
    def broken(self: CallWatcher, event: SseEvent) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(CallWatcher, "see", broken)
    served = annotating
    failed = pytest.raises(openai.APIError, match="toolgate: the gateway failed")
    with caplog.at_level(logging.ERROR, logger="toolgate.gateway"), failed as caught:
        list(_openai(served).chat.completions.create(model="m", messages=USER, stream=True))
    assert caught.value.code == "internal_error"
    assert any("RuntimeError" in (r.exc_text or "") for r in caplog.records)


def test_an_upstream_down_is_502_and_a_slow_one_504(
    fake: Any, shared_filter: Any, annotating: Served
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there now
    down = Gateway(GatewayConfig(upstreams={"openai": Upstream(closed)}), tool_filter=shared_filter)
    with serving(down.app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        SDK_CLIENTS.append(client)
        with pytest.raises(openai.InternalServerError, match="cannot be reached") as caught:
            client.chat.completions.create(model="m", messages=USER)
        assert caught.value.status_code == 502
    _, fake_url = fake
    slow = Gateway(
        GatewayConfig(upstreams={"openai": Upstream(fake_url)}, timeout=0.5),
        tool_filter=shared_filter,
    )
    annotating.fake.script.answer_delay = 3
    with serving(slow.app) as url:
        response = httpx.post(url + "/v1/chat/completions", json={"messages": USER}, timeout=10)
    assert response.status_code == 504
    assert "did not answer in time" in response.json()["error"]["message"]


# ---- the rest of the API ----


def test_other_paths_pass_through_untouched(annotating: Served) -> None:
    served = annotating
    models = _openai(served).models.list()
    assert models.data[0].id == "fake-model"
    received = served.fake.received[-1]
    assert (received.method, received.path) == ("GET", "/v1/models")
    assert received.headers["authorization"] == "Bearer sk-client"


def test_healthz_and_metrics(annotating: Served) -> None:
    served = annotating
    assert httpx.get(served.url + "/healthz").json() == {"status": "ok"}
    _openai(served).chat.completions.create(model="m", messages=USER, tools=chat_tools())
    text = httpx.get(served.url + "/metrics").text
    for name in (
        "toolgate_gateway_requests_total", "toolgate_gateway_tools_in_total",
        "toolgate_gateway_tools_out_total", "toolgate_gateway_schema_tokens_saved_total",
        "toolgate_gateway_filter_seconds_bucket", "toolgate_gateway_upstream_responses_total",
    ):  # fmt: skip
        assert name in text
    assert metric(served, "toolgate_gateway_schema_tokens_saved_total", endpoint="openai") > 0
    assert (
        metric(served, "toolgate_gateway_upstream_responses_total", upstream="openai", status="200")
        > 0
    )


def test_headers_pass_byte_for_byte_and_paths_as_the_client_wrote_them(
    annotating: Served,
) -> None:
    name = 'attachment; filename="café → menu.pdf"'.encode()
    annotating.fake.script.headers = ((b"content-disposition", name),)
    note = "José Müller → ok".encode()
    body = {"messages": USER, "tools": chat_tools()}
    for url in (annotating.url + "/v1/chat/completions", annotating.url + "/v1/embeddings"):
        answer = httpx.post(url, json=body, headers=[(b"x-note", note)])
        assert answer.status_code == 200
        assert (b"content-disposition", name) in answer.headers.raw
        assert annotating.fake.received[-1].headers["x-note"] == note.decode("latin-1")
    httpx.get(annotating.url + "/v1/files/a%3Fb%23c%2Fd/content")
    assert annotating.fake.received[-1].raw_path == b"/v1/files/a%3Fb%23c%2Fd/content"


def test_a_filtered_body_goes_upstream_with_every_integer_and_level_it_had(
    annotating: Served,
) -> None:
    deep: Any = "bottom"
    for _ in range(300):  # past orjson's writer (254 levels), within its reader
        deep = [deep]
    body = {"messages": USER, "tools": chat_tools(), "seed": 123456789012345678901,
            "metadata": {"order": -9223372036854775809, "deep": deep}}  # fmt: skip
    answer = httpx.post(annotating.url + "/v1/chat/completions", json=body)
    assert answer.status_code == 200
    sent = annotating.fake.received[-1].body
    assert len(sent["tools"]) < len(chat_tools())  # filtered, so written anew
    assert sent["seed"] == 123456789012345678901
    assert sent["metadata"] == body["metadata"]
    huge = "1" * 5000  # past what any JSON reader here takes: refused, not rounded
    raw = orjson.dumps({"messages": USER, "tools": chat_tools()})[:-1] + b',"n":' + huge.encode()
    refused = httpx.post(annotating.url + "/v1/chat/completions", content=raw + b"}")
    assert refused.status_code == 400
    assert "not valid JSON" in refused.json()["error"]["message"]
