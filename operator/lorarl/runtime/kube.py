"""A thin, explicit Kubernetes API layer for the reconciler (blocking; used from kopf's threads).

Only a handful of verbs are needed: get, list, server-side apply, JSON merge patch of the status
subresource, delete, and Events (post, patch). Paths are built from a small table instead of API discovery, so a
missing CRD is a clear 404 rather than a discovery failure.

Overload: a request the API server answers 429 (API Priority and Fairness rejected it) or 5xx
with a ``Retry-After`` header is sent again after the seconds asked, up to 10 times, for every
verb, as client-go does (k8s.io/client-go@v0.37.2 ``rest/request.go:167`` maxRetries 10,
``rest/with_retry.go:148-195`` and ``checkWait`` 309-318). A 429 means the request was not
executed (APF rejects before the handler), so a POST is safe to repeat. urllib3's own retries
are switched off for statuses and reads (``CLIENT_RETRIES``): they honoured Retry-After only for
GET/PUT/DELETE, hid the 429 behind a MaxRetryError, and retried a hung GET 3 times, so a request
on a dead connection hung 4 x the timeout (the informers' and the leader election's requests
still go through urllib3; the reconcile's go through libcurl, ``transport.py``, which says why).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kubernetes
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from urllib3.util.retry import Retry

from . import metrics, transport

FIELD_MANAGER = "lorarl-operator"

# (apiVersion, kind) -> plural; the API prefix follows from apiVersion.
PLURALS = {
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Secret"): "secrets",
    ("v1", "Event"): "events",
    ("v1", "Pod"): "pods",  # read only: `lorarl logs` finds the submitter's and the head's pods
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("batch/v1", "Job"): "jobs",  # the adapter's export Job (job/export_job.py)
    ("ray.io/v1", "RayJob"): "rayjobs",
    ("lorarl.dev/v1alpha1", "LoraRLJob"): "lorarljobs",
    ("kueue.x-k8s.io/v1beta2", "Workload"): "workloads",
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): "localqueues",
}


#: client-go's limit of Retry-After retries per request (rest/request.go:167)
RETRY_AFTER_ATTEMPTS = 10
#: connection errors (nothing was sent) are retried by urllib3; statuses and reads never are
CLIENT_RETRIES = Retry(total=3, read=0, status_forcelist=None, respect_retry_after_header=False, raise_on_status=False)
T = TypeVar("T")


def retry_after(err: ApiException | ErrorAnswer) -> float | None:
    """The seconds the server asked to wait before the request is sent again: a 429, or a 5xx
    with a ``Retry-After`` header (client-go ``checkWait``), else None."""
    status = err.status or 0
    if status != 429 and status < 500:
        return None
    value = (getattr(err, "headers", None) or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def honouring_retry_after(send: Callable[[], T], stopping: threading.Event) -> T:
    """``send()``, sent again after each Retry-After answer (at most RETRY_AFTER_ATTEMPTS
    times). The wait ends early, with the last answer raised, once ``stopping`` is set."""
    for attempt in itertools.count(1):
        try:
            return send()
        except (ApiException, ErrorAnswer) as err:
            seconds = retry_after(err)
            if seconds is None or attempt > RETRY_AFTER_ATTEMPTS:
                raise
            metrics.API_RETRY_AFTER.labels(str(err.status)).inc()
            if stopping.wait(seconds):
                raise
    raise AssertionError("unreachable")


class ErrorAnswer(Exception):
    """The API server answered with an error status (``ApiError`` is what callers see)."""

    def __init__(self, answer: transport.Answer) -> None:
        self.status, self.reason, self.headers, self.body = answer.status, answer.reason, answer.headers, answer.body
        super().__init__(f"{self.status} {self.reason}")


class ApiError(Exception):
    """A Kubernetes API error with its HTTP status and the server's message; ``retry_after``:
    the seconds the server asked to wait, when it did."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None, *, status_reason: str = "", fields: tuple[str, ...] = ()):
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        # from the API server's Status: its reason (Invalid, Forbidden, ...) and the `field` of each
        # of its details.causes, the parts of a refusal that quote no value (issue 35, point 6)
        self.status_reason = status_reason
        self.fields = fields
        super().__init__(f"{status} {reason}: {message}")

    @property
    def too_large(self) -> bool:
        """The object is too large to store: 413 (the API server's request body limit, 3 MiB) or a
        500 whose message is etcd's refusal (``etcdserver: request is too large``, above its
        --max-request-bytes, 1.5 MiB by default) or its gRPC client's (``trying to send message
        larger than max``). The same object is refused again: a retry cannot help (issue 35)."""
        text = str(self).lower()
        return self.status == 413 or (self.status == 500 and any(w in text for w in TOO_LARGE_WORDS))

    @property
    def transient(self) -> bool:
        return self.status in (0, 429, 500, 502, 503, 504) and not self.too_large

    @property
    def needs_fix(self) -> bool:
        """The server refused the request itself (invalid field 422, RBAC 403, a missing CRD 404,
        an admission webhook or policy 400/403/422, an object too large to store): retrying the
        same request cannot help until someone changes the cluster or the spec. 409 (conflict) and
        429 are worth a quick retry."""
        return (400 <= self.status < 500 and self.status not in (409, 429)) or self.too_large


# etcd's words (server/etcdserver/api/v3rpc/rpctypes/error.go ErrRequestTooLarge) and grpc-go's
# (rpc_util.go: "trying to send message larger than max"; "received message larger than max")
TOO_LARGE_WORDS = ("request is too large", "message larger than max", "request entity too large")


def collection_path(api_version: str, plural: str, namespace: str | None) -> str:
    """REST path of a collection (the core group is /api/v1); namespace None: all namespaces."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{plural}"


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
    """REST path; namespace None lists across all namespaces."""
    out = collection_path(api_version, PLURALS[(api_version, kind)], namespace)
    if name:
        out += f"/{name}"
    if subresource:
        out += f"/{subresource}"
    return out


class ThrottledRefresh:
    """The client's token refresh hook, run at most once per ``period`` seconds.

    The kubernetes client calls ``Configuration.refresh_api_key_hook`` before every request. The hooks
    its config loaders install (in-cluster and kubeconfig) re-read the token only when it is due
    (in-cluster: once a minute, as client-go's ``NewCachedFileTokenSource``,
    k8s.io/client-go@v0.37.2 transport/token_source.go:67-81), but each call also sets the
    configuration's host again, which looks up the proxy environment: 5% of the operator's GIL
    time in a 1,000-job burst (py-spy). Once every 10 s keeps the token as fresh as the loaders'
    own schedule within those 10 s."""

    def __init__(self, hook: Callable[[Any], None], period: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.hook, self.period, self.clock = hook, period, clock
        self._lock = threading.Lock()
        self._next = float("-inf")

    def __call__(self, configuration: Any) -> None:
        if self.clock() < self._next:
            return
        with self._lock:
            if self.clock() < self._next:
                return  # another thread refreshed it meanwhile
            self.hook(configuration)
            # the loaders' hooks install themselves again on every run (kubernetes 37:
            # config/kube_config.py:529-537 ``_set_config``, config/incluster_config.py:87-100):
            # the new one is what runs next time, and the throttle stays in front of it
            if configuration.refresh_api_key_hook is not self:
                self.hook = configuration.refresh_api_key_hook or self.hook
                configuration.refresh_api_key_hook = self
            self._next = self.clock() + self.period


@dataclass
class Api:
    """Blocking calls by path on libcurl (``transport.CurlTransport``); ``client``, the official
    client, gives the server, TLS and credentials (its ``Configuration``) and serves the
    informers' streams and the leader election."""

    client: kubernetes.client.ApiClient
    request_timeout: float = 30.0  # per attempt; a request on a half-open connection fails after it
    stopping: threading.Event = field(default_factory=threading.Event)  # set: no more Retry-After waits

    @classmethod
    def from_environment(cls, connections: int | None = None) -> Api:
        """In-cluster config, else $KUBECONFIG / ~/.kube/config."""
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()
        return cls.from_configuration(kubernetes.client.Configuration.get_default_copy(), connections)

    @classmethod
    def from_configuration(cls, config: kubernetes.client.Configuration, connections: int | None = None) -> Api:
        """``connections``: how many requests may be in flight at once on the official client (the
        informers' streams, the leader election). Its default pool (5 per CPU) is smaller than that
        on small machines, and urllib3 then drops a connection after each request over the pool
        ("Connection pool is full"): the next request pays for a new TLS session."""
        if connections is not None:
            config.connection_pool_maxsize = max(config.connection_pool_maxsize, connections)
        config.retries = CLIENT_RETRIES
        if config.refresh_api_key_hook is not None and not isinstance(config.refresh_api_key_hook, ThrottledRefresh):
            config.refresh_api_key_hook = ThrottledRefresh(config.refresh_api_key_hook)
        return cls(kubernetes.client.ApiClient(config))

    def __post_init__(self) -> None:
        self._transport = transport.CurlTransport(self.client.configuration)

    def close(self) -> None:
        """Close the connections (this Api's and the official client's)."""
        self._transport.close()
        self.client.close()

    def _call(self, method: str, url: str, body: Any = None, content_type: str | None = None, query: list | None = None, answer: bool = True) -> dict[str, Any]:
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type or "application/json"

        def send() -> bytes:
            got = self._transport.request(method, url, data, headers, self.request_timeout)
            if got.status >= 400:
                raise ErrorAnswer(got)
            return got.body

        try:
            raw = honouring_retry_after(send, self.stopping)
        except ErrorAnswer as err:
            raise _api_error(err) from None
        except transport.TransportError as err:  # connection refused, TLS, timeouts: retryable
            if err.timed_out:
                self.drop_idle_connections()
            raise ApiError(0, type(err).__name__, str(err)) from None
        return json.loads(raw) if raw and answer else {}

    def drop_idle_connections(self) -> None:
        """A request timed out: the path to the API server may be dead without a FIN or RST, and so
        may every idle kept-alive connection, each of which would cost the next request another
        timeout. Every thread connects afresh at its next request (requests in flight keep theirs).
        client-go gets the same from HTTP/2: a connection that fails its health ping is closed for
        every request on it (k8s.io/apimachinery@v0.37.2 pkg/util/net/http.go:146-192: idle 30 s,
        ping timeout 15 s)."""
        self._transport.drop_connections()

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", path(api_version, kind, namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else None
        return self._call("GET", path(api_version, kind, namespace), query=query).get("items", [])

    def apply(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER, force: bool = True, answer: bool = True) -> dict[str, Any]:
        """Server-side apply (by default with our field manager and force: idempotent, no
        resourceVersion, no 409). ``answer=False``: the object as applied is not decoded ({} is
        returned), for a caller that does not read it (a ConfigMap's answer is ~90 KB of JSON)."""
        meta = obj["metadata"]
        url = path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return self._call(
            "PATCH",
            url,
            body=obj,
            content_type="application/apply-patch+yaml",
            query=[("fieldManager", field_manager), ("force", "true" if force else "false")],
            answer=answer,
        )

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any], field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """JSON merge patch of the object (only the keys given are touched)."""
        return self._call(
            "PATCH",
            path(api_version, kind, namespace, name),
            body=body,
            content_type="application/merge-patch+json",
            query=[("fieldManager", field_manager)],
        )

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any], field_manager: str | None = None) -> dict[str, Any]:
        """JSON merge patch of .status: only the keys given are touched (no resourceVersion).
        ``field_manager`` names the writer in managedFields (without it the API server takes the
        user agent's first word)."""
        return self._call(
            "PATCH",
            path(api_version, kind, namespace, name, "status"),
            body={"status": status},
            content_type="application/merge-patch+json",
            query=[("fieldManager", field_manager)] if field_manager else None,
        )

    def post_event(self, involved: dict[str, Any], type_: str, reason: str, message: str, now: str, now_micro: str) -> dict[str, Any]:
        """A core/v1 Event about ``involved`` (what `kubectl describe` and `kubectl events` show)."""
        meta = involved["metadata"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now_micro,
            "action": "Reconcile",
            "count": 1,
        }
        return self._call("POST", path("v1", "Event", meta["namespace"]), body=event)

    def patch_event(self, namespace: str, name: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Merge patch of an Event (its count and lastTimestamp, see events.py)."""
        return self._call("PATCH", path("v1", "Event", namespace, name), body=fields, content_type="application/merge-patch+json")

    def delete(self, api_version: str, kind: str, namespace: str, name: str, propagation: str = "Background", uid: str | None = None) -> bool:
        """Delete (False if it is gone); with ``uid``, only that object, not one re-created under its name."""
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", path(api_version, kind, namespace, name), body=body)
            return True
        except ApiError as err:
            if err.status == 404:
                return False
            raise


def raw_requests(client: kubernetes.client.ApiClient) -> DynamicClient:
    """Requests by path through ``client`` (its auth, TLS and pool). DynamicClient.request is the
    client's public raw-request API, the same from kubernetes 30 to 37 (ApiClient.call_api changed
    its signature in 37); its API discovery is skipped. The typed API classes are not used: importing
    CoreV1Api builds the client's models of every core type (pydantic, kubernetes 37), ~1.5 s of
    CPU at start-up, measured with py-spy."""
    return DynamicClient(client, discoverer=_NoDiscovery)


class _NoDiscovery:
    """A discoverer for DynamicClient that discovers nothing: our paths come from PLURALS."""

    def __init__(self, client: Any, cache_file: Any = None) -> None:
        pass


def _api_error(err: ApiException | ErrorAnswer) -> ApiError:
    message = err.body or err.reason or ""
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    status_reason = ""
    fields: tuple[str, ...] = ()
    try:
        parsed = json.loads(err.body or "")  # none: ValueError, as a body that is not JSON
        message = parsed.get("message", message)
        status_reason, fields = status_parts(parsed)
    except (TypeError, ValueError, AttributeError):
        pass
    return ApiError(err.status or 0, err.reason or "", str(message), retry_after(err), status_reason=status_reason, fields=fields)


def status_parts(status: Any) -> tuple[str, tuple[str, ...]]:
    """A Status object's reason and the distinct ``field`` of its details.causes (metav1.Status,
    StatusCause.Field: "spec.template.spec.containers[0].image"), each cut to 256 characters."""
    if not isinstance(status, dict):
        return "", ()
    reason = status.get("reason")
    causes = (status.get("details") or {}).get("causes") if isinstance(status.get("details"), dict) else None
    fields: list[str] = []
    for cause in causes if isinstance(causes, list) else []:
        field = cause.get("field") if isinstance(cause, dict) else None
        if isinstance(field, str) and field and field[:256] not in fields:
            fields.append(field[:256])
    return (reason[:64] if isinstance(reason, str) else ""), tuple(fields)
