"""The trainer as a child process: every byte it writes to stdout/stderr goes, unchanged and
unbuffered, to ours (binary-safe; a partial line is passed on at once and parsed when its
newline arrives); SIGTERM/SIGINT/SIGHUP are forwarded; its exit code is ours (a child killed by
signal N gives 128+N, like a shell; 127/126 when it cannot be started)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from .notes import warn

MAX_LINE = 8 << 20  # longer lines are passed through but not parsed
DRAIN_SECONDS = 5.0  # grandchildren may hold the pipes open after the child exits


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except OSError:  # EPIPE etc.: stop writing, keep draining the child
            return False
        view = view[n:]
    return True


def pump(src_fd: int, dst_fd: int, on_line: Callable[[bytes], None]) -> None:
    """Copy src to dst as bytes arrive; hand every complete line to on_line afterwards."""
    writing = True
    buf = bytearray()
    skipping = False  # inside an over-long line
    while True:
        try:
            chunk = os.read(src_fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        if writing:
            writing = _write_all(dst_fd, chunk)
        buf += chunk
        start = 0
        while True:
            newline = buf.find(b"\n", start)
            if newline < 0:
                break
            if not skipping:
                on_line(bytes(buf[start:newline]))
            skipping = False
            start = newline + 1
        del buf[:start]
        if len(buf) > MAX_LINE:
            buf.clear()
            skipping = True
    if buf and not skipping:
        on_line(bytes(buf))
    try:
        os.close(src_fd)
    except OSError:
        pass


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _fileno(stream, default: int) -> int:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return default


class SignalForwarder:
    """Installed before the child starts; signals that arrive earlier are delivered once it runs."""

    def __init__(self):
        self.child = None
        self.pending = []
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                signal.signal(sig, self._forward)
            except (OSError, ValueError):
                pass

    def _forward(self, signum, _frame=None):
        if self.child is None:
            self.pending.append(signum)
            return
        try:
            self.child.send_signal(signum)
        except OSError:
            pass

    def attach(self, child) -> None:
        self.child = child
        for signum in self.pending:
            self._forward(signum)


def run(command: list, forwarder: SignalForwarder, on_line: Callable[[bytes], None]) -> int:
    """Run ``command``, pass its output through, return its exit code (shell convention)."""
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    except PermissionError as exc:
        warn(f"cannot run {command[0]!r}: {exc}")
        return 126
    except OSError as exc:
        warn(f"cannot run {command[0]!r}: {exc}")
        return 127
    forwarder.attach(child)
    assert child.stdout is not None and child.stderr is not None  # both PIPE
    pumps = [
        threading.Thread(target=pump, args=(child.stdout.fileno(), _fileno(sys.stdout, 1), on_line), daemon=True),
        threading.Thread(target=pump, args=(child.stderr.fileno(), _fileno(sys.stderr, 2), on_line), daemon=True),
    ]
    for t in pumps:
        t.start()
    returncode = child.wait()
    drain_deadline = time.monotonic() + DRAIN_SECONDS
    for t in pumps:
        t.join(max(0.0, drain_deadline - time.monotonic()))
    return exit_code(returncode)
