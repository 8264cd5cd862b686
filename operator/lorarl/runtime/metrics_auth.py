"""Authenticated /metrics (issue 35, point 6): every scrape's bearer token is checked with a
TokenReview, and the user it names is then authorized with a SubjectAccessReview for the
nonResourceURL ``/metrics``, verb ``get``. The per-job series name every tenant's jobs, phases and
GPU-hours: only who may `get /metrics` (the chart's ClusterRole
``<release>-lorarl-operator-metrics-reader``, bound to Prometheus) reads them.

This is what controller-runtime's metrics filter does (sigs.k8s.io/controller-runtime@v0.23.3
pkg/metrics/filters/filters.go ``WithAuthenticationAndAuthorization``: a delegating authenticator
on TokenReviews, anonymous off, then a delegating authorizer on SubjectAccessReviews with the
request's lower-cased method as the verb and its URL path as the path; 401 "Unauthorized" when
the token is not authenticated, 403 when the user is not allowed, 500 when a review cannot be
made) and kube-rbac-proxy before it. Its caches: authentication 1 min, authorization allowed 5 min
and denied 30 s. Here one cache holds the decision per token (keyed by its SHA-256, never the
token itself): allowed for ``ALLOW_TTL`` (60 s), refused for ``DENY_TTL`` (10 s). A Prometheus
scraping every 15 s so costs two API calls a minute, not eight; a revoked binding or token is
seen within a minute. A review that fails (the API server unreachable) is a 500 and not cached.

The server speaks plain HTTP (the operator has no serving certificate): the token crosses the pod
network in clear, so the chart's NetworkPolicy admits only the monitoring namespace's Prometheus to
this port (docs/security.md), and the token Prometheus sends is worth only `get /metrics`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app

log = logging.getLogger("lorarl.metrics")

ALLOW_TTL = 60.0
DENY_TTL = 10.0
MAX_ENTRIES = 1024
PATH = "/metrics"
VERB = "get"

# (status, reason) -> the WSGI status line and a body of ours
ANSWERS = {401: "401 Unauthorized", 403: "403 Forbidden", 500: "500 Internal Server Error"}


class DecisionCache:
    """Token hash -> (deadline, HTTP status of the decision), bounded, least recently used out."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_entries: int = MAX_ENTRIES) -> None:
        self._clock, self._max = clock, max_entries
        self._entries: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> int | None:
        key = self.key(token)
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, token: str, status: int) -> None:
        ttl = ALLOW_TTL if status == 200 else DENY_TTL
        with self._lock:
            self._entries[self.key(token)] = (self._clock() + ttl, status)
            self._entries.move_to_end(self.key(token))
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)


class ReviewError(Exception):
    """A review could not be made (the API server refused or did not answer)."""


class KubeReviewer:
    """The two reviews, with the kubernetes client (its ApiClient: the operator's credentials;
    the chart grants `create` on tokenreviews and subjectaccessreviews)."""

    def __init__(self, api_client: Any) -> None:
        import kubernetes

        self._authn = kubernetes.client.AuthenticationV1Api(api_client)
        self._authz = kubernetes.client.AuthorizationV1Api(api_client)
        self._api_exception = kubernetes.client.exceptions.ApiException

    def authenticate(self, token: str) -> dict[str, Any] | None:
        """The user the token names (TokenReview status.user), or None when not authenticated."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = self._post(self._authn.create_token_review, body)
        return (status.get("user") or {}) if status.get("authenticated") else None

    def authorize(self, user: dict[str, Any]) -> bool:
        """SubjectAccessReview of `get /metrics` for the user, groups, uid and extra the
        TokenReview returned (as the API server's own delegated authorizer sends them)."""
        spec: dict[str, Any] = {"user": user.get("username", ""), "nonResourceAttributes": {"path": PATH, "verb": VERB}}
        for key in ("groups", "uid", "extra"):
            if user.get(key):
                spec[key] = user[key]
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return bool(self._post(self._authz.create_subject_access_review, body).get("allowed"))

    def _post(self, create: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = create(body=body, _preload_content=False, _request_timeout=10)
            return json.loads(answer.data).get("status") or {}
        except self._api_exception as err:
            raise ReviewError(f"{err.status} {err.reason}") from None
        except Exception as err:  # noqa: BLE001 - no answer at all (connection, timeout): a 500, retried at the next scrape
            raise ReviewError(f"{type(err).__name__}: {err}") from None


class Gate:
    """The decision for one request's Authorization header: 200, 401, 403 or 500."""

    def __init__(self, reviewer: Any, cache: DecisionCache | None = None) -> None:
        self.reviewer, self.cache = reviewer, cache or DecisionCache()

    def decide(self, authorization: str | None) -> int:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401
        cached = self.cache.get(token)
        if cached is not None:
            return cached
        try:
            user = self.reviewer.authenticate(token)
            status = 401 if user is None else (200 if self.reviewer.authorize(user) else 403)
        except ReviewError as err:
            log.warning("could not review a /metrics request: %s", err)
            return 500
        if status == 403:
            log.info("/metrics refused to %s: not allowed to get %s", (user or {}).get("username", "?"), PATH)
        self.cache.put(token, status)
        return status


def guarded(app: Callable[..., Iterable[bytes]], gate: Gate) -> Callable[..., Iterable[bytes]]:
    """The WSGI app behind the gate: only an allowed request reaches ``app``."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status = gate.decide(environ.get("HTTP_AUTHORIZATION"))
        if status == 200:
            return app(environ, start_response)
        line = ANSWERS[status]
        body = (line.split(" ", 1)[1] + "\n").encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="lorarl-operator metrics"'))
        start_response(line, headers)
        return [body]

    return wrapped


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def serve(port: int, address: str = "0.0.0.0", gate: Gate | None = None, registry: Any = REGISTRY) -> WSGIServer:
    """Serve /metrics on ``address:port`` in a daemon thread; behind ``gate`` unless it is None
    (the plain endpoint: `lorarl run --metrics-auth none`)."""
    app = make_wsgi_app(registry)
    if gate is not None:
        app = guarded(app, gate)
    server_class = _Server
    if ":" in address:  # an IPv6 address

        class _Server6(_Server):
            address_family = socket.AF_INET6

        server_class = _Server6
    httpd = make_server(address, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="lorarl-metrics", daemon=True).start()
    return httpd
