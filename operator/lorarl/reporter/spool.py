"""The status spool between the trainer's container and the reporter sidecar: the container that
runs the trainer holds no API token (issue 19, finding 7), so the reporter there writes each
status it would send to a file on a volume it shares with the sidecar, and the sidecar, the only
container with the job's token, sends it.

Files in the spool directory: ``status.json`` (``{"seq": N, "status": {...}}``, replaced
atomically, the newest only) written by the trainer's side; ``sent`` (the last ``seq`` the API
server accepted) written by the sidecar, which the trainer's side waits for on its final report.
The sidecar trusts nothing in the file but its shape: only the reporter's own status keys are
sent (``kubeapi.patch_body``), a file over ``MAX_BYTES`` is skipped, and the API server's
job-status policy bounds the rest, as it did when the trainer's container held the token.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from .kubeapi import REQUEST_TIMEOUT, Patcher, api_config
from .notes import warn

SPOOL_ENV = "LORARL_STATUS_SPOOL"
STATUS_FILE = "status.json"
SENT_FILE = "sent"
MAX_BYTES = 256 * 1024  # the job-status policy admits at most ~64 KB of reporter keys
POLL_SECONDS = 0.5


class SpoolPatcher:
    """What the reporter next to the trainer uses instead of ``kubeapi.Patcher``: ``send``
    writes the status to the spool (True once written); with a ``timeout`` (the final report) it
    also waits that long for the sidecar to say it was sent. Never raises."""

    def __init__(self, directory: str, target: str, timeout: float = REQUEST_TIMEOUT):
        self.directory = directory
        self.target = target
        self.timeout = timeout
        self.sent = 0
        self.failures = 0
        self._seq = 0
        self._lock = threading.Lock()

    def send(self, status: dict, timeout: float | None = None) -> bool:
        with self._lock:
            self._seq += 1
            seq = self._seq
            try:
                data = json.dumps({"seq": seq, "status": status}, allow_nan=False, separators=(",", ":"))
                tmp = os.path.join(self.directory, f".{STATUS_FILE}.tmp")
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(self.directory, STATUS_FILE))
            except Exception as exc:  # reporting must never take the run down
                if self.failures == 0:
                    warn(f"cannot write the status spool {self.directory} ({type(exc).__name__}: {exc})"[:300])
                self.failures += 1
                return False
            self.failures = 0
            self.sent += 1
        if timeout is None:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if read_sent(self.directory) >= seq:
                return True
            time.sleep(0.1)
        return False


def read_sent(directory: str) -> int:
    try:
        with open(os.path.join(directory, SENT_FILE), encoding="utf-8") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def read_status(directory: str) -> tuple[int, dict] | None:
    """(seq, status) of the spool's newest status, or None when absent or not of its shape."""
    try:
        path = os.path.join(directory, STATUS_FILE)
        if os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("seq"), int) or not isinstance(doc.get("status"), dict):
        return None
    return doc["seq"], doc["status"]


def _write_sent(directory: str, seq: int) -> None:
    tmp = os.path.join(directory, f".{SENT_FILE}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(seq))
    os.replace(tmp, os.path.join(directory, SENT_FILE))


def forward(directory: str, patcher, stop: threading.Event, poll: float = POLL_SECONDS) -> int:
    """Send each new status of the spool until ``stop`` is set, then the last one once more if
    it was not sent. Returns the last seq sent."""
    sent_seq = read_sent(directory)
    while True:
        stopping = stop.is_set()
        found = read_status(directory)
        if found is not None and found[0] > sent_seq and patcher.send(found[1]):
            sent_seq = found[0]
            try:
                _write_sent(directory, sent_seq)
            except OSError as exc:
                warn(f"cannot write {SENT_FILE} in {directory} ({type(exc).__name__}: {exc})"[:300])
        if stopping:
            return sent_seq
        stop.wait(poll)


def sidecar_main(argv: list) -> int:
    """``reporter.pyz sidecar --namespace NS --name JOB --spool DIR``: the token holder."""
    import argparse

    p = argparse.ArgumentParser(prog="reporter.pyz sidecar", description="Send the statuses the trainer's container spools to the LoraRLJob status.")
    p.add_argument("--namespace", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--spool", required=True, help="the directory shared with the trainer's container")
    p.add_argument("--poll", default=POLL_SECONDS, type=float)
    opts = p.parse_args(argv)
    config = api_config()
    if config is None:
        warn("no Kubernetes API configured (KUBERNETES_SERVICE_HOST or LORARL_API_SERVER); the sidecar sends nothing")
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    forward(opts.spool, Patcher(config, opts.namespace, opts.name), stop, opts.poll)
    return 0
