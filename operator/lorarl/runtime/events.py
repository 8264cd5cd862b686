"""Aggregated core/v1 Events: a repeated Event is one object whose ``count`` grows.

As client-go's EventRecorder does (k8s.io/client-go@v0.37.2 tools/record/events_cache.go:52-67
``getEventKey``: source, involved object, type, reason and message; :327-372 ``eventObserve``: a
key seen before becomes a PATCH of ``count`` + 1 and ``lastTimestamp`` of the Event it created,
keeping its ``firstTimestamp``; :36 an LRU of 4096 keys; event.go:336-351 ``recordEvent``: a PATCH
that answers 404 (the Event expired, 1 h by default) creates a new one). ``kubectl events`` and
``kubectl describe`` then show one line "x<count>" instead of one per repetition. The cache is
this process's memory: after a restart (or a leader change) the first repetition creates a new
Event, as client-go's does.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..reporter.text import printable
from .kube import FIELD_MANAGER, Api, ApiError

MAX_KEYS = 4096  # client-go's maxLruCacheEntries


@dataclass
class _Seen:
    name: str
    count: int
    first: str


class EventRecorder:
    def __init__(self, kube: Api, max_keys: int = MAX_KEYS) -> None:
        self.kube = kube
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()

    @staticmethod
    def key(involved: dict[str, Any], type_: str, reason: str, message: str) -> tuple[str, ...]:
        meta = involved["metadata"]
        return (FIELD_MANAGER, involved["apiVersion"], involved["kind"], meta["namespace"], meta["name"], meta.get("uid", ""), type_, reason, message[:1024])

    def record(self, involved: dict[str, Any], type_: str, reason: str, message: str, now: str, now_micro: str) -> dict[str, Any]:
        """Post the Event, or count one more of an Event this process posted before. Returns
        the Event as the API server stored it."""
        reason, message = printable(reason), printable(message, 1024)  # text from outside (lorarl.reporter.text)
        key = self.key(involved, type_, reason, message)
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
        namespace = involved["metadata"]["namespace"]
        if seen is not None:
            try:
                stored = self.kube.patch_event(namespace, seen.name, {"count": seen.count + 1, "lastTimestamp": now})
            except ApiError as err:
                if err.status != 404:
                    raise
            else:
                self._remember(key, stored)
                return stored
        stored = self.kube.post_event(involved, type_, reason, message, now, now_micro)
        self._remember(key, stored)
        return stored

    def _remember(self, key: tuple[str, ...], stored: dict[str, Any]) -> None:
        with self._lock:
            self._seen[key] = _Seen(stored["metadata"]["name"], int(stored.get("count") or 1), stored.get("firstTimestamp") or "")
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)
