"""A router's directory on disk: the matrix, the BM25 index, the catalog and a manifest.

Every file is written atomically (temporary file, fsync, rename) and the manifest last, so a
directory with a manifest is complete. The manifest carries what routing needs (tool ids,
pinned rows, flag names, catalog version, config), so a router reopens without parsing the
full catalog, which loads only when promote or verify first need it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolgate.catalog import Catalog
from toolgate.config import RouterConfig
from toolgate.errors import CatalogError, IndexFormatError

__all__ = [
    "BM25",
    "CATALOG",
    "FORMAT_VERSION",
    "MANIFEST",
    "MATRIX",
    "CatalogOutline",
    "SavedRouter",
    "copy_atomic",
    "load_saved_catalog",
    "read_manifest",
    "renamed_rows",
    "write_catalog_and_manifest",
]

FORMAT_VERSION = 1
MANIFEST = "router.json"
CATALOG = "catalog.json"
MATRIX = "matrix.tgm"
BM25 = "bm25.tgb"


@dataclass(frozen=True)
class CatalogOutline:
    """What routing needs of a catalog: ids in row order, pinned rows, and the version.

    ``exposed`` lists the rows whose exposed name (what the model sees and repeats) differs
    from the tool's name, with that name, so a query that mentions it names the tool; None
    when a manifest written before it was recorded does not say.
    """

    ids: tuple[str, ...]
    pinned: tuple[int, ...]
    version: str
    exposed: tuple[tuple[int, str], ...] | None = ()

    @classmethod
    def of(cls, catalog: Catalog) -> CatalogOutline:
        """The outline of a loaded catalog."""
        pinned = tuple(row for row, tool in enumerate(catalog) if tool.pinned)
        return cls(tuple(catalog.ids), pinned, catalog.version, renamed_rows(catalog))


def renamed_rows(catalog: Catalog) -> tuple[tuple[int, str], ...]:
    """Rows of ``catalog`` whose exposed name differs from the tool name, with that name."""
    return tuple(
        (row, tool.exposed_name)
        for row, tool in enumerate(catalog)
        if tool.exposed_name != tool.name
    )


@dataclass(frozen=True)
class SavedRouter:
    """The manifest of a saved router."""

    config: RouterConfig
    outline: CatalogOutline
    flags: tuple[str, ...]
    model_id: str


def read_manifest(directory: Path) -> SavedRouter:
    """Read and check ``directory``'s manifest; any problem is an :class:`IndexFormatError`."""
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(
            f"{directory}: not a toolgate router ({MANIFEST} is missing)"
        ) from None
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{path}: unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise IndexFormatError(
            f"{path}: router format {found!r}, this toolgate reads format {FORMAT_VERSION}"
        )
    try:
        settings = dict(manifest["config"])
        settings["bm25_weights"] = tuple(settings["bm25_weights"])
        exposed = manifest.get("exposed")
        outline = CatalogOutline(
            tuple(manifest["ids"]),
            tuple(manifest["pinned"]),
            str(manifest["catalog_version"]),
            None if exposed is None else tuple((int(r), str(n)) for r, n in exposed),
        )
        return SavedRouter(
            RouterConfig(**settings), outline, tuple(manifest["flags"]), str(manifest["model_id"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(f"{path}: malformed manifest: {exc!r}") from None


def write_catalog_and_manifest(directory: Path, catalog: Catalog, saved: SavedRouter) -> None:
    """Write the full catalog, then the manifest that makes the directory complete."""
    tools = [tool.to_dict() for tool in catalog]
    # Exposed names depend on the catalog's naming mode, which reopening must reproduce.
    _write_atomic(directory / CATALOG, json.dumps({"tools": tools, "qualify": catalog.qualify}))
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "config": asdict(saved.config),
        "catalog_version": saved.outline.version,
        "model_id": saved.model_id,
        "flags": list(saved.flags),
        "ids": list(saved.outline.ids),
        "pinned": list(saved.outline.pinned),
        "exposed": [list(item) for item in renamed_rows(catalog)],
    }
    _write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1))


def load_saved_catalog(path: Path, outline: CatalogOutline) -> Catalog:
    """The catalog saved at ``path``, checked against the manifest's ``outline``."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        catalog = Catalog.from_tools(saved["tools"])
        qualify = saved.get("qualify", "auto")
        if qualify != catalog.qualify:
            catalog = Catalog(catalog.tools, qualify=qualify)
    except (OSError, ValueError, KeyError, TypeError, CatalogError) as exc:
        raise IndexFormatError(f"{path}: unreadable catalog: {exc}") from exc
    if catalog.version != outline.version or tuple(catalog.ids) != outline.ids:
        raise IndexFormatError(
            f"{path}: catalog version {catalog.version} does not match the router's "
            f"{outline.version}"
        )
    return catalog


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` through a temporary file and a rename."""
    if source.resolve() == target.resolve():
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with source.open("rb") as src, tmp.open("wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, target)
