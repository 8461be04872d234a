"""A router's directory on disk: the matrix, the BM25 index, the catalog and a manifest.

Every file is written under a temporary name (fsync'd) and renamed over its target only once
all are written, the manifest last (:func:`~toolgate.routing.atomic_files.staging`): a save
that fails while writing (a full disk, Ctrl-C) leaves the router saved there before whole. The
manifest carries what routing needs (tool ids, pinned rows, flag names, catalog version,
config), so a router reopens without parsing the full catalog, which loads only when promote
or verify first need it. It also carries a fingerprint of the matrix and BM25 files it was
written with (and the catalog its version and a digest of its load-time overrides, which
:meth:`Catalog.replace_server` applies again): a save over an existing router that failed half
way, or two saves racing into one directory, can leave files of different saves side by side,
and opening them must fail rather than route with one catalog's vectors under another's ids.

The manifest carries a sha256 of its own content and one of the catalog file, so a bit flip
or an edit (ids swapped, a row renumbered) is an :class:`IndexFormatError`, not routing to
the wrong tools. Every file is read within a size bound, and only if it is a regular file.

The manifest is :mod:`toolgate.routing.manifest`, the outline of the catalog it carries
:mod:`toolgate.routing.outline`, the atomic writes :mod:`toolgate.routing.atomic_files`, and
:func:`publish` lives in :mod:`toolgate.routing.publish`; the names are re-exported here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.overrides import saved_overrides
from toolgate.errors import CatalogError, IndexFormatError, InvalidInputError, StorageError
from toolgate.json_limits import loads, open_regular, read_bounded
from toolgate.routing.atomic_files import (
    CLOCK_SLACK_S,
    Staging,
    directory_path,
    naming,
    prepare_directory,
    storage_errors,
)
from toolgate.routing.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    SavedRouter,
    is_manifest,
    is_unparseable,
    manifest_checksum,
    read_manifest,
)
from toolgate.routing.outline import (
    CatalogOutline,
    addressing_rows,
    renamed_rows,
    schema_token_rows,
    slashed_server_rows,
)
from toolgate.routing.publish import publish, router_directory

__all__ = [
    "BM25",
    "CATALOG",
    "FORMAT_VERSION",
    "MANIFEST",
    "MATRIX",
    "ROUTER_FILES",
    "CatalogOutline",
    "SavedRouter",
    "check_files",
    "check_save_directory",
    "fingerprint",
    "load_saved_catalog",
    "manifest_checksum",
    "prepare_directory",
    "prepare_router_directory",
    "publish",
    "read_manifest",
    "renamed_rows",
    "router_directory",
    "save_fingerprinted",
    "saved_overrides",
    "storage_errors",
    "write_catalog_and_manifest",
]

CATALOG = "catalog.json"
MATRIX = "matrix.tgm"
BM25 = "bm25.tgb"
#: The files a save writes into a router directory, replacing any of the same name.
ROUTER_FILES = (MANIFEST, CATALOG, MATRIX, BM25)
# A save's temporary files (``temporary_name``'s, and the core's beside them): what a save
# interrupted before its manifest leaves, with the index files.
_TEMPORARY = re.compile(r"\.+(?:router\.json|catalog\.json|matrix\.tgm|bm25\.tgb)\..*tmp.*")

# Far past how long a save runs: a temporary file this old is a killed save's. So is one
# changed further ahead of the clock than CLOCK_SLACK_S: no running save's file is.
_STALE_S = 24 * 3600
# The names saves give their temporary files, exactly (``temporary_name``'s 32 hex digits,
# ``mkstemp``'s 8 characters in older saves, the core's ``.tmp-PID-N`` beside either or
# beside its target): only these are removed when stale. _TEMPORARY's looser match (any
# "tmp") would delete a user's ``.catalog.json.tmpl`` kept in the router's folder.
_KILLED_SAVE = re.compile(
    r"\.\.?(?:router\.json|catalog\.json|matrix\.tgm|bm25\.tgb)\."
    r"(?:(?:[0-9a-f]{32}|[a-z0-9_]{8})\.tmp(?:\.tmp-\d+-\d+)?|tmp-\d+-\d+)"
)

# The keys of the catalog file :func:`write_catalog_and_manifest` writes: a save interrupted
# before its manifest leaves one, known by them from a user's own catalog.json.
_CATALOG_KEYS = frozenset({"tools", "qualify", "overrides"})

# Far past what any catalog needs (a catalog holds a few kilobytes a tool), and a bound on
# what a wrong or hostile file makes a reader allocate.
_MAX_CATALOG_BYTES = 2 << 30


# Both index formats keep the checksum of their payload in their header (matrix_file.rs,
# bm25/file.rs), so the first bytes and the size identify a file's content without reading it.
_FINGERPRINT_BYTES = 4096


def fingerprint(path: Path) -> str:
    """A short digest of ``path``'s leading bytes and size: which save wrote it."""
    with open_regular(path) as handle:
        head = handle.read(_FINGERPRINT_BYTES)
        size = os.fstat(handle.fileno()).st_size
    return hashlib.sha256(head + size.to_bytes(8, "little")).hexdigest()[:32]


def save_fingerprinted(bm25: Any, directory: Path, stage: Staging) -> str:
    """Stage ``bm25`` (a ``_toolgate.Bm25``) as the directory's BM25 file; its fingerprint,
    taken from these bytes, whatever another save puts in the directory meanwhile."""
    target = directory / BM25
    tmp = stage.path(target)
    with naming(target, tmp):
        bm25.save(tmp)  # the core writes it afresh, fsync'd
        return fingerprint(tmp)


def check_save_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory a router may be saved in: one that does not exist yet, an
    empty one, or a toolgate router's: its manifest there, whatever its format or state, or
    one no longer JSON beside both index files (a damaged router is rebuilt over), or what
    a first save interrupted before its manifest left. Any other folder is refused with an
    :class:`InvalidInputError` naming a file found in it: a save replaces its
    ``catalog.json`` and ``router.json``, which may be the user's own, and must not mix a
    router's files into a folder of other things."""
    directory = directory_path(path)
    manifest = directory / MANIFEST
    if not directory.is_dir() or is_manifest(manifest):
        return directory  # missing, or a file: prepare_directory says what is wrong
    if _index_beside(directory, both=True) and is_unparseable(manifest):
        return directory  # a router whose manifest was cut short or garbled on disk
    # A first save cut off at its manifest leaves its catalog too: that one is replaced.
    catalog = _index_beside(directory) and _saved_catalog(directory / CATALOG)
    found = next(
        (
            name
            for name in (MANIFEST, CATALOG)
            if not _own_file(name, catalog=catalog) and os.path.lexists(directory / name)
        ),
        None,
    )
    if found is None:
        with storage_errors(), os.scandir(directory) as entries:
            found = next((e.name for e in entries if not _own_file(e.name, catalog=catalog)), None)
    if found is not None:
        if found == MANIFEST and not os.access(manifest, os.R_OK):
            # Another user's router (0600), say: whether it is one cannot be told.
            raise StorageError(errno.EACCES, "cannot read it to tell what it is", str(manifest))
        raise InvalidInputError(
            f"{directory}: neither empty nor a toolgate router (it holds {found!r}); save the "
            "router to a new or empty folder"
        )
    return directory


def prepare_router_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory to save a router in (see :func:`check_save_directory`),
    created if needed, without the temporary files that saves killed long ago left there."""
    directory = prepare_directory(check_save_directory(path))
    _remove_stale_temporaries(directory)
    return directory


def _remove_stale_temporaries(directory: Path) -> None:
    """Remove the temporary files in ``directory`` last changed over :data:`_STALE_S` ago
    (or ahead): a killed save leaves each file it had staged (index-sized ones too), and
    every kill would add more. A younger one may be a running save's, so it stays."""
    now = time.time()
    oldest, latest = now - _STALE_S, now + CLOCK_SLACK_S
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if _KILLED_SAVE.fullmatch(entry.name) is None:
                continue
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and not (
                    oldest <= entry.stat().st_mtime <= latest
                ):
                    os.unlink(entry.path)


def _own_file(name: str, *, catalog: bool) -> bool:
    """Whether ``name`` is an index file, a temporary file that a save writes, or (if
    ``catalog``: the folder's is a saved one) the catalog: all a first save interrupted
    before its manifest leaves in a folder."""
    own = (MATRIX, BM25, CATALOG) if catalog else (MATRIX, BM25)
    return name in own or _TEMPORARY.fullmatch(name) is not None


def _index_beside(directory: Path, *, both: bool = False) -> bool:
    """Whether ``directory`` holds a router's index file (or ``both``): what a save writes
    before its catalog and manifest, and what no user's own folder holds."""
    found = [os.path.isfile(directory / name) for name in (MATRIX, BM25)]
    return all(found) if both else any(found)


def _saved_catalog(path: Path) -> bool:
    """Whether ``path`` holds a catalog as :func:`write_catalog_and_manifest` writes it (an
    object of exactly its keys), not a user's own ``catalog.json``."""
    try:
        saved = loads(read_bounded(path, _MAX_CATALOG_BYTES))
    except (OSError, ValueError):
        return False
    return (
        isinstance(saved, dict)
        and saved.keys() == _CATALOG_KEYS
        and isinstance(saved["tools"], list)
        and isinstance(saved["qualify"], str)
        and isinstance(saved["overrides"], dict)
    )


def check_files(directory: Path, saved: SavedRouter) -> None:
    """Raise :class:`IndexFormatError` unless the directory holds the files ``saved`` names."""
    for name, expected in saved.files.items():
        path = directory / name
        try:
            found = fingerprint(path)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise IndexFormatError(f"{path}: cannot read: {reason}") from None
        if found != expected:
            raise IndexFormatError(
                f"{path} is not the file {MANIFEST} was written with (an interrupted or "
                "concurrent save?); save the router again or rebuild it with 'toolgate index'"
            )


def write_catalog_and_manifest(
    directory: Path,
    catalog: Catalog,
    saved: SavedRouter,
    stage: Staging,
    *,
    addressing: tuple[int, ...] | None = None,
) -> None:
    """Stage the full catalog, then the manifest that makes the directory complete.

    ``addressing`` are the catalog's flagged rows when the caller has just found them
    (:func:`~toolgate.routing.outline.addressing_rows`, which reads every description);
    ``None``: found here.

    The catalog file holds the load-time overrides too (a reopened catalog's
    :meth:`~Catalog.replace_server` must apply them as the saved one's would), and the
    manifest their digest, so overrides from another save are caught like its tools are.
    Overrides JSON cannot hold are a :class:`CatalogError`, raised before either is written.
    """
    try:
        overrides, digest = saved_overrides(catalog.overrides)
    except ValueError as exc:
        # Every router writes this, into a temporary directory when built without a path.
        raise CatalogError(
            f"the catalog's overrides cannot be stored with the router: {exc}"
        ) from None
    tools = [tool.to_dict() for tool in catalog]
    # Exposed names depend on the catalog's naming mode, which reopening must reproduce.
    document = {"tools": tools, "qualify": catalog.qualify, "overrides": overrides}
    text = json.dumps(document).encode()
    stage.write(directory / CATALOG, lambda out: out.write(text))
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "config": asdict(saved.config),
        "catalog_version": saved.outline.version,
        "model_id": saved.model_id,
        "flags": list(saved.flags),
        "ids": list(saved.outline.ids),
        "pinned": list(saved.outline.pinned),
        "exposed": [list(item) for item in renamed_rows(catalog)],
        "slashed_servers": [list(item) for item in slashed_server_rows(catalog)],
        "text_version": saved.outline.text_version,
        "addressing": list(addressing_rows(catalog) if addressing is None else addressing),
        "overrides_digest": digest,
        "files": dict(saved.files),
        "catalog_sha256": hashlib.sha256(text).hexdigest(),
    }
    tokens = saved.outline.schema_tokens
    # A router opened from a manifest that predates the counts gains them when saved again.
    manifest["schema_tokens"] = list(schema_token_rows(catalog) if tokens is None else tokens)
    if saved.null is not None:
        manifest["null_scores"] = saved.null.to_dict()
    if saved.offset is not None:
        manifest["row_offset"] = list(saved.offset)
    manifest["checksum"] = manifest_checksum(manifest)
    sealed = json.dumps(manifest, indent=1).encode()
    stage.write(directory / MANIFEST, lambda out: out.write(sealed))


def load_saved_catalog(path: Path, outline: CatalogOutline) -> Catalog:
    """The catalog saved at ``path``, checked against the manifest's ``outline``.

    A catalog file without overrides (written before they were saved) loads with none.
    """
    try:
        data = read_bounded(path, _MAX_CATALOG_BYTES)
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{path}: unreadable catalog: {exc}") from None
    if outline.file_digest is not None and hashlib.sha256(data).hexdigest() != outline.file_digest:
        raise IndexFormatError(
            f"{path}: not the catalog {MANIFEST} was written with (edited, damaged, or from an "
            "interrupted or concurrent save); save the router again or rebuild it with "
            "'toolgate index'"
        )
    try:
        saved = loads(data)
        tools, qualify = saved["tools"], saved.get("qualify", "auto")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IndexFormatError(f"{path}: unreadable catalog: {exc}") from None
    try:
        overrides, digest = saved_overrides(saved.get("overrides", {}))
    except ValueError as exc:
        raise IndexFormatError(f"{path}: bad saved overrides: {exc}") from None
    if outline.overrides_digest is not None and digest != outline.overrides_digest:
        raise IndexFormatError(
            f"{path}: overrides are not the ones {MANIFEST} was written with (an interrupted "
            "or concurrent save?); save the router again or rebuild it with 'toolgate index'"
        )
    try:
        catalog = Catalog.from_saved(tools, qualify=qualify, overrides=overrides)
    except (ValueError, KeyError, TypeError, CatalogError) as exc:
        raise IndexFormatError(f"{path}: unreadable catalog: {exc}") from exc
    if catalog.version != outline.version or tuple(catalog.ids) != outline.ids:
        raise IndexFormatError(
            f"{path}: catalog version {catalog.version} does not match the router's "
            f"{outline.version}"
        )
    return catalog
