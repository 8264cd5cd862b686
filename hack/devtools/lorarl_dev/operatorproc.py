"""`lorarl run` as a real process for tests: start, stop, SIGKILL, its log, and a traceback scan.

The log of every start is appended to one file, so a test reads the whole history of the
operator across crashes. Log lines of a reconcile look like
``[ns/name] reconcile <id> (<trigger>): phase <Phase>, ...`` (``lorarl.controller``).
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

__all__ = ["OperatorProcess", "tracebacks"]

_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def tracebacks(text: str) -> list[str]:
    """Each Python traceback in a log, from its header to its exception line (the first line
    after the header that is not indented); a chained one ("During handling of the above
    exception ...", "The above exception was the direct cause ...") stays one block."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if _TRACEBACK not in lines[i]:
            i += 1
            continue
        start = i
        while True:
            i += 1
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                i += 1  # frames (indented) and blank lines
            if i < len(lines) and lines[i].startswith(_CHAINED):
                continue
            if i < len(lines) and _TRACEBACK in lines[i]:
                continue
            end = min(i + 1, len(lines))  # the exception line
            j = end
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].startswith(_CHAINED):
                i = j
                continue
            i = end
            break
        found.append("\n".join(lines[start:i]).rstrip())
    return found


class OperatorProcess:
    """`lorarl run -n <namespace>` against a control plane (plain log format, no probes/metrics).

    ``kubeconfig`` authenticates as someone else or goes through a proxy; ``resync_seconds``
    is the level-triggered backstop (a long one makes a test depend on the watches alone).
    """

    def __init__(
        self,
        control_plane,
        namespace: str,
        tmp_path: os.PathLike[str] | str,
        kubeconfig: os.PathLike[str] | str | None = None,
        *,
        resync_seconds: float = 1,
        extra_args: Sequence[str] = (),
        log_name: str = "operator.log",
    ) -> None:
        self.control_plane, self.namespace, self.kubeconfig = control_plane, namespace, kubeconfig
        self.resync_seconds = resync_seconds
        self.extra_args = list(extra_args)
        self.log_path = pathlib.Path(tmp_path) / log_name
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.starts = 0

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "lorarl.cli",
            "run",
            "-n",
            self.namespace,
            "--liveness",
            "",
            "--metrics-port",
            "0",
            "--resync-seconds",
            str(self.resync_seconds),
            "--log-format",
            "plain",
            *self.extra_args,
        ]

    def start(self) -> OperatorProcess:
        env = {**os.environ, **self.control_plane.env()}
        if self.kubeconfig:
            env["KUBECONFIG"] = str(self.kubeconfig)
        if self.log is None or self.log.closed:
            self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.starts += 1
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.log is not None:
            self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- the log -------------------------------------------------------------

    def reconciles(self, namespace: str, name: str | None = None) -> list[str]:
        """The reconcile log lines of one job (or of every job in ``namespace``)."""
        pattern = re.compile(rf"\[{re.escape(namespace)}/{re.escape(name) if name else '[^]]+'}\] reconcile ")
        return [line for line in self.output().splitlines() if pattern.search(line)]

    def wait_for_log(self, needle: str, count: int = 1, timeout: float = 60.0) -> None:
        """Wait until ``needle`` occurs in ``count`` lines of the log (a bounded wait)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            seen = sum(1 for line in self.output().splitlines() if needle in line)
            if seen >= count:
                return
            if not self.alive:
                raise AssertionError(f"the operator exited ({self.proc.returncode}) before {count}x {needle!r}:\n" + self.output()[-3000:])
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {count}x {needle!r} in the operator log (seen {seen})")

    def unexpected_tracebacks(self, allow: Mapping[str, str] = {}) -> list[str]:
        """Tracebacks in the log whose text matches none of the ``allow`` regexes (regex -> why
        it is expected)."""
        return [tb for tb in tracebacks(self.output()) if not any(re.search(p, tb) for p in allow)]

    def assert_no_tracebacks(self, allow: Mapping[str, str] = {}) -> None:
        unexpected = self.unexpected_tracebacks(allow)
        assert not unexpected, f"{len(unexpected)} unexpected traceback(s) in {self.log_path}:\n\n" + "\n\n".join(unexpected[:3])
