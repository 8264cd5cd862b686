"""Prometheus metrics of the operator (served by prometheus_client on --metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("lorarl_reconcile_total", "Reconciles by trigger and result.", ["trigger", "result"])
RECONCILE_SECONDS = Histogram(
    "lorarl_reconcile_duration_seconds",
    "Duration of one reconcile.",
    ["trigger"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHILDREN_APPLIED = Counter("lorarl_children_applied_total", "Child objects server-side applied.")
STATUS_WRITES = Counter("lorarl_status_writes_total", "Status patches written by the operator.")
JOBS = Gauge("lorarl_jobs", "LoraRLJobs by phase (as last reconciled).", ["phase"])
CACHED = Gauge("lorarl_cached_objects", "Objects in the watch caches; form=compact: finished LoraRLJobs kept as a small stand-in.", ["kind", "form"])
LEADER = Gauge("lorarl_leader", "1 while this replica runs the operator (holds the Lease, or runs without leader election), 0 as a standby.")
API_RETRY_AFTER = Counter(
    "lorarl_api_retry_after_total", "API requests sent again after the server answered with Retry-After (429: API Priority and Fairness).", ["code"]
)
