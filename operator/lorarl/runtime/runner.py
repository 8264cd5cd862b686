"""`lorarl run`: the probe endpoints, optional leader election, then the controller under kopf.

Without leader election kopf starts at once. With it, the process is a standby until it holds the
Lease: no controller, so no watches, no resync thread and no writes (``controller.Controller``
is built once the Lease is held, and starts in kopf's startup handler). Once it leads, a renewal thread keeps the Lease; if leadership is lost the process
exits at once with status 1, the way controller-runtime does, so the kubelet restarts it as a
standby and it can never write beside a new leader. On SIGTERM kopf stops, in-flight reconciles
finish, and only then is the Lease released, so the successor starts at its next retry.

kopf's own peering (KopfPeering objects, `--priority`) is not used for this: it pauses operators
that see a peer of higher priority, and peers of equal priority all freeze ("If two operators run
with the same priority, all operators issue a warning and freeze, leaving the cluster unserved",
docs.kopf.dev/en/latest/peering/); it does not elect exactly one replica.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf

from . import leader, metrics, metrics_auth, probes
from .kube import Api

log = logging.getLogger("lorarl.runner")


@dataclass(frozen=True)
class Election:
    namespace: str
    name: str
    identity: str
    timings: leader.Timings


@dataclass
class State:
    """What the probes report: the role, and whether kopf has started (its ready flag)."""

    role: str = "starting"  # standby | leader | single
    kopf_started: threading.Event = field(default_factory=threading.Event)
    kopf_liveness: str | None = None  # kopf's own liveness endpoint, on loopback

    def alive(self) -> tuple[bool, str]:
        if self.kopf_started.is_set() and self.kopf_liveness:
            ok, text = probes.forward(self.kopf_liveness)
            return ok, f"{self.role}: kopf {'alive' if ok else 'not alive'}: {text}"
        return True, f"{self.role}: alive"

    def ready(self) -> tuple[bool, str]:
        if self.role == "standby":
            return True, "standby: ready to take over"
        if self.kopf_started.is_set():
            return True, f"{self.role}: watching"
        return False, f"{self.role}: starting the operator"


def _loopback_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/healthz"


def _exit_now(message: str) -> None:
    """Stop every thread at once: a replica that may have lost the Lease must not write again."""
    log.critical(message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(1)


def _renew_or_exit(elector: leader.LeaseElector, stop: threading.Event) -> None:
    try:
        elector.keep_renewing(stop)
    except leader.LeadershipLost as err:
        _exit_now(f"lost leadership: {err}; exiting so that only the new leader writes (restarted, this replica becomes a standby)")
    except BaseException as err:  # noqa: BLE001 - an unknown state of the lease is a lost one
        _exit_now(f"lease renewal failed unexpectedly: {err!r}; exiting")


def operator_settings() -> kopf.OperatorSettings:
    """kopf's settings for what it still watches itself: CRDs and namespaces (its observers)."""
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    return settings


class RetryStart(Exception):
    """Raised by a controller's start when it should be tried again in ``delay`` seconds (kopf
    retries its startup handler, and reports the process ready only once one succeeded)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class Controller(Protocol):
    """What kopf runs: started in its startup handler, stopped in its cleanup handler; ``cached``
    is shown by its liveness endpoint."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def cached(self) -> dict[str, int]: ...


#: kopf's settings, which the controller holds only to hand to object_logger
Settings = kopf.OperatorSettings
#: builds the controller once this process may write, with kopf's settings
Build = Callable[[Settings], Controller]


def configure_logging(verbose: bool, log_format: str) -> None:
    """kopf's log format (plain, full or json) for the whole process: the "[namespace/name]" prefix
    of its object formatter on text lines; JSON lines carry the same reference as an "object" key."""
    fmt = getattr(kopf.LogFormat, log_format.upper())
    kopf.configure(verbose=verbose, log_format=fmt, log_prefix=fmt is not kopf.LogFormat.JSON, log_refkey="object")


def object_logger(body: dict[str, Any], settings: kopf.OperatorSettings) -> logging.LoggerAdapter:
    """kopf's own object logger, so that a line naming a job is formatted exactly as kopf's own
    lines; the local variant never posts a log line as a Kubernetes Event."""
    return kopf.LocalObjectLogger(body=body, settings=settings)  # type: ignore[arg-type]


def _register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    @kopf.on.startup(registry=registry, id="lorarl-start")
    def _start(**_: Any) -> None:
        try:
            controller.start()
        except RetryStart as err:
            raise kopf.TemporaryError(str(err), delay=err.delay) from None

    @kopf.on.cleanup(registry=registry, id="lorarl-stop")
    def _stop(**_: Any) -> None:
        controller.stop()

    @kopf.on.probe(registry=registry, id="cached")
    def _cached(**_: Any) -> dict[str, int]:  # kopf's liveness endpoint shows it
        return controller.cached()


def run(
    *,
    build: Build,
    namespaces: list[str],
    clusterwide: bool,
    liveness: str | None,
    metrics_port: int | None,
    kube: Api,
    election: Election | None,
    metrics_address: str = "0.0.0.0",
    metrics_authenticated: bool = True,
) -> None:
    """``build`` makes the controller, whose start and stop kopf's startup and cleanup handlers
    call: called once this process may write (it holds the Lease, or runs without election). /metrics answers only
    a bearer token allowed to `get /metrics` unless ``metrics_authenticated`` is False
    (runtime/metrics_auth.py)."""
    state = State(role="standby" if election else "single", kopf_liveness=_loopback_url() if liveness else None)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # kopf's liveness server: a line per probe
    server = probes.ProbeServer(liveness, state.alive, state.ready).start() if liveness else None
    if metrics_port:  # served by the standby too, so a scrape of either pod succeeds
        # authenticated by default: a TokenReview and a SubjectAccessReview per new token (cached)
        gate = metrics_auth.Gate(metrics_auth.KubeReviewer(kube.client)) if metrics_authenticated else None
        metrics_auth.serve(metrics_port, metrics_address, gate)
    metrics.LEADER.set(0 if election else 1)
    settings = operator_settings()
    registry = kopf.OperatorRegistry()
    # a registry of our own has none of the default one's login handlers: the kubernetes client's
    # configuration, as kopf's default (kopf.login_via_client), is what the rest of the operator uses too
    kopf.on.login(registry=registry, id="login-via-client")(kopf.login_via_client)
    # SIGTERM/SIGINT before kopf runs (kopf then installs its own handlers) stops a standby, and
    # kopf as soon as it starts. kopf gets a future of its own loop, which it awaits natively (for
    # a threading.Event it would park an executor thread that blocks its exit); the future is
    # resolved at cleanup too, else kopf waits 5 s for its waiter task as a "hung" task.
    loop = asyncio.new_event_loop()
    stop, stop_kopf = threading.Event(), loop.create_future()

    def resolve() -> None:
        if not stop_kopf.done():
            stop_kopf.set_result(None)

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        loop.call_soon_threadsafe(resolve)

    @kopf.on.cleanup(registry=registry, id="resolve-stop-flag")
    async def _resolve_stop_flag(**_: Any) -> None:
        resolve()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    elector, renewer, stop_renewing = None, None, threading.Event()
    try:
        if election:
            elector = leader.LeaseElector(kube.client, election.namespace, election.name, election.identity, election.timings)
            log.info(
                "leader election on the lease %s as %s (lease %gs, renew deadline %gs, retry %gs)",
                elector.describe,
                election.identity,
                *(getattr(election.timings, f) for f in ("lease_duration", "renew_deadline", "retry_period")),
            )
            if not elector.acquire(stop):
                log.info("stopped while a standby")
                return
            state.role = "leader"
            metrics.LEADER.set(1)
            renewer = threading.Thread(target=_renew_or_exit, args=(elector, stop_renewing), name="lorarl-lease", daemon=True)
            renewer.start()
        _register(registry, build(settings))
        kopf.run(
            loop=loop,
            registry=registry,
            settings=settings,
            standalone=True,  # no kopf peering: see the module docstring
            clusterwide=clusterwide,
            namespaces=namespaces,
            liveness_endpoint=state.kopf_liveness,
            ready_flag=state.kopf_started,  # set once the startup handler listed every kind
            stop_flag=stop_kopf,
        )
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        if renewer is not None and elector is not None:
            stop_renewing.set()
            renewer.join()
            elector.release()
        kube.close()  # its connections (the lease is released by now)
        if server is not None:
            server.stop()
        sys.stdout.flush()
