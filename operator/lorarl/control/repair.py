"""When each job's children are all applied again (``--repair-seconds``): the repair of drift.

Nothing watches the children other than the RayJob (the operator may only create and patch them:
no RBAC to read ConfigMaps or ServiceAccounts), so one deleted or edited by hand is not seen. A
reconcile applies only the children whose render changed (``reconcile.children_to_apply``); this
schedule makes a resync apply every child of a job once per period, so such drift is repaired
within a period. A job first seen gets its first repair one to two periods later, at a moment
spread by its key, so that a restart does not apply every job's children at once (and nothing is
applied in the first period after a job is seen: a new job's children were all just applied).

Pure of I/O; the clock is injectable.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Hashable


def spread(key: Hashable) -> float:
    """A fraction in [0, 1) fixed by the key."""
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") / 2**64


class Repairs:
    def __init__(self, period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._period, self._clock = period, clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}  # key -> when its children were last all applied

    def due(self, key: Hashable) -> bool:
        """Whether the key's next resync should apply all its children (never with period 0)."""
        if self._period <= 0:
            return False
        with self._lock:
            now = self._clock()
            last = self._last.setdefault(key, now + self._period * spread(key))
            return now - last >= self._period

    def done(self, key: Hashable) -> None:
        """Every child of the key was applied now."""
        with self._lock:
            self._last[key] = self._clock()

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._last.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)
