"""List, then watch, one kind in one scope: the operator's own watch, as client-go's Reflector.

Followed (k8s.io/client-go@v0.37.2): ``tools/cache/reflector.go`` (list, then watch from the
listing's resourceVersion; bookmarks keep it fresh; a 410 Gone means re-list) and
``tools/pager/pager.go:108-120`` (a paged list whose continue token expired falls back to one
full list). A re-list is a replace (``tools/cache/delta_fifo.go`` ``Replace``): what the new
listing lacks is reported deleted, what changed (another resourceVersion) is reported modified,
what did not change is not reported at all.

``list()`` blocks until the kind is listed (the caller's readiness signal: every kind listed
before the first reconcile); ``watch(stop)`` then follows changes until ``stop`` is set. Each
object reaches ``handle(type, body, listed)``: ``type`` ADDED, MODIFIED or DELETED, ``listed``
True for what a listing delivered. Objects are decoded one page (or one event) at a time and
never kept here: the handler decides what to keep. Only (uid, resourceVersion) per key stays,
to know what a re-list changed.

A connection can die without a FIN or RST (a NAT or load balancer that forgot it, a peer gone
behind a partition): the stream then just goes quiet. The API server sends a bookmark on every
watch roughly each minute (k8s.io/apiserver@v0.37.2 ``pkg/storage/cacher/cacher.go:76-78``
defaultBookmarkFrequency, ``cache_watcher.go:233-264``), so a watch that delivers no byte for
``WATCH_IDLE_SECONDS`` is dead and is reopened from the last resourceVersion: kopf's
``settings.watching.inactivity_timeout`` (70 s) rests on the same fact. client-go notices the
same thing through HTTP/2 pings (30 s idle + 15 s ping timeout); this client speaks HTTP/1.1.
A 429 (API Priority and Fairness) is sent again after its Retry-After (``kube.honouring_retry_after``),
page by page, so a throttled listing does not start over.

Decoding is where a listing's client time goes (measured on a page of 1,000 LoraRLJobs, 6.4 MB,
docs/benchmarks.md): ``json.loads`` of the page 458 ms, while msgspec splitting it into its
items' raw bytes (``msgspec.Raw``, no object built) takes a few ms. So a page (and a watch
event) is split first, and each object's bytes go to the informer's ``decode(raw, listed)``
(default: the whole object, ``json.loads``); a caller that needs less of an object (a listed
finished job: a stub) decodes less. What it returns must hold at least ``metadata.namespace``,
``name``, ``uid`` and ``resourceVersion``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import msgspec
from kubernetes.client.rest import ApiException

from .kube import honouring_retry_after, retry_after

log = logging.getLogger("lorarl.informer")
Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any], bool], None]
Decode = Callable[[msgspec.Raw, bool], dict[str, Any]]  # (an object's raw JSON, listed) -> what the handler gets

PAGE_SIZE = 500  # objects per LIST page: one page decoded at a time bounds the start-up peak
MAX_BACKOFF = 16.0  # seconds between attempts while the API server is away (client-go: 0.8 s doubling to 30 s)
WATCH_SECONDS = 300  # the server ends a watch after 300-600 s (client-go: minWatchTimeout x (1 + rand))
WATCH_IDLE_SECONDS = 70.0  # no byte (not even a bookmark, sent each ~60 s) for this long: the connection is dead


class _ListMeta(msgspec.Struct):
    resourceVersion: str | None = None
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct):
    """A LIST answer split, not decoded: each item stays its raw JSON bytes."""

    kind: str = ""
    items: list[msgspec.Raw] | None = None
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


class _Status(msgspec.Struct):
    code: int | None = None
    message: str = ""


class _Event(msgspec.Struct):
    """A watch event split: its object stays raw bytes (an ERROR's object is a Status)."""

    type: str
    object: msgspec.Raw


_page_decoder = msgspec.json.Decoder(_Page)
_event_decoder = msgspec.json.Decoder(_Event)
_status_decoder = msgspec.json.Decoder(_Status)


def decode_whole(raw: msgspec.Raw, listed: bool = False) -> dict[str, Any]:
    """The whole object (``decode``'s default)."""
    return json.loads(bytes(raw))


class Gone(Exception):
    """410: the resourceVersion (or continue token) is older than etcd's compaction."""


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


class Informer:
    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        handle: Handler,
        label_selector: str | None = None,
        page_size: int = PAGE_SIZE,
        request_timeout: float = 60.0,
        stopping: threading.Event | None = None,
        decode: Decode = decode_whole,
    ) -> None:
        self._api = kubernetes.client.CustomObjectsApi(client)
        self.group, self.version, self.plural, self.namespace = group, version, plural, namespace
        self._handle, self._selector, self._page_size, self._timeout = handle, label_selector, page_size, request_timeout
        self._stopping = stopping or threading.Event()  # set: stop waiting out a Retry-After
        self._decode = decode
        self._api_version = f"{group}/{version}"
        self._known: dict[Key, tuple[str | None, str | None]] = {}  # key -> (uid, resourceVersion)
        self.resource_version: str | None = None

    @property
    def describe(self) -> str:
        return f"{self.plural}{'.' + self.group if self.group else ''} in {self.namespace or 'all namespaces'}"

    def _request(self, **query: Any) -> Any:
        if self._selector:
            query["label_selector"] = self._selector
        if self.group == "" and self.plural == "pods":  # the core group: /api/v1, not /apis/<group>/<version>
            core = kubernetes.client.CoreV1Api(self._api.api_client)
            if self.namespace:
                return honouring_retry_after(lambda: core.list_namespaced_pod(self.namespace, _preload_content=False, **query), self._stopping)
            return honouring_retry_after(lambda: core.list_pod_for_all_namespaces(_preload_content=False, **query), self._stopping)
        if self.namespace:
            return honouring_retry_after(
                lambda: self._api.list_namespaced_custom_object(self.group, self.version, self.namespace, self.plural, _preload_content=False, **query),
                self._stopping,
            )
        return honouring_retry_after(
            lambda: self._api.list_cluster_custom_object(self.group, self.version, self.plural, _preload_content=False, **query), self._stopping
        )

    def _page(self, limit: int | None, token: str | None) -> Any:
        query: dict[str, Any] = {"_request_timeout": self._timeout}
        if limit:
            query["limit"] = limit
        if token:
            query["_continue"] = token
        try:
            response = self._request(**query)
        except ApiException as err:
            if err.status == 410:
                raise Gone(str(err.reason)) from None
            raise
        try:
            return _page_decoder.decode(response.data)
        finally:
            response.release_conn()

    def list(self) -> int:
        """List every object (in pages) and report it; what is gone since the last listing is
        reported deleted. Returns how many objects there are."""
        seen: set[Key] = set()
        token, limit = None, self._page_size
        while True:
            try:
                page = self._page(limit, token)
            except Gone:
                if token is None or limit is None:
                    raise
                log.info("listing %s: the continue token expired; listing everything at once", self.describe)
                seen, token, limit = set(), None, None  # pager.go: a full list instead
                continue
            for raw in page.items or []:
                item = self._decode(raw, True)
                item.setdefault("apiVersion", self._api_version)
                item.setdefault("kind", page.kind.removesuffix("List"))
                meta = item["metadata"]
                key = (meta["namespace"], meta["name"])
                seen.add(key)
                known = self._known.get(key)
                current = (meta.get("uid"), meta.get("resourceVersion"))
                if known != current:
                    self._known[key] = current
                    self._handle("ADDED" if known is None or known[0] != current[0] else "MODIFIED", item, True)
            token = page.metadata.continue_
            if not token:
                self.resource_version = page.metadata.resourceVersion
                break
            page = raw = None  # let the page go before the next one arrives (a Raw holds its buffer)
        for key in [k for k in self._known if k not in seen]:
            uid, rv = self._known.pop(key)
            self._handle("DELETED", {"metadata": {"namespace": key[0], "name": key[1], "uid": uid, "resourceVersion": rv}}, True)
        return len(seen)

    def _watch_once(self, stop: threading.Event) -> None:
        seconds = int(WATCH_SECONDS * (1 + random.random()))
        try:
            response = self._request(
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version,
                timeout_seconds=seconds,
                _request_timeout=(self._timeout, WATCH_IDLE_SECONDS),
            )
        except ApiException as err:
            if err.status == 410:
                raise Gone(str(err.reason)) from None
            raise
        try:
            for line in _lines(response):
                if stop.is_set():
                    return
                event = _event_decoder.decode(line)
                kind = event.type
                if kind == "ERROR":
                    failure = _status_decoder.decode(event.object)
                    if failure.code == 410:
                        raise Gone(failure.message)
                    raise ApiException(status=failure.code, reason=failure.message)
                obj = self._decode(event.object, False)
                meta = obj.get("metadata") or {}
                self.resource_version = meta.get("resourceVersion") or self.resource_version
                if kind == "BOOKMARK":
                    continue
                key = (meta["namespace"], meta["name"])
                if kind == "DELETED":
                    self._known.pop(key, None)
                else:
                    self._known[key] = (meta.get("uid"), meta.get("resourceVersion"))
                self._handle(kind, obj, False)
        finally:
            response.release_conn()

    def watch(self, stop: threading.Event) -> None:
        """Follow changes until ``stop``: a watch that ends is reopened where it stopped, one
        that fails is retried after 1, 2, 4 ... 16 s, and a 410 Gone is a re-list."""
        failures = 0
        while not stop.is_set():
            try:
                self._watch_once(stop)
                failures = 0
            except Gone:
                log.info("watching %s: resourceVersion %s is too old; listing again", self.describe, self.resource_version)
                try:
                    self.list()
                    failures = 0
                except Exception as err:  # noqa: BLE001 - the API server is away: retry below
                    failures += 1
                    log.warning("listing %s failed: %s", self.describe, _describe(err))
                    stop.wait(_backoff(failures, err))
            except Exception as err:  # noqa: BLE001 - connection lost, timeouts, 5xx: reopen
                failures += 1
                delay = _backoff(failures - 1, err)
                log.warning("watching %s failed: %s; reopening in %gs", self.describe, _describe(err), delay)
                stop.wait(delay)


def _backoff(failures: int, err: BaseException) -> float:
    """1, 2, 4 ... 16 s, and never sooner than a Retry-After still standing when its retries ran out."""
    asked = retry_after(err) if isinstance(err, ApiException) else None
    return max(asked or 0.0, min(MAX_BACKOFF, 2.0**failures))


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
