"""What the gateway sends upstream and hands back: endpoints, headers, credentials, errors.

An endpoint is known by its path (trailing slashes aside: :func:`endpoint_path`), which
gives the request's shape (the body format) and the API it is for:

- OpenAI's ``/v1/chat/completions`` and ``/v1/responses``; Azure OpenAI's
  ``/openai/deployments/{deployment}/chat/completions``, ``/openai/responses`` and its v1
  API's ``/openai/v1/chat/completions`` and ``/openai/v1/responses``, in OpenAI's shapes;
- Anthropic's ``/v1/messages``;
- Gemini's ``/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``;
  Vertex AI's ``/v1/projects/{p}/locations/{l}/publishers/{publisher}/models/{model}:...``
  (``v1beta1`` too, and ``/v1beta1/publishers/...`` with an API key; a tuned model's
  ``endpoints/{id}``), in Gemini's shape.

Each API goes to the upstream named after it; Azure's and Vertex AI's, when the gateway has
no ``azure`` or ``vertex`` upstream, to the ``openai`` or ``gemini`` one, unless that one is
OpenAI's or the Gemini API's own host (:func:`upstream_for`). Any other path
passes through to the upstream its path or credentials point to; one that looks like a model
call (:func:`unfiltered_call`) is flagged, since its tools go upstream unfiltered. Hop-by-hop
headers (RFC 9110 section 7.6.1: the standard ones and those a ``Connection`` header names)
are never forwarded, in either direction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote_plus, urlsplit

from toolgate.extras import needs_extra

with needs_extra("gateway", "toolgate.gateway"):
    import orjson

__all__ = [
    "UPSTREAM_FALLBACK",
    "Endpoint",
    "endpoint_of",
    "endpoint_path",
    "error_body",
    "forwarded_headers",
    "forwarded_query",
    "no_upstream",
    "passthrough_provider",
    "refused_fallback",
    "response_headers",
    "target_of",
    "target_problem",
    "undecodable",
    "unfiltered_call",
    "upstream_for",
    "written_endpoint_path",
]


@dataclass(frozen=True)
class Endpoint:
    """A path whose requests are filtered: the API it is for (``openai``, ``azure``,
    ``anthropic``, ``gemini`` or ``vertex``) and its request shape."""

    provider: str
    shape: str


_GENERATE = r":(?:generateContent|streamGenerateContent)"
_ENDPOINTS = (
    (re.compile(r"/v1/chat/completions"), Endpoint("openai", "openai")),
    (re.compile(r"/v1/responses"), Endpoint("openai", "openai-responses")),
    (
        re.compile(r"/openai/(?:deployments/[^/]+|v1)/chat/completions"),
        Endpoint("azure", "openai"),
    ),
    (re.compile(r"/openai(?:/v1)?/responses"), Endpoint("azure", "openai-responses")),
    (re.compile(r"/v1/messages"), Endpoint("anthropic", "anthropic")),
    (
        re.compile(rf"/v1(?:beta|alpha)?/(?:models|tunedModels)/[^/:]+{_GENERATE}"),
        Endpoint("gemini", "gemini"),
    ),
    (
        re.compile(
            r"/v1(?:beta1)?/(?:projects/[^/]+/locations/[^/]+/)?"
            rf"(?:publishers/[^/]+/models|endpoints)/[^/:]+{_GENERATE}"
        ),
        Endpoint("vertex", "gemini"),
    ),
)

# Paths of model calls that may carry tools on APIs the gateway does not filter: Anthropic's
# on Vertex AI (:rawPredict) or Bedrock (/invoke), Bedrock's Converse, OpenAI-compatible
# APIs under other paths, or a known API's path spelled otherwise.
_MODEL_CALL = re.compile(
    r".*(?:/chat/completions|/responses|/messages|/converse(?:-stream)?"
    r"|/invoke(?:-with-response-stream)?|(?<!/count-tokens):(?:stream)?[rR]awPredict"
    r"|:(?:stream)?[gG]enerateContent)/*",  # a trailing slash too: servers may take it
    re.DOTALL,  # a decoded path may hold a newline (%0A): still a model call
)

# A written path's trailing slashes, escaped or not (%2F decodes to one).
_TRAILING_SLASHES = re.compile(r"(?:/|%2[fF])+\Z")

# Where Azure's and Vertex AI's requests go when the gateway names no upstream for them.
UPSTREAM_FALLBACK = {"azure": "openai", "vertex": "gemini"}

# The hosts a fallback upstream must not be (a name, or a domain and its subdomains): the
# vendor's own API, which does not serve the API falling back and would only be sent its
# credentials, an Azure key or a Google Cloud OAuth token. A fallback upstream elsewhere (an
# Azure resource, Vertex AI, a proxy: what an old config's openai or gemini pointed at) may.
_NO_FALLBACK_HOSTS = {"openai": "openai.com", "gemini": "generativelanguage.googleapis.com"}

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
    }
)  # fmt: skip

_HOP_BY_HOP_BYTES = frozenset(name.encode() for name in HOP_BY_HOP)
# Answer headers the ASGI server (uvicorn) adds to every answer of the gateway's.
_WRITTEN_BY_SERVER = frozenset({b"date", b"server"})

# Google's paths: the Gemini API's and its uploads; Vertex AI's (/v1/projects/...,
# /v1beta1/..., /v1/publishers/... with an API key) apart.
_GEMINI_PATH = re.compile(r"/(?:v1beta|v1alpha|upload)/")
_VERTEX_PATH = re.compile(r"/v1beta1/|/v1[a-z0-9]*/(?:projects|publishers)/")
_AZURE_PATH = re.compile(r"/openai/")

# Where each API's SDK puts its key, and where the gateway puts the key it holds.
_KEY_HEADERS = {
    "openai": "authorization", "azure": "api-key", "anthropic": "x-api-key",
    "gemini": "x-goog-api-key", "vertex": "x-goog-api-key",
}  # fmt: skip
CREDENTIAL_HEADERS = frozenset(_KEY_HEADERS.values())
# The query parameter an API's REST clients may put their key in instead (Google's ?key=).
_KEY_PARAMS = {"gemini": "key", "vertex": "key"}
GATEWAY_KEY_HEADER = "x-toolgate-key"
_CREDENTIAL_BYTES = frozenset(name.encode() for name in CREDENTIAL_HEADERS)


# What parts a path into segments, for the dot segments check: a slash, and a backslash, which
# some servers take for one.
_SEGMENT_BREAK = re.compile(r"[/\\]")


def target_of(scope: Mapping[str, Any]) -> tuple[str, str, str]:
    """A request's path decoded (what it is routed on), its path as the client wrote it
    (what goes upstream: an escaped ``%2F`` stays one) and its query string, from the ASGI
    scope. Not from Starlette's ``request.url``, which is built with the ``Host`` header:
    before Starlette 1.0.1 a ``Host`` holding ``/`` or ``#`` changed its path
    (CVE-2026-48710), and the request went upstream on a path it was not routed as."""
    path = scope["path"]
    raw = scope.get("raw_path")
    written = raw.decode("latin-1") if raw else quote(path, safe="/:@!$&'()*+,;=~")
    return path, written, scope.get("query_string", b"").decode("latin-1")


def target_problem(path: str, written: str) -> str | None:
    """Why a request for ``path`` (``written`` as the client wrote it) is not forwarded, or
    None. The upstream's URL is its origin followed by ``written``: a target not beginning
    with ``/`` (``%2F@host/...``, which an h11 server passes on as written) would make the
    origin's host a user name and send the request, and the key the gateway holds, to
    ``host``. A ``.`` or ``..`` segment (escaped too) is resolved by the HTTP client or the
    upstream: the request would reach a path other than the one it was routed as (its tools
    unfiltered, its deny list unheld) or leave the origin's own path."""
    if not written.startswith("/"):
        return f"the request target must be a path beginning with '/', got {written!r}"
    if any(segment in (".", "..") for segment in _SEGMENT_BREAK.split(path)):
        return f"the request path {path!r} holds a '.' or '..' segment: send it resolved"
    return None


def endpoint_of(method: str, path: str) -> Endpoint | None:
    """The filtered endpoint ``method path`` is, or None (it passes through)."""
    if method != "POST":
        return None
    return next((ep for pattern, ep in _ENDPOINTS if pattern.fullmatch(endpoint_path(path))), None)


def endpoint_path(path: str) -> str:
    """``path`` without its trailing slashes: what a filtered request is routed on and sent
    to. Web frameworks serve ``/v1/chat/completions/`` as ``/v1/chat/completions`` or
    redirect it there (FastAPI's and Gin's 307, which sends the client to the upstream
    around the gateway), so its tools went upstream unfiltered, flagged nowhere.

    >>> endpoint_path("/v1/messages/")
    '/v1/messages'
    """
    return path.rstrip("/") or path


def written_endpoint_path(written: str) -> str:
    """``written``, a filtered request's path as the client wrote it, without the trailing
    slashes :func:`endpoint_path` left out of its decoded path, escaped ones (``%2F``)
    too: its decoded path was routed as the endpoint, so it goes to the endpoint, not to a
    path an upstream decodes to the slashed one (and redirects).

    >>> written_endpoint_path("/v1/messages%2f/")
    '/v1/messages'
    """
    return _TRAILING_SLASHES.sub("", written) or written


def passthrough_provider(path: str, headers: Mapping[str, str], query: str = "") -> str:
    """The API an unfiltered request is for: Vertex AI's for its paths, Gemini's for its
    paths or key (header or ``?key=``), Azure OpenAI's for its paths (``/openai/...``),
    Anthropic's for its headers, else OpenAI's."""
    if _VERTEX_PATH.match(path):
        return "vertex"
    google_key = "x-goog-api-key" in headers or "key" in parse_qs(query)
    if _GEMINI_PATH.match(path) or google_key:
        return "gemini"
    if _AZURE_PATH.match(path):
        return "azure"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def upstream_for(provider: str, origins: Mapping[str, str]) -> str:
    """The upstream, among ``origins`` (upstream names to their origins), that
    ``provider``'s requests go to: its own; Azure's and Vertex AI's, when not named,
    OpenAI's and Gemini's, unless that upstream is OpenAI's or the Gemini API's own host
    (:func:`refused_fallback`). Not among ``origins`` when there is none.

    >>> upstream_for("azure", {"openai": "https://r.openai.azure.com"})
    'openai'
    >>> upstream_for("azure", {"openai": "https://api.openai.com"})
    'azure'
    """
    if provider in origins:
        return provider
    fallback = UPSTREAM_FALLBACK.get(provider)
    if fallback is None or fallback not in origins or refused_fallback(provider, origins):
        return provider
    return fallback


def refused_fallback(provider: str, origins: Mapping[str, str]) -> bool:
    """Whether ``provider``'s fallback upstream is among ``origins`` but refused: its host
    is its vendor's own API (``api.openai.com`` for Azure's requests,
    ``generativelanguage.googleapis.com`` for Vertex AI's)."""
    fallback = UPSTREAM_FALLBACK.get(provider)
    if fallback is None or fallback not in origins:
        return False
    host = (urlsplit(origins[fallback]).hostname or "").rstrip(".")
    refused = _NO_FALLBACK_HOSTS[fallback]
    return host == refused or host.endswith("." + refused)


_API_NAMES = {
    "openai": "OpenAI's", "gemini": "the Gemini API's", "azure": "Azure OpenAI's",
    "vertex": "Vertex AI's",
}  # fmt: skip


def no_upstream(provider: str, origins: Mapping[str, str]) -> str:
    """Why a request for ``provider``'s API has nowhere to go among ``origins``, and the
    flag that fixes it."""
    fallback = UPSTREAM_FALLBACK.get(provider)
    flag = f"--upstream {provider}=URL"
    if fallback is not None and refused_fallback(provider, origins):
        return (
            f"no upstream for {provider}: the {fallback} upstream is "
            f"{_API_NAMES[fallback]} own API, which does not serve {_API_NAMES[provider]} "
            f"requests and is not sent their credentials; start the gateway with {flag}"
        )
    also = f" (or --upstream {fallback}=URL)" if fallback else ""
    return f"no upstream for {provider}: start the gateway with {flag}{also}"


def unfiltered_call(method: str, path: str) -> bool:
    """Whether ``method path``, which the gateway does not filter, looks like a model call
    that may carry tools (Anthropic on Vertex AI or Bedrock, a model call under a path the
    gateway does not know)."""
    return method == "POST" and _MODEL_CALL.fullmatch(path) is not None


def forwarded_headers(
    headers: Iterable[tuple[bytes, bytes]],
    provider: str,
    api_key: str | None,
    *,
    decoded: bool = False,
) -> list[tuple[bytes, bytes]]:
    """The client's headers as sent upstream, as bytes (a value may hold any octet, which
    a round trip through text would change): hop-by-hop ones, ``host`` and the length
    (recomputed) left out, the gateway's own key never, and the client's credentials
    replaced by ``api_key`` when the gateway holds one. With ``decoded`` (a filtered
    request: the gateway decodes its body and reads its answer) the client's
    ``content-encoding`` is left out (the body goes decoded) and so is its
    ``accept-encoding``: the upstream is asked for the codings the gateway's client decodes,
    not for one (``br``, ``zstd``) the client could decode but the gateway could not read."""
    headers = list(headers)
    skipped = _hop_by_hop(headers) | {b"host", b"content-length", GATEWAY_KEY_HEADER.encode()}
    if decoded:
        skipped |= {b"accept-encoding", b"content-encoding"}
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower in skipped or (api_key is not None and lower in _CREDENTIAL_BYTES):
            continue
        out.append((name, value))
    if api_key is not None:
        header = _KEY_HEADERS[provider]
        key = f"Bearer {api_key}" if header == "authorization" else api_key
        out.append((header.encode(), key.encode()))
    return out


def forwarded_query(query: str, upstream: str, *, holds_key: bool) -> str:
    """The client's query string as sent to ``upstream``: as written, but for a key in it
    (Google's ``?key=``) when the gateway holds the upstream's key, which goes in place of
    the client's (in a header): the client's, perhaps the gateway's own token, stays here.

    >>> forwarded_query("key=client&pageSize=5", "gemini", holds_key=True)
    'pageSize=5'
    """
    param = _KEY_PARAMS.get(upstream)
    if not holds_key or param is None or not query:
        return query
    kept = [part for part in query.split("&") if unquote_plus(part.partition("=")[0]) != param]
    return "&".join(kept)


def response_headers(
    headers: Iterable[tuple[bytes, bytes]], *, decoded: bool
) -> list[tuple[bytes, bytes]]:
    """The upstream's answer headers for the client, as bytes, hop-by-hop ones left out,
    and its ``date`` and ``server``, which the server serving the gateway writes itself (a
    second ``Date`` makes an invalid answer); with ``decoded`` (the body is passed on
    decoded, or rewritten) its encoding and length too."""
    headers = list(headers)
    dropped = _hop_by_hop(headers) | _WRITTEN_BY_SERVER
    if decoded:
        dropped |= {b"content-encoding", b"content-length"}
    return [(name, value) for name, value in headers if name.lower() not in dropped]


def _hop_by_hop(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """The hop-by-hop header names of ``headers``: the standard ones, and those its
    ``Connection`` names (RFC 9110 section 7.6.1: a proxy removes them too)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return set(_HOP_BY_HOP_BYTES) | named


def undecodable(content_encoding: str, decodable: str) -> str | None:
    """The codings in an answer's ``content_encoding`` that are not in ``decodable`` (an
    ``Accept-Encoding`` value: what the gateway's client decodes), or None. httpx passes a
    coding it does not know as it is, which the gateway would then take for the body.

    >>> undecodable("gzip, br", "gzip, deflate")
    'br'
    """
    known = {part.split(";")[0].strip().lower() for part in decodable.split(",")} | {"identity"}
    codings = [part.strip() for part in content_encoding.split(",") if part.strip()]
    unknown = [coding for coding in codings if coding.lower() not in known]
    return ", ".join(unknown) or None


def error_body(provider: str, status: int, message: str, code: str) -> bytes:
    """A gateway error as ``provider``'s API writes its errors, so its SDK raises it with
    ``message``: OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``,
    Google's ``{"error": {"code", "message", "status"}}`` (Azure's and Vertex AI's are
    OpenAI's and Google's)."""
    provider = UPSTREAM_FALLBACK.get(provider, provider)
    body: dict[str, Any]
    if provider == "anthropic":
        kind = "invalid_request_error" if status < 500 else "api_error"
        kind = {403: "permission_error", 413: "request_too_large"}.get(status, kind)
        body = {"type": "error", "error": {"type": kind, "message": message}}
    elif provider == "gemini":
        google = {
            400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            413: "INVALID_ARGUMENT", 421: "FAILED_PRECONDITION", 500: "INTERNAL",
            504: "DEADLINE_EXCEEDED",
        }  # fmt: skip
        body = {"error": {"code": status, "message": message,
                          "status": google.get(status, "UNAVAILABLE")}}  # fmt: skip
    else:
        kind = "invalid_request_error" if status < 500 else "toolgate_error"
        body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
    return orjson.dumps(body)
