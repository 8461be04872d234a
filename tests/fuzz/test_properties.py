"""Property campaigns (hypothesis): hostile catalogs, tool calls and config values.

Whatever the input, the catalog loaders return a catalog or raise a ``ToolgateError``,
``verify_call`` returns a verdict, the MCP proxy reads a ``call_tool`` call's arguments or
refuses them, and the config readers (``RouterConfig``, a router's manifest, the MCP proxy's
``servers.json``) return a config or raise a ``ToolgateError``; every example must finish
within 5 s (the deadline). Examples are derandomized (a fixed seed) and nothing is stored
between runs.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.routing.sealed import write_sealed
from toolgate import CatalogWarning, IndexFormatError, ToolgateError
from toolgate.catalog.catalog import Catalog
from toolgate.formats.calls import parse_tool_call
from toolgate.integrations.mcp.meta_tools import unwrap_call
from toolgate.integrations.mcp.server_config import load_servers
from toolgate.routing.config import RouterConfig
from toolgate.routing.store import read_manifest
from toolgate.verify import verify_call

CAMPAIGN = settings(
    max_examples=200,
    deadline=5000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Strings a hostile source picks on purpose, beside hypothesis's own.
HOSTILE_TEXT = [
    "", " ", "\ud800", "a\udfffb", "x" * 10_000, "^(a+)+$", "(?=a)b", "(a)\\1", "[", "\\u0041",
    "a" * 40 + "!", "get_me", "GET_ME", "get\u200bme", "github/get_me", "../../etc/passwd",
    "\x00", "\u202e", "\U0001d420\U0001d41e\U0001d42d", "9" * 5_000, "[" * 2_000, "date-time",
    "regex", "uri",
]  # fmt: skip

text = st.one_of(st.text(max_size=40), st.sampled_from(HOSTILE_TEXT))
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    # Built by map: hypothesis prints its strategies, and no repr takes 5,000 digits.
    st.sampled_from([5000, -5000, 64]).map(lambda n: 10**n if n > 0 else -(10**-n)),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)


def deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


json_values = st.recursive(
    st.one_of(scalars, st.sampled_from([70, 5_000]).map(deep), st.just({"\ud800": 1})),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(text, children, max_size=4)
    ),
    max_leaves=20,
)

SCHEMA_KEYS = [
    "type", "properties", "pattern", "patternProperties", "items", "$ref", "required", "enum",
    "format", "uniqueItems", "additionalProperties", "anyOf", "minimum", "maxLength", "$defs",
    "unevaluatedProperties", "const", "$schema", "propertyNames", "not",
]  # fmt: skip
SCHEMA_VALUES = [
    "object", "string", "integer", "array", ["string", "null"], "#/$defs/x", "#", "http://x/y",
    "^(a+)+$", "(?=a)", "regex", "date-time", "uri", True, False, 0, -1, 2**70, [], ["a"],
]  # fmt: skip

schemas = st.recursive(
    st.one_of(st.booleans(), st.just({"type": "string"}), st.just({})),
    lambda children: st.dictionaries(
        st.sampled_from(SCHEMA_KEYS),
        st.one_of(
            children,
            st.sampled_from(SCHEMA_VALUES),
            st.dictionaries(text, children, max_size=3),
            st.lists(children, max_size=3),
            json_values,
        ),
        max_size=5,
    ),
    max_leaves=12,
)

TOOL_KEYS = [
    "name", "description", "inputSchema", "input_schema", "parameters", "server", "title",
    "annotations", "_meta", "x-toolgate", "fingerprint", "pinned", "requires", "summary",
    "type", "function", "exposed_name", "scopes", "tags",
]  # fmt: skip

meta_blocks = st.fixed_dictionaries(
    {},
    optional={
        "pinned": st.one_of(st.booleans(), json_values),
        "requires": st.one_of(
            st.fixed_dictionaries({}, optional={"scopes": st.lists(text, max_size=3)}),
            json_values,
        ),
        "summary": text,
        "tags": st.one_of(st.lists(text, max_size=3), json_values),
    },
)

tools = st.dictionaries(
    st.sampled_from(TOOL_KEYS),
    st.one_of(
        text,
        schemas,
        json_values,
        meta_blocks,
        st.fixed_dictionaries({"toolgate": meta_blocks}),
        st.fixed_dictionaries({"name": text, "parameters": schemas}),
    ),
    max_size=7,
)

documents = st.one_of(
    st.lists(tools, max_size=4),
    st.fixed_dictionaries({"tools": st.lists(tools, max_size=4)}),
    st.dictionaries(
        text, st.fixed_dictionaries({"tools": st.lists(tools, max_size=3)}), max_size=3
    ),
    st.fixed_dictionaries({"function_declarations": st.lists(tools, max_size=3)}),
    json_values,
)


def _quietly(load: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogWarning)
        return load()


def _check_loaded(catalog: Catalog, arguments: Any) -> None:
    """What a loaded catalog must survive: every tool exported, every tool called."""
    ids = catalog.ids
    for tool in catalog:
        for provider in ("openai", "anthropic", "gemini", "mcp"):
            tool.to_provider(provider)
        verdict = verify_call(catalog, ids, {"name": tool.exposed_name, "arguments": arguments})
        assert verdict.error in (None, "invalid_arguments", "malformed_call"), verdict


@CAMPAIGN
@given(documents, st.booleans(), json_values)
def test_catalog_loaders_raise_only_toolgate_errors(
    document: Any, lenient: bool, arguments: Any
) -> None:
    for load in (
        lambda: Catalog.load(document, lenient=lenient, server="s"),
        lambda: (
            Catalog.from_tools(document, lenient=lenient, server="s")
            if isinstance(document, list)
            else Catalog.load(document, lenient=lenient)
        ),
        lambda: Catalog.load(_json_text(document), lenient=lenient, server="s"),
        lambda: Catalog.from_jsonl(_jsonl(document), lenient=lenient, server="s"),
    ):
        try:
            catalog = _quietly(load)
        except ToolgateError:
            continue
        _check_loaded(catalog, arguments)


def _json_text(document: Any) -> str:
    try:
        return json.dumps(document)
    except (ValueError, TypeError, RecursionError):
        return "[" * 3_000  # what cannot be written is sent as text nested past the parser


def _jsonl(document: Any) -> str:
    items = document if isinstance(document, list) else [document]
    return "\n".join(_json_text(item) for item in items) + "\n"


@CAMPAIGN
@given(st.lists(tools, max_size=3), st.booleans())
def test_saved_tool_shapes_raise_only_toolgate_errors(items: list[Any], trusted: bool) -> None:
    try:
        if trusted:
            catalog = _quietly(lambda: Catalog.from_saved(items))
        else:
            catalog = _quietly(lambda: Catalog.from_tools(items, server="s"))
    except ToolgateError:
        return
    _check_loaded(catalog, {})


VERIFY_SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "pattern": "^(a+)+$", "format": "date-time"},
        "r": {"type": "string", "format": "regex"},
        "u": {"type": "array", "uniqueItems": True, "items": {"$ref": "#/$defs/node"}},
        "n": {"type": "number", "multipleOf": 0.01, "maximum": 10**30},
        "w": {"type": "string", "format": "uri"},
    },
    "patternProperties": {"^(b+)+$": {"type": "integer"}},
    "additionalProperties": {"type": "string", "maxLength": 50},
    "$defs": {"node": {"type": ["object", "string"], "properties": {"k": {"$ref": "#"}}}},
}


@pytest.fixture(scope="module")
def verify_catalog() -> Catalog:
    return Catalog.load(
        {"tools": [{"name": "t", "inputSchema": VERIFY_SCHEMA}, {"name": "u"}]}, server="x"
    )


calls = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("t"), text, json_values)},
        optional={"arguments": st.one_of(json_values, text)},
    ),
    st.fixed_dictionaries(
        {
            "function": st.one_of(
                json_values, st.fixed_dictionaries({"name": text, "arguments": text})
            )
        }
    ),
    st.fixed_dictionaries({"type": st.just("tool_use"), "name": text, "input": json_values}),
    st.fixed_dictionaries(
        {
            "method": st.just("tools/call"),
            "params": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {"name": st.just("t"), "arguments": st.dictionaries(text, json_values)}
                ),
            ),
        }
    ),
)


@CAMPAIGN
@given(
    calls, st.dictionaries(st.sampled_from(["s", "r", "u", "n", "w", "b" * 30 + "!"]), json_values)
)
def test_verify_returns_a_verdict_for_any_call(
    verify_catalog: Catalog, call: Any, arguments: dict[str, Any]
) -> None:
    parse_tool_call(call)
    verdict = verify_call(verify_catalog, ["x/t"], call)
    assert isinstance(verdict.ok, bool)
    verdict = verify_call(verify_catalog, ["x/t"], {"name": "t", "arguments": arguments})
    assert verdict.error in (None, "invalid_arguments", "malformed_call"), verdict


CONFIG_FIELDS = list(RouterConfig.__dataclass_fields__)


@CAMPAIGN
@given(
    st.dictionaries(
        st.sampled_from(CONFIG_FIELDS),
        st.one_of(json_values, st.tuples(numbers, numbers, numbers, numbers)),
    )
)
def test_router_config_takes_a_value_or_names_it(values: dict[str, Any]) -> None:
    with contextlib.suppress(ToolgateError):
        RouterConfig(**values)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> dict[str, Any]:
    from toolgate.routing.router import Router

    path = tmp_path_factory.mktemp("manifest")
    catalog = Catalog.load({"tools": [{"name": "a"}, {"name": "b"}]}, server="s")
    Router.from_catalog(catalog, path=path, embedder=embedder, cache=None)
    data: dict[str, Any] = json.loads((path / "router.json").read_text())
    return data


@CAMPAIGN
@given(st.data())
def test_manifest_reader_reads_or_names_the_problem(
    manifest: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("m", numbered=True)
    edited = json.loads(json.dumps(manifest))
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from([*edited, "config"]))
        value = data.draw(json_values)
        if key == "config" and isinstance(edited.get("config"), dict):
            edited["config"][data.draw(st.sampled_from(CONFIG_FIELDS))] = value
        else:
            edited[key] = value
    try:
        write_sealed(directory / "router.json", edited)
    except (ValueError, TypeError, RecursionError):  # a value no JSON text holds
        return
    with contextlib.suppress(IndexFormatError):
        read_manifest(Path(directory))


@CAMPAIGN
@given(st.one_of(text, json_values.map(_json_text)))
def test_call_tool_arguments_are_read_or_refused(arguments: str) -> None:
    unwrapped = unwrap_call({"name": "t", "arguments": arguments})
    assert unwrapped is None or isinstance(unwrapped[1], dict)


SERVER_KEYS = [
    "command", "args", "env", "cwd", "url", "headers", "type", "disabled", "timeout",
    "autoApprove", "alwaysAllow", "maxResultBytes",
]  # fmt: skip

server_configs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "mcpServers": st.one_of(
                json_values,
                st.dictionaries(
                    text,
                    st.dictionaries(st.sampled_from(SERVER_KEYS), json_values, max_size=4),
                    max_size=3,
                ),
            )
        }
    ),
)


@CAMPAIGN
@given(server_configs)
def test_mcp_proxy_config_reader_reads_or_names_the_problem(
    tmp_path_factory: pytest.TempPathFactory, config: Any
) -> None:
    path = tmp_path_factory.mktemp("servers", numbered=True) / "servers.json"
    path.write_text(_json_text(config), encoding="utf-8")
    with contextlib.suppress(ToolgateError):
        load_servers(path)


# Text that holds lone surrogates (json.loads of "\ud800" gives one): hypothesis's own
# strings leave them out.
surrogate_text = st.lists(
    st.one_of(st.sampled_from(["\ud800", "\udfff", "\udce9", "\ud83d"]), st.text(max_size=6)),
    min_size=1,
    max_size=5,
).map("".join)

ENTRY_TOOLS = [
    {"name": name, "description": f"{name.replace('_', ' ')} for a customer.", "inputSchema": {}}
    for name in ("create_invoice", "refund_payment", "send_receipt")
]


@pytest.fixture(scope="module")
def entry_points(embedder: Any) -> tuple[Any, Any]:
    from toolgate.gateway.filter import ToolFilter
    from toolgate.routing.router import Router

    router = Router.from_tools(ENTRY_TOOLS, embedder=embedder, cache=None)
    router.learn(":memory:")
    return router, ToolFilter(embedder=embedder, cache=None)


@CAMPAIGN
@given(surrogate_text)
def test_every_public_entry_takes_lone_surrogates_or_names_them(
    entry_points: tuple[Any, Any], value: str
) -> None:
    """Each entry repairs the text or raises a ``ToolgateError``: the core and the stores
    cannot encode a lone surrogate, which escaped as a bare ``UnicodeEncodeError``."""
    router, gate = entry_points
    result = router.route("refund a payment")
    promotion = router.promote(result, pool="digest")
    request = {"model": "m", "messages": [{"role": "user", "content": value}]}
    request["tools"] = [{"type": "function", "function": tool} for tool in ENTRY_TOOLS]
    entries = {
        "route": lambda: router.route(value),
        "select": lambda: router.route(f"select:{value}"),
        "term": lambda: router.route(f"+{value} invoice"),
        "allow": lambda: router.route("refund", allow=[value], deny=[value]),
        "include": lambda: router.route("refund", include=[value]),
        "promote": lambda: router.promote(result, turn_id=value),
        "verify": lambda: router.verify({"name": value, "arguments": {value: value}}, result),
        "search": lambda: router.verify(
            {"name": "tool_search", "arguments": {"query": value}}, promotion
        ),
        "feedback": lambda: router.feedback(value, used=["default/refund_payment"]),
        "used": lambda: router.feedback("refund", used=[value]),
        "forget tool": lambda: router.forget(tool=value),
        "forget server": lambda: router.forget(server=value),
        "catalog": lambda: Catalog.load([{"name": value, "description": value}]),
        "filter": lambda: gate.filter(request, top_k=2, previous=[value], allow=[value]),
        "pinned": lambda: gate.filter(request, top_k=2, pinned=[value]),
    }
    for entry, call in entries.items():
        try:
            call()
        except ToolgateError:
            pass
        except UnicodeError as exc:
            raise AssertionError(f"{entry}: {exc!r} escaped") from exc
