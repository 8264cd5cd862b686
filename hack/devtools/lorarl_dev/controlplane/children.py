"""The children: start one (in the cluster's network namespace), watch it, stop and restart it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from lorarl_dev.controlplane.kubeconfig import write_json
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.node import realnode
from lorarl_dev.node.netns import nsenter_prefix
from lorarl_dev.processes import die_with_parent


class Children:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that runs its processes; also
    what the real node and the tests' servers beside it start theirs with."""

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        exe: str | None = None,
        pass_fds: Sequence[int] = (),
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] | None = None,
    ) -> None:
        """Start child ``name``; in the cluster's namespace with ``nsenter``, or with ``prefix``
        (e.g. :meth:`lorarl_dev.node.realnode.RealNode.dns_exec_prefix`) when given."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        log = open(logs / f"{name}.log", "ab")
        cmd = [exe or str(self.bin_dir / name), *args]
        if prefix is not None:
            cmd = [*prefix, *cmd]
            self._prefixes[name] = list(prefix)
        elif self.netns is not None:
            cmd = [*nsenter_prefix(self.netns), *cmd]
        self._log("starting " + " ".join(cmd))
        kwargs: dict[str, Any] = {}
        if not self.detached and threading.current_thread() is threading.main_thread():
            # Linux: the child is SIGKILLed if this (forking) thread's process dies.
            kwargs["preexec_fn"] = die_with_parent
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.workdir,
                close_fds=True,
                pass_fds=tuple(pass_fds),
                env=dict(env) if env is not None else None,
                **kwargs,
            )
        finally:
            log.close()
        self._procs[name] = proc
        self._args[name] = args
        if exe is not None:
            self._exes[name] = exe
        self.pids[name] = proc.pid
        self._write_pids()

    def _write_pids(self) -> None:
        write_json(self.workdir / "pids.json", self.pids, 0o644)
        if self.netns is not None:
            realnode.record_pids(self.pids)

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last ``lines`` lines of child ``name``'s log (for an error message)."""
        try:
            text = (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self, name: str) -> None:
        """Raise :class:`ControlPlaneError` with its log's tail if child ``name`` has exited."""
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise ControlPlaneError(f"{name} exited with {proc.returncode}; last log lines:\n{self.log_tail(name)}")

    def wait_http(self, name: str, url: str, timeout: float, healthy=lambda body: True, *, in_netns: bool = True, via=None) -> None:
        """Poll a plain-HTTP health endpoint of child ``name`` until it answers 200 and ``healthy``
        (from inside the cluster's namespace, if there is one, unless ``in_netns`` is False)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive(name)
            try:
                if self._http_ok(url, healthy, in_netns=in_netns, via=via):
                    return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not healthy after {timeout:.0f}s:\n{self.log_tail(name)}")
            time.sleep(0.2)

    def _http_ok(self, url: str, healthy, *, in_netns: bool = True, via=None) -> bool:
        """GET ``url`` (in the cluster's namespace if there is one and ``in_netns``, or from the
        NetnsThread ``via``): 200 and ``healthy(body)``."""

        def get() -> bool:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200 and healthy(r.read())

        if via is not None:
            return via.call(get)
        return self._netns_thread.call(get) if self._netns_thread is not None and in_netns else get()

    def _halt(self, name: str, sig: int, grace: float = 10.0) -> None:
        """Signal child ``name``'s process group, SIGKILL it after ``grace`` seconds, and reap it
        (its port is free again afterwards)."""
        proc = self._procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def _respawn(self, name: str) -> None:
        self.spawn(name, self._args[name], exe=self._exes.get(name), prefix=self._prefixes.get(name))
        self.write_state()

    def stop_child(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Stop child ``name`` (a node's kubelet, say); :meth:`start_child` starts it again."""
        self._halt(name, sig)

    def start_child(self, name: str) -> None:
        """Start child ``name`` again with the same command line (its readiness is the caller's)."""
        self._respawn(name)
