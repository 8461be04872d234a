"""LangChain: the model's tool calls checked before the agent runs them.

A call to a tool the model call that made it was not shown is not run: the model gets the
verdict of :func:`toolgate.verify.verify_name` as the tool's error result, and a tool it asked
for that exists is routed on its next call as if named. What each model call was shown is kept
in the agent's state under :data:`OFFERED` (see
:class:`~toolgate.integrations.langchain.ToolgateMiddleware`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toolgate.formats.raw import RawTool
from toolgate.gateway.choosing import shut_out_read
from toolgate.integrations import needs_extra
from toolgate.verify import Verdict, verify_name

with needs_extra("langchain"):
    from langchain.agents.middleware import ToolCallRequest
    from langchain_core.messages import AIMessage, ToolCall, ToolMessage

__all__ = ["OFFERED", "asked_for", "refusal"]

#: The agent state's key for the names of the tools the latest model call was shown.
OFFERED = "toolgate_offered"


def refusal(
    request: ToolCallRequest, allow: Iterable[str] | None, deny: Iterable[str] | None
) -> ToolMessage | None:
    """The error result for a call to a tool the model was not shown, or None to run it.

    The check is of the model's own calls: a call that middleware listed before this one
    pointed at another tool (a human reviewer's edit) is that middleware's choice, and runs,
    unless the ``allow`` / ``deny`` lists shut that tool out: they are the operator's, and
    hold whoever chose the call.
    """
    state = request.state
    offered = state.get(OFFERED) if isinstance(state, Mapping) else getattr(state, OFFERED, None)
    if offered is None:
        return None
    call = request.tool_call
    own = _models_call(state, call["id"])
    if own is not None and own["name"] != call["name"]:
        if not shut_out_read([RawTool("tool_call", name=call["name"])], allow, deny):
            return None
        message = f"The tool {call['name']!r} is shut out by the allow / deny lists: not run."
        verdict = Verdict(
            False, "tool_not_available", name=call["name"], call_id=call["id"], message=message
        )
    else:
        known = [call["name"]] if request.tool is not None else []
        arguments = {"name": call["name"], "arguments": call["args"]}
        verdict = verify_name(arguments, offered, known=known)
        if verdict.ok:
            return None
    return ToolMessage(
        content=verdict.to_tool_result("openai")["content"],
        name=call["name"],
        tool_call_id=call["id"] or "",
        status="error",
        artifact={"toolgate": verdict.to_dict()},
    )


def _models_call(state: Any, call_id: str | None) -> ToolCall | None:
    """The call with id ``call_id`` in the model's latest message, as the model made it."""
    if isinstance(state, Mapping):
        messages = state.get("messages")
    else:
        messages = getattr(state, "messages", None)
    if not call_id or not isinstance(messages, Sequence):
        return None
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return next((c for c in message.tool_calls if c["id"] == call_id), None)
    return None


def asked_for(messages: Sequence[Any]) -> list[str]:
    """The existing tools the model asked for since its last message and was refused as not
    shown: routed on its next call as if named."""
    names = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        artifact = message.artifact
        verdict = artifact.get("toolgate") if isinstance(artifact, Mapping) else None
        if isinstance(verdict, Mapping) and verdict.get("error") == "tool_not_available":
            names.append(str(verdict.get("name")))
    return names
