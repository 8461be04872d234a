"""The runnable examples of a whole turn, one per provider (README.md lists them), run as
written: the request they build is the provider's shape, and the model's call passes and
is answered."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import CATALOGS, require
from toolgate import Catalog, Promotion, Router, Verdict

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


def test_host_overrides_gate_the_github_servers_write_tools(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tools_list = CATALOGS / "github-mcp-server.tools-list.json"
    require(tools_list)
    monkeypatch.setattr(sys, "argv", ["host_overrides.py", str(tools_list)])
    namespace = run_example("host_overrides.py")
    reader, admin = namespace["reader"], namespace["admin"]
    gated = {g.id: g.reason for g in reader.gated_out}
    assert "github/delete_file" not in reader.ids
    assert gated["github/delete_file"] == "requires scope:github:write, scope:github:admin"
    assert "github/delete_file" in admin.ids
    assert "reader: routed" in capsys.readouterr().out
    # Without the file the same state gates nothing: the server declares no preconditions.
    bare = Router.from_catalog(Catalog.load(tools_list, server="github"))
    assert "github/delete_file" in bare.route(namespace["query"], state={"scopes": []}, top_k=5).ids


def test_the_github_overrides_name_exactly_the_tools_that_write() -> None:
    tools_list = CATALOGS / "github-mcp-server.tools-list.json"
    require(tools_list)
    tools = json.loads(tools_list.read_text(encoding="utf-8"))["tools"]
    overrides = json.loads((EXAMPLES / "github.overrides.json").read_text(encoding="utf-8"))
    # A key naming no tool would gate nothing, silently: each must be one of the server's.
    writers = {t["name"] for t in tools if not t.get("annotations", {}).get("readOnlyHint")}
    assert set(overrides) == writers
    destructive = {t["name"] for t in tools if t.get("annotations", {}).get("destructiveHint")}
    for name, block in overrides.items():
        scopes = block["requires"]["scopes"]
        assert scopes == ["github:write", *(["github:admin"] if name in destructive else [])]
