"""The gateway's answers: the upstream's passed on, the gateway's own errors, tool calls checked.

An answer to a filtered request has its tool calls checked against the tools the request was
sent with (:class:`Check`): a whole one as it is read (:meth:`Check.whole`, which names the
failures in the :data:`CALLS_HEADER` header), a streamed one event by event as it passes
(:func:`stream`). Any other answer goes on untouched (:func:`raw`), or only decoded when the
gateway asked for its coding (:func:`decoded`); the gateway's own errors take the error shape
of the provider the request was for (:func:`error`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from toolgate.asgi import AnswerCut
from toolgate.extras import needs_extra
from toolgate.formats.calls import answer_tool_calls
from toolgate.gateway.config import RouteConfig
from toolgate.gateway.filter import FilteredRequest
from toolgate.gateway.learning import lesson_of
from toolgate.gateway.streaming import (
    CallWatcher,
    JsonArraySplitter,
    SseEvent,
    SseSplitter,
    array_error,
    error_event,
)
from toolgate.gateway.upstream import error_body, response_headers, undecodable
from toolgate.redaction import redact_urls
from toolgate.verify import Verdict

with needs_extra("gateway", "toolgate.gateway"):
    import anyio
    import httpx
    import orjson
    from starlette.responses import Response, StreamingResponse

if TYPE_CHECKING:  # the gateway makes the checks: a run-time import would be circular
    from toolgate.gateway.app import Gateway

__all__ = [
    "CALLS_HEADER",
    "NOT_SENT",
    "Check",
    "decoded",
    "error",
    "raw",
    "stream",
    "unreadable",
]

# A call naming a tool the request was not sent: what enforce blocks.
NOT_SENT = frozenset({"tool_not_available", "unknown_tool"})
CALLS_HEADER = "x-toolgate-tool-calls"
_log = logging.getLogger("toolgate.gateway")
#: Counts an upstream call that failed, by its kind (:func:`failure_kind`), in the upstream
#: errors metric.
Failed = Callable[[str], None]


def failure_kind(exc: httpx.TransportError) -> str:
    """The kind, in the upstream errors metric, of an upstream answer that broke off."""
    return "timeout" if isinstance(exc, httpx.TimeoutException) else "reset"


class Check:
    """The tool calls of one answer checked against the tools its request was sent with."""

    def __init__(
        self,
        gateway: Gateway,
        shape: str,
        filtered: FilteredRequest,
        route: RouteConfig,
        upstream: str,
    ) -> None:
        self.gateway, self.shape, self.filtered = gateway, shape, filtered
        self.enforce = route.policy == "enforce"
        self.upstream = upstream
        # A Responses answer's id and calls, for the follow-ups naming it.
        self.record = gateway.response_tools.recorder(shape, filtered)

    def verdict(self, call: Any) -> Verdict:
        """The verdict on ``call``, counted; a call that passed is queued to be learned from
        (when the filter learns) on the learning thread, off the event loop."""
        gateway = self.gateway
        verdict = gateway.filter.verify(call, self.filtered, learn=False)
        gateway.metrics.tool_calls.labels(self.shape, verdict.error or "ok").inc()
        if self.record is not None:
            self.record.called(verdict)
        if (lesson := lesson_of(self.filtered, verdict)) is not None:
            gateway.learning.submit(lesson)
        return verdict

    def failed(self, kind: str) -> None:
        """Count a failure of ``kind`` of the upstream this answer comes from."""
        self.gateway.metrics.upstream_errors.labels(self.upstream, kind).inc()

    def not_sent(self, name: str) -> bool:
        """Whether a call to ``name`` names a tool the request was not sent (its arguments
        are checked when the call is whole)."""
        call = {"name": name, "arguments": {}}
        verdict = self.gateway.filter.verify(call, self.filtered, learn=False)
        return verdict.error in NOT_SENT

    def blocked(self, names: list[str]) -> str:
        self.gateway.metrics.blocked.labels(self.shape).inc()
        listed = ", ".join(repr(n) for n in names)
        return (
            f"toolgate: the model called {listed}, which the request did not offer it "
            f"(it was sent: {', '.join(self.filtered.kept) or 'no tools'})"
        )

    async def whole(self, sent: httpx.Response, ours: list[tuple[str, str]]) -> Response:
        """A whole answer, checked; blocked by an enforce route if it calls a tool not sent."""
        try:
            body = await sent.aread()
        except (httpx.TransportError, httpx.DecodingError) as exc:
            return _broken(_provider(self.shape), exc, self.failed)
        finally:
            await sent.aclose()
        headers = response_headers(sent.headers.raw, decoded=True)
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _response(body, sent.status_code, headers, ours)
        verdicts = [self.verdict(call) for call in answer_tool_calls(answer, self.shape)]
        if self.record is not None:
            self.record.answered(answer)
        failed = [v for v in verdicts if not v.ok]
        provider = _provider(self.shape)
        not_sent = [v.name for v in failed if v.error in NOT_SENT]
        if self.enforce and not_sent:
            response = error(provider, 502, self.blocked(not_sent), "tool_not_sent")
            response.headers[CALLS_HEADER] = _summary(failed)
            return response
        if verdicts:
            ours = [*ours, (CALLS_HEADER, _summary(failed) if failed else "ok")]
        return _response(body, sent.status_code, headers, ours)


def _summary(failed: list[Verdict]) -> str:
    """Failed verdicts for a header: ``error=name`` pairs, each name (the model's, any text)
    as :func:`_header_text` writes it; past :data:`_HEADER_CHARS` characters, the pairs that
    do not fit are counted (``..., 3 more``)."""
    pairs = [f"{v.error}={_header_text(v.name)}" for v in failed]
    kept: list[str] = []
    for at, pair in enumerate(pairs):
        after = len(pairs) - at - 1
        if len(", ".join([*kept, pair, *([f"{after} more"] if after else [])])) > _HEADER_CHARS:
            return ", ".join([*kept, f"{len(pairs) - at} more"])
        kept.append(pair)
    return ", ".join(kept)


# The most characters of a header the gateway writes from a model's or upstream's text (a
# tool name): proxies refuse a response whose headers pass a few KiB (nginx: 4 or 8 KiB).
_HEADER_CHARS = 1024
_NAME_CHARS = 128
# Kept as they are in a header: visible ASCII, but the escape and the list's separators.
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "%,")


def _header_text(text: str) -> str:
    """``text`` for a header value: percent-encoded (UTF-8) outside visible ASCII, so a
    model's CR / LF / NUL can neither add a header nor make the server refuse the answer,
    and cut to :data:`_NAME_CHARS` characters (``...`` at the end, no character cut in two)."""
    quoted = _quoted(text)
    if len(quoted) <= _NAME_CHARS:
        return quoted
    parts: list[str] = []
    size = 0
    for char in text:
        part = _quoted(char)
        if size + len(part) > _NAME_CHARS - 3:
            break
        parts.append(part)
        size += len(part)
    return "".join(parts) + "..."


def _quoted(text: str) -> str:
    return quote(text, safe=_HEADER_SAFE, errors="replace")  # a lone surrogate: "?"


def stream(
    sent: httpx.Response, check: Check, ours: list[tuple[str, str]], *, array: bool = False
) -> Response:
    """A streamed answer passed on event by event while its tool calls are checked; with
    ``array``, a JSON array passed on element by element (Google's stream without SSE)."""

    async def events() -> AsyncIterator[bytes]:
        splitter = JsonArraySplitter() if array else SseSplitter()
        parse = JsonArraySplitter.parse if array else SseEvent.parse
        watcher = CallWatcher(check.shape)
        began = False

        def failure(message: str, code: str) -> bytes:
            # In an array, the error is its last element, as Google ends one that failed.
            return array_error(message, began) if array else error_event(check.shape, message, code)

        try:
            async for chunk in sent.aiter_bytes():
                for raw in splitter.feed(chunk):
                    event = parse(raw)
                    if check.record is not None:  # before the client can follow it up
                        check.record.streamed(event.data)
                    started, finished = watcher.see(event)
                    bad = [name for name in started if check.enforce and check.not_sent(name)]
                    for call in finished:
                        check.verdict(call)
                    if bad:
                        yield failure(check.blocked(bad), "tool_not_sent")
                        return
                    yield raw
                    began = True
            for call in watcher.finish():
                check.verdict(call)
            if rest := splitter.rest():
                yield rest
        except httpx.TransportError as exc:  # the upstream broke off or stalled mid-stream
            kind = failure_kind(exc)
            check.failed(kind)
            message = f"toolgate: the upstream's stream broke off ({type(exc).__name__})"
            yield failure(message, "upstream_" + kind)
        except httpx.DecodingError as exc:  # the upstream's, not a bug of ours
            message = f"toolgate: the upstream's stream cannot be decoded from its coding: {exc}"
            yield failure(message, "upstream_decoding")
        except Exception:  # a bug of ours: the client is told, not left with a cut stream
            _log.error("reading the upstream's stream failed (a bug)", exc_info=True)
            message = "toolgate: the gateway failed reading the upstream's stream (see its log)"
            yield failure(message, "internal_error")
        finally:
            with anyio.CancelScope(shield=True):  # also when the client went away
                await sent.aclose()

    headers = response_headers(sent.headers.raw, decoded=True) + _encoded(ours)
    response = StreamingResponse(events(), status_code=sent.status_code)
    response.raw_headers = headers
    return response


def raw(
    sent: httpx.Response, extra: list[tuple[str, str]] | None = None, *, failed: Failed
) -> Response:
    """The upstream's answer passed on untouched: status, headers, bytes as they come; one
    that breaks off is counted by ``failed``."""
    return _passed_on(sent, sent.aiter_raw(), extra or [], decoded=False, failed=failed)


async def decoded(
    sent: httpx.Response, provider: str, extra: list[tuple[str, str]], *, failed: Failed
) -> Response:
    """The upstream's answer passed on unread but decoded from its content coding (which the
    gateway asked for, not the client), its headers without the coding and length. One whose
    first bytes do not decode (a plain error page labelled gzip) is a 502 as
    :meth:`Check.whole` answers it; one that stops decoding later ends there, logged: its
    status is sent by then. One that breaks off is counted by ``failed``."""
    chunks = sent.aiter_bytes()
    try:
        first = await anext(chunks, b"")
    except (httpx.TransportError, httpx.DecodingError) as exc:
        await sent.aclose()
        return _broken(provider, exc, failed)
    return _passed_on(sent, _joined(first, chunks), extra, decoded=True, failed=failed)


def _passed_on(
    sent: httpx.Response,
    chunks: AsyncIterator[bytes],
    extra: list[tuple[str, str]],
    *,
    decoded: bool,
    failed: Failed,
) -> Response:
    """``sent`` streamed to the client as ``chunks``, with the gateway's ``extra`` headers."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except httpx.DecodingError as exc:  # the upstream's fault: no traceback, no 500
            _log.warning("the upstream's answer stopped decoding, passed on cut: %s", exc)
        except httpx.TransportError as exc:
            failed(failure_kind(exc))
            # The server's log of the cut, a traceback, is filtered out (NotCut): this line
            # is all an operator sees, so it says why (the error's message, URLs cut down:
            # one may hold a key), and the traceback goes to the debug level.
            why = redact_urls(str(exc), keep_path=True) or "no message"
            _log.warning(
                "the upstream's answer broke off (%s), passed on cut: %s", type(exc).__name__, why
            )
            _log.debug("the upstream's answer broke off here", exc_info=exc)
            # Raised: the server then closes the client's connection short of the answer's
            # end. Ending the answer here would pass a cut one off as whole.
            raise AnswerCut(f"the upstream's answer broke off ({type(exc).__name__})") from exc
        finally:
            with anyio.CancelScope(shield=True):
                await sent.aclose()

    response = StreamingResponse(body(), status_code=sent.status_code)
    response.raw_headers = [
        *response_headers(sent.headers.raw, decoded=decoded),
        *_encoded(extra),
    ]
    return response


async def _joined(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk


def _broken(
    provider: str, exc: httpx.TransportError | httpx.DecodingError, failed: Failed
) -> Response:
    """The gateway's answer to an upstream answer that cannot be decoded or broke off (a 502,
    counted by ``failed``), or stalled past the timeout (a 504, as one that never began)."""
    if isinstance(exc, httpx.DecodingError):  # not gzip after all, or cut short: no answer
        message = f"the upstream's answer cannot be decoded from its content coding: {exc}"
        return error(provider, 502, message, "upstream_decoding", retry=True)
    failed(failure_kind(exc))
    if isinstance(exc, httpx.TimeoutException):
        message = f"the upstream did not answer in time ({type(exc).__name__})"
        return error(provider, 504, message, "timeout", retry=True)
    message = f"the upstream's answer broke off ({type(exc).__name__})"
    return error(provider, 502, message, "upstream_reset", retry=True)


async def unreadable(
    sent: httpx.Response,
    decodable: str,
    provider: str,
    ours: list[tuple[str, str]],
    *,
    enforce: bool,
    failed: Failed,
) -> Response | None:
    """None when the gateway decodes ``sent``'s content coding (``decodable``: what its
    client asks for); else the answer to give, from an upstream that ignored the codings it
    was asked for. Its tool calls cannot be read, so an ``enforce`` route refuses a
    successful one (502); any other goes on untouched, its coding named for the client."""
    coding = undecodable(sent.headers.get("content-encoding", ""), decodable)
    if coding is None:
        return None
    if not enforce or sent.status_code != 200:
        return raw(sent, ours, failed=failed)
    await sent.aclose()
    message = (
        f"the upstream answered in a content coding the gateway cannot decode ({coding}), "
        "so its tool calls cannot be checked"
    )
    return error(provider, 502, message, "upstream_encoding", retry=True)


def _response(
    body: bytes, status: int, headers: list[tuple[bytes, bytes]], ours: list[tuple[str, str]]
) -> Response:
    response = Response(body, status)  # sets content-length for this body
    response.raw_headers = [
        *(h for h in response.raw_headers if h[0] == b"content-length"),
        *headers,
        *_encoded(ours),
    ]
    return response


def error(provider: str, status: int, message: str, code: str, *, retry: bool = False) -> Response:
    """The gateway's own error, in ``provider``'s error shape; unless ``retry`` (the
    upstream could not be reached), the SDKs are told not to retry it."""
    response = Response(error_body(provider, status, message, code), status)
    response.headers["content-type"] = "application/json"
    if not retry:
        response.headers["x-should-retry"] = "false"
    response.headers["x-toolgate-error"] = code
    return response


def _provider(shape: str) -> str:
    return "openai" if shape.startswith("openai") else shape


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """The gateway's own headers (ASCII) as bytes."""
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
