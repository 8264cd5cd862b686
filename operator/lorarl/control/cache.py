"""Watch-fed caches of LoraRLJobs and their RayJobs: what the reconciler reads instead of GETs.

The operator's own watches feed them (``informer.py``, ``controller.py``: every kind is listed
before the first reconcile, so a reconcile never sees a half-filled cache and mistakes a RayJob
not yet listed for a deleted one). Keys are (namespace, name); an update or a deletion of another
uid under the same name (deleted and re-created) is told apart by the uid.

Only what the operator reads is kept (bounded memory at thousands of jobs): a LoraRLJob without
``managedFields`` and kubectl's last-applied copy; a RayJob's metadata (of its ``managedFields``
only who owns ``spec.suspend``), ``spec.suspend``, ``spec.backoffLimit`` and status (its pod templates are the
operator's own render, never read back). A finished job, once reconciled (or when listed
finished and settled: ``put_compact``), is kept compact
(``Store.compact``: name, uid, generation, phase; its parse and render memos dropped): memory
grows with the jobs that run, not with the jobs that ever ran. The rare reconcile of a compact
job (its RayJob went away, its TTL fell due) reads the whole object with a GET; a watch event
brings the whole object back anyway.

The operator's own writes come back through the watch, and must not trigger another reconcile
(controller-runtime's GenerationChangedPredicate solves the same problem for the status). Before a
write the writer states what the object will look like in what the reconcile reads
(``expect``: a fingerprint); after it, ``note_own_write`` records the resourceVersion the API
server answered. ``put`` reports an event as an echo when it has that resourceVersion or that
fingerprint: the second catches an echo that the watch delivers before the HTTP answer reaches the
writer's thread, the first one whose content the API server normalised.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from ..job.render import JOB_LABEL
from . import driver, gpuhours, pods, status

Key = tuple[str, str]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
V = TypeVar("V")


def _meta(meta: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        out["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return out


SPEC_TEXT = "lorarl.dev/spec-json"  # a cached job's spec as JSON text (see trim_job)


def trim_job(body: dict[str, Any], cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec is kept as its JSON text: a fifth of the memory of the decoded dicts, and the
    reconcile reads it only to parse a new generation (``whole_job``). The API server bumps
    ``generation`` on every spec change (status is a subresource), so the text cached for the same
    uid and generation is reused: status-only events (reporter patches, our echoes) encode nothing."""
    out = {k: v for k, v in body.items() if k != "spec"}
    meta = out["metadata"] = _meta(body.get("metadata") or {})
    if "spec" in body:
        cached_meta = (cached or {}).get("metadata") or {}
        same = (
            SPEC_TEXT in (cached or {})
            and meta.get("generation") is not None
            and (cached_meta.get("uid"), cached_meta.get("generation")) == (meta.get("uid"), meta.get("generation"))
        )
        out[SPEC_TEXT] = cached[SPEC_TEXT] if same and cached is not None else json.dumps(body["spec"], separators=(",", ":"))
    return out


def whole_job(cached: dict[str, Any]) -> dict[str, Any]:
    """A cached job with its spec decoded again (what ``parse_stored`` reads)."""
    if SPEC_TEXT not in cached:
        return cached
    out = {k: v for k, v in cached.items() if k != SPEC_TEXT}
    out["spec"] = json.loads(cached[SPEC_TEXT])
    return out


def _suspend_owners(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries that own ``spec.suspend``, reduced to that field: who owns it
    decides how a queued RayJob is handed over to Kueue (``queueing.owns_suspend``)."""
    return [
        {"manager": entry.get("manager"), "operation": entry.get("operation"), "fieldsV1": {"f:spec": {"f:suspend": {}}}}
        for entry in meta.get("managedFields") or []
        if "f:suspend" in (((entry.get("fieldsV1") or {}).get("f:spec")) or {})
    ]


#: the RayJob spec fields the reconcile reads: who suspends it (queueing.py), how many retries it
#: allows (status.py words a final failure that used them up)
RAYJOB_SPEC_READ = ("suspend", "backoffLimit")


def trim_rayjob(body: dict[str, Any], cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the reconcile reads of a RayJob (``cached`` is unused: the same signature as trim_job)."""
    spec = body.get("spec") or {}
    meta = _meta(body.get("metadata") or {})
    owners = _suspend_owners(body.get("metadata") or {})
    if owners:
        meta["managedFields"] = owners
    out: dict[str, Any] = {
        "apiVersion": body.get("apiVersion", "ray.io/v1"),
        "kind": body.get("kind", "RayJob"),
        "metadata": meta,
        "spec": {k: spec[k] for k in RAYJOB_SPEC_READ if k in spec},
    }
    if "status" in body:
        out["status"] = body["status"]
    return out


def trim_export_job(body: dict[str, Any], cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the reconcile reads of an export Job (adapter_status.export_state): its name and status."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(body.get("metadata") or {}), "status": body.get("status") or {}}


def compact_job(body: dict[str, Any]) -> dict[str, Any]:
    """What stays cached of a finished job: enough to name it, count it by phase and tell a
    re-created job of the same name apart (the uid); and what its metrics show while finished
    (``jobmetrics``: the Ready reason, progress with the GPU-hours, the creation and completion
    times; a few hundred bytes)."""
    meta = body.get("metadata") or {}
    job_status = body.get("status") or {}
    kept = ("namespace", "name", "uid", "generation", "resourceVersion", "deletionTimestamp", "creationTimestamp")
    small = {k: job_status[k] for k in (status.PHASE, status.OBSERVED_GENERATION, status.COMPLETION_TIME, "progress") if k in job_status}
    ready = [{k: c[k] for k in ("type", "status", "reason") if k in c} for c in job_status.get(status.CONDITIONS) or [] if c.get("type") == status.READY]
    if ready:
        small[status.CONDITIONS] = ready
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in kept if k in meta},
        "status": small,
    }


# the digests of the rendered children, one per child, on the RayJob ("Kind=digest,..." in apply
# order): a reconcile applies the children whose render differs from what is recorded there
CHILDREN_DIGEST = "lorarl.dev/children-digest"


def child_digest(child: dict[str, Any]) -> str:
    """The digest of one rendered child (the RayJob's before the operator sets its suspend)."""
    return hashlib.sha256(json.dumps(child, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def child_digests(children: list[dict[str, Any]]) -> dict[str, str]:
    """Kind -> digest of each rendered child, in apply order (a job renders one child per kind)."""
    out = {child["kind"]: child_digest(child) for child in children}
    if len(out) != len(children):
        raise ValueError("two rendered children of one kind: the children digest is keyed by kind")
    return out


def encode_digests(digests: dict[str, str]) -> str:
    """The annotation's value: ``Kind=digest,...``."""
    return ",".join(f"{kind}={digest}" for kind, digest in digests.items())


def decode_digests(text: Any) -> dict[str, str]:
    """The annotation read back; {} for anything not of that shape (absent, edited by hand, an
    older operator's single digest of all children): then every child is taken as changed."""
    if not isinstance(text, str) or not text:
        return {}
    out: dict[str, str] = {}
    for part in text.split(","):
        kind, sep, digest = part.partition("=")
        if not sep or not kind or not digest:
            return {}
        out[kind] = digest
    return out


def stale_children(rendered: dict[str, str], recorded: dict[str, str]) -> set[str]:
    """The kinds whose render differs from what the RayJob records (all of them when nothing is
    recorded); the RayJob too when any is stale or the record differs, as it carries the record."""
    stale = {kind for kind, digest in rendered.items() if recorded.get(kind) != digest}
    if stale or recorded != rendered:
        stale.add("RayJob")
    return stale


def job_fingerprint(body: dict[str, Any]) -> Any:
    """What a reconcile reads of a LoraRLJob that others may change (of a watched object, and of
    the object the reconcile's own status write will leave: the one shape of both)."""
    meta = body.get("metadata") or {}
    return meta.get("generation"), meta.get("deletionTimestamp"), body.get("status") or {}


def rayjob_fingerprint(body: dict[str, Any]) -> Any:
    """What a reconcile reads of a RayJob that others may change."""
    meta = body.get("metadata") or {}
    return (
        meta.get("deletionTimestamp"),
        bool((body.get("spec") or {}).get("suspend")),
        body.get("status") or {},
        (meta.get("annotations") or {}).get(CHILDREN_DIGEST),
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: what the API server makes of ``target`` patched with ``patch``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def key_of(body: dict[str, Any]) -> Key:
    meta = body["metadata"]
    return meta["namespace"], meta["name"]


def by_job(body: dict[str, Any]) -> Key | None:
    """(namespace, job) of an object labelled with its LoraRLJob (its Ray pods, its export Jobs)."""
    meta = body["metadata"]
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    return (meta["namespace"], job) if job else None


class Store:
    """One kind's objects by (namespace, name), thread-safe; with ``index``, also by what it
    says (client-go's Indexer, tools/cache/thread_safe_store.go ``ByIndex``), so a job's pods are
    found without reading every pod in the cache."""

    def __init__(
        self,
        trim: Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]],
        fingerprint: Callable[[dict[str, Any]], Any],
        index: Callable[[dict[str, Any]], Key | None] | None = None,
    ) -> None:
        self._trim = trim
        self._fingerprint = fingerprint
        self._index = index
        self._indexed: dict[Key, set[Key]] = {}  # index value -> keys
        self._lock = threading.Lock()
        self._items: dict[Key, dict[str, Any]] = {}
        self._compact: set[Key] = set()  # keys whose cached object is a compact stand-in
        self._own: dict[Key, str] = {}  # resourceVersion of our last write, until its echo arrives
        self._expected: dict[Key, Any] = {}  # fingerprint our write in flight will leave

    def expect(self, key: Key, fingerprint: Any) -> None:
        """We are about to write ``key``; afterwards it will read as ``fingerprint``."""
        with self._lock:
            self._expected[key] = fingerprint

    def put(self, body: dict[str, Any]) -> bool:
        """Store what the watch delivered; True if it is the echo of our own last write."""
        key, rv = key_of(body), body["metadata"].get("resourceVersion")
        with self._lock:
            current = self._items.get(key)
            if current is not None and current["metadata"].get("uid") == body["metadata"].get("uid") and _newer(current, body):
                return True  # older than what is cached (a listing that began before our write): nothing new
            trimmed = self._set(key, self._trim(body, current))
            self._compact.discard(key)
            if rv is not None and self._own.get(key) == rv:
                del self._own[key]
                self._expected.pop(key, None)
                return True
            if key in self._expected and self._expected[key] == self._fingerprint(trimmed):
                del self._expected[key]
                return True
            return False

    def put_compact(self, body: dict[str, Any], shrink: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Store only ``shrink(body)``, as a compact stand-in (a listed job with nothing left to
        do: the whole object is never built)."""
        key = key_of(body)
        with self._lock:
            self._set(key, shrink(body))
            self._compact.add(key)
            self._own.pop(key, None)
            self._expected.pop(key, None)

    def note_own_write(self, body: dict[str, Any]) -> None:
        """We wrote ``body`` (the API server's answer): cache it now, and know its echo."""
        key, rv = key_of(body), body["metadata"].get("resourceVersion")
        with self._lock:
            current = self._items.get(key)
            if current is not None and current["metadata"].get("uid") not in (None, body["metadata"].get("uid")):
                return  # a newer object of that name is cached already
            if current is not None and _newer(current, body):
                return  # the watch already delivered something later
            self._set(key, self._trim(body, current))
            self._compact.discard(key)
            if rv is not None:
                self._own[key] = rv

    def delete(self, body: dict[str, Any]) -> bool:
        """Forget the object if the cached one is that uid; True if it was forgotten."""
        key, uid = key_of(body), body["metadata"].get("uid")
        with self._lock:
            current = self._items.get(key)
            if current is None or current["metadata"].get("uid") != uid:
                return False
            self._unset(key)
            self._compact.discard(key)
            self._own.pop(key, None)
            self._expected.pop(key, None)
            return True

    def compact(self, key: Key, shrink: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        """Replace the cached object by ``shrink(object)`` unless that is None; returns the
        object it replaced (None: nothing was replaced)."""
        with self._lock:
            current = self._items.get(key)
            if current is None or key in self._compact:
                return None
            small = shrink(current)
            if small is None:
                return None
            self._set(key, small)
            self._compact.add(key)
            return current

    def _set(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        """Store ``body`` under ``key`` and keep the index; the caller holds the lock."""
        if self._index is not None:
            self._unindex(key)
            value = self._index(body)
            if value is not None:
                self._indexed.setdefault(value, set()).add(key)
        self._items[key] = body
        return body

    def _unset(self, key: Key) -> None:
        if self._index is not None:
            self._unindex(key)
        del self._items[key]

    def _unindex(self, key: Key) -> None:
        old = self._items.get(key)
        value = self._index(old) if old is not None and self._index is not None else None
        if value is not None:
            keys = self._indexed.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._indexed[value]

    def by_index(self, value: Key) -> list[dict[str, Any]]:
        """The objects whose ``index`` is ``value`` (a Store made without one has none)."""
        with self._lock:
            return [self._items[k] for k in self._indexed.get(value, ())]

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._items.get(key)

    def read(self, key: Key) -> tuple[dict[str, Any] | None, bool]:
        """(the cached object, whether it is whole: False for a compact stand-in)."""
        with self._lock:
            return self._items.get(key), key not in self._compact

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._items)

    def values(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def compact_count(self) -> int:
        with self._lock:
            return len(self._compact)


def _newer(current: dict[str, Any], body: dict[str, Any]) -> bool:
    """resourceVersions are opaque, but etcd's are integers: compare them when both are."""
    a, b = current["metadata"].get("resourceVersion"), body["metadata"].get("resourceVersion")
    try:
        return int(a) > int(b)
    except (TypeError, ValueError):
        return False


class Memo(Generic[V]):
    """A bounded, thread-safe map with least-recently-used eviction (parse and render results
    per job generation: computed once per generation, not once per event)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()  # outside the lock: two threads may compute it once each, harmlessly
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


_MAX_GONE = 10000  # deleted GPU pods remembered until counted (and jobs whose deleted heads are remembered)


def _utcnow() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Caches:
    """What the reconciler reads: jobs, RayJobs (keyed by the RayJob's own name), memos."""

    def __init__(self, rayjobs_listed: bool = True) -> None:
        """``rayjobs_listed`` False: RayJobs are still being listed (the controller lists them after
        it is ready), so a RayJob absent from the cache may exist: the reconciler then GETs it."""
        self.rayjobs_listed = threading.Event()
        if rayjobs_listed:
            self.rayjobs_listed.set()
        self.jobs = Store(trim_job, job_fingerprint)
        self.rayjobs = Store(trim_rayjob, rayjob_fingerprint)
        self.pods = Store(pods.trim_pod, lambda body: None, index=by_job)  # never written by us: no echoes
        # the adapters' export Jobs (job/export_job.py), listed after start-up like the pods; until
        # then a reconcile neither creates one nor judges one (control/reconcile.py, _export)
        self.export_jobs = Store(trim_export_job, lambda body: body.get("status") or {}, index=by_job)
        self.export_jobs_listed = threading.Event()
        if rayjobs_listed:  # a cache filled by hand (tests, tools): every kind counts as listed
            self.export_jobs_listed.set()
        self.parsed: Memo[Any] = Memo(2048)  # (uid, generation) -> (job, unknown fields) or InvalidJob; ~15 KiB each
        self.digests: Memo[dict[str, str]] = Memo()  # (uid, generation) -> Kind -> digest of each rendered child
        # GPU accounting (gpuhours.account) reads the pods only once their listing is complete
        # (None: the whole cluster), else a pod not yet listed would look gone
        self.pods_listed: set[str | None] = set()
        self._gone_lock = threading.Lock()
        self._gone: OrderedDict[Key, dict[str, dict[str, Any]]] = OrderedDict()  # (namespace, job) -> uid -> last state
        self._gone_heads: OrderedDict[Key, dict[str, dict[str, Any]]] = OrderedDict()  # (namespace, job) -> cluster -> {name, at}

    def pods_complete(self, namespace: str) -> bool:
        return None in self.pods_listed or namespace in self.pods_listed

    def forget_pod(self, body: dict[str, Any], now: Callable[[], str] | None = None) -> None:
        """A pod was deleted: drop it, and keep its last state (the cached one: a re-list names a
        deletion by name and uid only) until its job's accounting has counted it; a Ray head,
        with when it went, for driver.lost (KubeRay v1.5.0 does not re-create it)."""
        cached = self.pods.get(key_of(body))
        if not self.pods.delete(body) or cached is None:
            return
        meta = cached["metadata"]
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        self._note_gone_head(cached, job, now)
        if not job or not gpuhours.pod_gpus(cached):
            return
        with self._gone_lock:
            self._gone.setdefault((meta["namespace"], job), {})[str(meta.get("uid"))] = cached
            self._gone.move_to_end((meta["namespace"], job))
            while sum(len(v) for v in self._gone.values()) > _MAX_GONE:
                self._gone.popitem(last=False)  # jobs never reconciled again (deleted): the oldest go

    def _note_gone_head(self, cached: dict[str, Any], job: str | None, now: Callable[[], str] | None) -> None:
        meta = cached["metadata"]
        labels = meta.get("labels") or {}
        cluster = labels.get(driver.CLUSTER_LABEL)
        if not job or not cluster or labels.get(driver.NODE_TYPE_LABEL) != "head":
            return
        # since when: its deletionTimestamp (the end of its grace period), else when the watch said so
        at = meta.get("deletionTimestamp") or (now or _utcnow)()
        with self._gone_lock:
            self._gone_heads.setdefault((meta["namespace"], job), {})[cluster] = {"name": meta.get("name"), "at": at}
            self._gone_heads.move_to_end((meta["namespace"], job))
            while len(self._gone_heads) > _MAX_GONE:
                self._gone_heads.popitem(last=False)

    def gone_heads(self, namespace: str, job: str) -> dict[str, dict[str, Any]]:
        """RayCluster name -> {name, at} of the job's Ray head pods seen deleted (since this process started)."""
        with self._gone_lock:
            return dict(self._gone_heads.get((namespace, job)) or {})

    def gone_pods(self, namespace: str, job: str) -> dict[str, dict[str, Any]]:
        with self._gone_lock:
            return dict(self._gone.get((namespace, job)) or {})

    def counted(self, namespace: str, job: str, uids: frozenset[str]) -> None:
        """The job's status now holds these gone pods' hours: forget them."""
        with self._gone_lock:
            left = {u: p for u, p in (self._gone.get((namespace, job)) or {}).items() if u not in uids}
            if left:
                self._gone[(namespace, job)] = left
            else:
                self._gone.pop((namespace, job), None)

    def pods_of(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The cached pods of a job's Ray cluster and one-off Jobs (labelled lorarl.dev/job by render)."""
        return self.pods.by_index((namespace, job))

    def export_jobs_of(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The cached export Jobs of a job (labelled lorarl.dev/job by render)."""
        return self.export_jobs.by_index((namespace, job))

    def settle(self, key: Key, finished: Callable[[dict[str, Any]], bool]) -> bool:
        """Keep a job compact that ``finished`` says has nothing left to do, and drop its
        memos (also when it was compact already: the reconcile of a stand-in parsed the job it
        read); True if it was whole before."""
        replaced = self.jobs.compact(key, lambda body: compact_job(body) if finished(body) else None)
        body, whole = self.jobs.read(key)
        if body is None or whole:
            return False
        meta = body["metadata"]
        self.parsed.discard((meta.get("uid"), meta.get("generation")))
        self.digests.discard((meta.get("uid"), meta.get("generation")))
        return replaced is not None
