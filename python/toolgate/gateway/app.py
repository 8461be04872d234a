"""The filtering HTTP gateway: an ASGI app in front of OpenAI, Anthropic and Gemini.

Each request on a filtered endpoint (see :mod:`toolgate.gateway.upstream`) has its tools
array cut to the tools routed for its latest user message, on a worker thread (routing and,
for a tools array not seen before, indexing are CPU work), then goes upstream on a pooled
keep-alive ``httpx`` client. The answer comes back as it arrives: a streamed one event by
event, never held. Its tool calls are checked against the tools the request was sent with:
``annotate`` counts them and names the failures in a ``x-toolgate-tool-calls`` header (a
streamed answer's headers leave before its calls, so there only the metric tells);
``enforce`` turns an answer calling a tool that was not sent into an error the
application's SDK raises. A request the router judged to need none of its tools goes on
without them and its answer carries ``x-toolgate-no-tool: 1`` (and the
``toolgate_gateway_no_tool`` counter counts it). Other paths pass through untouched; one
that looks like a model call carrying tools is flagged instead: ``x-toolgate-unfiltered: 1``
on its answer, the ``toolgate_gateway_unfiltered`` counter, a warning the first time.

A web page cannot use the gateway (and the keys it holds) through its visitor's browser: a
request carrying an ``Origin`` not in ``allowed_origins`` is refused (403), and so is one
whose ``Host`` is not among ``allowed_hosts`` when there are some (421: DNS rebinding); see
:mod:`toolgate.browser_guard`. ``GET /healthz`` and ``GET /livez`` answer any name, and
``GET /metrics`` too when the gateway has a key.

>>> from toolgate.gateway.app import Gateway
>>> from toolgate.gateway.config import GatewayConfig, Upstream
>>> config = GatewayConfig(upstreams={"openai": Upstream("https://api.openai.com")})
>>> app = Gateway(config).app  # an ASGI app: serve it with uvicorn
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from toolgate.asgi import bearer_token, is_secret
from toolgate.browser_guard import BrowserGuard, BrowserPolicy
from toolgate.errors import (
    CatalogError,
    IndexFormatError,
    InvalidInputError,
    ModelError,
    StorageError,
    ToolgateError,
)
from toolgate.extras import needs_extra
from toolgate.gateway import answers, bodies
from toolgate.gateway.answers import CALLS_HEADER as CALLS_HEADER  # re-exported: public here first
from toolgate.gateway.config import GatewayConfig, Prewarm, read_file
from toolgate.gateway.disconnect import CancelOnDisconnect
from toolgate.gateway.filter import ToolFilter, filter_off_loop
from toolgate.gateway.filtering import Filtered, filter_request
from toolgate.gateway.followups import ResponseTools
from toolgate.gateway.learning import LearningQueue
from toolgate.gateway.metrics import CONTENT_TYPE_LATEST, Metrics
from toolgate.gateway.stopping import AnswerWhenStopped
from toolgate.gateway.upstream import (
    CREDENTIAL_HEADERS,
    GATEWAY_KEY_HEADER,
    Endpoint,
    endpoint_of,
    endpoint_path,
    forwarded_headers,
    forwarded_query,
    no_upstream,
    passthrough_provider,
    target_of,
    target_problem,
    unfiltered_call,
    upstream_for,
    written_endpoint_path,
)
from toolgate.redaction import redact_logged_urls
from toolgate.told_once import ToldOnce

with needs_extra("gateway", "toolgate.gateway"):
    import anyio
    import httpx
    import orjson
    from starlette.applications import Starlette
    from starlette.datastructures import Headers
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

__all__ = ["Gateway"]

log = logging.getLogger("toolgate.gateway")


# httpx logs each request's URL at INFO: its query string may hold a Gemini client's key
# (``?key=``), and nothing the gateway logs may hold a key. The path, the API's, is kept.
redact_logged_urls("httpx", keep_path=True)

#: What filtering raises for a fault of the request's (tools it cannot read, a bad value):
#: a 400. Anything else is the gateway's own trouble: a 503 or a 500, never the client's.
CLIENT_FAULTS = (InvalidInputError, CatalogError)
#: Set (to "1") on an answer whose request the router judged to need none of its tools: it
#: was sent with none of them (or only those its tool choice named).
NO_TOOL_HEADER = "x-toolgate-no-tool"
#: Set (to "1") on the answer to a model call the gateway passed through without filtering
#: its tools: a path it does not filter (see :func:`unfiltered_call`).
UNFILTERED_HEADER = "x-toolgate-unfiltered"
# How many unfiltered paths are remembered, each warned about once: a bound on what clients
# writing new paths can make the gateway keep.
_WARNED_PATHS = 256
# How long an idle upstream connection is kept for reuse: under the shortest idle timeout
# common among servers (5 s: uvicorn's, and others'), so the gateway drops a connection
# before the upstream closes it, never sending a request into one being closed.
UPSTREAM_KEEP_ALIVE_SECONDS = 4.0
_WARM_TEXT = "prewarm"
# How long shutdown waits for the lessons still queued to be learned.
_LEARN_CLOSE_SECONDS = 10.0


class Gateway:
    """The gateway for ``config``: :attr:`app` is the ASGI app to serve.

    ``tool_filter`` is the :class:`ToolFilter` requests go through (one is made from the
    config otherwise: its store and LRU size). ``transport`` replaces the network under the
    upstream client (tests). :attr:`ready` turns true once the embedding model is loaded
    and the prewarmed tools are indexed, which runs in the background once the app starts;
    :attr:`problem` says why that failed, if it did. ``GET /healthz`` reports the state
    alone, to anyone (readiness: the problem is logged); ``GET /livez`` answers 200
    whenever the server answers at all (liveness: a prewarm still running or failed is no
    reason to restart); ``GET /metrics`` needs the gateway's key when it has one
    (``x-toolgate-key`` or ``Authorization: Bearer``).
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        tool_filter: ToolFilter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """See the class docstring."""
        self.config = config
        self.filter = tool_filter or ToolFilter(
            config=config.router, max_catalogs=config.max_catalogs, store=config.store,
            learn=config.learn, max_stored=config.max_stored,
        )  # fmt: skip
        self.metrics = Metrics()
        self.response_tools = ResponseTools()
        # Learning from checked calls writes to the learned store, which may wait on another
        # process's lock for seconds: a worker thread does it, never the event loop. Each
        # run of the app (its lifespan) makes its own queue and closes it as it stops.
        self.learning = self._learning_queue()
        self._token = config.auth_token()
        self._keys = {name: up.api_key() for name, up in config.upstreams.items()}
        self._origins = {name: up.origin for name, up in config.upstreams.items()}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._warned = ToldOnce(_WARNED_PATHS)  # the unfiltered paths warned of
        self._reported = ToldOnce(_WARNED_PATHS)  # the server-side failures logged
        # Read now, so a missing or malformed file stops the gateway before it listens.
        self._warm = [(entry, _read_tools(entry)) for entry in config.prewarm]
        self.ready = False
        self.problem: str | None = None
        self.app = Starlette(
            routes=[
                Route("/healthz", self._healthz, methods=["GET"]),
                Route("/livez", self._livez, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/{path:path}", self._handle, methods=_METHODS),
            ],
            middleware=self._middleware(),
            lifespan=self._lifespan,
        )

    def _middleware(self) -> list[Middleware]:
        """The ``Host`` / ``Origin`` checks, then CORS for the allowed origins' pages (which
        may then preflight and read the answers; the upstream's own CORS headers are
        replaced), the answer to a request cut as the server stops, then the watch that stops
        a request whose client went away."""
        policy = BrowserPolicy(self.config.allowed_hosts, self.config.allowed_origins)
        # The probes answer any name (a kubelet's carries the pod's address); so do the
        # metrics where the gateway's key guards them (a scrape by the pod's address too):
        # a page rebound to the gateway does not hold the key.
        keyed = ["/metrics"] if self._token is not None else []
        guard = Middleware(
            BrowserGuard, policy, refusal=self._refused, open_paths=["/healthz", "/livez"],
            any_host_paths=keyed, log=log,
        )  # fmt: skip
        cancel = Middleware(CancelOnDisconnect, on_gone=self._client_gone)
        stopped = Middleware(AnswerWhenStopped, answer=self._stopped, on_gone=self._client_gone)
        if not policy.origins:
            return [guard, stopped, cancel]
        cors = Middleware(
            CORSMiddleware, allow_origin_regex=policy.origin_regex(), allow_methods=["*"],
            allow_headers=["*"], expose_headers=["*"],
        )  # fmt: skip
        return [guard, cors, stopped, cancel]

    def _client_gone(self, scope: Any) -> None:
        """Counts (as status 499, nginx's "client closed request") and logs a request whose
        client left before its answer began: while still sending its body, or while its
        upstream call was under way (which was then stopped)."""
        query = scope.get("query_string", b"").decode("latin-1")
        _, _, label = _aimed_at(scope["method"], scope["path"], Headers(scope=scope), query)
        self.metrics.requests.labels(label, "499").inc()
        # The path quoted (%r), as the guard quotes it: decoded, a control character in it
        # (%1B, ESC; %0D) would reach the log, and the terminal reading it, as it is.
        log.info(
            "%s %r 499: the client went away before its answer began (an upstream call "
            "under way was stopped)", scope["method"], scope["path"],
        )  # fmt: skip

    def _refused(
        self, scope: Any, status: int, code: str, message: str, *, retry: bool = False
    ) -> Response:
        """The answer to a request the ``Host`` / ``Origin`` checks refuse, in the error
        shape of the provider it was for, counted as the gateway's other answers are."""
        query = scope.get("query_string", b"").decode("latin-1")
        _, provider, label = _aimed_at(scope["method"], scope["path"], Headers(scope=scope), query)
        self.metrics.requests.labels(label, str(status)).inc()
        return answers.error(provider, status, message, code, retry=retry)

    def _stopped(self, scope: Any) -> Response:
        """The answer to a request the server cut as it stopped: a 503 the SDKs retry (another
        replica, or this one started again, answers it)."""
        message = "the gateway stopped before answering: send the request again"
        return self._refused(scope, 503, "shutting_down", message, retry=True)

    @asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(self.config.timeout, connect=self.config.connect_timeout)
        limits = httpx.Limits(
            max_connections=1000,
            max_keepalive_connections=100,
            keepalive_expiry=UPSTREAM_KEEP_ALIVE_SECONDS,
        )
        # This run's own queue: the last run's was closed as that run ended.
        self.learning = self._learning_queue()
        try:
            async with (
                httpx.AsyncClient(
                    timeout=timeout, limits=limits, transport=self._transport,
                    follow_redirects=False,
                ) as client,
                anyio.create_task_group() as background,
            ):  # fmt: skip
                self._client = client
                # Loading the model and indexing the prewarmed tools may take minutes: the
                # gateway serves meanwhile (/healthz says it is starting) and a signal stops
                # it without waiting for it.
                background.start_soon(self._prewarm_all)
                try:
                    yield
                finally:
                    background.cancel_scope.cancel()
        finally:
            # Out of the task group: inside, its cancelled scope cancelled this wait too,
            # and every lesson still waiting was lost.
            self.ready = False
            await self._learn_the_rest()

    def _learning_queue(self) -> LearningQueue:
        return LearningQueue(on_drop=self.metrics.lessons_dropped.inc, log=log)

    async def _learn_the_rest(self) -> None:
        """Close the learning queue: the lessons waiting are learned, unless the store holds
        them up past :data:`_LEARN_CLOSE_SECONDS` (then they are dropped, counted and
        logged)."""
        queue = self.learning
        dropped = queue.dropped
        if not await anyio.to_thread.run_sync(queue.close, _LEARN_CLOSE_SECONDS):
            log.warning(
                "stopping before the last lessons were learned (%d dropped): the learned "
                "store took more than %g s", queue.dropped - dropped, _LEARN_CLOSE_SECONDS,
            )  # fmt: skip

    async def _prewarm_all(self) -> None:
        """Load the embedding model, which every filtered request needs, then index the
        prewarmed tools: the gateway is ready once both are done."""
        steps: list[tuple[str, Callable[[], object]]] = [
            ("the embedding model", self.filter.load_model),
            *((f"prewarm {e.tools}", partial(self._prewarm, e, tools)) for e, tools in self._warm),
        ]
        for name, step in steps:
            try:
                await anyio.to_thread.run_sync(step, abandon_on_cancel=True)
            except ToolgateError as exc:
                self.problem = f"{name}: {exc}"
                log.error("%s", self.problem)
                return
            except Exception as exc:  # a bug: /healthz and the log say so, the server goes on
                self.problem = f"{name}: {type(exc).__name__}: {exc}"
                log.exception("%s", self.problem)
                return
        self.ready = True

    def _prewarm(self, entry: Prewarm, tools: list[Any]) -> None:
        """Index ``tools`` as a request carrying them would, so the first real request
        finds them indexed."""
        user = {"role": "user", "content": _WARM_TEXT}
        requests: dict[str, dict[str, Any]] = {
            "openai": {"messages": [user], "tools": tools},
            "anthropic": {"messages": [user], "tools": tools},
            "openai-responses": {"input": _WARM_TEXT, "tools": tools},
            "gemini": {"contents": [{"role": "user", "parts": [{"text": _WARM_TEXT}]}],
                       "tools": tools},
        }  # fmt: skip
        filtered = self.filter.filter(requests[entry.provider])
        log.info("prewarmed %s: %d tools", entry.tools, len(filtered.kept) + filtered.dropped_count)

    async def _healthz(self, _request: Request) -> Response:
        # Open to anyone (probes carry no key): the state alone, the problem to the log
        # (file paths, errors) and to :attr:`problem`.
        if self.problem is not None:
            return Response(b'{"status":"failed"}', 503, media_type="application/json")
        if not self.ready:
            return Response(b'{"status":"starting"}', 503, media_type="application/json")
        return Response(b'{"status":"ok"}', 200, media_type="application/json")

    async def _livez(self, _request: Request) -> Response:
        # Not tied to prewarm: a restart would only index the same tools again (or fail the
        # same way), so a liveness probe must not see /healthz's 503.
        return Response(b'{"status":"alive"}', 200, media_type="application/json")

    async def _metrics(self, request: Request) -> Response:
        # Behind the gateway key, as the proxy's are behind its token: they tell which
        # upstreams and tools are used, and how much.
        if self._token is not None and not self._holds_token(request):
            body = b'{"error":"unauthorized: the gateway key is needed (x-toolgate-key, or '
            body += b'Authorization: Bearer)"}'
            headers = {"www-authenticate": "Bearer"}
            return Response(body, 401, headers=headers, media_type="application/json")
        return Response(self.metrics.render(), 200, media_type=CONTENT_TYPE_LATEST)

    def _holds_token(self, request: Request) -> bool:
        """Whether ``request`` carries the gateway's key in ``x-toolgate-key`` or as
        ``Authorization: Bearer`` (a Prometheus scrape's ``authorization``)."""
        return self._is_token(
            [_header(request, GATEWAY_KEY_HEADER), bearer_token(request.headers.raw)]
        )

    def _is_token(self, offered: list[bytes | None]) -> bool:
        """Whether one of ``offered`` is the gateway's key (compared in constant time)."""
        assert self._token is not None
        token = self._token.encode()
        return any(is_secret(value, token) for value in offered)

    async def _handle(self, request: Request) -> Response:
        started = time.perf_counter()
        path, written, query = target_of(request.scope)
        endpoint, provider, label = _aimed_at(request.method, path, request.headers, query)
        upstream = upstream_for(provider, self._origins)
        if not self._admitted(request, upstream):
            response = answers.error(provider, 401, "missing or wrong gateway key", "unauthorized")
        elif (problem := target_problem(path, written)) is not None:
            response = answers.error(provider, 400, problem, "bad_path")
        elif upstream not in self.config.upstreams:
            message = no_upstream(provider, self._origins)
            response = answers.error(provider, 502, message, "no_upstream")
        elif endpoint is None:
            response = await self._passthrough(request, upstream)
        else:
            response = await self._filtered(request, endpoint, upstream)
        self.metrics.requests.labels(label, str(response.status_code)).inc()
        # The path alone (a query string may hold a key: Gemini's ?key=), quoted.
        log.info(
            "%s %r %d %.1fms", request.method, path, response.status_code,
            (time.perf_counter() - started) * 1000,
        )  # fmt: skip
        return response

    def _admitted(self, request: Request, provider: str) -> bool:
        """Whether the request carries the gateway's key (when it has one): in
        ``x-toolgate-key``, or in the SDK's own key header when the gateway holds the
        upstream's key (the client then has no other use for it). Never in the query string
        (Google's ``?key=``), which proxies and servers log: google-genai sends its key in
        ``x-goog-api-key``, and a REST client can too."""
        if self._token is None:
            return True
        offered = [_header(request, GATEWAY_KEY_HEADER)]
        if self._keys.get(provider) is not None:
            offered.append(bearer_token(request.headers.raw))  # OpenAI's SDK's
            offered += [_header(request, h) for h in CREDENTIAL_HEADERS if h != "authorization"]
        return self._is_token(offered)

    def _url(self, provider: str, request: Request, *, endpoint: bool = False) -> str:
        """The upstream's URL for ``request``: its path as the client wrote it (an escaped
        ``%2F`` stays one), without trailing slashes, escaped ones too, for a filtered
        ``endpoint`` (the path it was routed as: :func:`written_endpoint_path`), and its
        query string (less a key the gateway replaces)."""
        origin = self.config.upstreams[provider].origin
        _, path, query = target_of(request.scope)  # checked by target_problem
        if endpoint:
            path = written_endpoint_path(path)
        holds_key = self._keys.get(provider) is not None
        query = forwarded_query(query, provider, holds_key=holds_key)
        return f"{origin}{path}" + (f"?{query}" if query else "")

    async def _passthrough(self, request: Request, upstream: str) -> Response:
        headers = forwarded_headers(request.headers.raw, upstream, self._keys.get(upstream))
        length, content = await bodies.passed_on(request)
        url = self._url(upstream, request)
        sent = await self._send(upstream, request.method, url, headers + length, content)
        if isinstance(sent, Response):
            return sent
        failed = partial(self._upstream_failed, upstream)
        if not unfiltered_call(request.method, request.scope["path"]):
            return answers.raw(sent, failed=failed)
        self._flag_unfiltered(request.scope["path"], upstream)
        return answers.raw(sent, [(UNFILTERED_HEADER, "1")], failed=failed)

    def _flag_unfiltered(self, path: str, upstream: str) -> None:
        """Counts a model call passed through with its tools unfiltered, and warns of its path
        the first time."""
        self.metrics.unfiltered.labels(upstream).inc()
        self._warned.log(
            log, logging.WARNING, path,
            "POST %r looks like a model call on a path the gateway does not filter: its tools "
            "went to the %s upstream unfiltered (each such answer carries %s: 1)",
            path, upstream, UNFILTERED_HEADER,
        )  # fmt: skip

    async def _filtered(self, request: Request, endpoint: Endpoint, upstream: str) -> Response:
        provider, shape = endpoint.provider, endpoint.shape
        read = await bodies.read(request, self.config.max_body_bytes, provider)
        if isinstance(read, Response):
            return read
        raw, body = read
        path = endpoint_path(request.scope["path"])
        route = self.config.route(path)
        previous = self.response_tools.recall(body) if shape == "openai-responses" else None
        try:
            done = await filter_off_loop(
                partial(
                    filter_request,
                    self.filter,
                    body,
                    route,
                    request.headers,
                    wait=False,
                    previous=previous,
                    shape=shape,
                ),
                # A request cancelled at shutdown does not wait for its thread to finish.
                partial(anyio.to_thread.run_sync, abandon_on_cancel=True),
            )
        except CLIENT_FAULTS as exc:  # the request's tools, or its text: the client's to fix
            return answers.error(
                provider, 400, f"toolgate cannot filter this request: {exc}", "bad_tools"
            )
        except Exception as exc:  # the gateway's own trouble, never the client's
            return self._cannot_filter(provider, exc)
        self._count(shape, done)
        changed = done.filtered.dropped_count or done.filtered.provider == "text_tags"
        try:
            content = await bodies.written(done.filtered.request, len(raw)) if changed else raw
        except InvalidInputError as exc:
            return answers.error(
                provider, 400, f"toolgate cannot forward this request: {exc}", "bad_body"
            )
        # The answer is read here, so the upstream is asked for codings the gateway decodes.
        key = self._keys.get(upstream)
        headers = forwarded_headers(request.headers.raw, upstream, key, decoded=True)
        url = self._url(upstream, request, endpoint=True)
        sent = await self._send(upstream, "POST", url, headers, content)
        if isinstance(sent, Response):
            return sent
        ours = [("x-toolgate-tools", f"{done.tools_out}/{done.tools_in}")]
        if done.filtered.result.no_tool:
            ours.append((NO_TOOL_HEADER, "1"))
        assert self._client is not None  # set by the lifespan before any request
        decodable = self._client.headers.get("accept-encoding", "")
        enforce = route.policy == "enforce"
        failed = partial(self._upstream_failed, upstream)
        unread = await answers.unreadable(
            sent, decodable, provider, ours, enforce=enforce, failed=failed
        )
        if unread is not None:
            return unread
        if sent.status_code != 200 or route.policy == "off":
            return await answers.decoded(sent, provider, ours, failed=failed)
        check = answers.Check(self, shape, done.filtered, route, upstream)
        if sent.headers.get("content-type", "").startswith("text/event-stream"):
            return answers.stream(sent, check, ours)
        if shape == "gemini" and path.endswith(":streamGenerateContent"):
            # Without ?alt=sse, Google streams a JSON array: passed on response by response.
            return answers.stream(sent, check, ours, array=True)
        return await check.whole(sent, ours)

    def _cannot_filter(self, provider: str, exc: Exception) -> Response:
        """The answer to a request the gateway failed to filter through no fault of the
        request's: a 503 the SDKs retry when the trouble may pass without the client changing
        anything (a full disk, a store, the embedding model prepared meanwhile), else a 500
        (a bug). The model's error names the server's files: the log has it, not the client."""
        if isinstance(exc, (StorageError, IndexFormatError)):
            message = f"toolgate cannot filter requests now: {exc}"
            return answers.error(provider, 503, message, "store_failed", retry=True)
        if isinstance(exc, ToolgateError):
            self._log_once(exc)
            model = isinstance(exc, ModelError)
            what = "its embedding model cannot be used" if model else "something it needs failed"
            message = f"toolgate cannot filter requests now: {what} (the gateway's log says why)"
            code = "model_unavailable" if model else "filter_unavailable"
            return answers.error(provider, 503, message, code, retry=True)
        log.exception("filtering a request failed")
        message = "toolgate failed to filter this request: a bug (the gateway's log has it)"
        return answers.error(provider, 500, message, "internal_error")

    def _log_once(self, exc: ToolgateError) -> None:
        """Log ``exc`` as an error the first time its message is seen: a model that cannot
        be loaded fails every request, and one line says why."""
        text = f"{type(exc).__name__}: {exc}"
        self._reported.log(log, logging.ERROR, text, "requests cannot be filtered: %s", text)

    def _count(self, shape: str, done: Filtered) -> None:
        self.metrics.tools_in.labels(shape).inc(done.tools_in)
        self.metrics.tools_out.labels(shape).inc(done.tools_out)
        self.metrics.tokens_saved.labels(shape).inc(done.tokens_saved)
        self.metrics.filter_seconds.labels(shape).observe(done.seconds)
        if done.filtered.result.no_tool:
            self.metrics.no_tool.labels(shape).inc()

    async def _send(
        self,
        provider: str,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        content: Any,
    ) -> httpx.Response | Response:
        """The upstream's answer, its body not read yet; or the gateway's error when the
        upstream cannot be reached (502) or does not answer in time (504)."""
        assert self._client is not None  # set by the lifespan before any request
        outgoing = self._client.build_request(method, url, headers=headers, content=content)
        try:
            sent = await self._client.send(outgoing, stream=True)
        except httpx.TimeoutException as exc:
            self._upstream_failed(provider, "timeout")
            # Which timeout (connect, write, pool, read) tells a slow upstream from a
            # starved gateway.
            message = f"the {provider} upstream did not answer in time ({type(exc).__name__})"
            return answers.error(provider, 504, message, "timeout", retry=True)
        except httpx.TransportError as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectError) else "reset"
            self._upstream_failed(provider, kind)
            message = f"the {provider} upstream cannot be reached ({type(exc).__name__})"
            return answers.error(provider, 502, message, "upstream_unreachable", retry=True)
        self.metrics.upstream.labels(provider, str(sent.status_code)).inc()
        return sent

    def _upstream_failed(self, upstream: str, kind: str) -> None:
        """Count a call to ``upstream`` that failed (``connect``, ``timeout``, ``reset``)."""
        self.metrics.upstream_errors.labels(upstream, kind).inc()


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _aimed_at(
    method: str, path: str, headers: Mapping[str, str], query: str
) -> tuple[Endpoint | None, str, str]:
    """The filtered endpoint a request is for (None: it passes through), the provider it
    goes to, and its label in the metrics."""
    endpoint = endpoint_of(method, path)
    if endpoint is None:
        return None, passthrough_provider(path, headers, query), "passthrough"
    return endpoint, endpoint.provider, endpoint.shape


def _header(request: Request, name: str) -> bytes | None:
    """The (first) value of header ``name``, as sent, spaces around it left out."""
    value = request.headers.get(name)
    return None if value is None else value.encode("latin-1").strip()


def _read_tools(entry: Prewarm) -> list[Any]:
    """The tools array in ``entry``'s file."""
    try:
        tools = orjson.loads(read_file(Path(entry.tools)))
    except (OSError, ValueError) as exc:  # JsonLimitError, not UTF-8, not JSON
        raise InvalidInputError(
            f"prewarm {entry.tools}: cannot read a tools array: {exc}"
        ) from None
    if not isinstance(tools, list):
        raise InvalidInputError(
            f"prewarm {entry.tools}: expected a JSON array of tools, got {type(tools).__name__}"
        )
    return tools
