"""List, then watch, one kind in one scope: the operator's own watch, as client-go's Reflector.

Followed (k8s.io/client-go@v0.37.2): ``tools/cache/reflector.go`` (list, then watch from the
listing's resourceVersion; bookmarks keep it fresh; a 410 Gone means re-list) and
``tools/pager/pager.go:108-120`` (a paged list whose continue token expired falls back to one
full list). A re-list is a replace (``tools/cache/delta_fifo.go`` ``Replace``): what the new
listing lacks is reported deleted, what changed (another resourceVersion) is reported modified,
what did not change is not reported at all.

``list()`` blocks until the kind is listed (the caller's readiness signal: every kind listed
before the first reconcile); ``watch(stop)`` then follows changes until ``stop`` is set.

A listing can be split (``ready_selector``, a field selector): ``list()`` then lists only what it
selects (a LoraRLJob informer: the unfinished jobs), the watch starts at once from that
listing's resourceVersion *without* the selector (one watch for every object: a selected watch
would report an object that leaves the selection as DELETED, which a re-list could not tell from
a deletion), and ``backfill()``, in a thread of its own, lists the rest. Why that is still every
object exactly once, in order: an object not selected at the first listing's resourceVersion R1
either changes after R1 (the watch delivers every such change, in order) or not (then the
backfill's listing, at R2 >= R1, has it as it was at R1). So the backfill reports only what is not
known yet (neither listed nor watched) and not deleted by the watch meanwhile (a tombstone per
key until the backfill ends); and a watch event older than what the backfill reported (a change
between R1 and R2 that the watch delivers late) is not reported again (resourceVersions compared
as integers when both are, as etcd's are; otherwise it is reported, and the watch's later events
bring the object up to date). A 410 Gone is a whole re-list, as without a split. Each
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

from .kube import collection_path, honouring_retry_after, raw_requests, retry_after

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
        ready_selector: str | None = None,
    ) -> None:
        self._raw = raw_requests(client)
        self.group, self.version, self.plural, self.namespace = group, version, plural, namespace
        self._handle, self._selector, self._page_size, self._timeout = handle, label_selector, page_size, request_timeout
        self._stopping = stopping or threading.Event()  # set: stop waiting out a Retry-After
        self._decode = decode
        self._api_version = f"{group}/{version}" if group else version  # the core group: "v1"
        self._known: dict[Key, tuple[str | None, str | None]] = {}  # key -> (uid, resourceVersion)
        self._lock = threading.Lock()  # the watch and the backfill report from two threads: one at a time
        self._ready_selector = ready_selector
        self._backfilling = False
        self._tombstones: dict[Key, str | None] = {}  # key -> uid the watch saw deleted while backfilling
        self.resource_version: str | None = None
        self._listed_at: str | None = None

    @property
    def describe(self) -> str:
        return f"{self.plural}{'.' + self.group if self.group else ''} in {self.namespace or 'all namespaces'}"

    def _request(self, field_selector: str | None = None, **query: Any) -> Any:
        """GET the collection (a listing page or a watch), unread: the caller streams the answer."""
        if field_selector:
            query["field_selector"] = field_selector
        if self._selector:
            query["label_selector"] = self._selector
        where = collection_path(self._api_version, self.plural, self.namespace)
        return honouring_retry_after(
            lambda: self._raw.request("GET", where, header_params={"Accept": "application/json"}, serialize=False, **query), self._stopping
        )

    def _page(self, limit: int | None, token: str | None, field_selector: str | None = None, from_cache: bool = False) -> Any:
        query: dict[str, Any] = {"_request_timeout": self._timeout, "field_selector": field_selector}
        if from_cache and not token:
            query["resource_version"] = "0"
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

    def _items(self, field_selector: str | None = None, from_cache: bool = False) -> Iterator[tuple[dict[str, Any], Key] | None]:
        """Every object of one listing with its key, decoded one at a time; the listing's
        resourceVersion is left in ``self._listed_at``. Yields None when the listing starts over
        (an expired continue token: one full list instead)."""
        token: str | None = None
        limit: int | None = self._page_size
        while True:
            try:
                page = self._page(limit, token, field_selector, from_cache)
            except Gone:
                if token is None or limit is None:
                    raise
                log.info("listing %s: the continue token expired; listing everything at once", self.describe)
                token, limit = None, None  # pager.go: a full list instead
                yield None
                continue
            for raw in page.items or []:
                item = self._decode(raw, True)
                item.setdefault("apiVersion", self._api_version)
                item.setdefault("kind", page.kind.removesuffix("List"))
                meta = item["metadata"]
                yield item, (meta["namespace"], meta["name"])
            token = page.metadata.continue_
            if not token:
                self._listed_at = page.metadata.resourceVersion
                return
            page = raw = None  # let the page go before the next one arrives (a Raw holds its buffer)

    def list(self) -> int:
        """List every object (in pages; with a ``ready_selector`` only what it selects) and report
        it; what is gone since the last listing is reported deleted. Returns how many objects
        were listed. A later call (the watch's re-list after a 410) lists everything."""
        selector = self._ready_selector if self.resource_version is None else None
        if selector:
            try:
                return self._list_selected(selector)
            except ApiException as err:
                if err.status != 400:  # 400: the field is not selectable (a CRD older than the operator)
                    raise
                log.warning("listing %s with %r refused (%s %s): listing everything before starting", self.describe, selector, err.status, err.reason)
                self._ready_selector, self._backfilling = None, False
        seen: set[Key] = set()
        for entry in self._items():
            if entry is None:
                seen = set()
                continue
            item, key = entry
            seen.add(key)
            meta = item["metadata"]
            with self._lock:
                known = self._known.get(key)
                current = (meta.get("uid"), meta.get("resourceVersion"))
                if known != current:
                    self._known[key] = current
                    self._handle("ADDED" if known is None or known[0] != current[0] else "MODIFIED", item, True)
        self.resource_version = self._listed_at
        with self._lock:
            gone = [k for k in self._known if k not in seen]
            for key in gone:
                uid, rv = self._known.pop(key)
                self._handle("DELETED", {"metadata": {"namespace": key[0], "name": key[1], "uid": uid, "resourceVersion": rv}}, True)
        return len(seen)

    def _list_selected(self, selector: str) -> int:
        """The first listing of a split informer: only what ``selector`` selects; the watch then
        starts from here and ``backfill()`` reports the rest."""
        count = 0
        with self._lock:
            self._backfilling = True  # from now until the backfill ends, the watch keeps tombstones
        # resourceVersion "0": from the API server's watch cache, which filters in memory; a
        # consistent (quorum) read with a limit is served from etcd, which reads and decodes every
        # object to fill a page of the few selected (measured: > 60 s over 10,000 finished jobs
        # under load, against 0.6-2.6 s from the cache). client-go's Reflector lists from "0" first
        # too (tools/cache/reflector.go, relistResourceVersion); the watch from this listing's
        # resourceVersion then delivers whatever the cache had not yet seen.
        for entry in self._items(selector, from_cache=True):
            if entry is None:
                continue  # listed again from the start: what was reported is known, and skipped below
            item, key = entry
            meta = item["metadata"]
            current = (meta.get("uid"), meta.get("resourceVersion"))
            with self._lock:
                if self._known.get(key) != current:
                    self._known[key] = current
                    self._handle("ADDED", item, True)
            count += 1
        self.resource_version = self._listed_at
        return count

    @property
    def split(self) -> bool:
        """Whether ``list()`` listed only part (``backfill()`` lists the rest)."""
        return self._backfilling

    def backfill(self) -> int:
        """After a split ``list()``, and while the watch runs: list everything, and report what
        neither that listing nor the watch has reported (see the module's docstring). Returns how
        many objects it reported."""
        if not self._backfilling:
            return 0
        reported = 0
        for entry in self._items():  # a failure leaves the split open: a retry lists again
            if entry is None:
                continue
            item, key = entry
            meta = item["metadata"]
            with self._lock:
                if key in self._known or (key in self._tombstones and self._tombstones[key] == meta.get("uid")):
                    continue  # listed or watched already (the watch keeps it current), or deleted since
                self._known[key] = (meta.get("uid"), meta.get("resourceVersion"))
                self._handle("ADDED", item, True)
            reported += 1
        with self._lock:
            self._backfilling = False
            self._tombstones.clear()
        return reported

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
                with self._lock:
                    current = (meta.get("uid"), meta.get("resourceVersion"))
                    known = self._known.get(key)
                    if kind == "DELETED":
                        self._known.pop(key, None)
                        if self._backfilling:
                            self._tombstones[key] = current[0]
                    elif known is not None and known[0] == current[0] and _older(current[1], known[1]):
                        continue  # the backfill reported a later state already (a change it listed before this event came)
                    else:
                        self._known[key] = current
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


def _older(rv: str | None, than: str | None) -> bool:
    """resourceVersions are opaque, but etcd's are integers: compare them when both are."""
    try:
        return int(rv) < int(than)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _backoff(failures: int, err: BaseException) -> float:
    """1, 2, 4 ... 16 s, and never sooner than a Retry-After still standing when its retries ran out."""
    asked = retry_after(err) if isinstance(err, ApiException) else None
    return max(asked or 0.0, min(MAX_BACKOFF, 2.0**failures))


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
