"""``toolgate gateway``: the gateway served by uvicorn, in one process or several workers.

Workers are separate processes that uvicorn starts by importing :func:`app_from_env`, so the
settings travel to them in an environment variable. They share each tools array's index
through the router store (memory-mapped files) and their metrics through
``PROMETHEUS_MULTIPROC_DIR``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolgate.browser_guard import host_pattern, is_loopback, origin_pattern, served_hosts
from toolgate.errors import InvalidInputError, ModelError
from toolgate.extras import needs_extra
from toolgate.gateway.app import Gateway
from toolgate.gateway.config import PROVIDERS, GatewayConfig, load_config
from toolgate.gateway.router_store import RouterStore
from toolgate.routing.learned_store import open_store
from toolgate.temporary_folders import scratch_folder

# Imported here, not where used: a missing one names the extra when this module is imported
# (``toolgate gateway`` imports it first), rather than a traceback later (or inside uvicorn's
# worker, importing the app).
with needs_extra("gateway", "toolgate.gateway"):
    import uvicorn

__all__ = ["KEEP_ALIVE_SECONDS", "ServeOptions", "app_from_env", "serve"]

_SETTINGS_ENV = "TOOLGATE_GATEWAY_SETTINGS"
# Where prometheus-client keeps each worker's metrics, for /metrics to sum them.
_METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
# How long an idle client connection stays open. Longer than clients keep idle connections
# in their pools (httpx, under the OpenAI, Anthropic and Google SDKs: 5 s), so the client
# always closes first: a server closing at the moment a client reuses the connection would
# fail that request.
KEEP_ALIVE_SECONDS = 75


@dataclass(frozen=True)
class ServeOptions:
    """What the command line says: where to listen, the upstreams, the config file."""

    host: str
    port: int
    upstreams: dict[str, str]
    config: Path | None = None
    top_k: int | None = None
    store: Path | None = None
    workers: int = 1
    no_auth: bool = False
    graceful_timeout: int = 10
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls,
        listen: str,
        upstreams: list[str],
        *,
        allow_hosts: list[str] | None = None,
        allow_origins: list[str] | None = None,
        **options: Any,
    ) -> ServeOptions:
        """Options from ``--listen HOST:PORT``, ``--upstream NAME=ORIGIN``, ``--allow-host``
        and ``--allow-origin`` (each repeated)."""
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInputError(f"--listen: expected HOST:PORT, got {listen!r}")
        parsed: dict[str, str] = {}
        for entry in upstreams:
            name, sep, origin = entry.partition("=")
            if not sep or name not in PROVIDERS:
                raise InvalidInputError(
                    f"--upstream: expected NAME=ORIGIN with NAME one of {list(PROVIDERS)}, "
                    f"got {entry!r}"
                )
            parsed[name] = origin
        hosts = tuple(host_pattern(name, "--allow-host") for name in allow_hosts or ())
        origins = tuple(origin_pattern(o, "--allow-origin") for o in allow_origins or ())
        return cls(
            host.strip("[]"), int(port), parsed, allow_hosts=hosts, allow_origins=origins,
            **options,
        )  # fmt: skip

    def gateway_config(self) -> GatewayConfig:
        """The config file's settings with the command line's on top; on a loopback address,
        the loopback names are among the ``Host`` names answered to."""
        config = load_config(self.config).with_overrides(
            upstreams=self.upstreams, top_k=self.top_k,
            allowed_hosts=self.allow_hosts, allowed_origins=self.allow_origins,
        )  # fmt: skip
        config = replace(config, allowed_hosts=served_hosts(self.host, config.allowed_hosts))
        if self.store is not None:
            config = replace(config, store=self.store)
        if config.store is None:
            from toolgate.embedding.model_files import toolgate_home

            # Saved indexes outlive a restart and are shared by the workers.
            config = replace(config, store=toolgate_home() / "gateway-routers")
        if not config.upstreams:
            raise InvalidInputError("no upstream: give --upstream NAME=ORIGIN (or [upstreams])")
        return config


def app_from_env() -> Any:
    """The ASGI app of the settings in ``TOOLGATE_GATEWAY_SETTINGS`` (uvicorn's factory in
    each worker)."""
    settings = json.loads(os.environ[_SETTINGS_ENV])
    options = ServeOptions(
        host=settings["host"], port=settings["port"], upstreams=settings["upstreams"],
        config=None if settings["config"] is None else Path(settings["config"]),
        top_k=settings["top_k"],
        store=None if settings["store"] is None else Path(settings["store"]),
        allow_hosts=tuple(settings["allow_hosts"]), allow_origins=tuple(settings["allow_origins"]),
    )  # fmt: skip
    return Gateway(options.gateway_config()).app


def _log_config() -> dict[str, Any]:
    """uvicorn's logging, with toolgate's lines (``toolgate.*``: each request, a client gone,
    prewarm, warnings) written as uvicorn writes its own, and no traceback for a request cut
    as the server stops, nor for an answer cut as its upstream broke off (the gateway logs
    that in a line). toolgate's went to the root logger, which has no handler: the INFO
    lines were lost (with uvicorn's access log off, a request left no line at all) and the
    warnings came out bare, without their level."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["toolgate"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    # A request still running when the graceful timeout ends is cut (uvicorn says so in one
    # line), not an error with a traceback. uvicorn cancels a request's task only then.
    filters = config.setdefault("filters", {})
    filters["not_cancelled"] = {"()": "toolgate.asgi.NotCancelled"}
    filters["not_cut"] = {"()": "toolgate.asgi.NotCut"}
    config["loggers"]["uvicorn.error"]["filters"] = ["not_cancelled", "not_cut"]
    return config


def _check_model(config: GatewayConfig) -> str:
    """The embedding model's id, or the :class:`ModelError` that says how to prepare it unless
    it is in place and passes its checksums: every filtered request needs it, so without it
    the gateway would listen only to fail them all. Reads the files (a tenth of a second),
    builds no session."""
    from toolgate.embedding.models import load

    try:
        return load(config.router.precision).model_id
    except ModelError as exc:
        raise ModelError(f"the gateway needs its embedding model: {exc}") from None


def _check_metrics_folder() -> None:
    """Check the folder ``PROMETHEUS_MULTIPROC_DIR`` names, if set. Set, even empty, the
    client library keeps each process's metrics in files there (an empty one: the working
    directory): a folder no worker can write to fails each one as it makes its metrics, and
    uvicorn starts them again for ever."""
    folder = os.environ.get(_METRICS_ENV)
    if folder is None:
        return
    if not folder or not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInputError(
            f"{_METRICS_ENV} {folder!r}: not a folder the gateway can write its metrics to "
            "(create it, or unset the variable)"
        )


@contextmanager
def _metrics_folder(workers: int) -> Iterator[None]:
    """For several workers and no ``PROMETHEUS_MULTIPROC_DIR``, the variable set to a new
    temporary folder while inside, the folder removed after (each start left one in /tmp).
    A folder the user named is theirs: kept."""
    if workers == 1 or _METRICS_ENV in os.environ:
        yield
        return
    with scratch_folder("toolgate-metrics-", or_set=_METRICS_ENV) as folder:
        made = os.environ[_METRICS_ENV] = str(folder)
        try:
            yield  # uvicorn returns once its workers have stopped, writing there no more
        finally:
            if os.environ.get(_METRICS_ENV) == made:
                del os.environ[_METRICS_ENV]


def serve(options: ServeOptions) -> None:
    """Serve until a signal; checks the settings (and the key rule), the keys, the learned
    store and the embedding model before listening."""
    config = options.gateway_config()  # every settings error before the port opens
    if not is_loopback(options.host) and config.auth_token_env is None and not options.no_auth:
        raise InvalidInputError(
            f"--listen {options.host}: a host other than loopback needs auth_token_env in "
            "the config (clients then send that token) or --no-auth"
        )
    config.auth_token()
    for upstream in config.upstreams.values():
        upstream.api_key()
    _check_metrics_folder()
    if config.learn is not None:  # a store that cannot be opened stops the start
        open_store(config.learn).close()
    model_id = _check_model(config)
    if config.store is not None:  # made and written to now, not at the first request
        RouterStore(Path(config.store), max_stored=1).check(model_id)
    os.environ[_SETTINGS_ENV] = json.dumps(
        {
            "host": options.host, "port": options.port, "upstreams": options.upstreams,
            "config": None if options.config is None else str(options.config.resolve()),
            "top_k": options.top_k,
            "store": None if config.store is None else str(Path(config.store).resolve()),
            "allow_hosts": options.allow_hosts, "allow_origins": options.allow_origins,
        }
    )  # fmt: skip
    with _metrics_folder(options.workers):
        uvicorn.run(
            "toolgate.gateway.serve:app_from_env",
            factory=True,
            host=options.host,
            port=options.port,
            workers=options.workers,
            access_log=False,  # it would log query strings, where Gemini clients may put a key
            log_config=_log_config(),
            log_level="info",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            # After a signal, requests still running (a long stream, an index being built)
            # get this long, then are cancelled: the process stops within it, never hangs.
            timeout_graceful_shutdown=options.graceful_timeout,
        )
