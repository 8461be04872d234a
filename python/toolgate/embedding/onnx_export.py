"""Build the all-MiniLM-L6-v2 sentence encoder as an ONNX graph from its safetensors weights.

No PyTorch is involved: the safetensors container is parsed with numpy and the BERT encoder is
written node by node with the ``onnx`` helpers. The graph uses ONNX Runtime's fused CPU operators
(``Attention``, ``SkipLayerNormalization``, ``BiasGelu`` from the ``com.microsoft`` domain) rather
than leaving fusion to the runtime's pattern matcher, so every session gets the fast kernels and
ONNX Runtime's dynamic quantizer turns ``Attention`` into ``QAttention`` for the int8 variant.

Mean pooling over the attention mask and L2 normalisation are part of the graph, so the output
``sentence_embedding`` is already what callers want. A second output, ``token_embeddings``, is the
last layer's state of every token, for pooling parts of a text (``toolgate.embedding.clauses``);
ONNX
Runtime computes only the outputs a caller asks for, so asking for the sentence embedding alone
costs nothing extra.

>>> from toolgate.embedding.onnx_export import read_safetensors, build_sentence_encoder
>>> tensors = read_safetensors(open("model.safetensors", "rb").read())  # doctest: +SKIP
>>> model = build_sentence_encoder(tensors, config)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgate.errors import ModelError

if TYPE_CHECKING:
    import onnx

__all__ = [
    "GRAPH_VERSION",
    "INT8_KEEP_FP32",
    "SENTENCE_OUTPUT",
    "TOKEN_OUTPUT",
    "BertConfig",
    "build_sentence_encoder",
    "read_safetensors",
]

# Bumped whenever the graph this module writes changes (or how ``models`` quantizes it), so
# cached artifacts are rebuilt. 3: the int8 variant quantizes five of the six FFN outputs.
# 4: the ``token_embeddings`` output.
GRAPH_VERSION = 4

#: The graph's outputs: the pooled, normalised embedding of each text, and every token's state.
SENTENCE_OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "token_embeddings"

_SAFETENSORS_DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_OPSET = 18


def _ffn_output_name(layer: int) -> str:
    """Node name of the feed-forward output projection of ``layer``."""
    return f"layer{layer}.ffn_output"


# Nodes the int8 variant keeps in float32. A feed-forward output projection reads the GELU
# output, whose long positive tail makes per-tensor uint8 activation quantization lose accuracy,
# and layer 0's by far the most; quantizing the other five costs retrieval nothing and makes a
# query faster (docs/design.md, "Embedding model").
INT8_KEEP_FP32 = (_ffn_output_name(0),)
_MS_DOMAIN = "com.microsoft"


def read_safetensors(data: bytes, *, name: str = "model.safetensors") -> dict[str, np.ndarray]:
    """Parse a safetensors container into numpy arrays (copies, so ``data`` may be freed).

    Raises :class:`~toolgate.errors.ModelError` naming ``name`` and the offending entry when the
    header is malformed, a dtype is unsupported or a tensor's byte range is inconsistent.
    """
    if len(data) < 8:
        raise ModelError(f"{name}: too short to be a safetensors file ({len(data)} bytes)")
    (header_len,) = struct.unpack_from("<Q", data, 0)
    if header_len > len(data) - 8:
        raise ModelError(f"{name}: header length {header_len} exceeds the file size {len(data)}")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{name}: header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ModelError(f"{name}: header is not a JSON object")
    body = memoryview(data)[8 + header_len :]
    tensors: dict[str, np.ndarray] = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        tensors[key] = _read_tensor(body, key, entry, name)
    return tensors


def _read_tensor(body: memoryview, key: str, entry: object, name: str) -> np.ndarray:
    if not isinstance(entry, dict):
        raise ModelError(f"{name}: entry {key!r} is not an object")
    dtype = _SAFETENSORS_DTYPES.get(str(entry.get("dtype")))
    if dtype is None:
        raise ModelError(f"{name}: tensor {key!r} has unsupported dtype {entry.get('dtype')!r}")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ModelError(f"{name}: tensor {key!r} has an invalid shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2):
        raise ModelError(f"{name}: tensor {key!r} has invalid data_offsets {offsets!r}")
    start, end = offsets
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not (0 <= start <= end <= len(body)) or end - start != expected:
        raise ModelError(
            f"{name}: tensor {key!r} spans bytes [{start}, {end}) but its shape {shape} "
            f"and dtype need {expected} bytes within a {len(body)}-byte body"
        )
    array: np.ndarray = np.frombuffer(body[start:end], dtype=dtype).reshape(shape).copy()
    return array


@dataclass(frozen=True)
class BertConfig:
    """The few hyper-parameters of a BERT encoder that shape the graph."""

    hidden_size: int
    num_heads: int
    num_layers: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BertConfig:
        """Read a Hugging Face ``config.json``; ModelError for anything this builder can't do."""
        try:
            config = cls(
                hidden_size=int(raw["hidden_size"]),
                num_heads=int(raw["num_attention_heads"]),
                num_layers=int(raw["num_hidden_layers"]),
                layer_norm_eps=float(raw["layer_norm_eps"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"config.json: missing or invalid field ({exc})") from exc
        if raw.get("hidden_act") != "gelu":
            raise ModelError(f"config.json: hidden_act {raw.get('hidden_act')!r} is not 'gelu'")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ModelError("config.json: only absolute position embeddings are supported")
        if config.hidden_size % config.num_heads:
            raise ModelError("config.json: hidden_size is not a multiple of num_attention_heads")
        return config


class _GraphBuilder:
    """Accumulates initializers and nodes, handing out unique value names."""

    def __init__(self, tensors: Mapping[str, np.ndarray]) -> None:
        self._tensors = tensors
        self.initializers: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self._counter = 0

    def tensor(self, key: str) -> np.ndarray:
        """The checkpoint tensor ``key``; ModelError when the checkpoint lacks it."""
        try:
            return self._tensors[key]
        except KeyError:
            raise ModelError(f"model.safetensors: tensor {key!r} is missing") from None

    def weight(self, key: str, *, transpose: bool = False) -> str:
        """Add the named checkpoint tensor (optionally transposed) as an initializer."""
        array = self.tensor(key)
        return self.constant(key, array.T if transpose else array)

    def constant(self, name: str, array: np.ndarray) -> str:
        """Add a numpy array as an initializer and return its name."""
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(
        self, op: str, inputs: list[str], *, domain: str = "", name: str = "", **attrs: Any
    ) -> str:
        """Append one single-output node and return the name of its output."""
        from onnx import helper

        self._counter += 1
        output = f"{op.lower()}_{self._counter}"
        node_name = name or f"{op}_{self._counter}"
        self.nodes.append(
            helper.make_node(op, inputs, [output], name=node_name, domain=domain, **attrs)
        )
        return output


def _check_shapes(tensors: Mapping[str, np.ndarray], config: BertConfig) -> None:
    hidden = config.hidden_size
    word = tensors.get("embeddings.word_embeddings.weight")
    if word is None or word.ndim != 2 or word.shape[1] != hidden:
        raise ModelError(
            "model.safetensors: embeddings.word_embeddings.weight is missing or not (vocab, "
            f"{hidden}) as config.json says"
        )
    for layer in range(config.num_layers):
        key = f"encoder.layer.{layer}.attention.self.query.weight"
        if key not in tensors or tensors[key].shape != (hidden, hidden):
            raise ModelError(f"model.safetensors: {key} is missing or not ({hidden}, {hidden})")


def build_sentence_encoder(
    tensors: Mapping[str, np.ndarray], config: BertConfig, *, half_word_embeddings: bool = False
) -> onnx.ModelProto:
    """Return the ONNX model: int32 ``input_ids`` and ``attention_mask`` of shape (batch, seq) in,
    float32 ``sentence_embedding`` (batch, hidden), mean-pooled and L2-normalised, and
    ``token_embeddings`` (batch, seq, hidden), the last layer's states, out.

    Sequences must be right-padded (the tokenizer does that) and at most 512 tokens long.
    ``half_word_embeddings`` stores the word-embedding table (half of all weights) as float16
    and widens the looked-up rows; the int8 variant uses it to load and verify less, at no
    measurable cost in accuracy next to quantization.
    """
    from onnx import TensorProto, helper

    _check_shapes(tensors, config)
    g = _GraphBuilder(tensors)
    hidden = _embeddings(g, config, half_word_embeddings)
    for layer in range(config.num_layers):
        hidden = _encoder_layer(g, config, layer, hidden)
    pooled = _mean_pool_and_normalise(g, hidden)

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "sequence"]),
    ]
    outputs = [
        helper.make_tensor_value_info(
            SENTENCE_OUTPUT, TensorProto.FLOAT, ["batch", config.hidden_size]
        ),
        helper.make_tensor_value_info(
            TOKEN_OUTPUT, TensorProto.FLOAT, ["batch", "sequence", config.hidden_size]
        ),
    ]
    g.nodes.append(helper.make_node("Identity", [pooled], [SENTENCE_OUTPUT], name="output"))
    g.nodes.append(helper.make_node("Identity", [hidden], [TOKEN_OUTPUT], name="token_output"))
    graph = helper.make_graph(g.nodes, "minilm_sentence_encoder", inputs, outputs, g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", _OPSET), helper.make_opsetid(_MS_DOMAIN, 1)],
        # Part of the graph bytes the manifest pins: the name this module had when they were.
        producer_name="toolgate.onnx_export",
        producer_version=str(GRAPH_VERSION),
    )
    # A fixed IR version keeps the serialised bytes (and so the manifest's sha256) reproducible
    # across onnx releases that would otherwise stamp their own newest IR version.
    model.ir_version = 8
    return model


def _embeddings(g: _GraphBuilder, config: BertConfig, half: bool) -> str:
    key = "embeddings.word_embeddings.weight"
    if half:
        table = g.constant(key, g.tensor(key).astype(np.float16))
        words = g.node("Cast", [g.node("Gather", [table, "input_ids"], axis=0)], to=1)  # FLOAT
    else:
        words = g.node("Gather", [g.weight(key), "input_ids"], axis=0)
    # Position ids are 0..seq-1 for right-padded input; slicing the table avoids a Range + Gather.
    seq_len = g.node(
        "Slice",
        [
            g.node("Shape", ["input_ids"]),
            g.constant("one_i64", np.array([1], np.int64)),
            g.constant("two_i64", np.array([2], np.int64)),
        ],
    )
    positions = g.node(
        "Slice",
        [
            g.weight("embeddings.position_embeddings.weight"),
            g.constant("zero_i64", np.array([0], np.int64)),
            seq_len,
            g.constant("axis0_i64", np.array([0], np.int64)),
        ],
    )
    # Every toolgate text is a single segment, so the token-type embedding is always row 0: a
    # constant row instead of a third model input.
    token_type = g.constant(
        "token_type_row0", g.tensor("embeddings.token_type_embeddings.weight")[0]
    )
    summed = g.node("Add", [words, g.node("Add", [positions, token_type])])
    return g.node(
        "LayerNormalization",
        [summed, g.weight("embeddings.LayerNorm.weight"), g.weight("embeddings.LayerNorm.bias")],
        axis=-1,
        epsilon=config.layer_norm_eps,
    )


def _encoder_layer(g: _GraphBuilder, config: BertConfig, layer: int, hidden: str) -> str:
    prefix = f"encoder.layer.{layer}."
    attn = prefix + "attention.self."
    qkv_weight = np.concatenate(
        [g.tensor(attn + f"{part}.weight").T for part in ("query", "key", "value")], axis=1
    )
    qkv_bias = np.concatenate(
        [g.tensor(attn + f"{part}.bias") for part in ("query", "key", "value")]
    )
    context = g.node(
        "Attention",
        [
            hidden,
            g.constant(prefix + "qkv.weight", qkv_weight),
            g.constant(prefix + "qkv.bias", qkv_bias),
            "attention_mask",
        ],
        domain=_MS_DOMAIN,
        num_heads=config.num_heads,
    )
    projected = g.node(
        "MatMul", [context, g.weight(prefix + "attention.output.dense.weight", transpose=True)]
    )
    hidden = _add_and_norm(g, config, projected, hidden, prefix + "attention.output.")
    intermediate = g.node(
        "BiasGelu",
        [
            g.node(
                "MatMul", [hidden, g.weight(prefix + "intermediate.dense.weight", transpose=True)]
            ),
            g.weight(prefix + "intermediate.dense.bias"),
        ],
        domain=_MS_DOMAIN,
    )
    output = g.node(
        "MatMul",
        [intermediate, g.weight(prefix + "output.dense.weight", transpose=True)],
        name=_ffn_output_name(layer),
    )
    return _add_and_norm(g, config, output, hidden, prefix + "output.")


def _add_and_norm(
    g: _GraphBuilder, config: BertConfig, projected: str, residual: str, block: str
) -> str:
    """BERT's ``LayerNorm(projected + bias + residual)`` after attention and after the
    feed-forward layer, as one fused node; ``block`` prefixes the weights' names."""
    return g.node(
        "SkipLayerNormalization",
        [
            projected,
            residual,
            g.weight(block + "LayerNorm.weight"),
            g.weight(block + "LayerNorm.bias"),
            g.weight(block + "dense.bias"),
        ],
        domain=_MS_DOMAIN,
        epsilon=config.layer_norm_eps,
    )


def _mean_pool_and_normalise(g: _GraphBuilder, hidden: str) -> str:
    mask = g.node("Cast", ["attention_mask"], to=1)  # 1 = FLOAT
    axis1 = g.constant("axis1_i64", np.array([1], np.int64))
    weighted = g.node(
        "Mul",
        [hidden, g.node("Unsqueeze", [mask, g.constant("axis2_i64", np.array([2], np.int64))])],
    )
    summed = g.node("ReduceSum", [weighted, axis1], keepdims=0)
    # Same clamps as sentence-transformers: an all-padding row divides by 1e-9, not zero, and a
    # zero vector is left as zero by normalising against max(norm, 1e-12).
    count = g.node(
        "Max",
        [
            g.node("ReduceSum", [mask, axis1], keepdims=1),
            g.constant("eps_count", np.array(1e-9, np.float32)),
        ],
    )
    mean = g.node("Div", [summed, count])
    norm = g.node(
        "Max",
        [
            g.node("ReduceL2", [mean, axis1], keepdims=1),
            g.constant("eps_norm", np.array(1e-12, np.float32)),
        ],
    )
    return g.node("Div", [mean, norm])
