"""What :meth:`~toolgate.gateway.filter.ToolFilter.filter` returns: a request cut down to its
routed tools, with the routing behind it and what a later check of the model's call needs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgate.forks import BoundToProcess
from toolgate.formats import genai_sdk
from toolgate.formats.calls import call_name, parse_tool_call, plain_json
from toolgate.formats.raw import RawTool
from toolgate.formats.requests import (
    other_tool_names,
    qualified_name,
    read_slots,
    routable_tools,
)
from toolgate.gateway.choosing import shut_out_read
from toolgate.gateway.indexes import IndexedTools
from toolgate.promotion.budget import BudgetDecision
from toolgate.routing.result import RouteResult
from toolgate.verify import Verdict, verify_name

__all__ = ["FilteredRequest", "function_names", "verify_by_name", "verify_cut", "verify_other"]


@dataclass(frozen=True)
class FilteredRequest(BoundToProcess):
    """A request cut down to its routed tools, and the routing behind it.

    ``request`` is a new dict; the input is never modified (nested values that were not
    rewritten are shared with it, not copied). ``kept`` names the function tools kept, as the
    request names them, in request order; provider-side tools are kept too but not listed.
    ``positions`` are the indexes, in the request's ``tools`` array, of the entries kept
    (provider-side ones too), in order; empty for text tags.
    ``dropped_count`` counts the function tools removed. ``provider`` is the shape read:
    ``"openai"``, ``"openai-responses"``, ``"anthropic"``, ``"gemini"`` or ``"text_tags"``.
    When nothing was routed (tool calling off, no function tools, tools deferred to a tool
    search, no user text to route on: a system prompt or an image alone) ``result`` is
    empty, with form ``"none"``, and ``request`` is a copy of the input without the function
    tools the allow / deny lists shut out (``dropped_count`` counts them). ``budget`` is the
    decision of the budget given to :meth:`ToolFilter.filter`, if any. For a google-genai
    request object, ``request`` is an object of the same type.
    """

    _elsewhere = (
        "it holds the router its tools were indexed into: send filtered.request (or "
        "filtered.to_dict()), and verify the calls in the process that filtered"
    )

    request: Any
    result: RouteResult
    kept: tuple[str, ...]
    dropped_count: int
    provider: str
    positions: tuple[int, ...] = ()
    budget: BudgetDecision | None = None
    # What ToolFilter.verify checks a call against: the router of the tools read, and the
    # catalog ids kept (None when nothing was routed).
    _routed: IndexedTools | None = field(default=None, repr=False, compare=False)
    _active: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # The caller's allow / deny lists, which a call is checked against by name when nothing
    # was routed (the request went with its other tools).
    _allow: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    _deny: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    # The names of the tools routing left alone and sent as given (provider-side, client and
    # custom tools), a call to which passes by name; when nothing was routed, read from the
    # request's tools instead.
    _others: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # The names of the function tools and legacy functions the allow / deny lists took out of
    # the request and that no catalog holds (a Responses namespace's as ``namespace.name``): a
    # call to one is ``tool_not_available``, as a call to a routed tool left out is, not
    # ``unknown_tool``.
    _shut: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.kept)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kept)

    @property
    def no_tool(self) -> bool:
        """Whether the router judged that the request needs none of its tools: it keeps
        only those its tool choice names and those the conversation called
        (``RouteResult.no_tool``)."""
        return self.result.no_tool

    def __repr__(self) -> str:
        kept, dropped = list(self.kept), self.dropped_count
        return f"FilteredRequest({self.provider}, kept={kept}, dropped={dropped})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view for logs; the request itself is left out (large, user data)."""
        return {
            "provider": self.provider,
            "kept": list(self.kept),
            "dropped_count": self.dropped_count,
            "no_tool": self.no_tool,
            "result": self.result.to_dict(),
            "budget": None if self.budget is None else self.budget.to_dict(),
        }


def verify_by_name(call: Any, filtered: FilteredRequest) -> Verdict:
    """A call checked by name alone against the function tools a request was sent with (its
    ``tools``, and OpenAI Chat's legacy ``functions``).

    A request whose tools are declared where the gateway cannot read them (a Gemini
    ``cachedContent``, a Responses stored ``prompt``) and that carries none of its own lets
    any named call pass, unchecked: blocking it would block every call it makes. A tool the
    caller's allow / deny lists shut out never passes (``tool_not_available``).
    """
    request = filtered.request
    lifted = genai_sdk.lift(request)  # generate_content's arguments: read as REST
    if lifted is not None:
        request = lifted.request
    tools = request.get("tools")
    functions = request.get("functions")
    read: list[RawTool] = []
    if isinstance(tools, list) and filtered.provider != "text_tags":
        # A deferred tool a tool search loaded is one the request offered.
        slots = routable_tools(tools, filtered.provider, deferred=True)
        others = other_tool_names(tools, {i for i, _ in slots})
        if (passed := verify_other(call, others)) is not None:
            return passed
        read = read_slots(tools, slots, filtered.provider)
    if isinstance(functions, list):
        read += [
            RawTool(f"functions[{i}]", name=f["name"])
            for i, f in enumerate(functions)
            if isinstance(f, Mapping) and _named(f)
        ]
    if tools is None and functions is None and any(k in request for k in TOOLS_ELSEWHERE):
        name = call_name(call)
        read = [RawTool("the call", name=name)] if name else []
    shut = shut_out_read(read, filtered._allow, filtered._deny)
    named = [(k in shut, raw.name) for k, raw in enumerate(read) if isinstance(raw.name, str)]
    offered = [name for out, name in named if not out]
    known = [*(name for out, name in named if out), *filtered._shut]
    return verify_name(call, offered, known=known)


def verify_other(call: Any, others: frozenset[str]) -> Verdict | None:
    """A passing verdict for a call naming one of ``others``, the tools a request was sent
    that are no function tools (Anthropic's ``bash``, a custom tool): the application runs
    them, but their input is the provider's to define, not a schema's; else None."""
    call = plain_json(call)
    name, namespace = call_name(call), _namespace(call)
    if not name or qualified_name(namespace, name) not in others:
        return None
    return Verdict(True, name=name, call_id=parse_tool_call(call).call_id)


def verify_cut(call: Any, filtered: FilteredRequest) -> Verdict | None:
    """A ``tool_not_available`` verdict for a call, naming its namespace, to a function the
    allow / deny lists cut from a Responses namespace (a function of that name outside it
    must not let it pass); else None. (A call named ``namespace.name``, as a stream's is
    checked, is refused as any shut-out name is.)"""
    call = plain_json(call)
    name, namespace = call_name(call), _namespace(call)
    if not name or namespace is None or qualified_name(namespace, name) not in filtered._shut:
        return None
    return verify_name(call, [n for n in filtered.kept if n != name], known=[name])


def _namespace(call: Any) -> str | None:
    """The namespace a call names beside its tool (a tool of a Responses namespace)."""
    namespace = call.get("namespace") if isinstance(call, Mapping) else None
    return namespace if isinstance(namespace, str) else None


def function_names(request: Mapping[str, Any]) -> frozenset[str]:
    """The names of an OpenAI Chat request's legacy ``functions``, which go unrouted beside
    its tools: a call to one it was sent passes by name, as when nothing was routed."""
    functions = request.get("functions")
    listed = functions if isinstance(functions, list) else []
    return frozenset(f["name"] for f in listed if isinstance(f, Mapping) and _named(f))


# Where a request may declare its tools out of band: Gemini's cached content, a Responses
# stored prompt.
TOOLS_ELSEWHERE = ("cachedContent", "cached_content", "prompt")


def _named(entry: Mapping[str, Any]) -> bool:
    return isinstance(entry.get("name"), str)
