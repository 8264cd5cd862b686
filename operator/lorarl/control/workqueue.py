"""A keyed work queue for reconciles: deduplicated, one worker per key, due times, per-key backoff.

It follows client-go's workqueue (k8s.io/client-go/util/workqueue): a key waiting in the queue is
there once however often it is added (queue.go: ``dirty`` set); a key being processed is not
handed to a second worker, and an add meanwhile runs it once more when the first is ``done``
(queue.go: ``processing`` set); ``add(key, after=...)`` schedules it for a moment (delaying_queue.go),
and the earlier of two moments wins; failures back off per key (default_rate_limiters.go:
``ItemExponentialFailureRateLimiter``) until ``forget``. One difference: a backed-off key stays
backed off when a periodic resync adds it (``respect_backoff``), so a refused apply is retried by
one path only, the backoff; an event of the job itself (the user edited it) still runs at once.

Fair across tenants (client-go's queue is one FIFO): keys that are due wait in one FIFO per tenant
(``tenant(key)``: the namespace of a (namespace, name) key), and ``get`` takes from the tenants in
turn, round-robin. A burst of one namespace's keys then delays another namespace's new key by at
most one key per busy namespace, not by the whole burst. Within a tenant, keys run in the order
they fell due, as before.

Pure of I/O; the clock is injectable, so the unit tests drive time by hand.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# when two triggers of one key merge, the run is named by the most telling one. Every trigger is
# ranked above the resync: a worker skips a resync of a finished job (controller._work), so an
# event merged with a stale resync must keep its own name or its reconcile is lost (the end of an
# export at a save of a job that has settled, tests/operator/test_workqueue.py)
TRIGGER_RANK = {"change": 0, "rayjob-event": 1, "job-event": 2, "export-event": 3, "pod-event": 4, "timer": 5, "retry": 6, "resync": 7}
RESYNC = "resync"  # the periodic backstop (controller._resync_loop), which a worker may skip


def stronger(a: str | None, b: str) -> str:
    if a is None:
        return b
    return a if TRIGGER_RANK[a] <= TRIGGER_RANK[b] else b


def merge(old: tuple[float, str] | None, due: float, trigger: str, now: float) -> tuple[float, str]:
    """Two schedules of one key: it runs at the earlier moment, named by what makes it run
    then (a resync that pulls a timer due in an hour forward is a resync; of two adds due
    already, the more telling name)."""
    if old is None:
        return due, trigger
    old_due, old_trigger = old
    if old_due <= now and due <= now:
        return min(old_due, due), stronger(old_trigger, trigger)
    return (due, trigger) if due < old_due else (old_due, old_trigger)


def namespace_of(key: Hashable) -> Hashable:
    """The tenant of a (namespace, name) key; every other key is of one tenant (None)."""
    return key[0] if isinstance(key, tuple) and key else None


class WorkQueue(Generic[K]):
    def __init__(self, clock: Callable[[], float] = time.monotonic, tenant: Callable[[K], Hashable] = namespace_of) -> None:
        self._clock = clock
        self._tenant = tenant
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, K]] = []  # (due, seq, key) of keys not yet due; stale entries are skipped
        self._ready: dict[Hashable, deque[K]] = {}  # tenant -> its due keys, in the order they fell due
        self._turns: deque[Hashable] = deque()  # tenants with due keys, in the order they are served
        self._in_ready: set[K] = set()  # keys in a ready FIFO (an entry whose key was taken or removed is skipped)
        self._due: dict[K, float] = {}  # key -> when it runs (waiting keys only)
        self._trigger: dict[K, str] = {}
        self._processing: set[K] = set()
        self._again: dict[K, tuple[float, str]] = {}  # added while processing: re-queue at done
        # a schedule a resync pulled forward, put back at done: the controller skips a resync of
        # a finished job, and a timer lost with it (the ttlSecondsAfterFinished deletion, due a
        # second after the Failed write, absorbed by a resync queued from the older cached copy)
        # would never come back
        self._kept: dict[K, tuple[float, str]] = {}
        self._failures: dict[K, int] = {}
        self._backoff_until: dict[K, float] = {}
        self._seq = itertools.count()
        self._shutdown = False

    # -- adding ---------------------------------------------------------------------------------

    def add(self, key: K, trigger: str, after: float = 0.0, respect_backoff: bool = False) -> None:
        with self._cond:
            if self._shutdown:
                return
            now = self._clock()
            if respect_backoff and self._backoff_until.get(key, 0.0) > now:
                return  # its retry is scheduled already (the backoff added it)
            due = now + max(0.0, after)
            if key in self._processing:
                self._keep(key, self._again.get(key), due, trigger)
                self._again[key] = merge(self._again.get(key), due, trigger, self._clock())
                return
            self._schedule(key, due, trigger)

    def add_rate_limited(self, key: K, trigger: str, delay: Callable[[int], float]) -> float:
        """Re-run ``key`` after ``delay(n)`` seconds, n = its failures so far (then n + 1)."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
            seconds = delay(n)
            self._backoff_until[key] = self._clock() + seconds
        self.add(key, trigger, after=seconds)
        return seconds

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff again."""
        with self._cond:
            self._failures.pop(key, None)
            self._backoff_until.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _keep(self, key: K, old: tuple[float, str] | None, due: float, trigger: str) -> None:
        """Keep aside a schedule that a resync due earlier absorbs (see ``_kept``), whichever of
        the two came first: the resync after the timer, or the timer after the resync (a resync
        queued while the reconcile that asks for the timer still runs)."""
        if old is None:
            return
        if trigger == RESYNC and old[1] != RESYNC and due < old[0]:
            self._kept[key] = merge(self._kept.get(key), *old, self._clock())
        elif old[1] == RESYNC and trigger != RESYNC and old[0] < due:
            self._kept[key] = merge(self._kept.get(key), due, trigger, self._clock())

    def _schedule(self, key: K, due: float, trigger: str) -> None:
        current = self._due.get(key)
        old = None if current is None else (current, self._trigger[key])
        self._keep(key, old, due, trigger)
        self._due[key], self._trigger[key] = merge(old, due, trigger, self._clock())
        if current is not None and current <= due:
            return  # already waiting for an earlier (or the same) moment
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._cond.notify()

    # -- taking ---------------------------------------------------------------------------------

    def _promote(self, now: float) -> None:
        """Move the keys that fell due from the heap to their tenant's FIFO, in due order."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due:  # superseded by an earlier schedule, or taken
                heapq.heappop(self._heap)
                continue
            if due > now:
                return
            heapq.heappop(self._heap)
            if key in self._in_ready:
                continue  # an entry of it waits already (it was removed and added again)
            tenant = self._tenant(key)
            fifo = self._ready.get(tenant)
            if fifo is None:
                fifo = self._ready[tenant] = deque()
                self._turns.append(tenant)
            fifo.append(key)
            self._in_ready.add(key)

    def _next_ready(self, now: float) -> K | None:
        """The next tenant's oldest due key (round-robin over tenants), or None."""
        while self._turns:
            tenant = self._turns.popleft()
            fifo = self._ready[tenant]
            key = fifo.popleft()
            self._in_ready.discard(key)
            if fifo:
                self._turns.append(tenant)  # its next key after every other tenant's
            else:
                del self._ready[tenant]
            due = self._due.get(key)
            if due is None or due > now:
                continue  # taken, removed, or removed and added again for later: its heap entry brings it back
            return key
        return None

    def get(self, timeout: float | None = None) -> tuple[K, str] | None:
        """The next due key and its trigger, marked as processing; None on shutdown or timeout.
        Due keys are taken from the tenants in turn."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                now = self._clock()
                self._promote(now)
                key = self._next_ready(now)
                if key is not None:
                    del self._due[key]
                    self._processing.add(key)
                    return key, self._trigger.pop(key)
                wait = None if not self._heap else self._heap[0][0] - now
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            again = self._again.pop(key, None)
            if again is not None and not self._shutdown:
                self._schedule(key, *again)
            if key not in self._due and not self._shutdown:  # (a key queued again keeps it until its next run)
                kept = self._kept.pop(key, None)
                if kept is not None:
                    self._schedule(key, *kept)  # at worst one reconcile more, at the time it asked for

    def remove(self, key: K) -> None:
        """Drop every trace of a key (its object is gone)."""
        with self._cond:
            self._due.pop(key, None)
            self._trigger.pop(key, None)
            self._again.pop(key, None)
            self._kept.pop(key, None)
            self._failures.pop(key, None)
            self._backoff_until.pop(key, None)

    # -- state ----------------------------------------------------------------------------------

    def waiting(self) -> dict[K, float]:
        """Waiting keys and when they are due (a copy)."""
        with self._cond:
            return dict(self._due)

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
