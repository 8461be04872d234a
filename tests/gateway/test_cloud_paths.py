"""Vertex AI's and Azure OpenAI's paths through the gateway, driven by the real google-genai
(``vertexai=True``) and openai (``AzureOpenAI``, the Azure v1 API) clients: filtered and
enforced as Gemini's and OpenAI's are, sent to their own upstream or the fallback one; and a
model call on a path the gateway does not filter, flagged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from google.oauth2.credentials import Credentials

from tests.gateway.conftest import SDK_CLIENTS, Served, metric, sent_names
from tests.gateway.fake_upstream import FakeUpstream, serving
from tests.gateway.test_filter import SPECS, WEATHER, anthropic_tools, chat_tools, responses_tools
from tests.gateway.test_gateway import genai_config
from toolgate.gateway.app import _WARNED_PATHS, Gateway
from toolgate.gateway.config import GatewayConfig, RouteConfig, Upstream, load_config
from toolgate.gateway.filter import ToolFilter
from toolgate.gateway.serve import ServeOptions
from toolgate.gateway.upstream import Endpoint, endpoint_of, unfiltered_call, upstream_for

USER = [{"role": "user", "content": WEATHER}]
API_VERSION = "2024-10-21"


def _vertex(url: str, mode: str) -> genai.Client:
    """A google-genai Vertex AI client: with an API key (express mode) or a project."""
    options = types.HttpOptions(base_url=url)
    if mode == "api_key":
        client = genai.Client(vertexai=True, api_key="v-client", http_options=options)
    else:
        client = genai.Client(
            vertexai=True, project="proj", location="us-central1",
            credentials=Credentials(token="ya29.client"), http_options=options,
        )  # fmt: skip
    SDK_CLIENTS.append(client)
    return client


def _gemini(url: str) -> genai.Client:
    """A google-genai client of the Gemini API."""
    client = genai.Client(api_key="g-client", http_options=types.HttpOptions(base_url=url))
    SDK_CLIENTS.append(client)
    return client


def _azure(url: str) -> openai.AzureOpenAI:
    client = openai.AzureOpenAI(
        azure_endpoint=url, api_key="az-client", api_version=API_VERSION, max_retries=0
    )
    SDK_CLIENTS.append(client)
    return client


def _azure_v1(url: str) -> openai.OpenAI:
    """A client of Azure OpenAI's v1 API: the OpenAI client at ``/openai/v1``."""
    client = openai.OpenAI(base_url=url + "/openai/v1", api_key="az-client", max_retries=0)
    SDK_CLIENTS.append(client)
    return client


VERTEX_PATHS = {
    "api_key": "/v1beta1/publishers/google/models/g:generateContent",
    "project": (
        "/v1beta1/projects/proj/locations/us-central1/publishers/google/models/g:generateContent"
    ),
}


# ---- Vertex AI ----


@pytest.mark.parametrize("mode", ["api_key", "project"])
def test_vertex_ai_requests_are_filtered_and_keep_their_path(annotating: Served, mode: str) -> None:
    served = annotating
    served.fake.script.tool = "get_weather"
    answer = _vertex(served.url, mode).models.generate_content(
        model="g", contents=WEATHER, config=genai_config()
    )
    assert answer.function_calls[0].name == "get_weather"
    sent = sent_names(served.fake)
    assert "get_weather" in sent
    assert len(sent) == 3
    headers = answer.sdk_http_response.headers
    assert headers["x-toolgate-tools"] == f"3/{len(SPECS)}"
    assert headers["x-toolgate-tool-calls"] == "ok"
    assert served.fake.received[-1].path == VERTEX_PATHS[mode]


def test_vertex_ai_credentials_reach_the_upstream(annotating: Served) -> None:
    served = annotating
    _vertex(served.url, "project").models.generate_content(
        model="g", contents=WEATHER, config=genai_config()
    )
    assert served.fake.received[-1].headers["authorization"] == "Bearer ya29.client"
    _vertex(served.url, "api_key").models.generate_content(
        model="g", contents=WEATHER, config=genai_config()
    )
    assert served.fake.received[-1].headers["x-goog-api-key"] == "v-client"


@pytest.mark.parametrize("mode", ["api_key", "project"])
@pytest.mark.parametrize("stream", [False, True])
def test_enforce_blocks_a_vertex_ai_call_to_a_tool_not_sent(
    enforcing: Served, mode: str, stream: bool
) -> None:
    served = enforcing
    served.fake.script.tool = "send_email"  # in the request, but routed out for WEATHER
    models = _vertex(served.url, mode).models
    call = models.generate_content_stream if stream else models.generate_content
    with pytest.raises(genai_errors.APIError, match="send_email"):
        list(_consume(call(model="g", contents=WEATHER, config=genai_config())))
    method = ":streamGenerateContent" if stream else ":generateContent"
    assert served.fake.received[-1].path == VERTEX_PATHS[mode].replace(":generateContent", method)


@pytest.mark.parametrize("mode", ["gemini", "api_key", "project"])
def test_a_gemini_request_routed_to_no_function_keeps_its_built_in_tools_alone(
    annotating: Served, mode: str
) -> None:
    # Sent with a function calling config and no function declaration, the Gemini API and
    # Vertex AI refuse it (400 "Function calling config is set without function_declarations").
    served = annotating
    config = genai_config()
    config.tools = [types.Tool(google_search=types.GoogleSearch()), *(config.tools or [])]
    config.tool_config = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.AUTO
        )
    )
    client = _vertex(served.url, mode) if mode != "gemini" else _gemini(served.url)
    raw = client.models.generate_content(model="g", contents="🙂", config=config)
    assert raw.sdk_http_response is not None
    assert raw.sdk_http_response.headers["x-toolgate-no-tool"] == "1"
    sent = served.fake.received[-1].body
    assert sent["tools"] == [{"googleSearch": {}}]
    assert "toolConfig" not in sent
    client.models.generate_content(model="g", contents=WEATHER, config=config)
    sent = served.fake.received[-1].body
    declared = [d["name"] for t in sent["tools"] for d in t.get("functionDeclarations", [])]
    assert "get_weather" in declared
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def _consume(answer: Any) -> Any:
    return answer if hasattr(answer, "__iter__") and not hasattr(answer, "model_dump") else [answer]


# ---- Azure OpenAI ----


def test_azure_chat_is_filtered_and_keeps_its_path_and_api_version(annotating: Served) -> None:
    served = annotating
    served.fake.script.tool = "get_weather"
    raw = _azure(served.url).chat.completions.with_raw_response.create(
        model="my-deployment", messages=USER, tools=chat_tools()
    )
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "get_weather"
    assert raw.headers["x-toolgate-tools"] == f"3/{len(SPECS)}"
    assert raw.headers["x-toolgate-tool-calls"] == "ok"
    received = served.fake.received[-1]
    assert received.path == "/openai/deployments/my-deployment/chat/completions"
    assert received.query == f"api-version={API_VERSION}"
    assert received.headers["api-key"] == "az-client"
    assert len(sent_names(served.fake)) == 3


def test_azure_responses_and_the_v1_api_are_filtered(annotating: Served) -> None:
    served = annotating
    calls = [
        ("/openai/responses", lambda: _azure(served.url).responses.with_raw_response),
        ("/openai/v1/responses", lambda: _azure_v1(served.url).responses.with_raw_response),
    ]
    for path, responses in calls:
        raw = responses().create(model="m", input=WEATHER, tools=responses_tools())
        assert raw.headers["x-toolgate-tools"] == f"3/{len(SPECS)}"
        assert served.fake.received[-1].path == path
    chat = _azure_v1(served.url).chat.completions.with_raw_response.create(
        model="m", messages=USER, tools=chat_tools()
    )
    assert chat.headers["x-toolgate-tools"] == f"3/{len(SPECS)}"
    assert served.fake.received[-1].path == "/openai/v1/chat/completions"
    assert "get_weather" in sent_names(served.fake)


@pytest.mark.parametrize("stream", [False, True])
def test_enforce_blocks_an_azure_call_to_a_tool_not_sent(enforcing: Served, stream: bool) -> None:
    served = enforcing
    served.fake.script.tool = "send_email"
    before = metric(served, "toolgate_gateway_answers_blocked_total", endpoint="openai")
    with pytest.raises(openai.APIError, match="send_email"):
        list(_consume(_azure(served.url).chat.completions.create(
            model="d", messages=USER, tools=chat_tools(), stream=stream)))  # fmt: skip
    after = metric(served, "toolgate_gateway_answers_blocked_total", endpoint="openai")
    assert after == before + 1
    with pytest.raises(openai.APIError, match="send_email"):
        list(_consume(_azure_v1(served.url).responses.create(
            model="m", input=WEATHER, tools=responses_tools(), stream=stream)))  # fmt: skip


# ---- which upstream ----


@pytest.fixture(scope="module")
def second_fake() -> Iterator[tuple[FakeUpstream, str]]:
    upstream = FakeUpstream()
    with serving(upstream.app) as url:
        yield upstream, url


def test_azure_and_vertex_go_to_their_own_upstream_with_its_key(
    fake: tuple[FakeUpstream, str], second_fake: tuple[FakeUpstream, str],
    shared_filter: ToolFilter, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    (public, public_url), (cloud, cloud_url) = fake, second_fake
    cloud.received.clear()
    monkeypatch.setenv("AZURE_KEY", "az-held")
    monkeypatch.setenv("VERTEX_KEY", "v-held")
    config = GatewayConfig(
        upstreams={
            "openai": Upstream(public_url), "gemini": Upstream(public_url),
            "azure": Upstream(cloud_url, "AZURE_KEY"), "vertex": Upstream(cloud_url, "VERTEX_KEY"),
        },
        default=RouteConfig(top_k=3),
    )  # fmt: skip
    with serving(Gateway(config, tool_filter=shared_filter).app) as url:
        _azure(url).chat.completions.create(model="d", messages=USER, tools=chat_tools())
        azure = cloud.received[-1]
        assert azure.path == "/openai/deployments/d/chat/completions"
        assert azure.headers["api-key"] == "az-held"
        assert "authorization" not in azure.headers
        assert len(sent_names(cloud)) == 3
        _vertex(url, "project").models.generate_content(
            model="g", contents=WEATHER, config=genai_config()
        )
        vertex = cloud.received[-1]
        assert vertex.path == VERTEX_PATHS["project"]
        assert vertex.headers["x-goog-api-key"] == "v-held"
        assert "authorization" not in vertex.headers
        # A Vertex AI passthrough (a token count) goes there too.
        _vertex(url, "project").models.count_tokens(model="g", contents=WEATHER)
        assert cloud.received[-1].path.endswith("/publishers/google/models/g:countTokens")
        assert len(cloud.received) == 3
        assert public.received == []


def test_azure_and_vertex_upstreams_are_named_in_a_config_and_on_the_command_line(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "gateway.toml"
    toml.write_text(
        '[upstreams.azure]\norigin = "https://r.openai.azure.com/"\napi_key_env = "AZ"\n'
    )
    azure = load_config(toml).upstreams["azure"]
    assert (azure.origin, azure.api_key_env) == ("https://r.openai.azure.com", "AZ")
    options = ServeOptions.parse("127.0.0.1:8080", ["vertex=https://aiplatform.googleapis.com"])
    assert options.upstreams == {"vertex": "https://aiplatform.googleapis.com"}


def test_a_request_with_no_upstream_names_both_flags(
    fake: tuple[FakeUpstream, str], shared_filter: ToolFilter
) -> None:
    _upstream, url = fake
    config = GatewayConfig(upstreams={"anthropic": Upstream(url)})
    with serving(Gateway(config, tool_filter=shared_filter).app) as base:
        with pytest.raises(genai_errors.APIError, match=r"--upstream gemini=URL"):
            _vertex(base, "api_key").models.generate_content(model="g", contents=WEATHER)
        with pytest.raises(openai.APIError, match=r"--upstream azure=URL \(or --upstream openai"):
            _azure(base).chat.completions.create(model="d", messages=USER)


def test_azure_and_vertex_credentials_never_fall_back_to_openai_or_gemini_itself(
    shared_filter: ToolFilter,
) -> None:
    sent: list[httpx.Request] = []

    def vendor(request: httpx.Request) -> httpx.Response:  # stands for OpenAI's and Google's
        sent.append(request)
        return httpx.Response(404, json={"error": {"message": "not here"}})

    origins = {
        "openai": "https://api.openai.com",
        "gemini": "https://generativelanguage.googleapis.com",
    }
    config = GatewayConfig(upstreams={name: Upstream(o) for name, o in origins.items()})
    gateway = Gateway(config, tool_filter=shared_filter, transport=httpx.MockTransport(vendor))
    with serving(gateway.app) as base:
        with pytest.raises(openai.APIError, match=r"OpenAI's own API.*--upstream azure=URL"):
            _azure(base).chat.completions.create(model="d", messages=USER)
        models = httpx.get(base + "/openai/deployments/d/models", headers={"api-key": "az-client"})
        assert models.status_code == 502
        with pytest.raises(genai_errors.APIError, match=r"--upstream vertex=URL"):
            _vertex(base, "project").models.generate_content(model="g", contents=WEATHER)
    assert sent == []


@pytest.mark.parametrize(
    ("origin", "upstream"),
    [
        ("https://my-resource.openai.azure.com", "openai"),
        ("http://127.0.0.1:8000", "openai"),
        ("https://api.openai.com", "azure"),
        ("https://eu.api.openai.com", "azure"),
        ("https://API.OpenAI.com.:443", "azure"),
    ],
)
def test_azure_falls_back_to_an_openai_upstream_that_is_not_openais_own(
    origin: str, upstream: str
) -> None:
    assert upstream_for("azure", {"openai": origin}) == upstream


# ---- paths ----


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1beta/models/g:generateContent", Endpoint("gemini", "gemini")),
        ("/v1beta/tunedModels/t:streamGenerateContent", Endpoint("gemini", "gemini")),
        ("/v1/publishers/google/models/g:generateContent", Endpoint("vertex", "gemini")),
        ("/v1/projects/p/locations/l/endpoints/123:streamGenerateContent",
         Endpoint("vertex", "gemini")),
        ("/openai/v1/responses", Endpoint("azure", "openai-responses")),
        ("/openai/deployments/d/chat/completions", Endpoint("azure", "openai")),
        ("/v1beta1/publishers/google/models/g:countTokens", None),
        ("/openai/deployments/d/embeddings", None),
        ("/v1/projects/p/locations/l/publishers/google/models/g:predict", None),
    ],
)  # fmt: skip
def test_the_path_selects_the_api_and_the_shape(path: str, endpoint: Endpoint | None) -> None:
    assert endpoint_of("POST", path) == endpoint


# ---- paths not filtered ----


def test_a_model_call_on_a_path_not_filtered_is_flagged_not_silent(
    annotating: Served, caplog: pytest.LogCaptureFixture
) -> None:
    served = annotating
    caplog.set_level(logging.WARNING, logger="toolgate.gateway")
    client = anthropic.AnthropicVertex(
        region="us-east5", project_id="proj", access_token="ya29.client",
        base_url=served.url + "/v1", max_retries=0,
    )  # fmt: skip
    SDK_CLIENTS.append(client)
    before = metric(served, "toolgate_gateway_unfiltered_total", upstream="gemini")
    for _ in range(2):
        raw = client.messages.with_raw_response.create(
            model="claude-x", max_tokens=16, messages=USER, tools=anthropic_tools()
        )
        assert raw.headers["x-toolgate-unfiltered"] == "1"
    received = served.fake.received[-1]
    assert received.path.endswith("/publishers/anthropic/models/claude-x:rawPredict")
    assert len(received.body["tools"]) == len(SPECS)  # as sent: the gateway cannot filter it
    after = metric(served, "toolgate_gateway_unfiltered_total", upstream="gemini")
    assert after == before + 2
    warnings = [r for r in caplog.records if "claude-x:rawPredict" in r.getMessage()]
    assert len(warnings) == 1  # once per path


def test_the_paths_warned_of_say_when_they_reach_their_bound(
    shared_filter: ToolFilter, caplog: pytest.LogCaptureFixture
) -> None:
    # Past the bound, a new path's model calls were passed through unfiltered without a word,
    # as if there were none: the last path warned of now says that no more are.
    gateway = Gateway(GatewayConfig(upstreams={"openai": Upstream("http://127.0.0.1:9")}),
                      tool_filter=shared_filter)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        for n in range(_WARNED_PATHS + 20):
            gateway._flag_unfiltered(f"/v{n}/chat/completions", "openai")
    warned = [r.getMessage() for r in caplog.records if "looks like a model call" in r.getMessage()]
    assert len(warned) == _WARNED_PATHS  # the first ones, then no more
    capped = [m for m in warned if "no more are logged" in m]
    assert len(capped) == 1
    assert f"/v{_WARNED_PATHS - 1}/" in capped[0]


def test_a_model_call_whose_path_holds_control_characters_is_logged_quoted(
    annotating: Served, caplog: pytest.LogCaptureFixture
) -> None:
    # Decoded, %1B is ESC: written raw, "ESC[2J" would clear the terminal reading the log.
    path = "/x%1B%5B2Jforged/chat/completions"
    with caplog.at_level(logging.INFO, logger="toolgate.gateway"):
        answer = httpx.post(annotating.url + path, json={"tools": chat_tools()})
    assert answer.headers["x-toolgate-unfiltered"] == "1"
    logged = [r.getMessage() for r in caplog.records if "forged" in r.getMessage()]
    assert any("looks like a model call" in line for line in logged)
    assert [line for line in logged if "\x1b" in line] == []


def test_a_model_call_path_holding_a_newline_is_one_still() -> None:
    assert unfiltered_call("POST", "/v1\n/chat/completions")


def test_other_passthroughs_are_not_flagged(annotating: Served) -> None:
    served = annotating
    listed = httpx.get(served.url + "/v1/models")
    assert "x-toolgate-unfiltered" not in listed.headers
    embedded = httpx.post(served.url + "/openai/deployments/d/embeddings", json={"input": "x"})
    assert "x-toolgate-unfiltered" not in embedded.headers
    assert served.fake.received[-1].path == "/openai/deployments/d/embeddings"
