"""The gateway's settings: upstreams, per-route filtering policy, prewarmed tool sets.

Read from a TOML or YAML file (``--config``), overridden by the command line. A route is
chosen by the first ``[[routes]]`` entry whose ``path`` pattern (``fnmatch``, e.g.
``/v1/*``) matches the request path; the top-level keys are every route's defaults::

    top_k = 5                      # the most tools a request keeps (a header may ask fewer)
    policy = "annotate"            # tool calls in answers: "off", "annotate" or "enforce"
    store = "/var/lib/toolgate"    # indexes saved here, memory-mapped, shared by workers
    max_stored = 256               # the most indexes kept there (least recently used go)
    learn = "learned.sqlite3"      # learn from the calls checked (or postgresql://...)
    max_body_bytes = 67108864      # a larger filtered request is refused (413), unread
    allowed_origins = ["https://app.example.com"]  # web pages let in (others: 403)
    allowed_hosts = ["gateway.internal"]  # Host names besides loopback's (others: 421)

    [upstreams.openai]
    origin = "https://api.openai.com"
    api_key_env = "OPENAI_API_KEY" # the upstream key comes from the gateway, not the client

    [upstreams.azure]              # Azure OpenAI's paths (/openai/...); the openai one if unset
    origin = "https://my-resource.openai.azure.com"
    api_key_env = "AZURE_OPENAI_API_KEY"  # sent in `api-key`, as Azure takes it

    [[routes]]
    path = "/v1/messages"
    top_k = 5
    threshold = 0.3                # a cosine floor in [-1, 1]
    budget_tokens = 6000           # schema tokens the kept tools may take
    pinned = ["search_docs"]       # kept past the budget too (state and lists apply)
    deny = ["delete_*"]
    query = "$.metadata.task"      # JSONPath to the text routed on (default: latest user turn)

    [[prewarm]]
    provider = "openai"            # the shape the file's tools array has
    tools = "tools/github.json"    # indexed before /healthz answers

    [router]                       # RouterConfig settings for every tools array's router
    server_weight = 0.35
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolgate.arguments import finite_number, shown
from toolgate.asgi import secret_from_env
from toolgate.browser_guard import host_pattern, origin_pattern
from toolgate.errors import InvalidInputError
from toolgate.json_limits import JsonLimitError, read_text
from toolgate.promotion.budget import Budget
from toolgate.routing.config import RouterConfig
from toolgate.routing.learned_postgres import is_postgres_address

__all__ = ["INSTALL_EXTRA", "PROVIDERS", "GatewayConfig", "RouteConfig", "Upstream", "load_config"]

#: What installs the packages the gateway needs (its YAML and JSONPath readers among them).
INSTALL_EXTRA = 'pip install "toolgate-router[gateway]"'

# The upstreams a gateway knows, one per API. Azure OpenAI's and Vertex AI's requests go to
# the openai and gemini upstreams when the gateway names none of their own.
PROVIDERS = ("openai", "anthropic", "gemini", "azure", "vertex")
_POLICIES = ("off", "annotate", "enforce")
# The state a request's headers may carry, header -> State field.
DEFAULT_STATE_HEADERS = {
    "x-toolgate-scopes": "scopes",
    "x-toolgate-milestones": "milestones",
    "x-toolgate-tools-run": "tools_run",
}
# A header name as HTTP allows it (RFC 9110 token): another would never arrive.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_ROUTE_KEYS = {
    "path", "top_k", "threshold", "budget_tokens", "max_tools", "pinned", "allow", "deny",
    "policy", "query", "state_headers",
}  # fmt: skip
_TOP_KEYS = _ROUTE_KEYS - {"path"} | {
    "upstreams", "routes", "prewarm", "store", "learn", "router", "max_catalogs", "timeout",
    "connect_timeout", "auth_token_env", "max_body_bytes", "max_stored", "allowed_origins",
    "allowed_hosts",
}  # fmt: skip
# Whitespace and control characters, which no URL holds unescaped.
_BLANK = re.compile(r"[\x00-\x20\x7f]")
# A route pattern every request path matches (``fnmatch``'s ``*`` spans ``/`` too).
_CATCH_ALL = re.compile(r"/?\*+")
# The largest filtered request read by default: past the providers' own limits (Anthropic's
# is 32 MB), so a request refused here would have been refused upstream.
MAX_BODY_BYTES = 64 << 20
# The largest config or prewarm tools file read: a bound on what a wrong path (/dev/zero)
# makes the gateway allocate before it listens.
MAX_FILE_BYTES = 1 << 30


@dataclass(frozen=True)
class Upstream:
    """Where one provider's requests go, and the key the gateway adds (if it holds one)."""

    origin: str
    api_key_env: str | None = None

    def api_key(self) -> str | None:
        """The key from the environment, or None when the client's own credentials pass."""
        return _from_env("api_key_env", self.api_key_env)


@dataclass(frozen=True)
class RouteConfig:
    """How requests on matching paths are filtered and their answers checked."""

    path: str = "*"
    top_k: int | None = None
    threshold: float | None = None
    budget_tokens: int | None = None
    max_tools: int | None = None
    pinned: tuple[str, ...] = ()
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None
    policy: str = "annotate"
    query: str | None = None
    state_headers: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_STATE_HEADERS))

    def budget(self) -> Budget | None:
        """The budget the route sets, if any (dropping the lowest-ranked tools past it)."""
        if self.budget_tokens is None and self.max_tools is None:
            return None
        return Budget(max_tools=self.max_tools, max_schema_tokens=self.budget_tokens)


@dataclass(frozen=True)
class Prewarm:
    """A tools array indexed at start-up, read as ``provider`` shapes it."""

    provider: str
    tools: Path


@dataclass(frozen=True)
class GatewayConfig:
    """Every setting of a gateway (see the module). ``allowed_hosts`` are the ``Host`` names
    the gateway answers to (empty: any; ``toolgate gateway`` adds the loopback names on a
    loopback address), ``allowed_origins`` the web pages it admits (empty: none)."""

    upstreams: Mapping[str, Upstream] = field(default_factory=dict)
    routes: tuple[RouteConfig, ...] = ()
    default: RouteConfig = field(default_factory=RouteConfig)
    prewarm: tuple[Prewarm, ...] = ()
    store: Path | None = None
    learn: str | None = None
    router: RouterConfig = field(default_factory=RouterConfig)
    max_catalogs: int = 64
    max_stored: int | None = None  # None: ToolFilter's default, from max_catalogs
    timeout: float = 600.0
    connect_timeout: float = 10.0
    auth_token_env: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    def route(self, path: str) -> RouteConfig:
        """The settings for ``path``: the first route whose pattern matches, else the
        defaults."""
        for route in self.routes:
            if fnmatch.fnmatchcase(path, route.path):
                return route
        return self.default

    def with_overrides(
        self,
        *,
        upstreams: Mapping[str, str] | None = None,
        top_k: int | None = None,
        allowed_hosts: tuple[str, ...] = (),
        allowed_origins: tuple[str, ...] = (),
    ) -> GatewayConfig:
        """These settings with the command line's ``--upstream`` and ``--top-k`` applied
        (``--top-k`` caps every route), and its ``--allow-host`` and ``--allow-origin``
        added to the file's."""
        merged = dict(self.upstreams)
        for name, origin in (upstreams or {}).items():
            known = merged.get(name)
            key_env = known.api_key_env if known else None
            merged[name] = Upstream(_origin(origin, f"--upstream {name}"), key_env)
        config = replace(
            self,
            upstreams=merged,
            allowed_hosts=tuple(dict.fromkeys((*self.allowed_hosts, *allowed_hosts))),
            allowed_origins=tuple(dict.fromkeys((*self.allowed_origins, *allowed_origins))),
        )
        if top_k is None:
            return config

        def capped(route: RouteConfig) -> RouteConfig:
            return replace(route, top_k=top_k if route.top_k is None else min(route.top_k, top_k))

        routes = tuple(capped(route) for route in self.routes)
        return replace(config, routes=routes, default=capped(self.default))

    def auth_token(self) -> str | None:
        """The token clients must present, from ``auth_token_env``; None: no check."""
        return _from_env("auth_token_env", self.auth_token_env)


def _from_env(key: str, variable: str | None) -> str | None:
    """The secret in the environment variable ``variable`` (named by the setting ``key``), as
    :func:`~toolgate.asgi.secret_from_env` reads it; None when there is no variable."""
    return None if variable is None else secret_from_env(variable, key)


def load_config(path: Path | None) -> GatewayConfig:
    """The settings in the TOML (``.toml``) or YAML (``.yaml``, ``.yml``) file ``path``;
    defaults when ``path`` is None. Every problem is an error naming the key."""
    if path is None:
        return GatewayConfig()
    data = _read(path)
    where = str(path)
    _check_keys(data, _TOP_KEYS, where)
    default = _route({k: v for k, v in data.items() if k in _ROUTE_KEYS}, "*", where)
    routes = data.get("routes", [])
    if not isinstance(routes, list):
        raise InvalidInputError(f"{where}: 'routes' must be a list of tables")
    parsed_routes: list[RouteConfig] = []
    for i, entry in enumerate(routes):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            raise InvalidInputError(f"{where}: routes[{i}] needs a 'path' pattern")
        _check_reachable(entry["path"], parsed_routes, f"{where}: routes[{i}]")
        # A route's unset keys fall back to the top-level defaults.
        merged = {**{k: v for k, v in data.items() if k in _ROUTE_KEYS}, **entry}
        parsed_routes.append(_route(merged, entry["path"], f"{where}: routes[{i}]"))
    upstreams = data.get("upstreams", {})
    if not isinstance(upstreams, Mapping):
        raise InvalidInputError(f"{where}: 'upstreams' must be a table of providers")
    base = path.parent
    return GatewayConfig(
        upstreams={name: _upstream(name, entry, where) for name, entry in upstreams.items()},
        routes=tuple(parsed_routes),
        default=default,
        prewarm=tuple(
            _prewarm(entry, i, base, where) for i, entry in enumerate(_list(data, "prewarm", where))
        ),
        store=_store(data, base, where),
        learn=_learn_store(data, base, where),
        router=_router_config(data, where),
        max_catalogs=_int(data, "max_catalogs", where, 64, minimum=1),
        max_stored=_int(data, "max_stored", where, None, minimum=1),
        timeout=_seconds(data, "timeout", where, 600.0),
        connect_timeout=_seconds(data, "connect_timeout", where, 10.0),
        auth_token_env=_env_name(data, "auth_token_env", where),
        max_body_bytes=_int(data, "max_body_bytes", where, MAX_BODY_BYTES, minimum=1),
        allowed_hosts=tuple(
            host_pattern(name, f"{where}: allowed_hosts")
            for name in _names(data, "allowed_hosts", where) or ()
        ),
        allowed_origins=tuple(
            origin_pattern(origin, f"{where}: allowed_origins")
            for origin in _names(data, "allowed_origins", where) or ()
        ),
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        text = read_file(path)
    except (OSError, JsonLimitError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise InvalidInputError(f"--config {path}: cannot read: {reason}") from None
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - the same parser, under its older name
            try:
                import tomli as tomllib
            except ImportError as exc:
                raise _needs(path, "TOML", exc) from None
        try:
            data: Any = tomllib.loads(text)
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
            raise InvalidInputError(f"--config {path}: not valid TOML: {_why(exc)}") from None
    elif path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise _needs(path, "YAML", exc) from None
        try:
            data = yaml.load(text, Loader=_unique_keys_loader(yaml))
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            raise InvalidInputError(f"--config {path}: not valid YAML: {_why(exc)}") from None
    else:
        raise InvalidInputError(f"--config {path}: expected a .toml, .yaml or .yml file")
    if not isinstance(data, dict):
        raise InvalidInputError(f"--config {path}: expected a table of settings")
    return data


def _unique_keys_loader(yaml: Any) -> Any:
    """PyYAML's safe loader, refusing a key given twice in one mapping: YAML forbids it,
    and PyYAML would keep the later value in silence (TOML's parser refuses it already).
    Merge keys (``<<: *base``) still share settings, the mapping's own keys winning."""

    merge_tag = "tag:yaml.org,2002:merge"

    class UniqueKeysLoader(yaml.SafeLoader):  # type: ignore[misc]
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.checked: set[int] = set()  # the mappings' nodes, by id

        def flatten_mapping(self, node: Any) -> None:
            # Called before a mapping is built and on each one merged into another
            # (`<<: *base`), which it rewrites in place, merged keys first (the mapping's own
            # win): so each is checked once, as written, its merge keys aside.
            if id(node) not in self.checked:
                self.checked.add(id(node))
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == merge_tag:
                        continue
                    key = self.construct_object(key_node, deep=False)
                    if isinstance(key, str) and key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}", key_node.start_mark
                        )
                    seen.add(key if isinstance(key, str) else id(key_node))
            super().flatten_mapping(node)

    return UniqueKeysLoader


def _needs(path: Path, language: str, exc: ImportError) -> InvalidInputError:
    """The error for a config file whose reader is not installed: the command that
    installs it, not a traceback."""
    return InvalidInputError(f"--config {path}: reading {language} needs {INSTALL_EXTRA} ({exc})")


def _why(exc: BaseException) -> str:
    """What a parser's failure says; both parsers recurse, so nesting past the interpreter's
    limit is a ``RecursionError``, and a number of more than 4,300 digits a ``ValueError``."""
    return "nested too deeply to read" if isinstance(exc, RecursionError) else str(exc)


def read_file(path: Path) -> str:
    """The text of the regular file ``path`` (a config or a tools array), at most
    :data:`MAX_FILE_BYTES` (see :func:`~toolgate.json_limits.read_text`): ``OSError``,
    :class:`JsonLimitError` or ``UnicodeDecodeError`` otherwise."""
    return read_text(path, MAX_FILE_BYTES)


def _check_keys(data: Mapping[str, Any], known: set[str], where: str) -> None:
    # YAML reads `1:`, `true:` and `null:` as keys of those types, which sort against no str.
    for key in data:
        if not isinstance(key, str):
            raise InvalidInputError(f"{where}: keys must be strings, got {shown(key)}")
    if unknown := sorted(set(data) - known):
        raise InvalidInputError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")


def _check_reachable(pattern: str, earlier: list[RouteConfig], where: str) -> None:
    """Refuse a route's ``path`` pattern that no request can reach: one no path matches (a
    request path begins with ``/``), or one a route before it matches first (the same
    pattern, or a catch-all). Its settings, a ``deny`` list among them, would apply to no
    request, silently."""
    if not pattern.startswith(("/", "*", "?", "[")):
        raise InvalidInputError(
            f"{where}: path {pattern!r} matches no request path (they begin with '/')"
        )
    for i, route in enumerate(earlier):
        if route.path == pattern or _CATCH_ALL.fullmatch(route.path):
            raise InvalidInputError(
                f"{where}: path {pattern!r} never applies: routes[{i}] ({route.path!r}) "
                "matches its paths first (the first route that matches applies)"
            )


def _route(data: Mapping[str, Any], path: str, where: str) -> RouteConfig:
    _check_keys(data, _ROUTE_KEYS, where)
    policy = data.get("policy", "annotate")
    if policy not in _POLICIES:
        # YAML 1.1, PyYAML's, reads `policy: off` as false: the value written is not shown.
        hint = " (YAML reads an unquoted off or on as false or true: quote it)"
        raise InvalidInputError(
            f"{where}: policy must be one of {list(_POLICIES)}, got {policy!r}"
            + (hint if isinstance(policy, bool) else "")
        )
    threshold = _threshold(data, where)
    route = RouteConfig(
        path=path,
        top_k=_int(data, "top_k", where, None, minimum=1),
        threshold=threshold,
        budget_tokens=_int(data, "budget_tokens", where, None, minimum=1),
        max_tools=_int(data, "max_tools", where, None, minimum=1),
        pinned=tuple(_names(data, "pinned", where) or ()),
        allow=_names(data, "allow", where),
        deny=_names(data, "deny", where),
        policy=policy,
        query=_optional_str(data, "query", where),
        state_headers=_state_headers(data, where),
    )
    if route.query is not None:
        from toolgate.gateway.query import compile_path

        compile_path(route.query, where)  # a bad path fails at start-up, not per request
    return route


def _threshold(data: Mapping[str, Any], where: str) -> float | None:
    """The route's ``threshold``, checked as :class:`RouterConfig` checks it: outside the
    cosine range it fails every request (NaN) or keeps no tool at all."""
    value = data.get("threshold")
    if value is None:
        return None
    if not (finite_number(value) and -1.0 <= value <= 1.0):
        raise InvalidInputError(
            f"{where}: 'threshold' must be a cosine in [-1, 1], got {shown(value)}"
        )
    return float(value)


def _state_headers(data: Mapping[str, Any], where: str) -> dict[str, str]:
    """The route's ``state_headers``, by lower-case name: HTTP names are case-blind, so two
    spellings of one name would silently keep only the last."""
    table = data.get("state_headers", DEFAULT_STATE_HEADERS)
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and v in ("scopes", "milestones", "tools_run") for k, v in table.items()
    ):
        raise InvalidInputError(
            f"{where}: state_headers maps header names to 'scopes', 'milestones' or 'tools_run'"
        )
    headers: dict[str, str] = {}
    for name, state in table.items():
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidInputError(f"{where}: state_headers: {shown(name)} is no HTTP header name")
        if name.lower() in headers:
            raise InvalidInputError(
                f"{where}: state_headers: {shown(name)} names a header already listed "
                "(header names ignore case)"
            )
        headers[name.lower()] = state
    return headers


def _upstream(name: str, entry: Any, where: str) -> Upstream:
    if name not in PROVIDERS:
        raise InvalidInputError(f"{where}: upstreams.{name}: expected one of {list(PROVIDERS)}")
    if not isinstance(entry, Mapping) or not isinstance(entry.get("origin"), str):
        raise InvalidInputError(f"{where}: upstreams.{name} needs an 'origin' URL")
    _check_keys(entry, {"origin", "api_key_env"}, f"{where}: upstreams.{name}")
    key_env = _env_name(entry, "api_key_env", f"{where}: upstreams.{name}")
    return Upstream(_origin(entry["origin"], f"{where}: upstreams.{name}.origin"), key_env)


def _origin(text: str, where: str) -> str:
    """``text``, an upstream's origin from ``where`` (the config file's key, or the
    command line's option), without a trailing slash."""
    if not text.startswith(("http://", "https://")):
        raise InvalidInputError(f"{where}: expected an http(s) URL, got {text!r}")
    # The request's path is appended to the text as it is: a query or fragment would take
    # the path in (the request reaching the origin's root), and a space or a missing host
    # fails every request; each is refused now, not at the first request.
    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # past 65535, or not a number
        port_ok = False
    if not port_ok or not parts.hostname or any(c in text for c in "?#") or _BLANK.search(text):
        raise InvalidInputError(
            f"{where}: expected an http(s) origin (a path may follow the host, no query or "
            f"fragment), got {text!r}"
        )
    return text.rstrip("/")


def _prewarm(entry: Any, i: int, base: Path, where: str) -> Prewarm:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("tools"), str):
        raise InvalidInputError(f"{where}: prewarm[{i}] needs 'tools', a file of a tools array")
    _check_keys(entry, {"provider", "tools"}, f"{where}: prewarm[{i}]")
    provider = entry.get("provider")
    shapes = ("openai", "openai-responses", "anthropic", "gemini")
    if provider not in shapes:
        raise InvalidInputError(f"{where}: prewarm[{i}].provider must be one of {list(shapes)}")
    return Prewarm(provider, _path(base, entry["tools"], f"{where}: prewarm[{i}].tools"))


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {key!r} must be a list")
    return value


def _names(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{where}: {key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _int(
    data: Mapping[str, Any], key: str, where: str, default: int | None, *, minimum: int
) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{where}: {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _seconds(data: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = data.get(key, default)
    # An infinite timeout overflows the socket's own (it is no "never").
    if not (finite_number(value) and value > 0):
        raise InvalidInputError(
            f"{where}: {key!r} must be a finite number of seconds > 0, got {shown(value)}"
        )
    return float(value)


def _router_config(data: Mapping[str, Any], where: str) -> RouterConfig:
    """The ``[router]`` table as a :class:`RouterConfig` (its defaults for the keys left out)."""
    table = data.get("router", {})
    if not isinstance(table, Mapping):
        raise InvalidInputError(f"{where}: 'router' must be a table of RouterConfig settings")
    try:
        return RouterConfig().with_settings(table)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: router: {exc}") from None


def _learn_store(data: Mapping[str, Any], base: Path, where: str) -> str | None:
    """The learned store of ``learn``: a ``postgresql://`` address as it is, a SQLite path
    from the config file's folder (``":memory:"``: each worker its own)."""
    value = _optional_str(data, "learn", where)
    if value is None:
        return None
    if not value.strip():
        raise InvalidInputError(
            f"{where}: 'learn' must be a SQLite path or a postgresql:// address"
        )
    if value == ":memory:" or is_postgres_address(value):
        return value
    return str(_path(base, value, f"{where}: learn"))


def _store(data: Mapping[str, Any], base: Path, where: str) -> Path | None:
    """The router store of ``store``, from the config file's folder; an empty path would be
    that folder itself, which holds the config, not routers."""
    value = _optional_str(data, "store", where)
    if value is None:
        return None
    if not value.strip():
        raise InvalidInputError(f"{where}: 'store' must be a folder path, got {value!r}")
    return _path(base, value, f"{where}: store")


def _path(base: Path, value: str, where: str) -> Path:
    """A path the config names (at ``where``): ``~`` is the user's home, as in a shell; a
    relative one is read from the config file's folder ``base``."""
    try:
        return base / Path(value).expanduser()
    except RuntimeError:  # pathlib's, for a ~user with no account or a home with no HOME
        raise InvalidInputError(
            f"{where}: {value!r} starts with '~', but that user's home cannot be found"
        ) from None


def _env_name(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """The environment variable named by ``key``: an empty name is never set, so it would
    fail every request instead of the start."""
    value = _optional_str(data, key, where)
    if value is not None and not value.strip():
        raise InvalidInputError(
            f"{where}: {key!r} must name an environment variable, got {value!r}"
        )
    return value


def _optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(f"{where}: {key!r} must be a string, got {value!r}")
    return value
