"""LLM requests of each provider: where their conversation, user turn, tools and tool choice are."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.formats import anthropic, gemini, openai
from toolgate.formats.calls import call_name, plain_json
from toolgate.formats.gemini_fields import DECLARATIONS, SpellingClash, field_key
from toolgate.formats.raw import DEFAULT_SERVER, RawTool
from toolgate.formats.text_tags import without_reminders
from toolgate.unicode import trimmed

# The key holding a request's conversation, and its provider ("messages": Chat or Anthropic).
_CONVERSATION = {"messages": "anthropic", "input": "openai-responses", "contents": "gemini"}


# Keys a provider refuses in a request that carries no tools.
TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls", "toolConfig", "tool_config")


# One tool's tag pair, as text_tags.strip_tool_tags matches them, with the name captured.
# As the parser pairs them, a description belongs to the name before it even with text
# between (but not past the next name).
_TAG_PAIR = re.compile(
    r"<toolname>(.*?)</toolname>(?:(?:(?!<toolname>).)*?<tooldescription>.*?</tooldescription>)?"
    r"\s*",
    re.DOTALL,
)


Slot = tuple[int, int | None]  # a routable tool: its index in tools, and in the declarations


# The key of each request shape's conversation.
_KEY_OF = {"openai": "messages", "anthropic": "messages", "openai-responses": "input",
           "gemini": "contents"}  # fmt: skip
SHAPES = tuple(_KEY_OF)


def request_shape(request: Mapping[str, Any], shape: str | None = None) -> tuple[str, str]:
    """The key holding the conversation, and the provider the request is shaped for.

    ``shape`` (one of :data:`SHAPES`), the shape the caller knows the request has (the
    gateway's endpoint), is taken when the body holds its key: a ``messages`` body without
    Chat tools is no Anthropic one on a Chat endpoint. A Responses request may have no
    ``input`` (a stored ``prompt`` holds its conversation): its key is then ``input``, and
    :func:`messages_of` reads no messages. Without ``shape`` the body's keys tell.
    """
    if shape is not None and (_KEY_OF[shape] in request or shape == "openai-responses"):
        return _KEY_OF[shape], shape
    keys = [key for key in _CONVERSATION if key in request]
    if len(keys) != 1:
        found = f"both {keys[0]!r} and {keys[1]!r}" if keys else f"keys {sorted(map(str, request))}"
        raise InvalidInputError(
            "expected an OpenAI Chat or Anthropic ('messages'), OpenAI Responses ('input') or "
            f"Gemini ('contents') request, got {found}"
        )
    key = keys[0]
    if key != "messages":
        return key, _CONVERSATION[key]
    tools = request.get("tools")
    chat = isinstance(tools, list) and any(_is_chat_tool(tool) for tool in tools)
    return key, "openai" if chat else "anthropic"


def _is_chat_tool(tool: Any) -> bool:
    """An OpenAI Chat tool: a function, or a free-form ``custom`` one (its body under
    ``custom``; Anthropic's ``type: "custom"`` tools carry theirs at the top level)."""
    if not isinstance(tool, Mapping):
        return False
    return tool.get("type") == "function" or (tool.get("type") == "custom" and "custom" in tool)


def messages_of(request: Mapping[str, Any], key: str) -> list[Any]:
    """The request's messages; a Responses ``input`` string is one user message, and none
    is none (its stored prompt holds them)."""
    if key == "input" and key not in request:
        return []
    value = request[key]
    if isinstance(value, str) and key == "input":
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise InvalidInputError(f"{key!r} must be a list of messages, got {type(value).__name__}")
    return value


def plain_messages(messages: list[Any]) -> list[Any]:
    """``messages`` with the provider SDKs' objects in them read as the JSON they are sent as:
    a message (OpenAI's ``ChatCompletionMessage``, LiteLLM's ``Message``, a Responses output
    item) or a content block (Anthropic's ``ToolUseBlock``), as an agent loop appends a
    response's own to its conversation. Plain messages are kept as given."""
    out = []
    for message in messages:
        message = plain_json(message)
        key = "parts" if isinstance(message, Mapping) and "parts" in message else "content"
        body = message.get(key) if isinstance(message, Mapping) else None
        if isinstance(body, list) and not all(isinstance(b, (Mapping, str)) for b in body):
            message = {**message, key: [plain_json(block) for block in body]}
        out.append(message)
    return out


def _text(message: Mapping[str, Any]) -> str:
    """A message's own text: string content, or its text blocks (not tool results, images),
    without Claude Code's ``<system-reminder>`` elements. Those are left out block by block:
    in the joined text, a user's block naming the tag would reach to a later reminder's
    closing tag, and the user's words in between would go with it."""
    body = message.get("parts", message.get("content"))
    if isinstance(body, str):
        return without_reminders(body)
    if not isinstance(body, list):
        return ""
    return "\n".join(without_reminders(b["text"]) for b in body if _is_text(b))


def _is_text(block: Any) -> bool:
    return isinstance(block, Mapping) and isinstance(block.get("text"), str)


def last_user_turn(messages: list[Any], provider: str) -> tuple[int, str] | None:
    """The position and text of the last user message that asks: has text (besides Claude
    Code's ``<system-reminder>`` elements, left out of it), and answers no tool call; None
    when there is none, or when the last one that answers none holds content but no text
    (an image, audio or a file alone): it asks something toolgate cannot read, and the turn
    before it is not what it asks.

    A user turn carrying tool results (Anthropic ``tool_result`` blocks, Gemini
    ``functionResponse`` parts) is passed over even when text rides with them (Claude
    Code's ``<system-reminder>``, a "continue"): it answers the model mid-task, and the
    task is the request before it. A Gemini content without a role is the user's.
    """
    found = _last_ask(messages, provider)
    return found if found is not None and found[1] else None


def asks_unreadably(messages: list[Any], provider: str) -> bool:
    """Whether the last user message that asks (as :func:`last_user_turn` reads them) holds
    content but no text: a new request toolgate cannot read, not a follow-up of results."""
    found = _last_ask(messages, provider)
    return found is not None and not found[1]


def _last_ask(messages: list[Any], provider: str) -> tuple[int, str] | None:
    """The last user message that answers no call and has text or other content: its
    position and text ("" when it holds no text)."""
    default_role = "user" if provider == "gemini" else None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, Mapping) or message.get("role", default_role) != "user":
            continue
        if _answers_calls(message):
            continue
        # A zero-width space alone asks nothing, nor a client's reminders alone.
        text = trimmed(_text(message))
        if text or _holds_content(message):
            return index, text
    return None


def _holds_content(message: Mapping[str, Any]) -> bool:
    """Whether a message's blocks or parts hold something besides text (an image, audio, a
    file, a part type newer than toolgate)."""
    body = message.get("parts", message.get("content"))
    return isinstance(body, list) and any(not _is_text(block) for block in body)


# What marks a content block or part as the answer to a tool call.
_RESULT_TYPES = ("tool_result", "function_call_output")
_RESULT_KEYS = ("functionResponse", "function_response")


def _answers_calls(message: Mapping[str, Any]) -> bool:
    """Whether a message's blocks or parts hold a tool call's result."""
    body = message.get("parts", message.get("content"))
    return isinstance(body, list) and any(
        isinstance(block, Mapping)
        and (block.get("type") in _RESULT_TYPES or any(k in block for k in _RESULT_KEYS))
        for block in body
    )


@dataclass(frozen=True)
class ToolChoice:
    """What a request's tool choice asks: tool calls off, some call required (OpenAI
    ``"required"``, Anthropic ``{"type": "any"}``, Gemini mode ``ANY``), the tool names
    it forces or allows, and whether the tools it allows (OpenAI ``allowed_tools``) take in
    one that is no function tool (an MCP server, a built-in or custom tool), which routing
    never drops."""

    off: bool = False
    required: bool = False
    names: frozenset[str] = frozenset()
    unrouted: bool = False


def read_tool_choice(request: Mapping[str, Any]) -> ToolChoice:
    """The request's tool choice (OpenAI, Anthropic or Gemini ``toolConfig``)."""
    choice = request.get("tool_choice")
    calling = _field(_field(request, "toolConfig"), "functionCallingConfig")
    mode = _field(calling, "mode")
    # A mode is a string; str() of any other value (a list nested 1,000 deep) may fail.
    mode = mode.upper() if isinstance(mode, str) else ""
    if choice == "none" or (isinstance(choice, Mapping) and choice.get("type") == "none"):
        return ToolChoice(off=True)
    if mode == "NONE":
        return ToolChoice(off=True)
    names: set[str] = set()
    required = choice == "required" or mode == "ANY"
    unrouted = False
    if isinstance(choice, Mapping) and choice.get("type") in ("function", "tool"):
        names.update(_choice_names([choice]))
    if isinstance(choice, Mapping) and choice.get("type") == "any":
        required = True
    if isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        # OpenAI: Chat nests the list under "allowed_tools", Responses does not.
        allowed_tools = choice.get("allowed_tools", choice)
        if isinstance(allowed_tools, Mapping):
            listed = allowed_tools.get("tools")
            listed = listed if isinstance(listed, list) else []
            names.update(_choice_names(listed))
            required = required or allowed_tools.get("mode") == "required"
            unrouted = any(isinstance(e, Mapping) and e.get("type") != "function" for e in listed)
    allowed = _field(calling, "allowedFunctionNames")
    if isinstance(allowed, list):
        names.update(name for name in allowed if isinstance(name, str))
    return ToolChoice(required=required, names=frozenset(names), unrouted=unrouted)


def called_tools(messages: list[Any]) -> frozenset[str]:
    """The names of the tools a conversation's earlier turns called, in any provider's
    shape: Chat ``tool_calls`` (and legacy ``function_call``), Responses ``function_call``
    items, Anthropic ``tool_use`` blocks, Gemini ``functionCall`` parts."""
    calls: list[Any] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("type") == "function_call":
            calls.append(message)
        tool_calls = message.get("tool_calls")
        calls += tool_calls if isinstance(tool_calls, list) else []
        if isinstance(message.get("function_call"), Mapping):
            calls.append({"function_call": message["function_call"]})
        body = message.get("parts", message.get("content"))
        for block in body if isinstance(body, list) else ():
            if isinstance(block, Mapping) and (
                block.get("type") == "tool_use" or "functionCall" in block
                or "function_call" in block
            ):  # fmt: skip
                calls.append(block)
    return frozenset(name for name in map(call_name, calls) if name)


def referenced_tools(messages: list[Any]) -> frozenset[str]:
    """The names of the tools an Anthropic tool search loaded: the ``tool_reference`` blocks
    of a conversation, in a client tool's ``tool_result`` or a server search's
    ``tool_search_tool_result``. The provider expands each from the request's tools, and
    refuses a request that no longer declares it."""
    names: set[str] = set()
    for message in messages:
        if isinstance(message, Mapping):
            _references(message.get("content"), names, depth=0)
    return frozenset(names)


# How deep tool references sit: message content > tool result > its content > a search
# result > its references list > the reference.
_REFERENCE_DEPTH = 6


def _references(value: Any, names: set[str], depth: int) -> None:
    """Adds to ``names`` those of the ``tool_reference`` blocks in ``value``, looking only
    where results hold them (``content``, ``tool_references``), never in a call's input."""
    if depth > _REFERENCE_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            _references(item, names, depth + 1)
    elif isinstance(value, Mapping):
        if value.get("type") == "tool_reference" and isinstance(value.get("tool_name"), str):
            names.add(value["tool_name"])
        for key in ("content", "tool_references"):
            _references(value.get(key), names, depth + 1)


def _choice_names(entries: list[Any]) -> set[str]:
    """The tool names in tool-choice entries (``{"type": "function", "function": {"name"}}``,
    ``{"type": "function", "name"}`` or Anthropic's ``{"type": "tool", "name"}``)."""
    names = set()
    for entry in entries:
        inner = entry.get("function", entry) if isinstance(entry, Mapping) else None
        if isinstance(inner, Mapping) and isinstance(inner.get("name"), str):
            names.add(inner["name"])
    return names


def _field(obj: Any, camel: str) -> Any:
    """``obj[camel]`` or its snake_case spelling (Gemini takes both), else ``None``."""
    if not isinstance(obj, Mapping):
        return None
    key = _key(obj, camel)
    return None if key is None else obj[key]


def routable_tools(tools: list[Any], provider: str, *, deferred: bool = False) -> list[Slot]:
    """Where each function tool of ``tools`` sits: its index, and for a Gemini declaration
    list the declaration's index in it.

    A function tool is one the provider runs in the application: OpenAI ``type: function``,
    an Anthropic tool without a ``type`` (or ``custom``), a Gemini function declaration.
    One deferred to a tool search (:func:`defers`) is not routed, and left out unless
    ``deferred``. Reading them is :func:`read_slots`, kept apart: a tools array seen before
    is served by its cached router, and for a large array parsing it would be most of a call.
    """
    slots: list[Slot] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InvalidInputError(f"tools[{i}] must be a JSON object, got {type(tool).__name__}")
        if provider == "gemini" and gemini.is_wrapper(tool):
            declared = gemini.parse_wrapper(tool, f"tools[{i}]", DEFAULT_SERVER)
            slots += [(i, j) for j in range(len(declared))]
        elif _runs_in_application(tool, provider) and (deferred or not defers(tool)):
            slots.append((i, None))
    return slots


def other_tool_names(tools: list[Any], routable: Collection[int]) -> frozenset[str]:
    """The names of the entries of ``tools`` not at ``routable`` (not function tools): the
    provider's tools that have one (Anthropic's ``web_search``, its client tools ``bash``,
    ``str_replace_based_edit_tool``, ``computer``, ``memory``), custom tools (OpenAI Chat's
    under ``custom``), deferred ones, and the tools of an OpenAI Responses ``namespace``, as
    ``namespace.name`` (:func:`qualified_name`: a call names both), not the namespace itself:
    it only groups them, and no call may name it. Routing leaves them as they are."""
    names = set()
    for i, tool in enumerate(tools):
        if i in routable or not isinstance(tool, Mapping):
            continue
        name = _tool_name(tool)
        if isinstance(name, str) and tool.get("type") != "namespace":
            names.add(name)
        grouped = tool.get("tools") if tool.get("type") == "namespace" else None
        for entry in grouped if isinstance(grouped, list) and isinstance(name, str) else ():
            if isinstance(entry, Mapping) and isinstance(inner := _tool_name(entry), str):
                names.add(qualified_name(name, inner))
    return frozenset(names)


def qualified_name(namespace: str | None, name: str) -> str:
    """``name`` as a tool of an OpenAI Responses ``namespace`` (none: itself). Tool names hold
    no dot, so none of a tool outside a namespace reads as one inside."""
    return f"{namespace}.{name}" if namespace else name


def unqualified_names(names: frozenset[str]) -> frozenset[str]:
    """``names`` without their namespaces: as a tool choice names a tool of a namespace."""
    return frozenset(name.rpartition(".")[2] for name in names)


def _tool_name(tool: Mapping[str, Any]) -> Any:
    """The name of an entry that is no function tool (an OpenAI Chat custom tool's is under
    ``custom``)."""
    inner = tool.get("custom") if tool.get("type") == "custom" else None
    return (inner if isinstance(inner, Mapping) else tool).get("name")


def read_slots(tools: list[Any], slots: Collection[Slot], provider: str) -> list[RawTool]:
    """The function tools at ``slots`` of ``tools`` (as :func:`routable_tools` found them)."""
    parse = anthropic.parse_tool if provider == "anthropic" else openai.parse_tool
    declared: dict[int, list[RawTool]] = {}
    out = []
    for i, j in slots:
        if j is None:
            out.append(parse(tools[i], f"tools[{i}]", DEFAULT_SERVER))
            continue
        if i not in declared:
            declared[i] = gemini.parse_wrapper(tools[i], f"tools[{i}]", DEFAULT_SERVER)
        out.append(declared[i][j])
    return out


def _runs_in_application(tool: Mapping[str, Any], provider: str) -> bool:
    """An OpenAI or Anthropic tool the application runs (not one the provider runs)."""
    if provider == "anthropic":
        return bool(tool.get("type", "custom") == "custom")
    return provider.startswith("openai") and tool.get("type") == "function"


def defers(tool: Mapping[str, Any]) -> bool:
    """Whether ``tool`` defers loading tools to a tool search (``defer_loading``: Anthropic's
    tool search, OpenAI Responses' ``tool_search``; an Anthropic MCP toolset's default or
    per-tool config): such tools cost no context until a search loads them."""
    if tool.get("defer_loading") is True:
        return True
    if tool.get("type") != "mcp_toolset":
        return False
    default, configs = tool.get("default_config"), tool.get("configs")
    listed = [default, *(configs.values() if isinstance(configs, Mapping) else ())]
    return any(isinstance(c, Mapping) and c.get("defer_loading") is True for c in listed)


def kept_entries(
    tools: list[Any], keep: list[Slot], routable: Collection[int], gemini: bool
) -> list[tuple[int, Any]]:
    """``tools`` without the function tools not in ``keep``: each kept entry, as given, with
    its position.

    A Gemini entry losing some declarations becomes a copy with the rest; one losing all of
    them goes, since an empty declaration list declares nothing. (Only a Gemini request has
    declaration lists to look for.)
    """
    declarations: dict[int, list[int]] = {}
    for i, j in keep:
        declarations.setdefault(i, []).extend(() if j is None else (j,))
    out: list[tuple[int, Any]] = []
    for i, tool in enumerate(tools):
        rows = declarations.get(i)
        key = (field_key(tool, DECLARATIONS) or "") if gemini else ""
        if rows and key and isinstance(tool[key], list) and len(rows) < len(tool[key]):
            out.append((i, {**tool, key: [tool[key][j] for j in rows]}))
        elif i not in routable or rows is not None:
            out.append((i, tool))
        elif key and len(tool) > 1:  # the entry also switches on a built-in (codeExecution)
            out.append((i, {k: v for k, v in tool.items() if k != key}))
    return out


def put_tools(out: dict[str, Any], tools: list[Any], kept: list[Any], provider: str) -> None:
    """Give ``out`` the ``kept`` entries of its request's ``tools``, Anthropic's cache marker
    carried to the last (a left-out tool may have held it); with none kept, no tool keys at
    all (a provider refuses an empty tools array beside a tool choice); a Gemini request
    left with built-in tools alone, without its function calling config."""
    if provider == "anthropic":
        kept = carry_cache_marker(tools, kept)
    if provider == "gemini":
        drop_function_config(out, tools, kept)
    if kept:
        out["tools"] = kept
    else:
        drop_tool_keys(out)


def drop_tool_keys(request: dict[str, Any]) -> None:
    """Remove the tool keys of ``request`` (a copy the caller owns) left with no tool: a
    provider refuses a tool choice without tools.

    An Anthropic request whose ``mcp_servers`` still offer tools (the first MCP connector
    declares them there, not in ``tools``) and whose tool choice is none is refused instead:
    without the choice the model could call the tools the client shut off.
    """
    choice = request.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "none" and _serves_mcp(request):
        raise InvalidInputError(
            "the request's tool choice is none, but no tool of its 'tools' is left (the allow "
            "/ deny lists shut them out) and a tool choice needs tools: dropping it would let "
            "the model call the tools of its mcp_servers. Leave out mcp_servers, or keep a tool"
        )
    for name in TOOL_KEYS:
        request.pop(name, None)


def _serves_mcp(request: Mapping[str, Any]) -> bool:
    """Whether an entry of the request's ``mcp_servers`` offers tools (its
    ``tool_configuration`` does not turn them off)."""
    servers = request.get("mcp_servers")
    configs = [s.get("tool_configuration") for s in _items(servers) if isinstance(s, Mapping)]
    return any(not isinstance(c, Mapping) or c.get("enabled") is not False for c in configs)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def carry_cache_marker(tools: list[Any], kept: list[Any]) -> list[Any]:
    """``kept`` with Anthropic's ``cache_control`` marker on its last tool loaded up front,
    when the tool that carried it in ``tools`` was filtered out.

    The marker caches the tools block up to it; losing it with its tool would silently turn
    the application's prompt caching off. A deferred tool never takes it: Anthropic refuses
    a tool holding both (400), and deferred tools are no part of the cached prefix anyway.
    """
    marker = next((t["cache_control"] for t in reversed(tools) if "cache_control" in t), None)
    if marker is None or any("cache_control" in t for t in kept):
        return kept
    last = next((i for i in reversed(range(len(kept))) if not defers(kept[i])), None)
    if last is None:
        return kept
    return [*kept[:last], {**kept[last], "cache_control": marker}, *kept[last + 1 :]]


def drop_function_config(request: dict[str, Any], tools: list[Any], kept: list[Any]) -> None:
    """Remove the ``functionCallingConfig`` of a Gemini ``request`` (a copy the caller owns)
    whose ``kept`` tools declare no function where its ``tools`` did: only built-in tools
    (``googleSearch``...) are left, and the Gemini API and Vertex AI refuse the request
    ("Function calling config is set without function_declarations"). The rest of its tool
    config (``retrievalConfig``) stays; a tool config left empty goes."""
    if not _declares_functions(tools) or _declares_functions(kept):
        return
    config_key = _key(request, "toolConfig")
    if config_key is None or not isinstance(config := request[config_key], Mapping):
        return
    calling_key = _key(config, "functionCallingConfig")
    if calling_key is None:
        return
    rest = {k: v for k, v in config.items() if k != calling_key}
    if rest:
        request[config_key] = rest
    else:
        del request[config_key]


def _declares_functions(tools: list[Any]) -> bool:
    """Whether an entry of a Gemini ``tools`` list declares a function."""
    for tool in tools:
        key = _key(tool, DECLARATIONS) if isinstance(tool, Mapping) else None
        if key is not None and isinstance(tool[key], list) and tool[key]:
            return True
    return False


def _key(obj: Mapping[str, Any], camel: str) -> str | None:
    """The key under which ``obj`` gives ``camel`` (in either spelling), or ``None``."""
    try:
        return field_key(obj, camel)
    except SpellingClash as clash:
        raise InvalidInputError(f"the request {clash}") from None


def keep_tags(text: str, names: set[str]) -> str:
    """``text`` without the tag pairs of tools not in ``names``.

    text_tags has only :func:`~toolgate.formats.text_tags.strip_tool_tags`, which removes
    every pair; this keeps the routed ones, read by name as the parser reads them.
    """

    def pair(match: re.Match[str]) -> str:
        return match.group(0) if html.unescape(match.group(1).strip()) in names else ""

    return _TAG_PAIR.sub(pair, text)


def text_rewriter(
    rewrite: Callable[[str], str],
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function applying ``rewrite`` to a message's text (string content or text blocks)."""

    def message(msg: Mapping[str, Any]) -> dict[str, Any]:
        key = "parts" if "parts" in msg else "content"
        body = msg.get(key)
        if isinstance(body, str):
            return {**msg, key: rewrite(body)}
        blocks = [{**b, "text": rewrite(b["text"])} if _is_text(b) else b for b in body or ()]
        return {**msg, key: blocks}

    return message
