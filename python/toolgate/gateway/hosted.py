"""Calls a model makes to hosted tools (OpenAI Responses ``web_search_call``, ``mcp_call``...,
Anthropic ``server_tool_use`` and ``mcp_tool_use``), checked against the hosted tools the
request offered.

Such a call names no function tool, and its input is the provider's to define, so it is
checked by what offers it: a Responses item by the tool type its own type stands for (an
``mcp_call`` by its server's ``server_label`` and ``allowed_tools``), an Anthropic server tool
by its name, an Anthropic MCP tool by its ``mcp_servers`` entry and that server's tool
configuration (``tool_configuration``, or the ``mcp_toolset`` naming it). Like the other
tools routing leaves alone, they are not held to the allow / deny lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.arguments import shown
from toolgate.formats import genai_sdk
from toolgate.formats.calls import parse_tool_call, plain_json
from toolgate.gateway.filtered import TOOLS_ELSEWHERE, FilteredRequest
from toolgate.verify import Verdict

__all__ = ["verify_hosted"]

# A Responses output item calling a hosted tool -> the tool type offering it (a versioned
# type, web_search_2025_08_26 or web_search_preview, offers it too).
_RESPONSES_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
    "computer_call": "computer",
    "tool_search_call": "tool_search",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcp",
    "mcp_approval_request": "mcp",
}
_ANTHROPIC_BLOCKS = ("server_tool_use", "mcp_tool_use")


def verify_hosted(call: Any, filtered: FilteredRequest) -> Verdict | None:
    """The verdict on ``call`` when it is a call to a hosted tool (see the module), else
    None: ``unknown_tool`` when the request offered no such tool, ``tool_not_available``
    when it offered the MCP server but its configuration leaves the tool out."""
    call = plain_json(call)
    kind = call.get("type") if isinstance(call, Mapping) else None
    if kind not in _RESPONSES_ITEMS and kind not in _ANTHROPIC_BLOCKS:
        return None
    request = filtered.request
    lifted = genai_sdk.lift(request)
    request = lifted.request if lifted is not None else request
    listed = request.get("tools")
    if listed is None and any(key in request for key in TOOLS_ELSEWHERE):
        return _passed(call)  # its tools cannot be read: as verify_by_name lets it through
    tools = [t for t in listed if isinstance(t, Mapping)] if isinstance(listed, list) else []
    if kind == "server_tool_use":
        name = call.get("name")
        offered = any(t.get("name") == name and t.get("type") not in (None, "custom")
                      for t in tools)  # fmt: skip
        return _passed(call) if offered else _refused(call, f"a server tool {shown(name)}")
    if kind == "mcp_tool_use":
        return _anthropic_mcp(call, request, tools)
    family = _RESPONSES_ITEMS[kind]
    if family == "mcp":
        return _responses_mcp(call, tools)
    if any(_offers(t.get("type"), family) for t in tools):
        return _passed(call)
    return _refused(call, f"a {family} tool")


def _offers(tool_type: Any, family: str) -> bool:
    """Whether a tool of ``tool_type`` is one of ``family`` (itself or a version of it)."""
    return isinstance(tool_type, str) and (
        tool_type == family or tool_type.startswith(family + "_")
    )


def _responses_mcp(call: Mapping[str, Any], tools: list[Mapping[str, Any]]) -> Verdict:
    """A Responses MCP item, checked against the ``mcp`` tool of its ``server_label``."""
    label = call.get("server_label")
    server = next((t for t in tools if t.get("type") == "mcp" and t.get("server_label") == label),
                  None)  # fmt: skip
    if server is None:
        return _refused(call, f"an MCP server {shown(label)}")
    allowed = server.get("allowed_tools")
    if isinstance(allowed, Mapping):  # a filter: {"tool_names": [...], "read_only": ...}
        allowed = allowed.get("tool_names")
    name = call.get("name")
    if isinstance(name, str) and isinstance(allowed, list) and name not in allowed:
        return _left_out(call, f"MCP server {shown(label)}'s allowed_tools")
    return _passed(call)


def _anthropic_mcp(
    call: Mapping[str, Any], request: Mapping[str, Any], tools: list[Mapping[str, Any]]
) -> Verdict:
    """An Anthropic ``mcp_tool_use``, checked against the ``mcp_servers`` entry it names and
    that server's tool configuration: its ``mcp_toolset`` (the current connector), else its
    ``tool_configuration`` (the first)."""
    server_name, name = call.get("server_name"), call.get("name")
    servers = request.get("mcp_servers")
    servers = servers if isinstance(servers, list) else []
    server = next((s for s in servers if isinstance(s, Mapping) and s.get("name") == server_name),
                  None)  # fmt: skip
    if server is None:
        return _refused(call, f"an MCP server {shown(server_name)}")
    toolset = next(
        (t for t in tools if t.get("type") == "mcp_toolset"
         and t.get("mcp_server_name") == server_name),
        None,
    )  # fmt: skip
    if toolset is not None:
        default, configs = toolset.get("default_config"), toolset.get("configs")
        own = configs.get(name) if isinstance(configs, Mapping) and isinstance(name, str) else None
        enabled = _enabled(own, _enabled(default, True))
        where = f"the mcp_toolset of MCP server {shown(server_name)}"
        return _passed(call) if enabled else _left_out(call, where)
    config = server.get("tool_configuration")
    config = config if isinstance(config, Mapping) else {}
    allowed = config.get("allowed_tools")
    if config.get("enabled") is False or (isinstance(allowed, list) and name not in allowed):
        return _left_out(call, f"MCP server {shown(server_name)}'s tool_configuration")
    return _passed(call)


def _enabled(config: Any, otherwise: bool) -> bool:
    """A tool config's ``enabled``, or ``otherwise`` where it says nothing."""
    value = config.get("enabled") if isinstance(config, Mapping) else None
    return value if isinstance(value, bool) else otherwise


def _name(call: Mapping[str, Any]) -> str:
    """What a hosted call is reported under: the tool it names, else its item type."""
    name = call.get("name")
    return name if isinstance(name, str) and name else str(call.get("type"))


def _passed(call: Mapping[str, Any]) -> Verdict:
    return Verdict(True, name=_name(call), call_id=parse_tool_call(call).call_id)


def _refused(call: Mapping[str, Any], what: str) -> Verdict:
    # The names are the model's, of any length, and the message goes back to it: cut short.
    message = f"The model made a {call.get('type')} call, but the request did not offer {what}."
    return Verdict(False, "unknown_tool", name=_name(call), message=message,
                   call_id=parse_tool_call(call).call_id)  # fmt: skip


def _left_out(call: Mapping[str, Any], where: str) -> Verdict:
    name = _name(call)
    message = f"The model called MCP tool {shown(name)}, which {where} leaves out."
    return Verdict(False, "tool_not_available", name=name, message=message,
                   call_id=parse_tool_call(call).call_id)  # fmt: skip
