"""What the gateway sends upstream and hands back: endpoints, headers, credentials, errors.

An endpoint is known by its path: OpenAI's ``/v1/chat/completions`` and ``/v1/responses``,
Anthropic's ``/v1/messages``, Gemini's ``/v1beta/models/{model}:generateContent`` and
``:streamGenerateContent``. Any other path passes through to the upstream its credentials
point to. Hop-by-hop headers (RFC 9110 section 7.6.1) are never forwarded, in either direction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "Endpoint",
    "endpoint_of",
    "error_body",
    "forwarded_headers",
    "passthrough_provider",
    "response_headers",
]


@dataclass(frozen=True)
class Endpoint:
    """A path whose requests are filtered: its upstream and its request shape."""

    provider: str
    shape: str


_ENDPOINTS = (
    (re.compile(r"/v1/chat/completions"), Endpoint("openai", "openai")),
    (re.compile(r"/v1/responses"), Endpoint("openai", "openai-responses")),
    (re.compile(r"/v1/messages"), Endpoint("anthropic", "anthropic")),
    (
        re.compile(r"/v1(?:beta|alpha)?/models/[^/:]+:(?:generateContent|streamGenerateContent)"),
        Endpoint("gemini", "gemini"),
    ),
)

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
    }
)  # fmt: skip

# Where each provider's SDK puts its key.
_KEY_HEADERS = {"openai": "authorization", "anthropic": "x-api-key", "gemini": "x-goog-api-key"}
CREDENTIAL_HEADERS = frozenset({*_KEY_HEADERS.values(), "api-key"})
GATEWAY_KEY_HEADER = "x-toolgate-key"


def endpoint_of(method: str, path: str) -> Endpoint | None:
    """The filtered endpoint ``method path`` is, or None (it passes through)."""
    if method != "POST":
        return None
    return next((ep for pattern, ep in _ENDPOINTS if pattern.fullmatch(path)), None)


def passthrough_provider(path: str, headers: Mapping[str, str]) -> str:
    """The upstream an unfiltered request goes to: Gemini for its own paths or key,
    Anthropic for its headers, else OpenAI."""
    if path.startswith(("/v1beta/", "/v1alpha/", "/upload/")) or "x-goog-api-key" in headers:
        return "gemini"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def forwarded_headers(
    headers: Iterable[tuple[str, str]], provider: str, api_key: str | None
) -> list[tuple[str, str]]:
    """The client's headers as sent upstream: hop-by-hop ones, ``host`` and the length
    (recomputed) left out, the gateway's own key never, and the client's credentials
    replaced by ``api_key`` when the gateway holds one."""
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in ("host", "content-length", GATEWAY_KEY_HEADER):
            continue
        if api_key is not None and lower in CREDENTIAL_HEADERS:
            continue
        out.append((name, value))
    if api_key is not None:
        header = _KEY_HEADERS[provider]
        out.append((header, f"Bearer {api_key}" if header == "authorization" else api_key))
    return out


def response_headers(headers: Iterable[tuple[str, str]], *, decoded: bool) -> list[tuple[str, str]]:
    """The upstream's answer headers for the client, hop-by-hop ones left out; with
    ``decoded`` (the body is passed on decoded, or rewritten) its encoding and length too."""
    dropped = HOP_BY_HOP | ({"content-encoding", "content-length"} if decoded else set())
    return [(name, value) for name, value in headers if name.lower() not in dropped]


def error_body(provider: str, status: int, message: str, code: str) -> bytes:
    """A gateway error as ``provider``'s API writes its errors, so its SDK raises it with
    ``message``: OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``,
    Google's ``{"error": {"code", "message", "status"}}``."""
    body: dict[str, Any]
    if provider == "anthropic":
        kind = "invalid_request_error" if status < 500 else "api_error"
        kind = "request_too_large" if status == 413 else kind
        body = {"type": "error", "error": {"type": kind, "message": message}}
    elif provider == "gemini":
        google = {
            400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 413: "INVALID_ARGUMENT",
            504: "DEADLINE_EXCEEDED",
        }  # fmt: skip
        body = {"error": {"code": status, "message": message,
                          "status": google.get(status, "UNAVAILABLE")}}  # fmt: skip
    else:
        kind = "invalid_request_error" if status < 500 else "toolgate_error"
        body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
    return orjson.dumps(body)
