"""The int8 model run of one query under each ONNX Runtime session option tried, in one run,
and where the shipped session's time goes by operator:

    .venv/bin/python -m benches.model_run

Queries are 300 of ``bench_route``'s pool, tokenized as the embedder does (unpadded, at most
256 tokens), one thread. Every variant runs each query in turn (which first turning from query
to query); it prints its p50 ms, its ratio
to the shipped session (:func:`toolgate.embedding.embedder._make_session`) and the largest
difference of its outputs (sentence vector and token states) from the shipped session's.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped,unused-ignore]

from benches.bench_route import query_pool
from toolgate.embedding import models
from toolgate.embedding.embedder import _make_session, _make_tokenizer
from toolgate.embedding.onnx_export import SENTENCE_OUTPUT, TOKEN_OUTPUT

QUERIES = 300
OUTPUTS = [SENTENCE_OUTPUT, TOKEN_OUTPUT]


def session(
    onnx: bytes,
    *,
    level: Any = None,
    entries: Sequence[tuple[str, str]] = (),
    arena: bool = True,
    disabled: Sequence[str] = (),
    profile: str | None = None,
) -> Any:
    """A one-thread session of ``onnx`` as the embedder makes it, but for the options given."""
    options = ort.SessionOptions()
    options.graph_optimization_level = level or ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = arena
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for key, value in entries:
        options.add_session_config_entry(key, value)
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(
        onnx, sess_options=options, providers=["CPUExecutionProvider"],
        disabled_optimizers=list(disabled),
    )  # fmt: skip


def run(model: Any, ids: np.ndarray, outputs: list[str] = OUTPUTS) -> list[np.ndarray]:
    """The named outputs for one unpadded text."""
    return list(model.run(outputs, {"input_ids": ids, "attention_mask": np.ones_like(ids)}))


def operator_shares(onnx: bytes, inputs: Sequence[np.ndarray]) -> list[tuple[str, float]]:
    """Each operator's share of the shipped session's kernel time, largest first."""
    with tempfile.TemporaryDirectory() as folder:
        model = session(onnx, profile=str(Path(folder) / "run"))
        for ids in inputs:
            run(model, ids)
        events = json.loads(Path(model.end_profiling()).read_text())
    spent: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += event["dur"]
    total = sum(spent.values())
    return [(op, us / total) for op, us in spent.most_common(6)]


def main() -> None:
    """Time every variant over the same queries."""
    loaded = models.load("int8")
    tokenizer = _make_tokenizer(loaded.tokenizer_json)
    texts = query_pool()[:QUERIES]
    inputs = [np.asarray(tokenizer.encode(t).ids, dtype=np.int32)[None, :] for t in texts]
    onnx, level = loaded.onnx_bytes, ort.GraphOptimizationLevel
    variants = {
        "shipped": _make_session(onnx, threads=1),
        "graph: extended": session(onnx, level=level.ORT_ENABLE_EXTENDED),
        "graph: basic": session(onnx, level=level.ORT_ENABLE_BASIC),
        "denormals as zero": session(onnx, entries=[("session.set_denormal_as_zero", "1")]),
        "no memory arena": session(onnx, arena=False),
        "no SkipLayerNorm / BiasGelu fusion": session(
            onnx, disabled=["SkipLayerNormFusion", "BiasGeluFusion"]
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in [*variants, "sentence vector only"]}
    worst = dict.fromkeys(variants, 0.0)
    for ids in inputs[:20]:
        for model in variants.values():
            run(model, ids)
    names = list(variants)
    for turn, ids in enumerate(inputs):
        reference = run(variants["shipped"], ids)
        # The order turns from query to query: no variant always runs after another's.
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            start = time.perf_counter()
            out = run(variants[name], ids)
            times[name].append((time.perf_counter() - start) * 1e3)
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(out, reference, strict=True))
            worst[name] = max(worst[name], diff)
        start = time.perf_counter()
        run(variants["shipped"], ids, [SENTENCE_OUTPUT])
        times["sentence vector only"].append((time.perf_counter() - start) * 1e3)
    tokens = statistics.median(ids.shape[1] for ids in inputs)
    print(f"int8 model run, one thread, {len(inputs)} queries (median {tokens:.0f} tokens)")
    shipped = statistics.median(times["shipped"])
    for name, values in times.items():
        ms = statistics.median(values)
        diff = f"  max |diff| {worst[name]:.1e}" if name in worst else ""
        print(f"  {name:36s} p50 {ms:5.2f} ms  ({ms / shipped:.2f}x){diff}")
    shares = ", ".join(f"{op} {share:.0%}" for op, share in operator_shares(onnx, inputs))
    print(f"shipped session's kernel time: {shares}")


if __name__ == "__main__":
    main()
