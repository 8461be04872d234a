"""Router directory cases for :mod:`tests.fuzz.file_worker`: every file of a saved router
mutated (bytes, and the manifest's fields resealed), then opened, routed, verified."""

from __future__ import annotations

import functools
import json
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.routing.sealed import write_sealed
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing.router import Router

TOOLS = {
    "files": {
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"path": {"type": "string", "pattern": "^/[a-z/]+$"}},
                    "required": ["path"],
                },
                "x-toolgate": {"requires": {"scopes": ["fs:read"]}},
            },
            {"name": "list_dir", "description": "List a directory."},
        ]
    },
    "mail": {"tools": [{"name": "send", "description": "Send an email to someone."}]},
}

# Values of the wrong type, out of range, or past a reader's bounds, for every manifest field.
HOSTILE_VALUES: list[Any] = [
    None, True, -1, 0, 2**63, 2**64, 1.5, float("1e308"), "", "x" * 10_000, "\u00e9",
    [], [None], [[0, "x"]], [-1], [2**70], {}, {"a": 1}, json.loads("[" * 500 + "]" * 500),
]  # fmt: skip


class _RepeatingEmbedder:
    """The real model, asked once per distinct text: the campaign routes the same queries
    thousands of times, through routers opened afresh (each with an empty query cache)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.vectors = functools.cache(inner.embed_tokens)

    def embed(self, texts: list[str]) -> Any:
        return self.inner.embed(texts)

    def embed_tokens(self, text: str) -> Any:
        return self.vectors(text)


def _use(directory: Path, embedder: Any) -> None:
    router = Router.open(directory, embedder=embedder)
    result = router.route("read the file /etc/hosts", state={"scopes": ["fs:read"]})
    router.route("select:read_file,send")
    router.promote(result)
    router.verify({"name": "read_file", "arguments": {"path": "/etc/hosts"}}, result)


def router_campaign(
    directory: Path,
    seed: int,
    flips: int,
    campaign_class: type[Any],
    mutations: Callable[..., Iterator[tuple[str, Callable[[bytearray], bytearray]]]],
) -> Any:
    campaign = campaign_class()
    rng = random.Random(seed)
    model = Embedder(precision="int8")
    embedder = _RepeatingEmbedder(model)
    good = directory / "good"
    Router.from_catalog(Catalog.load(TOOLS, overrides={"mail/send": {"pinned": True}}),
                        path=good, embedder=model, cache=None)  # fmt: skip
    case = directory / "case"
    shutil.copytree(good, case)
    for name in ("router.json", "catalog.json", "matrix.tgm", "bm25.tgb"):
        original = (good / name).read_bytes()
        few = flips if name.endswith(".json") else flips // 4
        for label, mutate in mutations(original, rng, lambda b: b, [], few):
            (case / name).write_bytes(bytes(mutate(bytearray(original))))
            campaign.run(f"router {name} {label}", lambda: _use(case, embedder))
        (case / name).write_bytes(original)
    manifest = json.loads((good / "router.json").read_text())
    fields = [(key, None) for key in manifest if key != "checksum"]
    fields += [("config", key) for key in manifest["config"]]
    for field, sub in fields:
        for value in HOSTILE_VALUES:

            def edited(field: str = field, sub: str | None = sub, value: Any = value) -> None:
                data = json.loads((good / "router.json").read_text())
                if sub is None:
                    data[field] = value
                else:
                    data[field][sub] = value
                write_sealed(case / "router.json", data)
                _use(case, embedder)

            campaign.run(f"router.json {field}.{sub} = {str(value)[:30]} (resealed)", edited)
    (case / "router.json").write_bytes((good / "router.json").read_bytes())
    saved = json.loads((good / "catalog.json").read_text())
    for index in range(len(saved["tools"])):
        for key in saved["tools"][index]:
            for value in HOSTILE_VALUES[::3]:

                def tool_edited(index: int = index, key: str = key, value: Any = value) -> None:
                    data = json.loads((good / "catalog.json").read_text())
                    data["tools"][index][key] = value
                    (case / "catalog.json").write_text(json.dumps(data))
                    write_sealed(
                        case / "router.json", json.loads((good / "router.json").read_text())
                    )
                    _use(case, embedder)

                campaign.run(f"catalog.json tools[{index}].{key} = {str(value)[:30]}", tool_edited)
    return campaign
