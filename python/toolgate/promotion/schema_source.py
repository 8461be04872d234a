"""Where phase 2 gets full schemas from, when not from the catalog itself.

A schema source answers ``fetch(tool_id) -> dict`` with the tool's input schema. A full tool
dict in any shape the catalog reads is accepted too (:func:`schema_of`): its schema is taken,
read as the catalog would read it, so a tool without one takes no arguments, and a tool named
otherwise than the one asked for is refused. :func:`as_schema_source` accepts:

- a callable ``(tool_id) -> dict``;
- a directory holding ``<server>/<name>.json`` per tool, or a catalog file in any format;
- an object with a ``fetch(tool_id)`` method (for instance an MCP client adapter);
- :class:`McpSchemaSource`, which wraps a function returning a server's ``tools/list`` result
  and re-lists only after :meth:`McpSchemaSource.invalidate` (call it on
  ``notifications/tools/list_changed``).

Fetched schemas are cached as JSON text in the core's LRU, ``toolgate._toolgate.SchemaCache``
(:func:`default_cache`), keyed by tool id and a version that changes with the tool.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
import unicodedata
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolgate import _toolgate
from toolgate.catalog.catalog import Catalog
from toolgate.errors import CatalogError, InvalidInputError
from toolgate.forks import fork_safe_lock
from toolgate.formats.mcp import is_jsonrpc_response, jsonrpc_error
from toolgate.json_limits import loads, read_text

__all__ = [
    "MAX_SCHEMA_FILE_BYTES",
    "CallableSchemaSource",
    "CatalogSchemaSource",
    "DirectorySchemaSource",
    "McpSchemaSource",
    "SchemaCacheLike",
    "SchemaSource",
    "SchemaSourceLike",
    "as_schema_source",
    "cache_token",
    "default_cache",
]


#: Largest schema file a directory source reads: a tool dict with the largest schema and
#: description the catalog accepts is far smaller.
MAX_SCHEMA_FILE_BYTES = 1 << 20


@runtime_checkable
class SchemaSource(Protocol):
    """Anything that returns a tool's input schema by id."""

    def fetch(self, tool_id: str) -> Any:
        """The input schema (or a whole tool dict) for ``tool_id``."""
        ...


@runtime_checkable
class SchemaCacheLike(Protocol):
    """What promotion needs of a schema cache (``toolgate._toolgate.SchemaCache`` has it)."""

    def get_or_fetch(self, tool_id: str, version: int, fetch: Callable[[], str]) -> str:
        """The cached JSON for ``(tool_id, version)``, calling ``fetch`` on a miss."""
        ...


class CallableSchemaSource:
    """Wraps a ``(tool_id) -> dict`` function."""

    def __init__(self, fn: Callable[[str], Any]) -> None:
        self._fn = fn

    def fetch(self, tool_id: str) -> Any:
        """Call the function."""
        return self._fn(tool_id)

    def cache_token(self, tool_id: str) -> int | None:
        """The function's: each promote wraps it anew, and its schemas stay cached."""
        owner = getattr(self._fn, "__self__", None)  # a bound method is made anew each time
        serial = None if owner is None else _serial(owner)
        if serial is not None:
            return hash((serial, getattr(self._fn, "__name__", "")))
        # A plain function, or a method of what cannot be weakly referenced (a dict's
        # ``get``): the method object itself, so a new dict is never served the old one's.
        return _serial(self._fn)


class DirectorySchemaSource:
    """Reads ``<root>/<server>/<name>.json`` (the id as a relative path)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).resolve()

    def fetch(self, tool_id: str) -> Any:
        """Read and parse the tool's file; ids that would leave the directory are refused."""
        path = self._path(tool_id)
        try:
            # Bounded: a FIFO would block promote for good, and a huge or deeply nested
            # file eat memory or leak a RecursionError.
            schema = loads(read_text(path, MAX_SCHEMA_FILE_BYTES))
        except FileNotFoundError:
            raise CatalogError(f"no schema file for {tool_id!r}: {path} does not exist") from None
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSON's errors too
            raise CatalogError(f"cannot read the schema of {tool_id!r} from {path}: {exc}") from exc
        spelled = self._spelled_otherwise(tool_id)
        if spelled is not None:
            raise CatalogError(
                f"no schema file for {tool_id!r}: the file read is spelled {spelled!r} in "
                f"{self._root}, which a case-insensitive file system (macOS, Windows) opens "
                "for this id too; it is another tool's"
            )
        return schema

    def _spelled_otherwise(self, tool_id: str) -> str | None:
        """The name on disk of the first part of ``tool_id``'s file that the folder lists
        under another spelling (``getUser.json`` for ``getuser``), else ``None``. A
        case-insensitive file system opens any case of a name: one file for two ids."""
        folder = self._root
        for part in Path(f"{tool_id}.json").parts:
            try:
                names = _listing(folder)
                if part not in names:  # the file may be newer than the listing kept
                    names = _listing(folder, fresh=True)
            except OSError:  # a folder this user may search but not list: nothing to go by
                return None
            if part not in names:
                # Unicode's other forms of one name (macOS may list é decomposed) are one name.
                listed = {unicodedata.normalize("NFC", n): n for n in names}
                asked = unicodedata.normalize("NFC", part)
                if asked not in listed:
                    folded = asked.casefold()
                    return next((n for c, n in listed.items() if c.casefold() == folded), part)
            folder = folder / part
        return None

    def cache_token(self, tool_id: str) -> int:
        """The file's path, modification time, size and inode: a file written anew is read
        anew."""
        return _file_token(self._path(tool_id))

    def _path(self, tool_id: str) -> Path:
        """``<root>/<id>.json``; an id with a ``.`` or ``..`` part, which could name another
        server's file (a tool named ``../vault/admin``), is refused. A backslash separates
        parts too: Windows reads it as ``/``."""
        if any(part in (".", "..", "") for part in re.split(r"[/\\]", tool_id)):
            raise CatalogError(f"tool id {tool_id!r} has a '.', '..' or empty path part")
        path = (self._root / f"{tool_id}.json").resolve()
        if self._root not in path.parents:
            raise CatalogError(f"tool id {tool_id!r} points outside the schema directory")
        return path


class CatalogSchemaSource:
    """Serves schemas from a catalog file (any format), loaded on first use."""

    def __init__(self, path: str | os.PathLike[str], *, server: str | None = None) -> None:
        self._path = path
        self._server = server
        self._schemas: dict[str, dict[str, Any]] | None = None
        self._loaded_token: int | None = None  # the file's token when it was loaded
        self._lock = threading.Lock()

    def fetch(self, tool_id: str) -> Any:
        """The schema of ``tool_id`` in the file, loaded again once the file was written anew."""
        # Taken before loading: a write during the load makes the next fetch load again.
        token = _file_token(Path(self._path))
        with self._lock:
            if self._schemas is None or token != self._loaded_token:
                # Kept loaded, the first file's schemas were served (and cached under the
                # new file's token) for as long as the source lived.
                loaded = Catalog.load(self._path, server=self._server)
                self._schemas = {t.id: t.input_schema for t in loaded}
                self._loaded_token = token
            schemas = self._schemas
        try:
            return schemas[tool_id]
        except KeyError:
            raise CatalogError(f"{self._path} has no tool {tool_id!r}") from None

    def cache_token(self, tool_id: str) -> int:
        """The file's path, modification time, size and inode."""
        return _file_token(Path(self._path))


class McpSchemaSource:
    """Schemas from an MCP server's ``tools/list``, listed once and again after :meth:`invalidate`.

    ``list_tools`` is whatever the client uses to call ``tools/list`` and returns its result
    (``{"tools": [...]}``) or the JSON-RPC response around it, as :meth:`Catalog.load
    <toolgate.catalog.Catalog.load>` accepts; ``server`` is the server part of the ids it
    answers for. A JSON-RPC error response is a :class:`CatalogError` quoting the server.
    """

    def __init__(self, server: str, list_tools: Callable[[], Mapping[str, Any]]) -> None:
        self._server = server
        self._list_tools = list_tools
        self._by_name: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._generation = 0

    def invalidate(self) -> None:
        """Forget the listing (on ``notifications/tools/list_changed``); schemas cached from
        it are fetched again."""
        with self._lock:
            self._by_name = None
            self._generation += 1

    def cache_token(self, tool_id: str) -> int:
        """This source, and how many times it was invalidated."""
        return hash((_serial(self), self._generation))

    def fetch(self, tool_id: str) -> Any:
        """The tool dict named in ``tool_id``, listing the server first if needed."""
        prefix = f"{self._server}/"
        if not tool_id.startswith(prefix):
            raise CatalogError(f"{tool_id!r} is not a tool of MCP server {self._server!r}")
        with self._lock:
            if self._by_name is None:
                tools = self._listed_tools(self._list_tools(), tool_id)
                self._by_name = {str(t.get("name")): t for t in tools if isinstance(t, Mapping)}
            by_name = self._by_name
        name = tool_id[len(prefix) :]
        if name not in by_name:
            raise CatalogError(f"MCP server {self._server!r} does not list a tool {name!r}")
        return by_name[name]

    def _listed_tools(self, result: Any, tool_id: str) -> list[Any]:
        """The ``tools`` list of a ``tools/list`` result or of the JSON-RPC response around it."""
        where = f"tools/list of MCP server {self._server!r} (fetching {tool_id!r})"
        if is_jsonrpc_response(result):
            if not isinstance(result.get("result"), Mapping):
                raise CatalogError(
                    f"{where} answered with a JSON-RPC error: {jsonrpc_error(result)}"
                )
            result = result["result"]
        tools = result.get("tools") if isinstance(result, Mapping) else None
        if not isinstance(tools, list):
            raise CatalogError(f"{where} returned no 'tools' list")
        return tools


#: What ``schema_source`` takes: a source, a callable ``(tool_id) -> schema or tool dict``, or
#: the path of a directory or a catalog file.
SchemaSourceLike = SchemaSource | Callable[[str], Any] | str | os.PathLike[str]


def as_schema_source(obj: SchemaSourceLike) -> SchemaSource:
    """Turn a callable, a path or an object with ``fetch`` into a :class:`SchemaSource`."""
    if isinstance(obj, SchemaSource):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        path = Path(obj)
        if path.is_dir():
            return DirectorySchemaSource(path)
        if path.is_file():
            return CatalogSchemaSource(path)
        raise InvalidInputError(
            f"schema_source path {str(path)!r} is neither a directory nor a file"
        )
    if callable(obj):
        return CallableSchemaSource(obj)
    raise InvalidInputError(
        "schema_source must be a callable (tool_id) -> dict, a directory, a catalog file, or an "
        f"object with fetch(tool_id); got {type(obj).__name__}"
    )


def cache_token(source: SchemaSource, tool_id: str) -> int | None:
    """What tells the schemas ``source`` gives for ``tool_id`` from another source's, or from
    its own before they changed (an invalidated listing, a file written anew): a source's own
    ``cache_token(tool_id)``, else the source object's identity; ``None`` when nothing can
    tell it apart from a source that is gone (then its schemas are not cached)."""
    own = getattr(source, "cache_token", None)
    if not callable(own):
        return _serial(source)
    token = own(tool_id)
    return None if token is None else int(token)


# A number for each object a token names, never reused (an ``id`` is reused once its object
# dies, and a new source would be served the old one's schemas). Keyed by identity, not by
# hash: an unhashable source (a dataclass) is told apart too, and two equal sources stay two.
_SERIALS: dict[int, tuple[weakref.ref[Any], int]] = {}
_NEXT_SERIAL = itertools.count(1)
_SERIALS_LOCK = threading.Lock()


def _serial(obj: Any) -> int | None:
    """``obj``'s serial while it lives; ``None`` if it cannot be weakly referenced, since its
    death, after which its id names another object, would go unseen."""
    key = id(obj)
    with _SERIALS_LOCK:
        held = _SERIALS.get(key)
        if held is not None and held[0]() is obj:
            return held[1]
        try:
            ref = weakref.ref(obj, partial(_forget, key))
        except TypeError:
            return None
        serial = next(_NEXT_SERIAL)
        _SERIALS[key] = (ref, serial)
        return serial


def _forget(key: int, ref: weakref.ref[Any]) -> None:
    """Drop a dead object's serial. It may run while this thread holds the lock (a collection
    during :func:`_serial`), so it takes none: one look-up and one pop, of its own entry only."""
    held = _SERIALS.get(key)
    if held is not None and held[0] is ref:
        _SERIALS.pop(key, None)


# Folders' listings by path, each with the folder's stat when listed: listed on every read,
# a folder of 10,000 schema files cost 10 ms a schema. A few hundred folders at most.
_LISTINGS: dict[Path, tuple[tuple[int, ...], frozenset[str]]] = {}
_LISTINGS_KEPT = 256
_LISTINGS_LOCK = fork_safe_lock()


def _listing(folder: Path, *, fresh: bool = False) -> frozenset[str]:
    """The names in ``folder`` (an ``OSError`` if it cannot be listed): the listing kept while
    the folder's modification time, size and inode stay the same, unless ``fresh``."""
    info = os.stat(folder)
    stamp = (info.st_mtime_ns, info.st_size, info.st_ino, info.st_dev)
    kept = _LISTINGS.get(folder)
    if not fresh and kept is not None and kept[0] == stamp:
        return kept[1]
    names = frozenset(os.listdir(folder))
    with _LISTINGS_LOCK:
        if folder not in _LISTINGS and len(_LISTINGS) >= _LISTINGS_KEPT:
            del _LISTINGS[next(iter(_LISTINGS))]  # the oldest listed
        _LISTINGS[folder] = (stamp, names)
    return names


def _file_token(path: Path) -> int:
    """What changes when ``path`` is written anew: its modification time, and its size and
    inode too, which tell a rewrite within one tick of the file system's clock (or one that
    kept the time) that changed the length or replaced the file."""
    try:
        stat = path.stat()
        stamp = f"{stat.st_mtime_ns}:{stat.st_size}:{stat.st_ino}"
    except OSError:
        stamp = "-1"  # missing: fetch says so
    digest = hashlib.sha256(f"{path}\0{stamp}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def default_cache(capacity: int = 1024, max_bytes: int = 64 << 20) -> _toolgate.SchemaCache:
    """The core's LRU schema cache, holding at most ``capacity`` schemas and ``max_bytes``
    bytes (tool ids plus schema text)."""
    return _toolgate.SchemaCache(capacity, max_bytes)
