"""The runnable examples of a whole turn, one per provider (README.md lists them), run as
written: the request they build is the provider's shape, and the model's call passes and
is answered."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from toolgate import Promotion, Verdict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str) -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def turn_of(namespace: dict[str, Any]) -> tuple[Promotion, Verdict, dict[str, Any]]:
    promotion, verdict, request = namespace["promotion"], namespace["verdict"], namespace["request"]
    assert isinstance(promotion, Promotion)
    assert isinstance(verdict, Verdict)
    assert verdict.ok, verdict.message
    assert promotion.pool_text.strip()
    return promotion, verdict, request


def test_every_example_is_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for example in sorted(EXAMPLES.glob("*.py")):
        assert f"examples/{example.name}" in readme, example.name


def test_openai_chat_turn() -> None:
    namespace = run_example("openai_chat.py")
    promotion, verdict, request = turn_of(namespace)
    assert verdict.tool_id == "github/create_issue"
    assert request["messages"][0] == {"role": "system", "content": promotion.pool_text}
    assert all(tool["type"] == "function" for tool in request["tools"])
    assert "create_issue" in [tool["function"]["name"] for tool in request["tools"]]
    answer = namespace["messages"][-1]
    assert (answer["role"], answer["tool_call_id"]) == ("tool", "call_1")
    assert json.loads(answer["content"])["title"] == "Flaky login test"


def test_openai_responses_turn() -> None:
    namespace = run_example("openai_responses.py")
    promotion, verdict, request = turn_of(namespace)
    assert verdict.tool_id == "github/list_pull_requests"
    assert request["instructions"] == promotion.pool_text
    assert all(tool["type"] == "function" and "name" in tool for tool in request["tools"])
    answer = namespace["items"][-1]
    assert (answer["type"], answer["call_id"]) == ("function_call_output", "call_1")


def test_gemini_turn_wraps_the_declarations() -> None:
    namespace = run_example("gemini.py")
    promotion, verdict, request = turn_of(namespace)
    assert verdict.tool_id == "github/search_code"
    [wrapper] = request["tools"]
    assert [d["name"] for d in wrapper["functionDeclarations"]] == [
        t["name"] for t in promotion.tools
    ]
    assert "search_code" in [d["name"] for d in wrapper["functionDeclarations"]]
    answer = namespace["contents"][-1]["parts"][0]["functionResponse"]
    assert answer["name"] == "search_code"


def test_mcp_host_turn_reaches_the_server() -> None:
    pytest.importorskip("mcp")
    namespace = run_example("mcp_host.py")
    outcome, request = namespace["outcome"], namespace["request"]
    assert outcome.verdict.ok
    assert outcome.server == "github"
    assert outcome.result.content[0].text == "opened 'Flaky login test' in acme/web"
    assert "create_issue" in [tool["name"] for tool in request["tools"]]
