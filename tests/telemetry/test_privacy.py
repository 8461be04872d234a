"""What verify events keep of a model's call: no name or key the model made up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.telemetry.recorder import Telemetry
from toolgate.telemetry.sinks import JsonFileSink, MemorySink
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
