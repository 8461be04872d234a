"""The child process of the file campaigns: reads mutated index, BM25 and router files.

Run as ``python -m tests.fuzz.file_worker CAMPAIGN DIR SEED``. Every case is one mutation of a
real file; the reader must answer with a result or a ``ToolgateError``. Anything else (another
exception, a case slower than :data:`CASE_SECONDS`) is printed as a finding; a crash (SIGBUS,
abort) kills this process, and the parent reports the last case it announced. The last line
of output is a JSON summary: cases run, errors by class, findings.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from toolgate import Index, ToolgateError
from toolgate._toolgate import Bm25

CASE_SECONDS = 5.0

Mutation = tuple[str, Callable[[bytearray], bytearray]]


class Campaign:
    """Runs cases, counting outcomes and collecting findings."""

    def __init__(self) -> None:
        self.cases = 0
        self.outcomes: Counter[str] = Counter()
        self.findings: list[str] = []

    def run(self, label: str, case: Callable[[], object]) -> None:
        # Announced first: if the case kills the process, the parent names it.
        print(f"case {label}", flush=True)
        self.cases += 1
        start = time.perf_counter()
        try:
            case()
            self.outcomes["ok"] += 1
        except ToolgateError as exc:
            self.outcomes[type(exc).__name__] += 1
        except Exception as exc:  # the finding: an exception outside the tree
            self.findings.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
        elapsed = time.perf_counter() - start
        if elapsed > CASE_SECONDS:
            self.findings.append(f"{label}: took {elapsed:.1f} s")

    def summary(self) -> str:
        return json.dumps(
            {"cases": self.cases, "outcomes": dict(self.outcomes), "findings": self.findings}
        )


def _put(data: bytearray, at: int, value: int, size: int) -> bytearray:
    data[at : at + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    return data


def _reseal_matrix(data: bytearray) -> bytearray:
    """Both CRCs of a matrix file recomputed, so the checks behind them are reached."""
    if len(data) >= 128:
        data[104:108] = struct.pack("<I", zlib.crc32(bytes(data[128:])))
        header = bytearray(data[:128])
        header[108:112] = b"\0\0\0\0"
        data[108:112] = struct.pack("<I", zlib.crc32(bytes(header)))
    return data


def _reseal_bm25(data: bytearray) -> bytearray:
    if len(data) >= 32:
        data[24:28] = struct.pack("<I", zlib.crc32(bytes(data[32:])))
    return data


_EDGE_VALUES = (0, 1, 2, 7, 63, 64, 65, 255, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1)


def mutations(good: bytes, rng: random.Random, reseal: Callable[[bytearray], bytearray],
              fields: list[tuple[int, int]], flips: int) -> Iterator[Mutation]:  # fmt: skip
    """Truncation at every byte of the first 512 and every 8th after, growth, bit flips with
    and without resealed checksums, and every header field set to edge values."""
    for length in [*range(min(len(good), 512)), *range(512, len(good), 8)]:
        yield f"cut at {length}", lambda b, n=length: b[:n]
    yield "one byte more", lambda b: b + b"\0"
    for i in range(flips):
        at, bit = rng.randrange(len(good)), rng.randrange(8)

        def flip(b: bytearray, at: int = at, bit: int = bit) -> bytearray:
            b[at] ^= 1 << bit
            return b

        yield f"flip {at}.{bit}", flip
        if i % 2 == 0:
            yield f"flip {at}.{bit} resealed", lambda b, f=flip: reseal(f(b))
    for at, size in fields:
        for value in _EDGE_VALUES:
            yield f"field {at} = {value}", lambda b, a=at, v=value, s=size: reseal(_put(b, a, v, s))


# (offset, size) of every header field of a matrix file (rust/matrix_file.rs) and a BM25 file.
MATRIX_FIELDS = [(8, 4), (12, 4), (16, 4), (20, 4), (24, 8), (32, 4), (36, 4), (40, 4), (44, 4)]
MATRIX_FIELDS += [(48 + 8 * i, 8) for i in range(7)]
BM25_FIELDS = [(8, 4), (16, 8), *[(32 + 4 * i, 4) for i in range(6)], (56, 8), (64, 8), (72, 8)]


def _use_index(index: Index) -> None:
    query = np.linspace(-1, 1, index.dim, dtype=np.float32)
    index.search(query, 5, flags=[0, 1, 70])
    index.search_gated(query, None, threshold=0.0)
    index.search_batch(np.stack([query, -query]), 3)
    index.scores(query)
    index.vectors([0, len(index) - 1]) if len(index) else None
    index.ids  # noqa: B018
    index.required_flags(0) if len(index) else None


def matrix_campaign(directory: Path, seed: int, flips: int) -> Campaign:
    campaign = Campaign()
    rng = random.Random(seed)
    vectors = np.random.default_rng(seed).standard_normal((65, 7)).astype(np.float32)
    masks = [[i % 70] for i in range(65)]
    for dtype in ("f32", "int8", "bf16"):
        source = directory / f"good-{dtype}.tgm"
        Index.build(source, vectors, dtype=dtype, masks=masks, model_id="fuzz")
        good = source.read_bytes()
        target = directory / f"case-{dtype}.tgm"
        for label, mutate in mutations(good, rng, _reseal_matrix, MATRIX_FIELDS, flips):
            target.write_bytes(bytes(mutate(bytearray(good))))
            for verify in (True, False):

                def case(verify: bool = verify, target: Path = target) -> None:
                    _use_index(Index.open(target, verify=verify, threads=2))

                campaign.run(f"matrix {dtype} {label} verify={verify}", case)
        # Changed in place while open: the open index must refuse, never fault.
        for label, mutate in mutations(good, rng, _reseal_matrix, [], flips // 4):
            shutil.copyfile(source, target)
            index = Index.open(target)

            def changed(
                mutate: Callable[[bytearray], bytearray] = mutate,
                index: Index = index,
                good: bytes = good,
                target: Path = target,
            ) -> None:
                data = bytes(mutate(bytearray(good)))
                if len(data) == len(good):
                    # A later mtime, as any real rewrite has: file times tick every few ms.
                    time.sleep(0.01)
                with target.open("r+b") as out:  # in place, like cp: same inode
                    out.truncate(0)
                    out.write(data)
                _use_index(index)

            campaign.run(f"matrix {dtype} changed while open: {label}", changed)
    return campaign


def bm25_campaign(directory: Path, seed: int, flips: int) -> Campaign:
    campaign = Campaign()
    rng = random.Random(seed)
    documents = [
        {"name": f"tool_{i}", "server": "s", "description": f"does thing {i} with files"}
        for i in range(12)
    ]
    source = directory / "good.tgb"
    Bm25.build(documents).save(source)
    good = source.read_bytes()
    target = directory / "case.tgb"
    for label, mutate in mutations(good, rng, _reseal_bm25, BM25_FIELDS, flips):
        target.write_bytes(bytes(mutate(bytearray(good))))

        def case() -> None:
            bm25 = Bm25.load(target)
            bm25.scores("thing files tool_3")
            bm25.mentioned_names("use tool_3 and tool_11")

        campaign.run(f"bm25 {label}", case)
    return campaign


def main() -> None:
    name, directory, seed, flips = (
        sys.argv[1],
        Path(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    campaigns = {"matrix": matrix_campaign, "bm25": bm25_campaign}
    if name == "router":
        from tests.fuzz.router_cases import router_campaign

        campaign = router_campaign(directory, seed, flips, Campaign, mutations)
    else:
        campaign = campaigns[name](directory, seed, flips)
    print(campaign.summary(), flush=True)
    os._exit(0)  # past interpreter teardown: only the campaign's own outcome counts


if __name__ == "__main__":
    main()
