"""A router's directory on disk: the matrix, the BM25 index, the catalog and a manifest.

Every file is written atomically (temporary file, fsync, rename) and the manifest last. The
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

:func:`publish` replaces a router that processes have open: the new one is written to a
directory of its own, then a symbolic link is switched to it in one rename. Writing over the
files of a live router (``cp``) would change pages they have mapped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from toolgate.catalog.addressing import addressing_sentences
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.overrides import saved_overrides
from toolgate.catalog.text import TEXT_VERSION
from toolgate.errors import (
    CatalogError,
    IndexFormatError,
    InvalidInputError,
    StorageError,
    ToolgateError,
)
from toolgate.json_limits import json_problem, loads, open_regular, read_bounded
from toolgate.routing.config import RouterConfig
from toolgate.routing.no_tool import NullScores

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
    "manifest_checksum",
    "prepare_directory",
    "publish",
    "read_manifest",
    "renamed_rows",
    "router_directory",
    "save_fingerprinted",
    "saved_overrides",
    "storage_errors",
    "write_catalog_and_manifest",
]

#: Version 2 added the manifest's own checksum and the catalog file's; version 1 manifests,
#: which have neither, are still read.
FORMAT_VERSION = 2
_READABLE_FORMATS = (1, FORMAT_VERSION)
MANIFEST = "router.json"
CATALOG = "catalog.json"
MATRIX = "matrix.tgm"
BM25 = "bm25.tgb"

# Far past what any catalog needs (a manifest holds about 60 bytes per tool, a catalog a few
# kilobytes), and a bound on what a wrong or hostile file makes a reader allocate.
_MAX_MANIFEST_BYTES = 256 << 20
_MAX_CATALOG_BYTES = 2 << 30


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

    ``file_digest`` is the sha256 of the saved catalog file as its manifest recorded it,
    checked when that file loads; None when the outline was not read from a manifest, or from
    one written before it was recorded.

    ``addressing`` lists the rows whose description or summary addresses the model
    (:func:`~toolgate.catalog.addressing.addressing_sentences`), which routing weighs down.
    """

    ids: tuple[str, ...]
    pinned: tuple[int, ...]
    version: str
    exposed: tuple[tuple[int, str], ...] | None = ()
    overrides_digest: str | None = None
    slashed_servers: tuple[tuple[int, str], ...] | None = ()
    text_version: int | None = TEXT_VERSION
    file_digest: str | None = None
    addressing: tuple[int, ...] = ()

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
            addressing=addressing_rows(catalog),
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


def addressing_rows(catalog: Catalog) -> tuple[int, ...]:
    """Rows of ``catalog`` whose description or summary addresses the model."""
    return tuple(
        row
        for row, tool in enumerate(catalog)
        if addressing_sentences(tool.description) or addressing_sentences(tool.summary)
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
    #: The catalog's scores for requests that need no tool (``None``: not measured, a
    #: manifest that predates them).
    null: NullScores | None = None


# Both index formats keep the checksum of their payload in their header (matrix_file.rs,
# bm25/file.rs), so the first bytes and the size identify a file's content without reading it.
_FINGERPRINT_BYTES = 4096


def fingerprint(path: Path) -> str:
    """A short digest of ``path``'s leading bytes and size: which save wrote it."""
    with open_regular(path) as handle:
        head = handle.read(_FINGERPRINT_BYTES)
        size = os.fstat(handle.fileno()).st_size
    return hashlib.sha256(head + size.to_bytes(8, "little")).hexdigest()[:32]


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Raise an ``OSError`` from inside as a :class:`StorageError`, which is both an
    ``OSError`` (same errno and file name) and a :class:`ToolgateError`."""
    try:
        yield
    except ToolgateError:
        raise
    except OSError as exc:
        if exc.errno is None:
            raise StorageError(str(exc)) from exc
        raise StorageError(exc.errno, exc.strerror or str(exc), exc.filename) from exc


def prepare_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory to save a router in, created if needed."""
    directory = Path(path)
    with storage_errors():
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(path))
        directory.mkdir(parents=True, exist_ok=True)
    return directory


@storage_errors()
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
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise IndexFormatError(f"{path}: cannot read: {reason}") from None
        if found != expected:
            raise IndexFormatError(
                f"{path} is not the file {MANIFEST} was written with (an interrupted or "
                "concurrent save?); save the router again or rebuild it with 'toolgate index'"
            )


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """The sha256 of ``manifest`` without its ``checksum``, in a canonical JSON form."""
    content = {key: value for key, value in manifest.items() if key != "checksum"}
    return hashlib.sha256(
        json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def read_manifest(directory: Path) -> SavedRouter:
    """Read and check ``directory``'s manifest; any problem is an :class:`IndexFormatError`."""
    path = directory / MANIFEST
    try:
        manifest = loads(read_bounded(path, _MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise IndexFormatError(
            f"{directory}: not a toolgate router ({MANIFEST} is missing)"
        ) from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise IndexFormatError(f"{path}: unreadable: {exc}") from None
    problem = json_problem(manifest, strict=False)  # the checksum's encoder recurses
    if problem:
        raise IndexFormatError(f"{path}: malformed manifest: it holds {problem}")
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or not _is_int(found) or found not in _READABLE_FORMATS:
        raise IndexFormatError(
            f"{path}: router format {found!r:.40}, this toolgate reads format "
            f"{' or '.join(map(str, _READABLE_FORMATS))}"
        )
    if found >= 2 and manifest.get("checksum") != manifest_checksum(manifest):
        raise IndexFormatError(
            f"{path}: checksum mismatch: the manifest was edited or damaged since it was "
            "written; save the router again or rebuild it with 'toolgate index'"
        )
    try:
        return _saved_router(manifest)
    except (KeyError, TypeError, ValueError, AttributeError, ToolgateError) as exc:
        raise IndexFormatError(f"{path}: malformed manifest: {exc}") from None


def _saved_router(manifest: dict[str, Any]) -> SavedRouter:
    """The manifest's fields, each checked for its type; ``ValueError`` or ``TypeError`` if
    one is wrong."""
    settings = _mapping(manifest["config"], "config")
    settings["bm25_weights"] = tuple(_list(settings["bm25_weights"], "bm25_weights"))
    if "no_tool_weights" in settings:
        settings["no_tool_weights"] = tuple(_list(settings["no_tool_weights"], "no_tool_weights"))
    null = manifest.get("null_scores")
    ids = tuple(_strings(manifest["ids"], "ids"))
    exposed = manifest.get("exposed")
    outline = CatalogOutline(
        ids,
        tuple(_row(r, len(ids)) for r in _list(manifest["pinned"], "pinned")),
        _string(manifest["catalog_version"], "catalog_version"),
        None if exposed is None else _exposed(exposed, ids),
        _optional_string(manifest.get("overrides_digest"), "overrides_digest"),
        _slashed_servers(manifest.get("slashed_servers"), ids),
        _text_version(manifest.get("text_version")),
        _optional_string(manifest.get("catalog_sha256"), "catalog_sha256"),
        tuple(_row(r, len(ids)) for r in _list(manifest.get("addressing", []), "addressing")),
    )
    files = _mapping(manifest.get("files", {}), "files")
    return SavedRouter(
        RouterConfig(**settings),
        outline,
        tuple(_strings(manifest["flags"], "flags")),
        _string(manifest["model_id"], "model_id"),
        {name: _string(digest, f"files[{name!r}]") for name, digest in files.items()},
        None if null is None else NullScores.from_dict(null),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is a {type(value).__name__}, not a list")
    return value


def _mapping(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is a {type(value).__name__}, not an object")
    return dict(value)


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is a {type(value).__name__}, not a string")
    return value


def _optional_string(value: object, what: str) -> str | None:
    return None if value is None else _string(value, what)


def _strings(value: object, what: str) -> list[str]:
    return [_string(item, f"{what}[{i}]") for i, item in enumerate(_list(value, what))]


def _pair(entry: object, what: str) -> tuple[object, object]:
    if not (isinstance(entry, list) and len(entry) == 2):
        raise ValueError(f"{what}: {entry!r:.60} is not a [row, name] pair")
    return entry[0], entry[1]


def _exposed(entries: object, ids: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    pairs = (_pair(entry, "exposed") for entry in _list(entries, "exposed"))
    return tuple((_row(row, len(ids)), _string(name, "exposed")) for row, name in pairs)


def _text_version(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"text_version {value!r} is not an integer")


def _slashed_servers(entries: Any, ids: tuple[str, ...]) -> tuple[tuple[int, str], ...] | None:
    """The manifest's ``slashed_servers``, each checked against the id of its row."""
    if entries is None:
        return None
    out = []
    for entry in _list(entries, "slashed_servers"):
        row, server = _pair(entry, "slashed_servers")
        row = _row(row, len(ids))
        if not (isinstance(server, str) and "/" in server and ids[row].startswith(server + "/")):
            raise ValueError(f"slashed_servers: {server!r} is not the server of row {row}")
        out.append((row, server))
    return tuple(out)


def _row(value: object, n: int) -> int:
    """A row number from the manifest, checked against the ``n`` rows it describes."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
        return value
    # Parsed JSON holds no integer too long for repr (json.loads refuses past 4,300 digits).
    raise ValueError(f"row {repr(value)[:40]} is not one of the {n} rows")


@storage_errors()
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
    text = json.dumps(document).encode()
    _replace_atomically(directory / CATALOG, lambda out: out.write(text))
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
        "addressing": list(addressing_rows(catalog)),
        "overrides_digest": digest,
        "files": dict(saved.files),
        "catalog_sha256": hashlib.sha256(text).hexdigest(),
    }
    if saved.null is not None:
        manifest["null_scores"] = saved.null.to_dict()
    manifest["checksum"] = manifest_checksum(manifest)
    _write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1))


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


@storage_errors()
def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` through a temporary file and a rename."""
    if source.resolve() == target.resolve():
        return
    with source.open("rb") as src:
        _replace_atomically(target, lambda out: shutil.copyfileobj(src, out, 1 << 20))


def router_directory(path: str | os.PathLike[str]) -> Path:
    """The directory to open a router from: a link :func:`publish` made is followed once, so
    that a router keeps reading the version it opened (its catalog loads later) after the
    link moves on."""
    directory = Path(path)
    return directory.resolve() if directory.is_symlink() else directory


@storage_errors()
def publish(save: Callable[[Path], None], path: str | os.PathLike[str], *, keep: int) -> Path:
    """Write a router with ``save`` into a new directory beside ``path``, then point the
    symbolic link ``path`` at it in one rename; the new directory.

    A process that opens ``path`` gets the old router or the new one, whole; one that opened
    the old one keeps it. The ``keep`` newest versions stay on disk, older ones are removed
    (a process that still has one open routes on, but its catalog can no longer load).
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidInputError(f"keep must be an integer >= 1, got {keep!r}")
    link = Path(path)
    if link.exists() and not link.is_symlink():
        raise InvalidInputError(
            f"{link} exists and is not a link that publish made: publish switches a symbolic "
            "link to each new version; publish to a new path, or move this one away first"
        )
    parent = prepare_directory(link.parent)
    prefix = f".{link.name}.v"
    # The time first in the name: versions sort oldest first.
    version = Path(tempfile.mkdtemp(dir=parent, prefix=f"{prefix}{time.time_ns():016x}-"))
    save(version)
    staged = parent / f".{link.name}.link-{os.getpid()}-{time.time_ns():x}"
    try:
        os.symlink(version.name, staged)  # relative: the parent may be moved
        os.replace(staged, link)
    finally:
        staged.unlink(missing_ok=True)
    _sync_directory(parent)
    versions = sorted(p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir())
    for old in versions[:-keep]:
        if old != version:
            shutil.rmtree(old, ignore_errors=True)
    return version


def _sync_directory(directory: Path) -> None:
    """fsync ``directory``, so a rename in it survives a crash (a no-op where unsupported)."""
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
