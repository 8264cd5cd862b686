"""Prometheus metrics of the operator (served by prometheus_client on --metrics-port)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

RECONCILES = Counter("lorarl_reconcile_total", "Reconciles by trigger and result.", ["trigger", "result"])
RECONCILE_SECONDS = Histogram(
    "lorarl_reconcile_duration_seconds",
    "Duration of one reconcile.",
    ["trigger"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHILDREN_APPLIED = Counter("lorarl_children_applied_total", "Child objects server-side applied.")
STATUS_WRITES = Counter("lorarl_status_writes_total", "Status patches written by the operator.")
CACHED = Gauge("lorarl_cached_objects", "Objects in the watch caches; form=compact: finished LoraRLJobs kept as a small stand-in.", ["kind", "form"])
LEADER = Gauge("lorarl_leader", "1 while this replica runs the operator (holds the Lease, or runs without leader election), 0 as a standby.")
API_RETRY_AFTER = Counter(
    "lorarl_api_retry_after_total", "API requests sent again after the server answered with Retry-After (429: API Priority and Fairness).", ["code"]
)


class SampleCollector:
    """Metrics computed when Prometheus scrapes (a prometheus_client custom collector): the
    source yields (name, labels, value) rows, which become one family per name. Nothing is kept
    between scrapes, so the series follow what the source holds (the operator's caches).

    One instance per process (registered once); ``bind`` points it at the running controller, a
    standby has no source and shows nothing of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # two scrapes at once must not interleave the source's state
        self._source: Callable[[], Iterable[Any]] | None = None
        self._help: Mapping[str, str] = {}
        self._counters: frozenset[str] = frozenset()

    def bind(self, source: Callable[[], Iterable[Any]], help_texts: Mapping[str, str], counters: frozenset[str] = frozenset()) -> None:
        with self._lock:
            self._source, self._help, self._counters = source, help_texts, counters

    def describe(self) -> list[Any]:
        return []  # the names depend on the source: not checked for duplicates at registration

    def collect(self) -> Iterable[Any]:
        with self._lock:
            if self._source is None:
                return []
            families: dict[str, tuple[Any, list[str]]] = {}
            for name, labels, value in self._source():
                if name not in families:
                    kind = CounterMetricFamily if name in self._counters else GaugeMetricFamily
                    families[name] = kind(name, self._help.get(name, name), labels=list(labels)), list(labels)
                family, names = families[name]
                family.add_metric([labels[k] for k in names], value)
            return [family for family, _ in families.values()]


JOB_METRICS = SampleCollector()
REGISTRY.register(JOB_METRICS)
