"""Keeping web pages off toolgate's HTTP servers: the ``Origin`` and ``Host`` checks.

A web page can make its browser send requests to any address the browser reaches, the
gateway or the MCP proxy on loopback or on the local network included. A cross-origin POST
runs there though the page cannot read the answer; after DNS rebinding (a name of the page's
own that turns to the server's address) the page reads the answers too. A program's HTTP
client carries neither of a browser's marks: ``Origin``, the page's origin, which a browser
sends on every cross-origin request and every POST; and in ``Host`` the name the browser
looked up, the page's own after rebinding.

So :class:`BrowserGuard` refuses a request carrying an ``Origin`` that is not allowed (403)
and, when the server has allowed host names, one whose ``Host`` is none of them (421, as the
MCP SDK answers it). A host is ``NAME`` (any port) or ``NAME:PORT``; an origin is
``SCHEME://NAME[:PORT]``, with ``:*`` for any port. Only HTTP requests are checked: neither
server takes WebSockets.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toolgate.asgi import App, Receive, Scope, Send, send_json
from toolgate.errors import InvalidInputError

__all__ = [
    "LOOPBACK_HOSTS",
    "BrowserGuard",
    "BrowserPolicy",
    "host_pattern",
    "is_loopback",
    "origin_pattern",
    "served_hosts",
]

#: The names a program on this machine reaches a loopback listener by.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

#: Makes the answer to a refused request from its scope, status, code and message.
Refusal = Callable[[Scope, int, str, str], App]

# A host name or IPv4 address, or an IPv6 address in brackets; then a port, or * for any.
_HOST = re.compile(r"(?P<name>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\])(?::(?P<port>\d+|\*))?")
_ORIGIN = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>[^/?#]+)(?P<rest>.*)", re.DOTALL)
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def is_loopback(host: str) -> bool:
    """Whether the listening address ``host`` is loopback (a name other than ``localhost``
    may resolve to anything, so it is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def served_hosts(listen: str, extra: Iterable[str]) -> tuple[str, ...]:
    """The ``Host`` names a server listening on ``listen`` answers to: ``extra``, and on a
    loopback address the loopback names and that address too. Empty (any name) only off
    loopback with no ``extra``: clients there reach the server by names it cannot know."""
    names = list(extra)
    if is_loopback(listen):
        names += [*LOOPBACK_HOSTS, f"[{listen}]" if ":" in listen else listen]
    return tuple(dict.fromkeys(names))


def host_pattern(text: str, where: str) -> str:
    """``text``, an allowed host (``NAME`` or ``NAME:PORT``), in the form the guard matches
    (lower case, ``NAME:*`` as ``NAME``); an :class:`InvalidInputError` naming ``where``
    (the option or key) and the value when it is none."""
    value = text.strip().lower()
    if "://" in value:
        raise InvalidInputError(
            f"{where}: a host is a name, with or without :PORT, not a URL; got {text!r}"
        )
    if value.count(":") > 1 and not value.startswith("["):
        raise InvalidInputError(
            f"{where}: an IPv6 address goes in brackets, as in [::1]; got {text!r}"
        )
    match = _HOST.fullmatch(value)
    if match is None or not _valid_name(match["name"]) or not _valid_port(match["port"]):
        raise InvalidInputError(
            f"{where}: expected a host NAME or NAME:PORT (e.g. gateway.internal or "
            f"gateway.internal:8080), got {text!r}"
        )
    port = match["port"]
    return match["name"] if port in (None, "*") else f"{match['name']}:{port}"


def origin_pattern(text: str, where: str) -> str:
    """``text``, an allowed origin (``SCHEME://NAME[:PORT]``, ``:*`` for any port), in the
    form the guard matches (lower case, a scheme's default port left out, as browsers send
    it); an :class:`InvalidInputError` naming ``where`` and the value when it is none."""
    value = text.strip().lower()
    if value == "null":
        raise InvalidInputError(
            f"{where}: the origin 'null' cannot be allowed: any sandboxed page or local file "
            "sends it"
        )
    if value == "*":
        raise InvalidInputError(
            f"{where}: '*' would let every web page in; name each origin, as in "
            "http://localhost:3000"
        )
    match = _ORIGIN.fullmatch(value)
    host = match and _HOST.fullmatch(match["host"])
    if not match or not host or not _valid_name(host["name"]) or not _valid_port(host["port"]):
        raise InvalidInputError(
            f"{where}: expected an origin, SCHEME://HOST or SCHEME://HOST:PORT (e.g. "
            f"http://localhost:3000, or http://localhost:* for any port), got {text!r}"
        )
    scheme, name, port = match["scheme"], host["name"], host["port"]
    bare = f"{scheme}://{name}" if port in (None, _DEFAULT_PORTS.get(scheme)) else None
    origin = bare or f"{scheme}://{name}:{port}"
    if match["rest"]:
        raise InvalidInputError(
            f"{where}: an origin has no path, query or trailing slash: {origin!r}, not {text!r}"
        )
    return origin


def _valid_name(name: str) -> bool:
    if not name.startswith("["):
        return True
    try:
        ipaddress.IPv6Address(name[1:-1])
    except ValueError:
        return False
    return True


def _valid_port(port: str | None) -> bool:
    return port in (None, "*") or 0 < int(port) < 65536


@dataclass(frozen=True)
class BrowserPolicy:
    """The ``Host`` names and the ``Origin`` values a server admits, read as
    :func:`host_pattern` and :func:`origin_pattern` read them (``Gateway.Internal`` is
    ``gateway.internal``, ``gw:*`` is ``gw``; an origin with a path is an
    :class:`InvalidInputError`), so values given in code match as the options' do. No
    ``hosts``: any ``Host``. No ``origins``: no request from a web page at all."""

    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Taken as given, "Gateway.Internal" or "https://app.example.com/" never matched: the
        # server refused every request with a 421 or 403 and no word of why.
        hosts = _patterns(self.hosts, host_pattern, "allowed_hosts")
        object.__setattr__(self, "hosts", hosts)
        object.__setattr__(
            self, "origins", _patterns(self.origins, origin_pattern, "allowed_origins")
        )

    def admits_host(self, host: str) -> bool:
        """Whether a request with ``Host: host`` is admitted."""
        if not self.hosts:
            return True
        host = host.lower()
        return host in self.hosts or _without_port(host) in self.hosts

    def admits_origin(self, origin: str) -> bool:
        """Whether a request with ``Origin: origin`` is admitted."""
        origin = origin.lower()
        return origin in self.origins or f"{_without_port(origin)}:*" in self.origins

    def origin_regex(self) -> str:
        """A regular expression matching exactly the admitted origins (for a CORS layer)."""
        parts = [
            re.escape(o[:-2]) + r"(?::\d+)?" if o.endswith(":*") else re.escape(o)
            for o in self.origins
        ]
        return "(?i)(?:" + "|".join(parts) + ")" if parts else "(?!)"

    def refusal(self, headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str, str] | None:
        """Why a request with these (ASGI, lower-case) headers is refused, as its status, an
        error code and a message; None when it is admitted."""
        hosts, origins = [], []
        for name, value in headers:
            if name == b"origin":
                origins.append(value.decode("latin-1"))
            elif name == b"host":
                hosts.append(value.decode("latin-1"))
        for origin in origins:
            if not self.admits_origin(origin):
                return 403, "origin_not_allowed", (
                    f"requests from web pages are refused: origin {origin!r} is not allowed "
                    "(the server's --allow-origin lets one in)"
                )  # fmt: skip
        if self.hosts and len(hosts) != 1:
            return 421, "host_not_allowed", f"a request needs one Host header, not {len(hosts)}"
        if self.hosts and not self.admits_host(hosts[0]):
            return 421, "host_not_allowed", (
                f"Host {hosts[0]!r} is not a name this server answers to (it answers to "
                f"{', '.join(self.hosts)}): a web page may reach it by another name through "
                "DNS rebinding (the server's --allow-host adds a name)"
            )  # fmt: skip
        return None


def _patterns(
    values: Iterable[str], pattern: Callable[[str, str], str], where: str
) -> tuple[str, ...]:
    """``values`` as ``pattern`` reads each, once each; an :class:`InvalidInputError` naming
    ``where`` for a value that is not a string (a lone string is not a list of them)."""
    if isinstance(values, str):
        raise InvalidInputError(f"{where}: expected a list of strings, got the string {values!r}")
    read = []
    for value in values:
        if not isinstance(value, str):
            raise InvalidInputError(
                f"{where}: expected a list of strings, got {type(value).__name__} {value!r}"
            )
        read.append(pattern(value, where))
    return tuple(dict.fromkeys(read))


def _without_port(authority: str) -> str:
    """``authority`` (``name:port``, ``scheme://name:port``) without its port, if it has one."""
    head, colon, port = authority.rpartition(":")
    return head if colon and port.isdigit() and not head.endswith(("/", ":")) else authority


class BrowserGuard:
    """Refuses the HTTP requests its ``policy`` does not admit, with the answer ``refusal``
    makes (by default ``{"error": message}`` as JSON), and logs each at warning level on
    ``log``; the rest go on to ``app``.

    A ``GET`` or ``HEAD`` of one of ``open_paths`` (a health probe, which must answer any
    name: an orchestrator's carries the pod's address) is not checked; one of
    ``any_host_paths`` (a path a key guards, which a rebound page does not hold) has its
    ``Origin`` checked but not its ``Host``. Any other method on those paths is checked as
    every request is: it is not the probe, and the app may send it on elsewhere.
    """

    def __init__(
        self,
        app: App,
        policy: BrowserPolicy,
        *,
        refusal: Refusal | None = None,
        open_paths: Iterable[str] = (),
        any_host_paths: Iterable[str] = (),
        log: logging.Logger | None = None,
    ) -> None:
        self.app, self.policy = app, policy
        self.refusal = refusal or _json_refusal
        self.open_paths = frozenset(open_paths)
        self.any_host_paths = frozenset(any_host_paths)
        self._origins_only = BrowserPolicy((), policy.origins)
        self.log = log or logging.getLogger("toolgate")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._open(scope, self.open_paths):
            any_host = self._open(scope, self.any_host_paths)
            policy = self._origins_only if any_host else self.policy
            refused = policy.refusal(scope.get("headers", []))
            if refused is not None:
                status, code, message = refused
                # Quoted by !r in the message: a header cannot forge a log line.
                self.log.warning("refused %s %r: %s", scope.get("method"), scope["path"], message)
                await self.refusal(scope, status, code, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _open(scope: Scope, paths: frozenset[str]) -> bool:
        """Whether ``scope`` reads one of ``paths``: a ``GET`` or ``HEAD`` of the path the
        app routes on (decoded, as ``/health%7A`` is ``/healthz``)."""
        return scope.get("method") in ("GET", "HEAD") and scope.get("path") in paths


def _json_refusal(_scope: Scope, status: int, _code: str, message: str) -> App:
    async def answer(_scope: Scope, _receive: Receive, send: Send) -> None:
        await send_json(send, status, {"error": message})

    return answer
