"""The toolgate exception tree.

Every error toolgate raises derives from :class:`ToolgateError`. The classes the Rust core
raises are defined in the extension and re-exported here, so ``except ToolgateError`` catches
errors from both layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolgate._toolgate import IndexFormatError, InvalidInputError, StorageError, ToolgateError
from toolgate.unicode import printable, surrogates_escaped

__all__ = [
    "CatalogError",
    "CatalogWarning",
    "EncodingUnavailableError",
    "IndexFormatError",
    "IndexIncompatibleError",
    "InvalidInputError",
    "InvalidToolsError",
    "ModelChecksumError",
    "ModelError",
    "ModelNotFoundError",
    "Offender",
    "StorageError",
    "ToolgateError",
    "UnknownToolError",
]


class IndexIncompatibleError(IndexFormatError):
    """A saved index that is sound but not for this process: written by a newer toolgate (a
    format this one does not read) or embedded with another model than the embedder given.
    Unlike other :class:`IndexFormatError` s it is no damage: another process may be using
    it, so nothing deletes or rebuilds it in place."""


class CatalogError(ToolgateError):
    """A tool catalog is malformed; the message lists every offending tool."""

    def __str__(self) -> str:
        # A tool's name or a file's (undecodable bytes) may hold lone surrogates: shown
        # escaped, so that the message can be printed and logged.
        return surrogates_escaped(super().__str__())


#: How much of a tool's id or label a message shows: a valid id (a server and a name of 256
#: characters at most) whole.
SHOWN_ID_CHARS = 520


@dataclass(frozen=True)
class Offender:
    """A tool that could not be loaded: where it was, what it is called, and why."""

    position: str
    tool: str
    reason: str

    def __str__(self) -> str:
        # Shown escaped and cut: lenient loads log it, and a name is the caller's text (a
        # line break in it forged a log line; a name refused as too long was quoted whole).
        tool, reason = printable(self.tool, SHOWN_ID_CHARS), printable(self.reason, 1000)
        return f"{self.position} {tool}: {reason}"


#: The offenders a warning names: the tools are a caller's or a server's, and listing
#: thousands made one warning of hundreds of kB for each load.
LISTED_OFFENDERS = 20


def listed_offenders(offenders: Sequence[Offender]) -> str:
    """The first :data:`LISTED_OFFENDERS` of ``offenders``, and how many more there are."""
    listed = "; ".join(map(str, offenders[:LISTED_OFFENDERS]))
    more = len(offenders) - LISTED_OFFENDERS
    return f"{listed}; and {more:,} more" if more > 0 else listed


class InvalidToolsError(CatalogError):
    """A catalog holds bad tools; ``offenders`` lists each with its position and reason,
    ``source`` names where they were read."""

    def __init__(self, offenders: Sequence[Offender], source: str) -> None:
        self.offenders = tuple(offenders)
        self.source = source
        lines = "\n".join(f"  {o}" for o in self.offenders)
        super().__init__(f"{len(self.offenders)} bad tool(s) in {source}:\n{lines}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again from this __init__'s arguments, not from ``args`` (the message alone):
        # a process pool's worker sends its exception back pickled, and one that cannot be
        # rebuilt hangs multiprocessing.Pool's result handler.
        return type(self), (self.offenders, self.source), self.__dict__


class UnknownToolError(CatalogError, KeyError):
    """No tool has the id or exposed name asked for."""

    def __str__(self) -> str:
        return surrogates_escaped(str(self.args[0])) if self.args else "unknown tool"


class CatalogWarning(UserWarning):
    """Lenient loading skipped bad tools; the message names each of them (of a server's
    refresh or a request's tools, the first 20, and counts the rest)."""

    def __str__(self) -> str:
        return surrogates_escaped(super().__str__())


class ModelError(ToolgateError):
    """The embedding model cannot be used."""


class ModelNotFoundError(ModelError):
    """The model files are missing; the message gives the command that installs them."""


class ModelChecksumError(ModelError):
    """A model file's sha256 differs from the manifest; the message names the file and hashes."""


class EncodingUnavailableError(ToolgateError):
    """A tokenizer vocabulary is missing or fails its checksum; the message says which."""
