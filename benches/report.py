"""Measure tokens, routing quality and speed, and write ``docs/results.md`` and the README's
results table from the measurements.

    .venv/bin/python -m benches.report            # make bench-report
    .venv/bin/python -m benches.report --no-speed # tokens and quality only (a few minutes)
    .venv/bin/python -m benches.report --render   # rewrite the text from the stored JSON

Measurements are stored as JSON (with the plots) in ``benches/results/``; the text is rendered
from that JSON alone, so ``--render`` rewrites ``docs/results.md`` and the README text between
``<!-- results:start -->`` and ``<!-- results:end -->`` without measuring anything. Queries are
subsampled (seeded) so the whole run stays within minutes on two cores; the sample sizes are
printed with the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benches import front, mcp_tasks, quality, tokens
from benches.plain import PlainCosine
from benches.tables import markdown
from benches.testbed import table2_tasks, table2_tools
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery, load_queries
from toolgate.routing.router import Router, RouterConfig

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benches" / "results"
DOCS_RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
PACKAGES = ("toolgate-router", "numpy", "onnxruntime", "tokenizers", "tiktoken", "faiss-cpu")
REAL_CATALOGS = (
    ("github-mcp-server", "github-mcp-server.tools-list.json"),
    ("mcpm-registry", "mcpm-registry.jsonl"),
    ("docker-mcp-registry", "docker-mcp-registry.jsonl"),
)


def environment() -> str:
    """CPU model, cores and package versions, for the stamp on every output."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        + ", ".join(versions)
        + f"; generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


TOKEN_COLUMNS = (
    "method", "schemas shown", "complete", "cl100k first turn", "cl100k steady",
    "cl100k steady cached", "o200k steady", "rho@30",
)  # fmt: skip


def _split(items: Sequence[Any], n: int) -> tuple[list[Any], list[Any]]:
    """Curation half and a sample of ``n`` from the evaluation half (disjoint)."""
    curation, held_out = list(items[0::2]), list(items[1::2])
    return curation, quality.sample(held_out, n)


def _dev_queries() -> list[LabelledQuery]:
    """Unlabelled turns for the real catalogs: queries of the dev sets, gold dropped."""
    out: list[LabelledQuery] = []
    for eval_set in quality.eval_sets(DATA / "eval"):
        drawn, _ = quality.load_sample(eval_set, 400)
        out += [LabelledQuery(q.qid, q.query, ()) for q in drawn]
    return out


def token_workload(
    name: str,
    catalog: Catalog,
    queries: Sequence[LabelledQuery],
    embedder: Embedder,
    n: int,
) -> dict[str, Any]:
    """The token table of one catalog: every method over ``n`` held-out queries."""
    # B3 and Tool Attention rank by plain cosine, with none of toolgate's ranking steps.
    cosine = PlainCosine(catalog, embedder)
    default = Router.from_catalog(catalog, embedder=embedder)
    curation, held_out = _split(queries, n)
    labelled = any(q.gold for q in queries)
    picks = (
        [tokens.gold_ids(catalog, q.gold) for q in curation]
        if labelled
        else [default.route(q.query).ids for q in curation]
    )
    curated = tokens.curate(catalog, picks)
    build = tokens.method_requests(catalog, cosine, default, curated)
    rows = tokens.account(catalog, ((q.query, q.gold) for q in held_out), build)
    return {"catalog": name, "tools": len(catalog), "queries": len(held_out),
            "labelled": labelled, "rows": rows}  # fmt: skip


def measure_tokens(embedder: Embedder, n: int) -> list[dict[str, Any]]:
    """Token accounting on the testbed, the real catalogs and BFCL's catalog."""
    workloads = []
    tasks = [LabelledQuery(t.qid, t.query, t.gold) for t in table2_tasks()]
    testbed = Catalog.from_tools(table2_tools())
    workloads.append(token_workload("synthetic testbed (Table 2)", testbed, tasks, embedder, n))
    dev = _dev_queries()
    for name, file in REAL_CATALOGS:
        catalog, _ = quality.load_catalog(DATA / "catalogs" / file)
        workloads.append(token_workload(name, catalog, dev, embedder, n))
    bfcl = quality.eval_sets(DATA / "eval")[0]
    catalog, _ = quality.load_catalog(bfcl.tools)
    relevant = [q for q in load_queries(bfcl.queries) if q.gold]
    workloads.append(token_workload("bfcl-single-turn", catalog, relevant, embedder, n))
    return workloads


def token_text(workloads: list[dict[str, Any]]) -> str:
    """The token accounting section: what is counted, then one table per catalog."""
    parts = [
        "Tool-related tokens per request, one serialiser for every method "
        "(`benches/tokens.py`: the tool system text, then one compact OpenAI-function JSON "
        "line per definition); means over held-out queries. *complete*: share of labelled "
        "queries whose every gold tool has its full schema in the request (n/a: no gold in "
        "that catalog, or the model discovers tools itself). *steady cached*: the stable "
        f"prefix billed at {tokens.CACHE_READ_FACTOR:.0%} (cache reads), the rest in full; "
        "cache writes billed as ordinary input. *rho@30*: the paper's eq. 3 at turn 30 with "
        f"C_task = 30 x {tokens.TASK_TOKENS_PER_TURN} tokens, C_sys = {tokens.SYSTEM_TOKENS}, "
        "and the tool tokens in the window at that turn (one copy per stateless request; B4's "
        "`--list` output stays in the conversation). These assumptions give the paper's own "
        "rho for B1-B3 from its token figures. B3 and Tool Attention retrieve by plain MiniLM "
        "cosine between the query and each tool's `name: description` (the router's int8 "
        "model; none of toolgate's ranking steps: `benches/plain.py`), top-10; Tool Attention "
        f"adds the full summary pool and theta = {tokens.TOOL_ATTENTION_THRESHOLD}; its second "
        "row counts the pool without tool names, as the paper's reference code does (for "
        "comparison only: a model cannot ask for a tool it cannot name). B2's 30 "
        "tools are those most needed (or, without gold, most routed) on a curation half of "
        "the queries, disjoint from the evaluated ones. B4 assumes perfect discovery: one "
        "`--help` per gold tool (per best match when there is no gold).",
    ]
    for w in workloads:
        parts.append(
            f"\n**{w['catalog']}**: {w['tools']:,} tools, {w['queries']} held-out queries"
            + ("" if w["labelled"] else " (dev-set queries, no gold in this catalog)")
            + "\n\n"
            + markdown(w["rows"], TOKEN_COLUMNS)
        )
    return "\n".join(parts)


QUALITY_COLUMNS = (
    "set", "config", "queries", "recall@5", "recall@10", "complete@10", "ndcg@10", "mrr",
    "route_ms_p50", "irrelevant", "irrelevant_rejected",
)  # fmt: skip
CURVE_COLUMNS = (
    "threshold", "queries", "recall@10", "complete@10", "ndcg@10", "irrelevant",
    "irrelevant_rejected",
)  # fmt: skip


def measure_quality(embedder: Embedder, n: int) -> dict[str, Any]:
    """Quality per set and configuration, the BFCL threshold curve, the samples drawn and
    the defaults they were measured with."""
    rows: list[dict[str, Any]] = []
    curve: list[dict[str, Any]] = []
    samples = []
    for eval_set in quality.eval_sets(DATA / "eval"):
        catalog, skipped = quality.load_catalog(eval_set.tools)
        drawn, total = quality.load_sample(eval_set, n)
        samples.append({"set": eval_set.name, "queries": len(drawn), "of": total,
                        "tools": len(catalog), "skipped": skipped})  # fmt: skip
        routers = quality.routers_for(catalog, embedder)
        rows += quality.quality_rows(eval_set.name, routers, drawn)
        if eval_set.name.startswith("bfcl") and not curve:
            curve = quality.threshold_curve(routers["toolgate default"], drawn)
    tools, tasks = mcp_tasks.load()
    catalog = Catalog.from_tools(tools)
    samples.append({"set": mcp_tasks.NAME, "queries": len(tasks), "of": len(tasks),
                    "tools": len(catalog), "skipped": 0})  # fmt: skip
    rows += quality.quality_rows(mcp_tasks.NAME, quality.routers_for(catalog, embedder), tasks)
    default = RouterConfig()
    defaults = {"alpha": default.alpha, "threshold": default.threshold, "fusion": default.fusion,
                "clause_weight": default.clause_weight,
                "near_copy_cosine": default.near_copy_cosine,
                "row_centring": default.row_centring}  # fmt: skip
    return {"rows": rows, "curve": curve, "samples": samples, "defaults": defaults}


def quality_text(measured: dict[str, Any]) -> str:
    """The routing quality section: the table per set and configuration, and the curve."""
    d = measured["defaults"]
    notes = [
        f"{s['set']}: {s['queries']} of {s['of']} queries, {s['tools']:,} tools"
        + (f" ({s['skipped']} duplicate or invalid skipped)" if s["skipped"] else "")
        for s in measured["samples"]
    ]
    return (
        "`toolgate eval` figures at top_k = 10 (route_ms includes the int8 query embedding, "
        f"one thread). toolgate default is `RouterConfig()`: alpha {d['alpha']}, cosine "
        f"floor {d['threshold']}, {d['fusion']} fusion, clause weight "
        f"{d['clause_weight']}, near copies from cosine {d['near_copy_cosine']} moved "
        f"down, rows centred by {d.get('row_centring', 0.0)} of the catalog's mean. BM25 alone "
        "is BM25 over each tool's name, description, parameter text and server (the router's "
        "BM25 settings), the tools matching a query word; dense alone is plain MiniLM cosine "
        "on each tool's `name: description` (B3's ranking); both rank by their signal and "
        "nothing else of toolgate's (`benches/plain.py`). Samples (seeded): "
        + "; ".join(notes)
        + ".\n\n"
        + markdown(measured["rows"], QUALITY_COLUMNS)
        + "\n\nBFCL, toolgate default with the cosine floor swept (relevant queries: recall and "
        "completeness; irrelevant ones: share routed to nothing):\n\n"
        + markdown(measured["curve"], CURVE_COLUMNS)
        + "\n\n![threshold curve](../benches/results/threshold.png)"
    )


#: The methods whose tokens per turn the speed suite reports at every N.
SCALE_METHODS = ("B1 full schema", "Tool Attention", "toolgate default")


def measure_speed(row_counts: str) -> dict[str, Any]:
    """Run ``bench_route.py``: medians with ratios to the python pipeline, tokens per turn."""
    env = {**os.environ, "TOOLGATE_BENCH_N": row_counts}
    with tempfile.TemporaryDirectory(prefix="toolgate-report-") as scratch:
        output = Path(scratch) / "route.json"
        subprocess.run(
            [sys.executable, "-m", "pytest", str(ROOT / "benches" / "bench_route.py"), "-q",
             "-p", "no:cacheprovider", f"--benchmark-json={output}"],
            check=True, cwd=ROOT, env=env,
        )  # fmt: skip
        data = json.loads(output.read_text())
    rows: list[dict[str, Any]] = []
    by_n: dict[int, dict[str, float]] = {}
    token_rows: dict[int, dict[str, float]] = {}
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        by_n.setdefault(info["n"], {})[info["method"]] = bench["stats"]["median"]
        token_rows[info["n"]] = info["tokens_per_turn"]
    for n, methods in sorted(by_n.items()):
        reference = methods.get("python pipeline")
        for method, seconds in methods.items():
            rows.append({
                "N": n, "method": method, "median ms": round(seconds * 1e3, 4),
                "x python pipeline": round(seconds / reference, 3) if reference else None,
            })  # fmt: skip
    _plot_speed(by_n, token_rows)
    tokens_table = [{"N": n, **figures} for n, figures in sorted(token_rows.items())]
    return {"timings": rows, "tokens_per_turn": tokens_table, "machine": data["machine_info"]}


def speed_text(measured: dict[str, Any]) -> str:
    """The speed section: route cost by N against the peers, and tokens per turn by N."""
    return (
        "Median time per call (one thread; a shared 2-core machine, so read the ratios, "
        "which come from the same run). `toolgate route` is `Router.route` with the default "
        "configuration: it embeds every query (int8 model) and fuses dense and BM25 scores; "
        "the python pipeline embeds with ONNX Runtime fp32 and searches faiss `IndexFlatIP` "
        "over the same tool vectors; faiss and numpy rows are dense top-10 for a given vector. "
        "Real tools up to ~7,200, synthetic top-ups past that (`benches/bench_route.py`).\n\n"
        + markdown(measured["timings"], ("N", "method", "median ms", "x python pipeline"))
        + "\n\n![cost vs N](../benches/results/route_cost.png)\n\n"
        "Tokens per turn (cl100k, steady state) versus N:\n\n"
        + markdown(measured["tokens_per_turn"], ("N", *SCALE_METHODS))
        + "\n\n![tokens vs N](../benches/results/tokens_vs_n.png)"
    )


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4), dpi=100)


def _save(fig: Any, name: str) -> None:
    fig.tight_layout()
    fig.savefig(RESULTS / name)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _plot_speed(by_n: dict[int, dict[str, float]], token_rows: dict[int, dict[str, float]]) -> None:
    ns = sorted(by_n)
    fig, ax = _figure()
    for method in sorted({m for methods in by_n.values() for m in methods}):
        ax.loglog(ns, [by_n[n].get(method, float("nan")) * 1e3 for n in ns], marker="o",
                  label=method)  # fmt: skip
    ax.set(xlabel="tools (N)", ylabel="median ms per query", title="Route cost vs N")
    ax.legend(fontsize=7)
    _save(fig, "route_cost.png")
    fig, ax = _figure()
    for method in SCALE_METHODS:
        ax.loglog(ns, [token_rows[n][method] for n in ns], marker="o", label=method)
    ax.set(xlabel="tools (N)", ylabel="cl100k tokens per turn", title="Tool tokens vs N")
    ax.legend(fontsize=7)
    _save(fig, "tokens_vs_n.png")


def _plot_curve(curve: list[dict[str, Any]]) -> None:
    fig, ax = _figure()
    xs = [row["threshold"] for row in curve]
    for key in ("recall@10", "complete@10", "irrelevant_rejected"):
        ax.plot(xs, [row[key] for row in curve], marker="o", label=key)
    ax.set(xlabel="cosine floor", ylabel="share", title="BFCL: threshold trade-off")
    ax.legend(fontsize=7)
    _save(fig, "threshold.png")


def headline(workloads: list[dict[str, Any]]) -> str:
    """B1 -> toolgate and B1 -> Tool Attention on the testbed, with completeness."""
    rows = {r["method"]: r for r in workloads[0]["rows"]}
    b1, ta, tg = rows["B1 full schema"], rows["Tool Attention"], rows["toolgate default"]

    def cut(row: dict[str, Any]) -> str:
        return f"{1 - row['cl100k steady'] / b1['cl100k steady']:.1%}"

    b3 = rows["B3 simple retrieval"]
    return (
        f"On the Table 2 testbed: B1 sends {b1['cl100k steady']:,.0f} cl100k tokens per turn; "
        f"Tool Attention with its full summary pool counted sends {ta['cl100k steady']:,.0f} "
        f"({cut(ta)} less, complete {ta['complete']}), toolgate's default "
        f"{tg['cl100k steady']:,.0f} ({cut(tg)} less, complete {tg['complete']}), B3's top-10 "
        f"schemas {b3['cl100k steady']:,.0f} ({cut(b3)} less, complete {b3['complete']}). "
        "The paper's 47.3k -> 2.4k (95%) cannot include the summary pool its own section 4.4 "
        "puts at ~4.8k tokens for 120 tools."
    )


#: The catalogs of the README's token table, by their name in ``tokens.json``.
README_CATALOGS = {
    "synthetic testbed (Table 2)": "Table 2 testbed",
    "github-mcp-server": "GitHub MCP server",
    "bfcl-single-turn": "BFCL",
    "docker-mcp-registry": "Docker MCP registry",
}


README_TOKEN_COLUMNS = (
    "catalog", "tools", "every schema", "toolgate", "complete: toolgate / top-10 cosine",
)  # fmt: skip


def readme_summary(
    stamp: str,
    workloads: list[dict[str, Any]],
    measured_quality: dict[str, Any],
    measured_speed: dict[str, Any] | None,
    measured_front: dict[str, Any] | None = None,
) -> str:
    """The README's short results: tokens per turn, the default against top-10 retrieval,
    nDCG@10 per ranking, route time."""

    def steady(rows: dict[str, dict[str, Any]], method: str) -> str:
        return f"{rows[method]['cl100k steady']:,.0f}"

    def complete(rows: dict[str, dict[str, Any]], method: str) -> str:
        value = rows[method].get("complete")
        return "n/a" if value is None else f"{value:.2f}"

    tokens_rows = []
    for w in workloads:
        if w["catalog"] not in README_CATALOGS:
            continue
        rows = {r["method"]: r for r in w["rows"]}
        full = rows["B1 full schema"]["cl100k steady"]
        ours = rows["toolgate default"]["cl100k steady"]
        tokens_rows.append({
            "catalog": README_CATALOGS[w["catalog"]], "tools": w["tools"],
            "every schema": steady(rows, "B1 full schema"),
            "toolgate": f"{steady(rows, 'toolgate default')} ({1 - ours / full:.0%} less)",
            README_TOKEN_COLUMNS[-1]: (
                f"{complete(rows, 'toolgate default')} / {complete(rows, 'B3 simple retrieval')}"
                if w["labelled"] else "n/a"
            ),
        })  # fmt: skip
    by_set: dict[str, dict[str, Any]] = {}
    for row in measured_quality["rows"]:
        by_set.setdefault(row["set"], {})[row["config"]] = f"{row['ndcg@10']:.3f}"
    quality_rows = [{"set": name, **configs} for name, configs in by_set.items()]
    parts = [
        "Tool tokens per turn (cl100k, steady state) with every schema sent and with "
        "toolgate's default (the digest, its tool_search tool and the routed schemas); *complete* "
        "is the share of labelled queries whose every gold tool is shown in full:",
        markdown(tokens_rows, README_TOKEN_COLUMNS),
    ]
    if measured_front is not None:
        parts += [
            "The default against plain top-10 cosine retrieval with full schemas (B3), in "
            "tokens and completeness (± its standard error; every query with gold of a set of "
            f"at most {front.QUERIES:,}, a seeded {front.QUERIES:,} of a larger one); the whole "
            "front: [docs/results.md](docs/results.md#tokens-against-completeness):",
            markdown(front.front_rows(measured_front["sets"]), front.FRONT_COLUMNS),
        ]
    parts += [
        "Routing quality, nDCG@10 at top_k = 10 (seeded samples of up to "
        f"{max(s['queries'] for s in measured_quality['samples'])} queries per set):",
        markdown(quality_rows, ("set", *quality.RANKINGS)),
    ]
    if measured_speed is not None:
        n = max(row["N"] for row in measured_speed["timings"] if row["N"] <= 10_000)
        route = next(
            row for row in measured_speed["timings"]
            if row["N"] == n and row["method"] == "toolgate route"
        )  # fmt: skip
        parts.append(
            f"`Router.route` at N = {n:,} tools: {route['median ms']:.2f} ms median, query "
            f"embedding included, {route['x python pipeline']:.2f}x the time of a plain "
            "tokenizers + ONNX Runtime + faiss pipeline in the same run."
        )
    parts.append(
        f"Measured by `make bench-report` on {stamp}. Every table, the method and the "
        "plots: [docs/results.md](docs/results.md)."
    )
    return "\n\n".join(parts)


def write_readme(section: str) -> None:
    """Replace the README text between the markers (appended when absent)."""
    text = README.read_text(encoding="utf-8")
    block = f"{START}\n{section}\n{END}"
    if START in text and END in text:
        before, rest = text.split(START, 1)
        _, after = rest.split(END, 1)
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


def _load(name: str) -> Any:
    path = RESULTS / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"{path} is missing: run `make bench-report` to measure") from None


def render() -> str:
    """Write ``docs/results.md`` and the README's results from the JSON in ``RESULTS``."""
    meta = _load("report.json")
    workloads = _load("tokens.json")
    measured_quality = _load("quality.json")
    measured_speed = _load("route.json") if "speed" in meta["sections"] else None
    measured_front = _load("front.json") if "front" in meta["sections"] else None
    sections = [
        f"# Results\n\nGenerated by `make bench-report` on {meta['stamp']}.",
        headline(workloads),
        "## Token accounting\n\n" + token_text(workloads),
        "## Routing quality\n\n" + quality_text(measured_quality),
    ]
    if measured_front is not None:
        text = front.front_text(measured_front, markdown)
        sections.append("## Tokens against completeness\n\n" + text)
    if measured_speed is not None:
        sections.append("## Speed and scale\n\n" + speed_text(measured_speed))
    DOCS_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    DOCS_RESULTS.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    write_readme(
        readme_summary(meta["stamp"], workloads, measured_quality, measured_speed, measured_front)
    )
    return headline(workloads)


def _store(name: str, data: Any) -> None:
    (RESULTS / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _timed(label: str, step: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    print(f"[report] {label} ...", flush=True)
    out = step()
    print(f"[report] {label}: {time.perf_counter() - start:.0f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure every section (unless ``--render``), then write the results."""
    parser = argparse.ArgumentParser(prog="python -m benches.report", description=__doc__)
    parser.add_argument("--quality-queries", type=int, default=500, help="sampled per set")
    parser.add_argument("--token-queries", type=int, default=150, help="held out per catalog")
    parser.add_argument(
        "--front-queries",
        type=int,
        default=front.QUERIES,
        help="relevant queries per set for the front: a set with no more is measured whole",
    )
    parser.add_argument("--speed-n", default="120,1000,10000,100000", help="row counts")
    parser.add_argument("--no-speed", action="store_true", help="skip the speed suite")
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: rewrite the text from the JSON"
    )
    args = parser.parse_args(argv)
    if not args.render:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = environment()
        embedder = Embedder(precision=RouterConfig().precision, progress=False)
        workloads = _timed("tokens", lambda: measure_tokens(embedder, args.token_queries))
        _store("tokens.json", workloads)
        measured = _timed("quality", lambda: measure_quality(embedder, args.quality_queries))
        _store("quality.json", measured)
        _plot_curve(measured["curve"])
        sections = ["tokens", "quality"]
        measured_front = _timed(
            "front", lambda: front.measure_all(embedder, args.front_queries, RESULTS)
        )
        _store("front.json", measured_front)
        sections.append("front")
        if not args.no_speed:
            _store("route.json", _timed("speed", lambda: measure_speed(args.speed_n)))
            sections.append("speed")
        _store("report.json", {"stamp": stamp, "sections": sections})
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
