"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

Followed: k8s.io/client-go@v0.37.2 ``tools/leaderelection/leaderelection.go`` (LE) and
``tools/leaderelection/resourcelock/leaselock.go`` (LL):

* Expiry is judged on this process's own monotonic clock, from the moment it last *observed a
  change* of the lease record, plus the record's ``leaseDurationSeconds`` (LE:20-28 and
  ``isLeaseValid``/``setObservedRecord``, LE:548-564). The holder's ``renewTime`` is never
  compared with our clock, so clock skew between nodes does not matter.
* A candidate takes the lease when it is absent (create), has no holder (released), or has
  expired; a takeover increments ``leaseTransitions`` and sets ``acquireTime``, a renewal keeps
  both (``tryAcquireOrRenew``, LE:444-515).
* Every write is a PUT of the lease as last read, with its ``resourceVersion`` (LL:73-96): a 409
  means another candidate wrote first, so we lost that round.
* The leader renews every retry period; if it has not renewed for the renew deadline it is no
  longer the leader (``renew``, LE:279-312). We also give up at once when the lease shows another
  holder. The caller must stop writing then (controller-runtime exits: pkg/manager/internal.go
  631-642 of sigs.k8s.io/controller-runtime@v0.25.2).
* On a clean shutdown the leader releases: ``holderIdentity`` cleared, ``leaseDurationSeconds``
  1, transitions kept (``tryRelease``, LE:326-359), so a standby takes over at its next try.
* Candidates retry with jitter: retry period x (1 + random x 1.2) (``acquire``, LE:252-277).

Why not ``kubernetes.leaderelection`` (the Python client, 37.0): it never releases the lease, does
not count ``leaseTransitions``, its acquire loop cannot be stopped (a standby could not honour
SIGTERM), and it calls ``sys.exit`` on bad settings. So this module uses the public
``CoordinationV1Api`` directly.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

log = logging.getLogger("lorarl.leader")
JITTER_FACTOR = 1.2  # LE:71-73


@dataclass(frozen=True)
class Timings:
    """Seconds. client-go's (and controller-runtime's) defaults: 15 / 10 / 2."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @property
    def lease_seconds(self) -> int:
        """leaseDurationSeconds is whole seconds: round up, never below the renew deadline."""
        return math.ceil(self.lease_duration)

    def problem(self) -> str | None:
        """Why these timings are unsafe, or None: lease > renew > retry > 0 (client-go, LE:76-92,
        asks renew > 1.2 x retry, its jitter factor; this flag contract asks renew > retry)."""
        if not self.retry_period > 0:
            return "--retry-period must be greater than 0"
        if not self.renew_deadline > self.retry_period:
            return f"--renew-deadline ({self.renew_deadline:g}) must be greater than --retry-period ({self.retry_period:g})"
        if not self.lease_duration > self.renew_deadline:
            return f"--lease-duration ({self.lease_duration:g}) must be greater than --renew-deadline ({self.renew_deadline:g})"
        return None


def new_identity(environ: Mapping[str, str] | None = None) -> str:
    """``$POD_NAME`` (else the hostname) plus a random suffix, unique per process even when a
    restarted pod keeps its name (as controller-runtime: hostname + "_" + uuid)."""
    environ = os.environ if environ is None else environ
    return f"{environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class Record:
    """The election record in a Lease's spec (the fields LL:122-160 maps)."""

    holder: str = ""
    lease_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,  # "" once released, as client-go writes it
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


# -- pure decisions (unit-tested with a fake clock) ---------------------------------------------


def expired(observed_at: float, lease_seconds: int, now: float) -> bool:
    """Has the lease run out, judged only by our own clock since we last saw it change?
    (LE isLeaseValid: valid while observedTime + leaseDuration is after now.)"""
    return observed_at + lease_seconds <= now


def may_take(record: Record, me: str, observed_at: float, now: float) -> bool:
    """Whose turn: ours if we hold it, nobody holds it, or the holder's lease ran out (LE:492-495)."""
    return record.holder in ("", me) or expired(observed_at, record.lease_seconds, now)


def next_record(old: Record | None, me: str, stamp: str, lease_seconds: int) -> Record:
    """The record we write: a renewal keeps acquireTime and transitions, a takeover counts one
    more transition (LE:497-505); a new lease starts at 0 transitions."""
    if old is None:
        return Record(me, lease_seconds, stamp, stamp, 0)
    if old.holder == me:
        return Record(me, lease_seconds, old.acquire_time or stamp, stamp, old.transitions)
    return Record(me, lease_seconds, stamp, stamp, old.transitions + 1)


def released(old: Record, stamp: str) -> Record:
    """The record a leader leaves behind on a clean shutdown (LE:341-346)."""
    return Record("", 1, stamp, stamp, old.transitions)


def renewal_overdue(last_renewed: float, renew_deadline: float, now: float) -> bool:
    """The leader must stop once it has not renewed for the renew deadline."""
    return now - last_renewed >= renew_deadline


def micro_time(moment: datetime.datetime) -> str:
    """metav1.MicroTime's wire format (RFC 3339 with exactly six fractional digits)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the elector (I/O) --------------------------------------------------------------------------


def describe_error(err: BaseException) -> str:
    """One line: the API server's status and message, not the client's dump of headers."""
    if isinstance(err, ApiException):
        message = err.reason or ""
        try:
            message = json.loads(err.body or "").get("message", message)  # none: ValueError
        except (TypeError, ValueError, AttributeError):
            pass
        return f"{err.status} {message}"
    return f"{type(err).__name__}: {err}"


class LeadershipLost(Exception):
    """This process is no longer (or may no longer be) the leader."""


class LeaseElector:
    """One candidate for the Lease ``namespace/name``. Blocking; run it from plain threads."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        timings: Timings = Timings(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.leases = kubernetes.client.CoordinationV1Api(client)
        self._serialize = client.sanitize_for_serialization
        self.namespace, self.name, self.identity, self.timings = namespace, name, identity, timings
        self._clock, self._wall = clock, wall
        self._lease: dict[str, Any] | None = None  # as last read or written (has resourceVersion)
        self.observed: Record | None = None
        self.observed_at = 0.0
        self.last_renewed = 0.0  # clock() when our last successful write was *sent*

    @property
    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_leader(self) -> bool:
        return self.observed is not None and self.observed.holder == self.identity

    def _timeout(self) -> float:
        """Per request: never let one hung call outlive the renew deadline of a leader."""
        budget = self.timings.retry_period
        if self.is_leader:
            budget = min(budget, self.timings.renew_deadline - (self._clock() - self.last_renewed))
        return max(budget, 0.2)

    def _observe(self, record: Record) -> None:
        if record != self.observed:  # LE:486-490: the clock restarts only on a change
            self.observed, self.observed_at = record, self._clock()

    def _read(self) -> dict[str, Any] | None:
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout())
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return self._serialize(lease)

    def _write(self, record: Record) -> bool:
        """Create, or PUT with the resourceVersion we read; False when another candidate won."""
        sent = self._clock()
        try:
            if self._lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": record.to_spec(),
                }
                # a dict body is serialised as it is (ApiClient.sanitize_for_serialization); the client types it V1Lease
                result = self.leases.create_namespaced_lease(self.namespace, body, _request_timeout=self._timeout())  # type: ignore[arg-type]
            else:
                body = {**self._lease, "spec": {**(self._lease.get("spec") or {}), **record.to_spec()}}
                result = self.leases.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=self._timeout())  # type: ignore[arg-type]
        except ApiException as err:
            if err.status in (409, 404):  # somebody else wrote (or deleted) it first
                self._lease = None
                return False
            raise
        self._lease = self._serialize(result)
        self._observe(record)
        if record.holder == self.identity:
            self.last_renewed = sent
        return True

    def try_acquire_or_renew(self) -> bool:
        """One round of LE tryAcquireOrRenew. Raises LeadershipLost if we led and see another holder."""
        was_leader = self.is_leader
        stamp = micro_time(self._wall())
        if was_leader and self._lease is not None:  # fast path: the lease as we last wrote it (LE:455-467)
            try:
                if self._write(next_record(self.observed, self.identity, stamp, self.timings.lease_seconds)):
                    return True
            except Exception as err:  # noqa: BLE001 - fall back to a fresh read, like LE
                log.debug("optimistic renewal of lease %s failed: %s", self.describe, describe_error(err))
        lease = self._read()
        if lease is None:
            self._lease = None
            return self._write(next_record(None, self.identity, stamp, self.timings.lease_seconds))
        self._lease = lease
        current = Record.from_lease(lease)
        self._observe(current)
        if was_leader and current.holder != self.identity:
            raise LeadershipLost(f"the lease {self.describe} is now held by {current.holder or 'nobody'}")
        if not may_take(current, self.identity, self.observed_at, self._clock()):
            return False
        return self._write(next_record(current, self.identity, stamp, self.timings.lease_seconds))

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we hold the lease (True) or ``stop`` is set (False)."""
        reported = None
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    log.info(
                        "acquired the lease %s as %s (leaseTransitions %d)", self.describe, self.identity, self.observed.transitions if self.observed else 0
                    )
                    return True
            except Exception as err:  # noqa: BLE001 - an API hiccup: try again next period
                log.warning("could not read or take the lease %s: %s", self.describe, describe_error(err))
            if self.observed is not None and self.observed.holder != reported:
                reported = self.observed.holder
                log.info("the lease %s is held by %s; %s waits as a standby", self.describe, reported or "nobody", self.identity)
            stop.wait(self.timings.retry_period * (1 + random.random() * JITTER_FACTOR))
        return False

    def keep_renewing(self, stop: threading.Event) -> None:
        """Renew every retry period until ``stop`` (returns) or until leadership is lost (raises)."""
        while not stop.wait(self.timings.retry_period):
            while True:
                try:
                    if self.try_acquire_or_renew():
                        break
                    reason = "another candidate wrote the lease first"
                except LeadershipLost:
                    raise
                except Exception as err:  # noqa: BLE001 - keep trying until the deadline
                    reason = describe_error(err)
                if renewal_overdue(self.last_renewed, self.timings.renew_deadline, self._clock()):
                    raise LeadershipLost(f"could not renew the lease {self.describe} for {self.timings.renew_deadline:g}s: {reason}")
                log.warning("renewing the lease %s failed (%s); retrying", self.describe, reason)
                if stop.wait(self.timings.retry_period):
                    return

    def release(self) -> bool:
        """Give the lease up if we still hold it, so a standby need not wait for it to expire."""
        for _ in range(3):  # a 409 can race with an in-flight renewal (LE:347-351)
            try:
                lease = self._read()
                if lease is None:
                    return False
                self._lease = lease
                current = Record.from_lease(lease)
                if current.holder != self.identity:
                    return True
                if self._write(released(current, micro_time(self._wall()))):
                    log.info("released the lease %s", self.describe)
                    return True
            except Exception as err:  # noqa: BLE001 - best effort: the lease expires anyway
                log.warning("could not release the lease %s: %s", self.describe, describe_error(err))
                return False
        return False
