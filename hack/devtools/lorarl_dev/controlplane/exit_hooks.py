"""Stopping the control planes this process started when it exits (atexit, SIGTERM, SIGHUP)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref

#: The control planes to stop on exit (a non-detached one adds itself at start).
LIVE: weakref.WeakSet = weakref.WeakSet()
_hooks_installed = False
_hooks_lock = threading.Lock()


def _stop_all_live() -> None:
    for cp in list(LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


def _on_signal(signum, frame):  # pragma: no cover - exercised by hand
    _stop_all_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install() -> None:
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        atexit.register(_stop_all_live)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(ValueError, OSError):
                    if signal.getsignal(sig) in (signal.SIG_DFL, None):
                        signal.signal(sig, _on_signal)
