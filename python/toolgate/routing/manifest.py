"""A saved router's manifest, ``router.json``: what it holds (:class:`SavedRouter`), its own
checksum, and reading it back with every field checked, so that a damaged or edited manifest
is an :class:`~toolgate.errors.IndexFormatError` and not routing to the wrong tools."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

from toolgate.errors import IndexFormatError, IndexIncompatibleError, ToolgateError
from toolgate.json_limits import json_problem, loads, read_bounded
from toolgate.routing.config import RouterConfig
from toolgate.routing.no_tool import NullScores
from toolgate.routing.outline import CatalogOutline

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "SavedRouter",
    "is_manifest",
    "is_unparseable",
    "manifest_checksum",
    "read_manifest",
]

#: Version 2 added the manifest's own checksum and the catalog file's; version 1 manifests,
#: which have neither, are still read.
FORMAT_VERSION = 2
_READABLE_FORMATS = (1, FORMAT_VERSION)
MANIFEST = "router.json"

# Far past what any catalog needs (a manifest holds about 60 bytes per tool), and a bound on
# what a wrong or hostile file makes a reader allocate.
_MAX_MANIFEST_BYTES = 256 << 20


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
    #: What was taken from each row before it was stored (:mod:`toolgate.routing.centring`;
    #: ``None``: nothing).
    offset: tuple[float, ...] | None = None
    #: Whether the manifest carried its own checksum (format 1 did not: its ids are checked
    #: against the saved catalog when the router opens).
    sealed: bool = True


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """The sha256 of ``manifest`` without its ``checksum``, in a canonical JSON form."""
    content = {key: value for key, value in manifest.items() if key != "checksum"}
    return hashlib.sha256(
        json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def is_manifest(path: Path) -> bool:
    """Whether ``path`` holds a toolgate manifest by its shape (an object with an integer
    ``format``, ``ids`` and ``config``), of any format and even if damaged since: what a
    save may replace, as a rebuild is what a damaged router needs."""
    try:
        manifest = loads(read_bounded(path, _MAX_MANIFEST_BYTES))
    except (OSError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and type(manifest.get("format")) is int
        and {"ids", "config"} <= manifest.keys()
    )


def is_unparseable(path: Path) -> bool:
    """Whether ``path`` is a file, read whole, whose bytes are not JSON (cut short or garbled
    on disk): beside a router's index files, a manifest damaged past :func:`is_manifest`."""
    try:
        data = read_bounded(path, _MAX_MANIFEST_BYTES)
    except (OSError, ValueError):
        return False
    try:
        loads(data)
    except ValueError:  # UnicodeDecodeError included
        return True
    return False


def read_manifest(directory: Path) -> SavedRouter:
    """Read and check ``directory``'s manifest; any problem is an :class:`IndexFormatError`,
    an :class:`IndexIncompatibleError` for a format only a newer toolgate reads."""
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
    readable = f"this toolgate reads format {' or '.join(map(str, _READABLE_FORMATS))}"
    if isinstance(manifest, dict) and _is_int(found) and found > FORMAT_VERSION:
        # A newer toolgate's router (a rolling upgrade: its workers share the store), not
        # damage: its checksum may be made another way, so it is not checked.
        raise IndexIncompatibleError(
            f"{path}: router format {found!r:.40}, written by a newer toolgate; {readable}"
        )
    if not isinstance(manifest, dict) or not _is_int(found) or found not in _READABLE_FORMATS:
        raise IndexFormatError(f"{path}: router format {found!r:.40}, {readable}")
    # A checksum is checked whatever the format says: relabelling a manifest "format 1"
    # must not switch its checks off.
    sealed = found >= 2 or "checksum" in manifest
    if sealed and manifest.get("checksum") != manifest_checksum(manifest):
        raise IndexFormatError(
            f"{path}: checksum mismatch: the manifest was edited or damaged since it was "
            "written; save the router again or rebuild it with 'toolgate index'"
        )
    try:
        return replace(_saved_router(manifest), sealed=sealed)
    except (KeyError, TypeError, ValueError, AttributeError, ToolgateError) as exc:
        raise IndexFormatError(f"{path}: malformed manifest: {exc}") from None


def _saved_router(manifest: dict[str, Any]) -> SavedRouter:
    """The manifest's fields, each checked for its type; ``ValueError`` or ``TypeError`` if
    one is wrong."""
    settings = _mapping(manifest["config"], "config")
    settings["bm25_weights"] = tuple(_list(settings["bm25_weights"], "bm25_weights"))
    # A manifest that predates centring indexes the model's rows as they are.
    settings.setdefault("row_centring", 0.0)
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
        _schema_tokens(manifest.get("schema_tokens"), len(ids)),
    )
    files = _mapping(manifest.get("files", {}), "files")
    return SavedRouter(
        RouterConfig(**settings),
        outline,
        tuple(_strings(manifest["flags"], "flags")),
        _string(manifest["model_id"], "model_id"),
        {name: _string(digest, f"files[{name!r}]") for name, digest in files.items()},
        None if null is None else NullScores.from_dict(null),
        _offset(manifest.get("row_offset")),
    )


def _is_int(value: object) -> TypeGuard[int]:
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


def _offset(values: object) -> tuple[float, ...] | None:
    """The manifest's ``row_offset``: finite numbers (their count is checked against the
    matrix when it is opened)."""
    if values is None:
        return None
    out = []
    for at, value in enumerate(_list(values, "row_offset")):
        # Written from float32 values, so always a JSON number with a point or exponent.
        if not (isinstance(value, float) and math.isfinite(value)):
            raise ValueError(f"row_offset[{at}] {repr(value)[:40]} is not a finite number")
        out.append(value)
    return tuple(out)


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


def _schema_tokens(counts: object, n: int) -> tuple[int, ...] | None:
    """The manifest's ``schema_tokens``: one count of at least 0 for each of the ``n`` rows."""
    if counts is None:
        return None
    counts = _list(counts, "schema_tokens")
    if len(counts) != n:
        raise ValueError(f"schema_tokens holds {len(counts)} counts for {n} rows")
    for row, count in enumerate(counts):
        if not (_is_int(count) and count >= 0):
            raise ValueError(f"schema_tokens[{row}] {repr(count)[:40]} is not a count >= 0")
    return tuple(counts)


def _row(value: object, n: int) -> int:
    """A row number from the manifest, checked against the ``n`` rows it describes."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
        return value
    # Parsed JSON holds no integer too long for repr (json.loads refuses past 4,300 digits).
    raise ValueError(f"row {repr(value)[:40]} is not one of the {n} rows")
