"""What the bench reads to measure: a process's CPU and peak RSS from /proc, and the API server's
audit log (every request with its user, verb and resource; see lorarl_dev.controlplane.AUDIT_POLICY),
read incrementally so that each phase counts only its own requests, per identity."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


class ProcMeter:
    """CPU seconds (user + system) and peak resident memory of one process."""

    def __init__(self, pid: int):
        self.pid = pid

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (proc(5) fields 14, 15)

    def _status(self, key: str) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024  # kB -> MiB
        return float("nan")

    def peak_rss_mib(self) -> float:
        return self._status("VmHWM")

    def rss_mib(self) -> float:
        return self._status("VmRSS")


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    resource: str  # resource or resource/subresource; "" for a non-resource URL
    code: int
    agent: str
    namespace: str = ""

    @property
    def write(self) -> bool:
        return self.verb in WRITE_VERBS


class AuditTail:
    """The finished requests (stage ResponseComplete) of users whose name contains ``marker``,
    read from the audit log as it grows. The API server writes each line before it answers
    (audit mode blocking), so after a response the request is in the file."""

    def __init__(self, path: str, marker: str):
        self.path, self.marker = path, marker
        self.requests: list[Request] = []
        self._offset = 0
        self._partial = b""
        self.last_write_at: dict[str, float] = {}
        self.last_request_at: dict[str, float] = {}

    def poll(self) -> int:
        """Read what was appended; returns the number of requests recorded so far."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return len(self.requests)
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        needle = self.marker.encode()
        now = time.monotonic()
        for line in lines:
            if needle not in line or b'"ResponseComplete"' not in line:
                continue
            event = json.loads(line)
            user = (event.get("user") or {}).get("username", "")
            if self.marker not in user or event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            req = Request(
                user,
                event.get("verb", ""),
                resource,
                int((event.get("responseStatus") or {}).get("code", 0)),
                event.get("userAgent", ""),
                ref.get("namespace", ""),
            )
            self.requests.append(req)
            self.last_request_at[user] = now
            if req.write:
                self.last_write_at[user] = now
        return len(self.requests)

    def between(self, start: int, end: int, user: str) -> list[Request]:
        return [r for r in self.requests[start:end] if r.user == user]


def by_verb(requests: list[Request]) -> dict[str, int]:
    """Counts keyed "verb resource" (e.g. "patch lorarljobs/status"), sorted by key."""
    return dict(sorted(Counter(f"{r.verb} {r.resource}" for r in requests).items()))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil
    return ordered[min(rank, len(ordered)) - 1]
