"""LiteLLM: filter each request's tools inside LiteLLM, proxy or SDK, with a callback.

:class:`ToolgateHook` is a LiteLLM ``CustomLogger``. On the LiteLLM proxy its
``async_pre_call_hook`` cuts the request's ``tools`` (OpenAI Chat or Anthropic Messages
shape) to those routed for the latest user message before LiteLLM calls the model; in the
SDK (``litellm.acompletion``, ``litellm.responses`` and ``aresponses``, a ``litellm.Router``)
``async_pre_call_deployment_hook`` does the same, and ``async_pre_request_hook`` for
``litellm.anthropic_messages``. Both go through :class:`toolgate.gateway.ToolFilter`, so a
tools array seen before is not indexed again. The proxy runs both on a request: the first
marks it in LiteLLM's metadata (which LiteLLM never sends to the provider) and the SDK's
hooks pass a marked request through, so its routed tools are not filtered twice.

The hooks are LiteLLM's async ones, which a sync ``litellm.completion`` never calls: its
tools go to the model unfiltered (use ``litellm.acompletion``).

Proxy ``config.yaml``::

    litellm_settings:
      callbacks: my_hooks.toolgate_hook   # my_hooks.py: toolgate_hook = ToolgateHook(top_k=5)

>>> import litellm
>>> from toolgate.integrations.litellm import ToolgateHook
>>> litellm.callbacks = [ToolgateHook(top_k=5)]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from toolgate.arguments import check_count
from toolgate.errors import InvalidInputError
from toolgate.gateway.filter import FilteredRequest, ToolFilter, filter_off_loop
from toolgate.integrations import needs_extra
from toolgate.routing.config import DEFAULT, DefaultType

with needs_extra("litellm"):
    from litellm.integrations.custom_logger import CustomLogger

__all__ = ["ToolgateHook"]

# The proxy's call types whose requests carry tools to filter (not embeddings, images...).
_CALL_TYPES = {"completion", "acompletion", "anthropic_messages", "responses", "aresponses"}
_CHAT_CALL_TYPES = {"completion", "acompletion"}

_MARK = "toolgate_filtered"
"""The metadata key saying the proxy hook filtered the request's tools already."""


class ToolgateHook(CustomLogger):
    """A LiteLLM callback that shows the model only the tools routed for each turn.

    ``top_k``, ``threshold``, ``allow``, ``deny`` and ``include`` are
    :meth:`ToolFilter.filter`'s; ``tool_filter`` shares a filter (and its indexes) with
    other users, one that keeps tools it cannot read is made otherwise. A request the filter
    cannot read is refused: the hook raises the :class:`~toolgate.ToolgateError` naming the
    problem, and LiteLLM fails the call with it.
    """

    def __init__(
        self,
        *,
        top_k: int = 5,
        threshold: float | DefaultType | None = DEFAULT,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
        tool_filter: ToolFilter | None = None,
    ) -> None:
        """See the class docstring."""
        super().__init__()
        check_count("top_k", top_k, minimum=1)
        if tool_filter is not None and not isinstance(tool_filter, ToolFilter):
            raise InvalidInputError(
                f"tool_filter must be a toolgate ToolFilter, got {type(tool_filter).__name__}"
            )
        self.tool_filter = tool_filter or ToolFilter(unreadable="keep")
        self._options: dict[str, Any] = {
            "top_k": top_k,
            "allow": None if allow is None else list(allow),
            "deny": None if deny is None else list(deny),
            "include": None if include is None else list(include),
            # As ToolFilter.filter reads it: DEFAULT the filter's configured floor, None none.
            "threshold": threshold,
        }

    def filter(self, request: dict[str, Any]) -> FilteredRequest:
        """``request`` (a chat, Responses or Anthropic request dict) filtered."""
        return self.tool_filter.filter(request, **self._options)

    async def _filter_async(self, request: dict[str, Any]) -> FilteredRequest:
        """:meth:`filter` on a worker thread; waiting for another request's indexing of
        the same tools holds none (the proxy's default executor has only a few)."""
        return await filter_off_loop(
            partial(self.tool_filter.filter, request, **self._options, wait=False)
        )

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        """The LiteLLM proxy's hook: ``data`` with its tools cut to the routed ones."""
        if call_type not in _CALL_TYPES or not data.get("tools"):
            return data
        filtered = await self._filter_async(data)
        return _marked(dict(filtered.request), call_type)

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> dict[str, Any] | None:
        """The SDK's hook for chat completions and Responses calls (``litellm.acompletion``,
        ``litellm.responses`` and ``aresponses``, the Router): the call's arguments with
        ``tools`` (and a tool choice) filtered for its messages or its Responses ``input``."""
        return await self._narrowed(kwargs.get("messages"), kwargs)

    async def async_pre_request_hook(
        self, model: str, messages: list[Any], kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The SDK's hook for Anthropic messages (``litellm.anthropic_messages``)."""
        return await self._narrowed(messages, kwargs)

    async def _narrowed(self, messages: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """``kwargs`` with its tool keys filtered for ``messages``, else for a Responses
        call's ``input`` (a text or a list of items); None (no change) when it has no tools
        or neither."""
        if not kwargs.get("tools") or _is_marked(kwargs):
            return None
        if isinstance(messages, list):
            turns: dict[str, Any] = {"messages": messages}
        elif isinstance(kwargs.get("input"), (str, list)):
            turns = {"input": kwargs["input"]}  # the filter reads it as a Responses request
        else:
            return None
        request = {**turns, **{k: kwargs[k] for k in _TOOL_KEYS if k in kwargs}}
        filtered = await self._filter_async(request)
        out = dict(kwargs)
        for key in _TOOL_KEYS:
            out.pop(key, None)
            if key in filtered.request:
                out[key] = filtered.request[key]
        return out


_TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")


def _marked(data: dict[str, Any], call_type: Any) -> dict[str, Any]:
    """``data`` with :data:`_MARK` in LiteLLM's metadata bucket, a copy of the bucket (the
    caller's request still holds its own).

    The bucket is the one LiteLLM reads (``litellm_metadata`` when the request has one, as
    the proxy's /v1/messages and /v1/responses do); ``metadata`` only on chat calls, where it
    is LiteLLM's and not the provider's: on the other calls it is a provider field.
    """
    chat_bucket = call_type in _CHAT_CALL_TYPES and isinstance(data.get("metadata"), dict)
    key = "metadata" if chat_bucket and "litellm_metadata" not in data else "litellm_metadata"
    bucket = data.get(key)
    data[key] = {**(bucket if isinstance(bucket, dict) else {}), _MARK: True}
    return data


def _is_marked(kwargs: dict[str, Any]) -> bool:
    """Whether the proxy hook filtered these call arguments' tools already."""
    return any(
        isinstance(bucket, dict) and bucket.get(_MARK) is True
        for bucket in (kwargs.get("litellm_metadata"), kwargs.get("metadata"))
    )
