"""The background thread: at most one status patch per interval (only when the summary
changed), a checkpoint scan and a ledger heartbeat every interval, and a bounded final report.
A slow or unreachable API server never slows the trainer's output."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .notes import warn
from .summary import Summary


class Sender(Protocol):
    """Where the status goes: the API server (kubeapi.Patcher) or the sidecar's spool
    (spool.SpoolPatcher). True once sent (or written)."""

    target: str  # what it reports to, for the log
    timeout: float  # seconds a send may take

    def send(self, status: dict, timeout: float | None = None) -> bool: ...


FINAL_TIMEOUT = 10.0  # seconds for everything after the child exited


class Reporter:
    """Owns the Summary (behind a lock) and the thread that patches, scans and heartbeats.

    ``scan()`` returns (saves, save_dir) or None; ``heartbeat(fields)`` records this attempt's
    progress (``Summary.ledger_fields``) and running time on the volume. Both run on the background thread only."""

    def __init__(
        self,
        summary: Summary,
        patcher: Sender | None,
        interval: float,
        scan: Callable[[], tuple | None] | None = None,
        heartbeat: Callable[[dict], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.summary = summary
        self.patcher = patcher
        self.interval = max(0.05, float(interval))
        self.scan = scan
        self.heartbeat = heartbeat
        self._now = monotonic
        self._cond = threading.Condition()
        self._stopping = False
        self._sent_version = 0
        self._last_attempt = -math.inf
        self._next_tick = -math.inf
        self._notes_shown = 0
        self._loop_error_logged = False
        self._thread = threading.Thread(target=self._run, name="lorarl-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def feed(self, event) -> None:
        with self._cond:
            changed = self.summary.apply(event)
            notes = self.summary.notes[self._notes_shown :]
            self._notes_shown = len(self.summary.notes)
            if changed:
                self._cond.notify()
        for note in notes:
            warn(note)

    def snapshot(self) -> tuple:
        with self._cond:
            return self.summary.version, self.summary.status()

    def _ticks(self) -> bool:
        return self.scan is not None or self.heartbeat is not None

    def _due(self, now: float) -> tuple:
        patch_due = self.patcher is not None and self.summary.version != self._sent_version and now >= self._last_attempt + self.interval
        tick_due = self._ticks() and now >= self._next_tick
        return patch_due, tick_due

    def _wait_time(self, now: float) -> float | None:
        deadlines = []
        if self.patcher is not None and self.summary.version != self._sent_version:
            deadlines.append(self._last_attempt + self.interval)
        if self._ticks():
            deadlines.append(self._next_tick)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _tick(self) -> None:
        if self.scan is not None:
            result = self.scan()
            if result is not None:
                with self._cond:
                    self.summary.apply_scan(*result)
        if self.heartbeat is not None:
            with self._cond:
                fields = self.summary.ledger_fields()
            self.heartbeat(fields)

    def _run(self) -> None:
        while True:
            try:
                with self._cond:
                    while True:
                        if self._stopping:
                            return
                        now = self._now()
                        patch_due, tick_due = self._due(now)
                        if patch_due or tick_due:
                            break
                        self._cond.wait(self._wait_time(now))
                if tick_due:
                    self._next_tick = self._now() + self.interval
                    self._tick()
                with self._cond:
                    patch_due, _ = self._due(self._now())
                    version, status = self.summary.version, self.summary.status()
                if patch_due and self.patcher is not None:  # (_due says so only with a patcher)
                    self._last_attempt = self._now()
                    if self.patcher.send(status):
                        self._sent_version = version
            except Exception as exc:  # keep reporting alive; never take the run down
                if not self._loop_error_logged:
                    self._loop_error_logged = True
                    warn(f"internal error in status loop: {type(exc).__name__}: {exc}"[:300])
                time.sleep(self.interval)

    def finish(self, total_timeout: float = FINAL_TIMEOUT) -> bool:
        """Stop the loop, scan and heartbeat once more, send the final patch (bounded).
        True when delivered."""
        deadline = self._now() + total_timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            timeout = (self.patcher.timeout if self.patcher else 0) + 0.5
            self._thread.join(max(0.0, min(timeout, deadline - self._now())))
        if self._ticks():
            ticker = threading.Thread(target=self._tick, daemon=True)
            ticker.start()
            ticker.join(max(0.0, min(2.0, deadline - self._now())))
        if self.patcher is None:
            return False
        _, status = self.snapshot()
        for _ in range(3):
            remaining = deadline - self._now()
            if remaining <= 0.1:
                break
            if self.patcher.send(status, timeout=min(self.patcher.timeout, remaining)):
                return True
            time.sleep(max(0.0, min(0.5, deadline - self._now())))
        warn(f"final status patch to {self.patcher.target} was not delivered")
        return False
