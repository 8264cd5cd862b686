"""Local child processes: a free port to give one, whether one still lives, stopping its group."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import time

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a component's, an operator's or a probe's listener)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """A ``preexec_fn``: the child is SIGKILLed when the thread that forked it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def pid_is(pid: int, name: str) -> bool:
    """Whether ``pid`` is still the ``name`` binary we started (guards against pid reuse)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return pid_alive(pid)
    if os.path.basename(exe.removesuffix(" (deleted)")) == name:
        return True
    # a Python child is known by its module (the real node's relay, the Hub stand-in) or by its
    # script (moto's moto_server)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        script = os.path.basename(argv[1].decode(errors="replace")) if len(argv) > 1 else ""
        module = "relay" if name.endswith("relay") else name  # the relays: one module, several names
        return f"lorarl_dev.node.{module}".encode() in argv or f"lorarl_dev.{name}".encode() in argv or script == name
    except OSError:
        return False


def kill_group(pid: int, name: str, timeout: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL after ``timeout``."""
    if not pid_alive(pid) or not pid_is(pid, name):
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid):
                return
            time.sleep(0.05)
