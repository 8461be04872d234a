"""A router's directory on disk: the matrix, the BM25 index, the catalog and a manifest.

Every file is written atomically (temporary file, fsync, rename) and the manifest last. The
manifest carries what routing needs (tool ids, pinned rows, flag names, catalog version,
config), so a router reopens without parsing the full catalog, which loads only when promote
or verify first need it. It also carries a fingerprint of the matrix and BM25 files it was
written with (and the catalog its version and a digest of its load-time overrides, which
:meth:`Catalog.replace_server` applies again): a save over an existing router that failed half
way, or two saves racing into one directory, can leave files of different saves side by side,
and opening them must fail rather than route with one catalog's vectors under another's ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.overrides import saved_overrides
from toolgate.catalog.text import TEXT_VERSION
from toolgate.errors import CatalogError, IndexFormatError, InvalidInputError
from toolgate.routing.config import RouterConfig

__all__ = [
    "BM25",
    "CATALOG",
    "FORMAT_VERSION",
    "MANIFEST",
    "MATRIX",
    "CatalogOutline",
    "SavedRouter",
    "check_files",
    "copy_atomic",
    "fingerprint",
    "load_saved_catalog",
    "read_manifest",
    "renamed_rows",
    "save_fingerprinted",
    "saved_overrides",
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

    ``overrides_digest`` is the :func:`saved_overrides` digest of the catalog's load-time
    overrides as a manifest recorded it, checked when the saved catalog loads; None when the
    outline was not read from a manifest, or from one written before overrides were saved.

    ``slashed_servers`` lists the rows whose server holds a ``/`` (an npm scope,
    ``@org/server``), with that server, so that :meth:`names` can split every id exactly;
    None when a manifest written before it was recorded does not say.

    ``text_version`` is the :data:`~toolgate.catalog.text.TEXT_VERSION` of the texts the stored
    vectors were embedded from; None when a manifest written before it was recorded does not
    say, and then no stored vector is taken for current.
    """

    ids: tuple[str, ...]
    pinned: tuple[int, ...]
    version: str
    exposed: tuple[tuple[int, str], ...] | None = ()
    overrides_digest: str | None = None
    slashed_servers: tuple[tuple[int, str], ...] | None = ()
    text_version: int | None = TEXT_VERSION

    @classmethod
    def of(cls, catalog: Catalog) -> CatalogOutline:
        """The outline of a loaded catalog."""
        pinned = tuple(row for row, tool in enumerate(catalog) if tool.pinned)
        return cls(
            tuple(catalog.ids),
            pinned,
            catalog.version,
            renamed_rows(catalog),
            slashed_servers=_slashed_server_rows(catalog),
        )

    def names(self) -> tuple[str, ...]:
        """Each row's tool name, as the catalog has it.

        An id is ``server/name`` and both parts may hold a ``/``; the rows whose server does
        are listed, every other id splits at its first ``/``. Without the list (None), that
        split can misread an id with two ``/``: ask the catalog instead.
        """
        slashed = dict(self.slashed_servers or ())
        return tuple(
            tool_id[len(slashed[row]) + 1 :] if row in slashed else tool_id.partition("/")[2]
            for row, tool_id in enumerate(self.ids)
        )


def _slashed_server_rows(catalog: Catalog) -> tuple[tuple[int, str], ...]:
    """Rows of ``catalog`` whose server holds a ``/``, with the server."""
    return tuple((row, tool.server) for row, tool in enumerate(catalog) if "/" in tool.server)


def renamed_rows(catalog: Catalog) -> tuple[tuple[int, str], ...]:
    """Rows of ``catalog`` whose exposed name differs from the tool name, with that name."""
    return tuple(
        (row, tool.exposed_name)
        for row, tool in enumerate(catalog)
        if tool.exposed_name != tool.name
    )


@dataclass(frozen=True)
class SavedRouter:
    """The manifest of a saved router; ``files`` maps file names to :func:`fingerprint`
    (empty when read from a manifest that predates them)."""

    config: RouterConfig
    outline: CatalogOutline
    flags: tuple[str, ...]
    model_id: str
    files: dict[str, str] = field(default_factory=dict)


# Both index formats keep the checksum of their payload in their header (matrix_file.rs,
# bm25/file.rs), so the first bytes and the size identify a file's content without reading it.
_FINGERPRINT_BYTES = 4096


def fingerprint(path: Path) -> str:
    """A short digest of ``path``'s leading bytes and size: which save wrote it."""
    with path.open("rb") as handle:
        head = handle.read(_FINGERPRINT_BYTES)
        size = os.fstat(handle.fileno()).st_size
    return hashlib.sha256(head + size.to_bytes(8, "little")).hexdigest()[:32]


def save_fingerprinted(bm25: Any, directory: Path) -> str:
    """Save ``bm25`` (a ``_toolgate.Bm25``) as the directory's BM25 file; its fingerprint.

    Written under a temporary name and fingerprinted before the rename, so the fingerprint is
    of these bytes even if another save replaces the file right after.
    """
    handle, name = tempfile.mkstemp(dir=directory, prefix=f".{BM25}.", suffix=".tmp")
    os.close(handle)
    tmp = Path(name)
    try:
        tmp.unlink()  # the core writes it afresh, itself atomically
        bm25.save(tmp)
        digest = fingerprint(tmp)
        os.replace(tmp, directory / BM25)
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def check_files(directory: Path, saved: SavedRouter) -> None:
    """Raise :class:`IndexFormatError` unless the directory holds the files ``saved`` names."""
    for name, expected in saved.files.items():
        path = directory / name
        try:
            found = fingerprint(path)
        except OSError as exc:
            raise IndexFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if found != expected:
            raise IndexFormatError(
                f"{path} is not the file {MANIFEST} was written with (an interrupted or "
                "concurrent save?); save the router again or rebuild it with 'toolgate index'"
            )


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
        ids = tuple(str(i) for i in manifest["ids"])
        exposed = manifest.get("exposed")
        overrides_digest = manifest.get("overrides_digest")
        if overrides_digest is not None and not isinstance(overrides_digest, str):
            raise ValueError(f"overrides_digest {overrides_digest!r} is not a string")
        outline = CatalogOutline(
            ids,
            tuple(_row(r, len(ids)) for r in manifest["pinned"]),
            str(manifest["catalog_version"]),
            None if exposed is None else tuple((_row(r, len(ids)), str(n)) for r, n in exposed),
            overrides_digest,
            _slashed_servers(manifest.get("slashed_servers"), ids),
            _text_version(manifest.get("text_version")),
        )
        files = {str(name): str(digest) for name, digest in manifest.get("files", {}).items()}
        return SavedRouter(
            RouterConfig(**settings),
            outline,
            tuple(manifest["flags"]),
            str(manifest["model_id"]),
            files,
        )
    except (KeyError, TypeError, ValueError, InvalidInputError) as exc:
        raise IndexFormatError(f"{path}: malformed manifest: {exc}") from None


def _text_version(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"text_version {value!r} is not an integer")


def _slashed_servers(entries: Any, ids: tuple[str, ...]) -> tuple[tuple[int, str], ...] | None:
    """The manifest's ``slashed_servers``, each checked against the id of its row."""
    if entries is None:
        return None
    out = []
    for row, server in entries:
        row = _row(row, len(ids))
        if not (isinstance(server, str) and "/" in server and ids[row].startswith(server + "/")):
            raise ValueError(f"slashed_servers: {server!r} is not the server of row {row}")
        out.append((row, server))
    return tuple(out)


def _row(value: object, n: int) -> int:
    """A row number from the manifest, checked against the ``n`` rows it describes."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise ValueError(f"row {value!r} is not one of the {n} rows")
    return value


def write_catalog_and_manifest(directory: Path, catalog: Catalog, saved: SavedRouter) -> None:
    """Write the full catalog, then the manifest that makes the directory complete.

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
    _write_atomic(directory / CATALOG, json.dumps(document))
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "config": asdict(saved.config),
        "catalog_version": saved.outline.version,
        "model_id": saved.model_id,
        "flags": list(saved.flags),
        "ids": list(saved.outline.ids),
        "pinned": list(saved.outline.pinned),
        "exposed": [list(item) for item in renamed_rows(catalog)],
        "slashed_servers": [list(item) for item in _slashed_server_rows(catalog)],
        "text_version": saved.outline.text_version,
        "overrides_digest": digest,
        "files": dict(saved.files),
    }
    _write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1))


def load_saved_catalog(path: Path, outline: CatalogOutline) -> Catalog:
    """The catalog saved at ``path``, checked against the manifest's ``outline``.

    A catalog file without overrides (written before they were saved) loads with none.
    """
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        tools, qualify = saved["tools"], saved.get("qualify", "auto")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexFormatError(f"{path}: unreadable catalog: {exc}") from exc
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


def _replace_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through a temporary file beside it, fsync'd, then renamed over it."""
    # A unique name per call: two threads (or processes) saving at once must not share one.
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_atomic(path: Path, text: str) -> None:
    _replace_atomically(path, lambda out: out.write(text.encode("utf-8")))


def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` through a temporary file and a rename."""
    if source.resolve() == target.resolve():
        return
    with source.open("rb") as src:
        _replace_atomically(target, lambda out: shutil.copyfileobj(src, out, 1 << 20))
