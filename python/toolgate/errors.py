"""The toolgate exception tree.

Every error toolgate raises derives from :class:`ToolgateError`. The classes the Rust core
raises are defined in the extension and re-exported here, so ``except ToolgateError`` catches
errors from both layers.
"""

from __future__ import annotations

from toolgate._toolgate import IndexFormatError, InvalidInputError, ToolgateError

__all__ = [
    "CatalogError",
    "EncodingUnavailableError",
    "IndexFormatError",
    "InvalidInputError",
    "ModelChecksumError",
    "ModelError",
    "ModelNotFoundError",
    "ToolgateError",
]


class CatalogError(ToolgateError):
    """A tool catalog is malformed; the message lists every offending tool."""


class ModelError(ToolgateError):
    """The embedding model cannot be used."""


class ModelNotFoundError(ModelError):
    """The model files are missing; the message gives the command that installs them."""


class ModelChecksumError(ModelError):
    """A model file's sha256 differs from the manifest; the message names the file and hashes."""


class EncodingUnavailableError(ToolgateError):
    """A tokenizer vocabulary is missing or fails its checksum; the message says which."""
