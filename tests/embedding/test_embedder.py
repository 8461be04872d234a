"""Embedder: parity with sentence-transformers, batching, input checking, threads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import toolgate
from tests.shared_data import SHARED
from toolgate.embedding import long_texts, models
from toolgate.embedding.embedder import Embedder

REFERENCE = SHARED / "reference" / "minilm-l6-v2.sentence-transformers.json"


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert len(data["items"]) == 40
    return data


@pytest.fixture(scope="module")
def fp32() -> Embedder:
    models.ensure()
    return Embedder("fp32")


@pytest.fixture(scope="module")
def int8() -> Embedder:
    models.ensure()
    return Embedder("int8")


def _cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    ours64 = ours.astype(np.float64)
    theirs64 = theirs.astype(np.float64)
    return np.einsum("ij,ij->i", ours64, theirs64) / (
        np.linalg.norm(ours64, axis=1) * np.linalg.norm(theirs64, axis=1)
    )


def test_wordpiece_ids_match_reference(fp32: Embedder, reference: dict[str, Any]) -> None:
    for item in reference["items"]:
        assert fp32.token_ids(item["text"]) == item["input_ids"], item["text"]


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_fp32_parity(fp32: Embedder, reference: dict[str, Any], batched: bool) -> None:
    texts = [item["text"] for item in reference["items"]]
    expected = np.array([item["embedding"] for item in reference["items"]])
    got = fp32.embed(texts) if batched else np.vstack([fp32.embed([t]) for t in texts])
    cosines = _cosines(got, expected)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.99999, (texts[worst], cosines[worst])


def test_int8_parity(int8: Embedder, reference: dict[str, Any]) -> None:
    texts = [item["text"] for item in reference["items"]]
    expected = np.array([item["embedding"] for item in reference["items"]])
    cosines = _cosines(np.vstack([int8.embed([t]) for t in texts]), expected)
    # The worst are the degenerate texts ("", " ", "xxx..."): 0.978 with layer 0's feed-forward
    # output in float32 (`onnx_export.INT8_KEEP_FP32`); every sentence is above 0.99.
    assert cosines.min() >= 0.975, (texts[int(np.argmin(cosines))], cosines.min())
    assert cosines.mean() >= 0.99


@pytest.mark.parametrize("threads", [1, 2])
def test_int8_vector_does_not_depend_on_the_batch(
    int8: Embedder, reference: dict[str, Any], threads: int
) -> None:
    # Dynamic quantization picks activation scales per run; a text's vector must still be the
    # same alone and amid a batch, or cached and fresh vectors would disagree.
    texts = [item["text"] for item in reference["items"]]
    single = np.vstack([int8.embed([t]) for t in texts])
    batched = Embedder("int8", threads=threads).embed(texts)
    np.testing.assert_allclose(batched, single, atol=1e-6)


def test_output_contract(fp32: Embedder) -> None:
    out = fp32.embed(["alpha", "a much longer text about routing tools", "", "beta"])
    assert out.shape == (4, 384)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out.astype(np.float64), axis=1), 1.0, atol=1e-5)
    assert fp32.dim == 384


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_embed_tokens_gives_the_same_vector_and_every_token_state(
    precision: str, fp32: Embedder, int8: Embedder
) -> None:
    embedder = fp32 if precision == "fp32" else int8
    text = "Find flights to Paris, then book a hotel near the Louvre."
    tokens = embedder.embed_tokens(text)
    np.testing.assert_array_equal(tokens.vector, embedder.embed([text])[0])
    n = len(embedder.token_ids(text))
    assert tokens.states.shape == (n, 384)
    assert tokens.states.dtype == np.float32
    assert len(tokens.offsets) == n
    assert tokens.offsets[0] == tokens.offsets[-1] == (0, 0)  # [CLS], [SEP]
    assert text[slice(*tokens.offsets[1])].lower() == "find"
    # The graph's sentence embedding is the normalised mean of these very states.
    mean = tokens.states.mean(axis=0)
    np.testing.assert_allclose(mean / np.linalg.norm(mean), tokens.vector, atol=1e-5)
    with pytest.raises(toolgate.InvalidInputError, match="expected str"):
        embedder.embed_tokens(b"bytes")  # type: ignore[arg-type]


def test_order_preserved_across_buckets(fp32: Embedder) -> None:
    # Texts of very different lengths land in different length buckets; rows must still come
    # back in input order and equal the one-at-a-time vectors.
    texts = [("word " * n).strip() for n in (40, 1, 17, 3, 60, 2, 9)]
    small_batches = Embedder("fp32", batch_size=2)
    together = small_batches.embed(texts)
    alone = np.vstack([fp32.embed([t]) for t in texts])
    assert _cosines(together, alone).min() >= 0.99999


def test_str_is_one_text_and_empty_list_is_empty(fp32: Embedder) -> None:
    np.testing.assert_array_equal(fp32.embed("hello"), fp32.embed(["hello"]))
    empty = fp32.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


def test_truncates_at_256_tokens(fp32: Embedder) -> None:
    long_text = "token " * 1000
    assert len(fp32.token_ids(long_text)) == 256
    longer = fp32.embed([long_text + "tail words that fall past the limit"])
    np.testing.assert_allclose(longer, fp32.embed([long_text]), atol=1e-6)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (["ok", 3], "texts[1] is int"),
        ([None], "texts[0] is NoneType"),
        (b"bytes", "got bytes"),
        (42, "got int"),
    ],
)
def test_bad_texts_are_rejected(fp32: Embedder, bad: Any, fragment: str) -> None:
    with pytest.raises(toolgate.InvalidInputError, match=re.escape(fragment)):
        fp32.embed(bad)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"precision": "fp16"}, "precision"),
        ({"threads": 0}, "threads"),
        ({"batch_size": 0}, "batch_size"),
        ({"cache": 3.5}, "cache"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(toolgate.InvalidInputError, match=fragment):
        Embedder(**kwargs)


def test_model_id_names_precision(fp32: Embedder, int8: Embedder) -> None:
    assert fp32.model_id != int8.model_id
    assert ":fp32:" in fp32.model_id
    assert ":int8:" in int8.model_id
    assert Embedder("fp32").model_id == fp32.model_id


def test_two_threads_give_the_same_vectors(fp32: Embedder) -> None:
    two = Embedder("fp32", threads=2)
    texts = [f"tool number {i} fetches record {i * 7}" for i in range(50)]
    np.testing.assert_allclose(two.embed(texts), fp32.embed(texts), atol=1e-5)


def test_concurrent_calls_from_threads(int8: Embedder) -> None:
    texts = [f"query {i} about calendars and email" for i in range(64)]
    expected = np.vstack([int8.embed([t]) for t in texts])
    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = list(pool.map(lambda t: int8.embed([t])[0], texts))
    np.testing.assert_array_equal(np.vstack(rows), expected)


def test_progress_bar_on_request(fp32: Embedder, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = Embedder("fp32", progress=True)
    quiet.embed(["one", "two", "three"])
    assert "embedding" in capsys.readouterr().err


def test_import_toolgate_does_not_load_onnxruntime() -> None:
    code = (
        "import sys, toolgate; "
        "assert 'onnxruntime' not in sys.modules and 'tiktoken' not in sys.modules; "
        "assert toolgate.Embedder.__name__ == 'Embedder'; "
        "assert 'onnxruntime' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lone_surrogates_are_replaced_not_fatal(int8: Embedder) -> None:
    # json.loads of a reply cut inside an emoji leaves a lone surrogate in the str.
    cut = json.loads('"post the \\ud83d message"')
    repaired = int8.embed([cut, "x\udfff"])
    expected = int8.embed(["post the \ufffd message", "x\ufffd"])
    np.testing.assert_array_equal(repaired, expected)
    assert int8.embed_tokens(cut).states.shape[1] == 384
    joined = int8.embed("\ud83d\ude00")  # a pair written as two code points is its character
    np.testing.assert_array_equal(joined, int8.embed("😀"))


@pytest.mark.parametrize("threads", [True, 0, 2**31])
def test_thread_counts_are_checked(threads: Any) -> None:
    with pytest.raises(
        toolgate.InvalidInputError, match=r"threads must be an integer in \[1, 4096\]"
    ):
        Embedder("int8", threads=threads)


class _ReadLengths:
    """Wraps a tokenizer and records the length of every text it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lengths: list[int] = []

    def encode(self, text: str) -> Any:
        self.lengths.append(len(text))
        return self.inner.encode(text)

    def encode_batch(self, texts: list[str]) -> Any:
        self.lengths.extend(len(text) for text in texts)
        return self.inner.encode_batch(texts)


def test_a_long_text_is_tokenized_only_as_far_as_the_model_reads(
    int8: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 4 MB query took 530 MB and 7 s to tokenize whole, for the 256 tokens the model reads.
    tokenizer = int8._tokenizer
    spy = _ReadLengths(tokenizer)
    monkeypatch.setattr(int8, "_tokenizer", spy)
    text = "open an issue about the crash, then tell the team " * 20_000  # 1 MB
    tokens = int8.embed_tokens(text)
    assert int8.token_ids(text) == tokenizer.encode(text).ids
    assert tokens.offsets == tuple(tuple(pair) for pair in tokenizer.encode(text).offsets)
    batch = int8.embed([text, "short text", "x" * 500_000])
    assert max(spy.lengths) <= long_texts.PREFIX_CHARS
    np.testing.assert_array_equal(batch[0], tokens.vector)
    np.testing.assert_array_equal(batch[1], int8.embed("short text")[0])


@pytest.mark.parametrize(
    "unit",
    [
        "list the files, then email them to bob. ",
        "日本語のテキストを読む。",  # no white space: the cuts fall inside words
        "antidisestablishmentarianism" * 5 + " ",  # words past WordPiece's 100 characters
        "a\u200bb\x00c\u0301 (d) ",  # characters the normaliser drops or strips
    ],
)
def test_tokens_read_by_prefix_are_the_whole_texts(fp32: Embedder, unit: str) -> None:
    tokenizer = fp32._tokenizer
    for repeats in (1, 700, 7_000):
        text = unit * repeats
        whole, read = tokenizer.encode(text), long_texts.encode(tokenizer, text)
        assert (read.ids, read.offsets) == (whole.ids, whole.offsets), len(text)


def test_tokens_past_the_longest_prefix_are_not_read(fp32: Embedder) -> None:
    # 131,072 characters of white space hold no token: what follows them is not read.
    text = " " * long_texts.PREFIX_CHARS + "tail"
    assert fp32.token_ids(text) == fp32.token_ids("")
