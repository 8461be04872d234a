"""Editing a saved router's files on purpose, past their checksums.

The manifest holds a sha256 of itself and of the catalog file, so any edit is refused before
the field it changed is read. A test that edits a field to reach that field's own check (or to
mimic a router saved by an older version) seals the directory again after the edit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from toolgate.routing.store import CATALOG, MANIFEST, manifest_checksum


def write_sealed(manifest_path: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` with the catalog beside it and itself checksummed again."""
    catalog = manifest_path.parent / CATALOG
    if "catalog_sha256" in manifest and catalog.exists():
        manifest["catalog_sha256"] = hashlib.sha256(catalog.read_bytes()).hexdigest()
    manifest["checksum"] = manifest_checksum(manifest)
    manifest_path.write_text(json.dumps(manifest))


def reseal(directory: Path) -> None:
    """Seal ``directory``'s manifest again after its files were edited."""
    path = directory / MANIFEST
    write_sealed(path, json.loads(path.read_text()))
