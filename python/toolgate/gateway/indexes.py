"""The routers a :class:`~toolgate.gateway.filter.ToolFilter` builds, one per tools array.

A gateway sees the same few tools arrays again and again: each is read, checked and indexed
once, keyed by a digest of the array, kept in an LRU (and, given a store directory, saved
there memory mapped, so that worker processes share one copy), and built once however many
requests ask for it at the same time. A worker a server forks while a build runs builds that
array itself: the build's thread was the parent's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import marshal
import sys
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from toolgate._toolgate import __version__
from toolgate.catalog.build import build_tools
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import ScopeMatcher
from toolgate.errors import (
    CatalogWarning,
    IndexFormatError,
    InvalidToolsError,
    StorageError,
    ToolgateError,
    listed_offenders,
)
from toolgate.forks import fork_safe_lock, on_fork_in_child
from toolgate.formats.raw import DEFAULT_SERVER, RawTool
from toolgate.gateway.learning import LearningStarter
from toolgate.gateway.router_store import FORMATS, RouterStore, StoredRouter
from toolgate.json_limits import MAX_DEPTH
from toolgate.lazy import Lazy
from toolgate.routing.config import RouterConfig
from toolgate.routing.learned_store import LearnedStore
from toolgate.routing.router import Router

try:  # the gateway extra's JSON library keys arrays fastest; marshal does it without
    import orjson
except ImportError:  # pragma: no cover - installed with the gateway extra
    orjson = None  # type: ignore[assignment]

# Dataclasses and datetimes have no JSON form a tools array reader sees: orjson must refuse
# them, as marshal does, rather than key them like the dicts and strings it would write.
_ORJSON_PLAIN_ONLY = (
    0 if orjson is None else (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME)
)

if TYPE_CHECKING:
    from toolgate.embedding.cache import EmbeddingCache
    from toolgate.embedding.embedder import Embedder

__all__ = [
    "MAX_CACHED_BYTES",
    "IndexInProgress",
    "IndexedTools",
    "Indexes",
    "digest",
    "filter_off_loop",
    "keyed",
]

#: The most bytes of tools arrays (their JSON, as keyed) whose routers the LRU keeps besides
#: the last one built: a built catalog holds several times its array's size (6x for large
#: schemas), so ``max_catalogs`` arrays of a gateway's largest bodies (64 MB) would hold tens
#: of GB. Real arrays (a few hundred kB) stay far below it at any ``max_catalogs``.
MAX_CACHED_BYTES = 256 << 20

_T = TypeVar("_T")
# Learning's trouble is logged where the gateway's is.
_GATEWAY_LOG = logging.getLogger("toolgate.gateway")


class IndexInProgress(ToolgateError):
    """Raised by :meth:`ToolFilter.filter` with ``wait=False`` when another thread is indexing
    the request's tools: ``done`` resolves when that build ends (built or failed), and the
    request is then filtered again. A server awaits it without holding a thread.

    A :class:`~toolgate.errors.ToolgateError` like every error toolgate raises, but neither
    the client's fault nor the server's: no handler on the way from the filter to
    :func:`filter_off_loop`, which catches it, catches a ``ToolgateError``.
    """

    def __init__(self, done: Future[None]) -> None:
        super().__init__("another thread is indexing this request's tools")
        self.done = done


@dataclass(frozen=True)
class IndexedTools:
    """A tools array read and indexed: its catalog and router, the position among the tools
    read of each catalog row, and the positions and names of the tools it could not read
    (kept on every request when the filter keeps unreadable tools)."""

    catalog: Catalog
    router: Router
    position_of_row: tuple[int, ...]
    unreadable: tuple[int, ...]
    unreadable_names_in_order: tuple[str, ...]
    scopes: ScopeMatcher  # over the catalog's rows
    unreadable_scopes: ScopeMatcher  # over the unreadable tools, in order
    reader: str  # the shape the tools were read as
    _totals: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def unreadable_names(self) -> frozenset[str]:
        """The names of the unreadable tools that have one."""
        return frozenset(name for name in self.unreadable_names_in_order if name)

    def tokens_of_all(self, provider: str) -> int:
        """The schema tokens of every tool of the catalog, as ``provider`` counts them."""
        total = self._totals.get(provider)
        if total is None:
            total = self._totals[provider] = sum(t.token_count(provider) for t in self.catalog)
        return total


class Indexes:
    """The :class:`IndexedTools` of the last ``max_catalogs`` tools arrays, by key.

    ``unreadable`` is the filter's policy for tools that cannot be indexed (``"error"``
    raises; ``"keep"`` leaves them out of the index, named by a warning); ``store`` is where
    the routers are saved and opened from; ``learn`` a learned store every router learns
    into (``Router.learn``), best effort: a router whose memory the store fails to give
    routes without it (:class:`~toolgate.routing.learning_starter.LearningStarter`).
    """

    def __init__(
        self,
        *,
        config: RouterConfig,
        embedder: Lazy[Embedder],
        cache: EmbeddingCache | None,
        store: RouterStore | None,
        max_catalogs: int,
        unreadable: Literal["error", "keep"],
        learn: LearnedStore | None = None,
    ) -> None:
        """See the class docstring."""
        self.config = config
        self._embedder = embedder
        self._cache = cache
        self._store = store
        self._max_catalogs = max_catalogs
        self._unreadable = unreadable
        self._learning = None if learn is None else LearningStarter(learn, log=_GATEWAY_LOG)
        self._lock = fork_safe_lock()
        self._routers: OrderedDict[str, IndexedTools] = OrderedDict()
        self._sizes: dict[str, int] = {}  # each cached array's keyed bytes
        self._cached_bytes = 0
        self._building: dict[str, Future[None]] = {}
        on_fork_in_child(self, Indexes._forked)

    def _forked(self) -> None:
        """In a forked child: the builds running are the parent's threads', which the child
        has not; forgotten, they are built again (their futures would never resolve)."""
        self._building = {}

    @property
    def learns(self) -> bool:
        """Whether every router built learns (into ``learn``)."""
        return self._learning is not None

    def get(
        self,
        key: str | None,
        reader: str,
        read: Callable[[], Sequence[RawTool]],
        wait: bool,
        size: int = 0,
    ) -> IndexedTools:
        """The catalog and router for the tools ``read`` gives, built once however many
        threads ask at the same time; those asking while it is built wait for it (or, without
        ``wait``, raise :class:`IndexInProgress`).

        ``key`` is a digest of the tools as the request gives them and of ``reader`` (how
        they are read: the same array reads differently as Gemini or Anthropic tools), so a
        request whose tools were seen before is neither read nor validated again: for a
        large array that is most of a call's time. Tools without a key (None) are read
        afresh every time. ``size`` is the bytes the key was taken over (:func:`keyed`):
        past :data:`MAX_CACHED_BYTES` of them, the least recently used routers go too.
        """
        indexed = self._get(key, reader, read, wait, size)
        if self._learning is not None:  # built while the learned store failed, it may learn now
            self._learning.start(indexed.router)
        return indexed

    def _get(
        self,
        key: str | None,
        reader: str,
        read: Callable[[], Sequence[RawTool]],
        wait: bool,
        size: int,
    ) -> IndexedTools:
        if key is None:
            return self._build(read, reader, None)
        while True:
            with self._lock:
                found = self._routers.get(key)
                if found is not None:
                    self._routers.move_to_end(key)
                    return found
                building = self._building.get(key)
                if building is None:  # this thread builds it
                    building = self._building[key] = Future()
                    # Running: a waiter's cancelled wrapper (asyncio.wrap_future) cannot
                    # cancel it under the builder.
                    building.set_running_or_notify_cancel()
                    break
            if not wait:
                raise IndexInProgress(building)
            # Per tools array: other arrays' requests do not wait for it. After a failed
            # build the next waiter builds, and fails, itself.
            wait_for([building])
        try:
            found = self._build(read, reader, key)
            with self._lock:
                self._routers[key] = found
                self._routers.move_to_end(key)
                self._cached_bytes += size - self._sizes.get(key, 0)
                self._sizes[key] = size
                # The newest stays, however large: its next request would build it again.
                while len(self._routers) > self._max_catalogs or (
                    self._cached_bytes > MAX_CACHED_BYTES and len(self._routers) > 1
                ):
                    gone, _ = self._routers.popitem(last=False)
                    self._cached_bytes -= self._sizes.pop(gone)
        finally:  # also when the build fails: a bad array must not leave its entry behind
            with self._lock:
                del self._building[key]
            building.set_result(None)
        return found

    def _build(
        self, read: Callable[[], Sequence[RawTool]], reader: str, key: str | None
    ) -> IndexedTools:
        raws = list(read())
        tools, offenders = build_tools(raws)
        unreadable: tuple[int, ...] = ()
        if offenders and self._unreadable == "error":
            raise InvalidToolsError(offenders, "the request's tools")
        if offenders:
            # Told apart by index: several text tags on one line share a position.
            _, by_index = build_tools([replace(raw, where=str(k)) for k, raw in enumerate(raws)])
            unreadable = tuple(sorted({int(offender.position) for offender in by_index}))
            readable = [k for k in range(len(raws)) if k not in set(unreadable)]
            tools, _ = build_tools([raws[k] for k in readable])
            _warn_unregistered(
                f"cannot index {len(offenders)} of the request's tools, so they are sent on "
                f"every request: {listed_offenders(offenders)}",
                stacklevel=7,  # filter()'s caller: _build, _get, get, _route, _filter_*, filter
            )
        else:
            readable = list(range(len(raws)))
        catalog = Catalog(tools)
        if self._store is not None and key is not None:
            router, release = self._stored(catalog, key)
        else:
            router, release = self._built(catalog), None
        try:
            indexed = self._indexed(catalog, router, raws, readable, unreadable, reader)
        except BaseException:
            if release is not None:
                release()
            raise
        if release is not None:
            # Not the router's own life: routers sit in reference cycles, freed only when the
            # garbage collector runs, and the store could not delete their folders till then.
            weakref.finalize(indexed, release)
        return indexed

    def _built(self, catalog: Catalog) -> Router:
        return Router.from_catalog(
            catalog, config=self.config, embedder=self._embedder.get(), cache=self._cache
        )

    def _indexed(
        self,
        catalog: Catalog,
        router: Router,
        raws: list[RawTool],
        readable: list[int],
        unreadable: tuple[int, ...],
        reader: str,
    ) -> IndexedTools:
        """``router`` learning (if the filter learns) with what routing needs of ``catalog``."""
        if self._learning is not None:
            self._learning.start(router)
        names = tuple(raws[k].name if isinstance(raws[k].name, str) else "" for k in unreadable)
        scopes = ScopeMatcher(
            [t.id for t in catalog], [t.name for t in catalog], [t.exposed_name for t in catalog]
        )
        unreadable_scopes = ScopeMatcher([f"{DEFAULT_SERVER}/{n}" for n in names], names)
        return IndexedTools(
            catalog, router, tuple(readable), unreadable, names, scopes, unreadable_scopes,
            reader,
        )  # fmt: skip

    def _stored(self, catalog: Catalog, key: str) -> StoredRouter:
        """The router for ``catalog`` from the store, built there first if no process has
        (:mod:`~toolgate.gateway.router_store`); the folder's name covers the tools array,
        the config, the embedder's model, toolgate's version and its files' formats, so
        filters of different models sharing a store, and the old and new workers of a rolling
        upgrade, never open (and fail on) each other's routers: the formats too, since a build
        may change them without a new version number (a worker built from the repository)."""
        assert self._store is not None  # the caller checked
        embedder = self._embedder.get()
        named = f"{key}\0{self.config!r}\0{embedder.model_id}\0{__version__}\0{FORMATS}"
        name = hashlib.sha256(named.encode()).hexdigest()[:40]

        def build(folder: Path) -> None:
            Router.from_catalog(
                catalog, config=self.config, embedder=embedder, path=folder, cache=self._cache
            )

        try:
            return self._store.router(
                name, build, lambda d: Router.open(d, embedder=embedder), model_id=embedder.model_id
            )
        except (OSError, IndexFormatError) as exc:  # the server's fault, not the request's
            raise StorageError(f"router store {self._store.root}: {exc}") from None


async def filter_off_loop(
    call: Callable[[], _T],
    run: Callable[[Callable[[], _T]], Awaitable[_T]] = asyncio.to_thread,
) -> _T:
    """``call`` (a :meth:`ToolFilter.filter` with ``wait=False``) on a worker thread by
    ``run``, again each time it finds its tools being indexed by another thread, after that
    build ends. Requests waiting for one build then hold no thread, so however many there
    are, other arrays' requests still find one free."""
    while True:
        try:
            return await run(call)
        except IndexInProgress as busy:
            await asyncio.wrap_future(busy.done)


def digest(source: Any, reader: str) -> str | None:
    """A key for the tools array ``source`` read as ``reader``, or None if it has no safe one
    (see :func:`keyed`)."""
    return keyed(source, reader)[0]


def keyed(source: Any, reader: str) -> tuple[str | None, int]:
    """A key for the tools array ``source`` read as ``reader``, or None if it has no safe one,
    and the size in bytes of what it was taken over (0 without a key).

    The key is a hash of the array's JSON text (orjson writes it fastest: keying is most of a
    repeated request's time), or of its marshal form where JSON text would be ambiguous
    (orjson writes NaN and the infinities as ``null``, and refuses integers past 64 bits);
    either form is loadable back, so two different arrays never share a key. The same tools
    with keys in another order only miss the cache. Other mappings and sequences (a client
    library's own types) are keyed by their plain JSON form; an array holding values that have
    none (whose text could only be a ``repr`` with a memory address in it) gets no key.
    """
    data = _key_bytes(source)
    if data is None:
        return None, 0
    return hashlib.sha256(reader.encode() + b"\0" + data).hexdigest(), len(data)


# Bytes before a JSON null value in orjson's compact text; "null" after anything else is
# inside a string (a type name in many schemas).
_BEFORE_VALUE = frozenset(b":,[")
# Past this many "null"s, three whole-text searches cost less than stepping through them.
_NULLS_STEPPED = 64


def _has_null_value(text: bytes) -> bool:
    """Whether ``text`` (orjson's compact JSON) holds a null value, not just the word."""
    at = text.find(b"null")
    for _ in range(_NULLS_STEPPED):
        if at == -1:
            return False
        if at == 0 or text[at - 1] in _BEFORE_VALUE:
            return True
        at = text.find(b"null", at + 4)
    return text.startswith(b"null") or any(n in text for n in (b":null", b",null", b"[null"))


def _key_bytes(source: Any) -> bytes | None:
    """``source`` as bytes that no other array gives, tagged by how they were written."""
    plain: Any = source
    if orjson is not None:
        try:
            text = orjson.dumps(source, option=_ORJSON_PLAIN_ONLY)
        except TypeError:
            text = None
        if text is None:
            try:
                plain = _plain(source)
                text = orjson.dumps(plain)
            except (ValueError, TypeError):
                text = None
        if text is not None and not _has_null_value(text):
            return b"j" + text
    try:
        return b"m" + marshal.dumps(plain, 2)
    except ValueError:
        try:
            return b"m" + marshal.dumps(_plain(source), 2)
        except ValueError:
            return None


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` with mappings as dicts, sequences as lists and subclasses of ``str``, ``int``
    and ``float`` (a ``str`` enum from a model dump) as those types, which is how JSON
    writes them; ValueError past JSON's types, or nested past ``MAX_DEPTH`` (which no tool
    passes: the catalog refuses it, by name, once the array gets no key here)."""
    if value is None or type(value) in (str, bool, int, float):
        return value
    for plain in (str, bool, int, float):
        if isinstance(value, plain):
            return plain.__str__(value) if plain is str else plain(value)
    if depth >= MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        return {_plain(key, depth + 1): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    raise ValueError(f"no JSON form for {type(value).__name__}")


def _warn_unregistered(message: str, stacklevel: int) -> None:
    """Warn with ``message``, a :class:`CatalogWarning`, as from the caller ``stacklevel``
    frames up, without the warnings registry: it keeps the text of each warning shown (to
    show it once), and each tools array a client sends may make a new one. A tools array
    is indexed once while cached, so its warning is still shown once in that time."""
    try:
        frame = sys._getframe(stacklevel)
    except ValueError:  # a shallower stack: warnings.warn names "sys" then
        filename, lineno, module, frame_globals = "sys", 1, "sys", None
    else:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        module, frame_globals = frame.f_globals.get("__name__", filename), frame.f_globals
    warnings.warn_explicit(message, CatalogWarning, filename, lineno, module, None, frame_globals)
