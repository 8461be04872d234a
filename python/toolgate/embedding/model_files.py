"""Where the model's files live, and how each is checked and written."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from toolgate.errors import InvalidInputError, ModelChecksumError, ModelError

__all__ = [
    "ENSURE_COMMAND",
    "HOME_ENV",
    "Precision",
    "home_path",
    "manifest",
    "model_dir",
    "toolgate_home",
]


Precision = Literal["fp32", "int8"]


HOME_ENV = "TOOLGATE_HOME"


def _ensure_command() -> str:
    """The command that prepares the model, for this interpreter: ``toolgate model ensure``
    when the ``toolgate`` on PATH is this environment's, else this interpreter's
    ``-m toolgate`` (a virtualenv that is not activated, ``pipx``, a system Python)."""
    import shlex
    import shutil
    import sys

    script = shutil.which("toolgate")
    if script is not None and Path(script).absolute().parent == Path(sys.executable).parent:
        return "toolgate model ensure"
    return f"{shlex.quote(sys.executable or 'python')} -m toolgate model ensure"


ENSURE_COMMAND = _ensure_command()


STAMP = "stamp.json"


TOKENIZER = "tokenizer.json"


def toolgate_home() -> Path:
    """The cache root: ``$TOOLGATE_HOME`` when set, else ``~/.cache/toolgate``.

    Raises :class:`ModelError` naming the variable when there is no home to put it in.
    """
    configured = os.environ.get(HOME_ENV)
    try:
        return Path(configured).expanduser() if configured else Path.home() / ".cache" / "toolgate"
    except RuntimeError:  # pathlib's: HOME unset and this user has no password entry
        reason = (
            f"{HOME_ENV}={configured!r} names a home that cannot be found"
            if configured
            else f"{HOME_ENV} is unset, HOME is not set and this user has no password entry"
        )
        raise ModelError(
            f"cannot tell where toolgate keeps its files: {reason}; set {HOME_ENV} (or HOME) "
            "to a folder"
        ) from None


def home_path(home: str | os.PathLike[str] | None) -> Path:
    """``home`` as a :class:`~pathlib.Path`, or :func:`toolgate_home` when it is ``None``.

    Every public ``home=`` goes through here, so a str or any ``os.PathLike`` works like a Path.
    """
    if home is None:
        return toolgate_home()
    if not isinstance(home, (str, os.PathLike)):
        raise InvalidInputError(f"home must be a str or os.PathLike, got {type(home).__name__}")
    return Path(home)


def model_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """Folder holding the converted model under ``home`` (default :func:`toolgate_home`)."""
    return home_path(home) / "models" / str(manifest()["name"])


@functools.cache
def manifest() -> dict[str, Any]:
    """The model manifest: source package, input and artifact sha256, toolchain versions.

    It ships inside the package (``toolgate/embedding/model_manifest.json``, which
    ``models/manifest.json``
    links to), so wheels carry it too.
    """
    path = Path(__file__).resolve().with_name("model_manifest.json")
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ModelError(f"the model manifest is missing: {path}") from None


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def check_hash(label: str, data: bytes, expected: str) -> None:
    actual = sha256_hex(data)
    if actual != expected:
        raise ModelChecksumError(
            f"{label}: sha256 is {actual}, expected {expected}; the file is corrupted or not the "
            f"published one. Rebuild with `{ENSURE_COMMAND} --force`."
        )


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary sibling, fsync, then rename: readers see old or new, never half."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; the cache is meant to be shared like any other cache file.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def write_error(path: Path, exc: OSError) -> ModelError:
    """The :class:`ModelError` for ``exc``, raised writing ``path`` of the model cache."""
    # A directory in the file's place or a read-only folder: ensure cannot fix either itself.
    return ModelError(
        f"cannot write {path} ({exc.strerror}); make the folder writable and remove anything "
        f"else at that path, then run `{ENSURE_COMMAND} --force`"
    )


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: rely on atomic renames alone.
        yield
        return
    try:
        handle = open(path, "a+b")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise write_error(path, exc) from None
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
