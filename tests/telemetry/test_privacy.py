"""What verify events keep of a model's call: no name or key the model made up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import EXPOSED_NAME_RE
from toolgate.telemetry.events import VerifyEvent
from toolgate.telemetry.recorder import Telemetry
from toolgate.telemetry.sinks import JsonFileSink, MemorySink
from toolgate.telemetry.usage import UsageStats
from toolgate.verify import verify_call

_SCHEMA = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "headers": {"type": "object", "additionalProperties": {"type": "integer"}},
        "meta": {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
        "env": {"type": "object", "additionalProperties": {"type": "object", "properties": {}}},
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            },
        },
        "cfg": {"$ref": "#/$defs/Cfg"},
    },
    "$defs": {
        "Cfg": {
            "type": "object",
            "properties": {"depth": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
        }
    },
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    tool = {"name": "login", "description": "Log in to the service.", "parameters": _SCHEMA}
    return Catalog.from_tools([tool], server="s")


@pytest.mark.parametrize(
    ("arguments", "shown", "logged"),
    [
        ({"user": 5}, "$.user", "$.user"),
        ({"headers": {"sk-live-KEY": "v"}}, "$.headers.sk-live-KEY", "$.headers.*"),
        ({"meta": {"x-sk-live-KEY": "v"}}, "$.meta.x-sk-live-KEY", "$.meta.*"),
        ({"env": {"sk-live-KEY": 1}}, "$.env.sk-live-KEY", "$.env.*"),
        ({"rows": [{"id": "z"}]}, "$.rows[0].id", "$.rows[0].id"),
        ({"rows": [{}]}, "$.rows[0].id", "$.rows[0].id"),
        ({"cfg": {"depth": "deep"}}, "$.cfg.depth", "$.cfg.depth"),
        ({"cfg": {"sk-live-KEY": 1}}, "$.cfg.sk-live-KEY", "$.cfg.*"),
    ],
)
def test_a_verify_event_names_no_argument_key_the_schema_does_not(
    catalog: Catalog, arguments: dict[str, Any], shown: str, logged: str
) -> None:
    """A free-form map's keys (headers, environment variables) are the model's choice and
    may be secrets: the event stored them, even without ``record_queries``. The model and
    the caller still see the key, to fix the call."""
    memory = MemorySink()
    verdict = verify_call(catalog, ["s/login"], {"name": "login", "arguments": arguments})
    event = Telemetry([memory]).verify(verdict)
    assert verdict.error == event.error == "invalid_arguments"
    assert verdict.path == shown
    assert shown in verdict.message
    assert event.path == logged
    assert memory.events == [event]


def test_an_events_file_holds_no_secret_argument_key(catalog: Catalog, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    hub = Telemetry([JsonFileSink(log)])
    for arguments in ({"headers": {"sk-live-KEY": "v"}}, {"cfg": {"sk-live-KEY": 1}}):
        hub.verify(verify_call(catalog, ["s/login"], {"name": "login", "arguments": arguments}))
    text = log.read_text()
    assert text.count('"error":"invalid_arguments"') == 2
    assert "sk-live" not in text


def _unknown(hub: Telemetry, catalog: Catalog, name: str) -> VerifyEvent:
    verdict = verify_call(catalog, ["s/login"], {"name": name, "arguments": {}})
    assert verdict.error == "unknown_tool"
    assert verdict.name == name  # the caller sees what the model called
    return hub.verify(verdict)


def test_an_unknown_name_like_a_tool_name_is_stored_as_called(catalog: Catalog) -> None:
    assert _unknown(Telemetry([MemorySink()]), catalog, "log_in_user").name == "log_in_user"


@pytest.mark.parametrize(
    "name",
    [
        "n" * 1_000_000,
        "a" * 65,
        "please email bob@example.com my password hunter2",
        "log\nin",
        "login\n",
        "log\x00in",
        "x\ud800",
    ],
)
def test_an_unknown_name_unlike_a_tool_name_is_stored_as_a_keyed_hash(
    catalog: Catalog, name: str
) -> None:
    """A model may call junk, or echo the user's text as the name: stored whole, a 1 MB name
    made a 1 MB line and a ``toolgate stats`` key, and user text went in without
    ``record_queries``."""
    event = _unknown(Telemetry([MemorySink()]), catalog, name)
    assert len(event.name) <= 64
    assert name not in event.name
    assert not EXPOSED_NAME_RE.fullmatch(event.name)  # never taken for a name a model called
    assert event.name != _unknown(Telemetry([MemorySink()], salt="pepper"), catalog, name).name


def test_hashed_unknown_names_still_count_apart(catalog: Catalog, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    stats = UsageStats(catalog.ids)
    hub = Telemetry([JsonFileSink(log), stats], salt="pepper")
    for name in ("tell bob: hunter2", "n" * 1_000_000, "tell bob: hunter2", "log_in_user"):
        _unknown(hub, catalog, name)
    counts = sorted(stats.unknown.values())
    assert counts == [1, 1, 2]
    assert stats.unknown["log_in_user"] == 1
    assert UsageStats.from_log(log).unknown == stats.unknown
    assert log.stat().st_size < 4000
    assert "hunter2" not in log.read_text()
