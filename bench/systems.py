"""The three systems the bench compares, each a separate process with its own identity (a
ServiceAccount bound to cluster-admin, so the audit log tells their requests apart and the API
server's priority and fairness treats them alike):

* ``ours``: ``lorarl run -n NS`` with its defaults (kopf, 30 s resync);
* ``ceiling``: ``python -m bench.ceiling`` (the create path's writes and nothing else);
* ``kuberay``: the real KubeRay operator binary (v1.5.0, built by hack/controlplane/build.sh)
  with its defaults, watching NS only.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.processes import free_port

from .measure import ProcMeter

IDENTITY_NAMESPACE = "bench-system"
REPO = pathlib.Path(__file__).resolve().parents[1]
_running: set[System] = set()


def stop_all() -> None:
    """Stop every system still running (at exit, also after a signal)."""
    for system in list(_running):
        system.stop()


def identity(cp: ControlPlane, name: str) -> tuple[str, pathlib.Path]:
    """(username, kubeconfig) of ServiceAccount bench-system/NAME with cluster-admin."""
    cp.kubectl("create", "namespace", IDENTITY_NAMESPACE, check=False)
    kubeconfig = cp.restricted_kubeconfig(IDENTITY_NAMESPACE, name)
    user = f"system:serviceaccount:{IDENTITY_NAMESPACE}:{name}"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"bench-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": IDENTITY_NAMESPACE}],
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(binding))
    return user, kubeconfig


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class System:
    """One running system under test: its process, its meter, its log."""

    name = ""

    def __init__(self, cp: ControlPlane, kubeconfig: pathlib.Path, user: str, logdir: pathlib.Path):
        self.cp, self.kubeconfig, self.user, self.logdir = cp, kubeconfig, user, logdir
        self.proc: subprocess.Popen | None = None
        self.meter: ProcMeter | None = None
        self.metrics_port: int | None = None
        self.extra_env: dict[str, str] = {}  # e.g. PYTHONPATH: another revision's operator (bench/churn.py)

    def command(self, namespace: str) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, namespace: str, timeout: float = 90) -> System:
        return self.launch(namespace).wait_ready(timeout)

    def launch(self, namespace: str, label: str = "") -> System:
        """Start the process (not waiting for it to be ready)."""
        self.log_path = self.logdir / f"{self.name}-{namespace}{label}.log"
        log = open(self.log_path, "wb")
        env = {**os.environ, **self.cp.env(), "KUBECONFIG": str(self.kubeconfig), **self.extra_env}
        self.proc = subprocess.Popen(
            self.command(namespace), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=REPO
        )
        log.close()
        _running.add(self)
        self.meter = ProcMeter(self.proc.pid)
        return self

    def wait_ready(self, timeout: float = 90) -> System:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting; see {self.log_path}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s; see {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a lost node or an OOM kill would end it."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self.proc = None
        _running.discard(self)


class Ours(System):
    name = "ours"

    def __init__(self, *args, extra_args: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.extra_args = extra_args  # e.g. leader election

    def command(self, namespace: str) -> list[str]:
        self.probe_port, self.metrics_port = free_port(), free_port()
        return [
            sys.executable,
            "-m",
            "lorarl.cli",
            "run",
            "-n",
            namespace,
            "--liveness",
            f"http://127.0.0.1:{self.probe_port}/healthz",
            "--metrics-port",
            str(self.metrics_port),
            "--log-format",
            "plain",
            *self.extra_args,
        ]

    def ready(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.probe_port}/readyz")

    def metric(self, prefix: str) -> float:
        """The operator's own metric lines that start with ``prefix``, summed."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return 0.0
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))

    def reconciles(self) -> float:
        """lorarl_reconcile_total summed over triggers and results (the operator's own counter)."""
        return self.metric("lorarl_reconcile_total{")

    def cached_jobs(self) -> dict[str, int]:
        """LoraRLJobs in the operator's cache, whole and compact (the gauge is read when scraped)."""
        return {form: int(self.metric(f'lorarl_cached_objects{{form="{form}",kind="LoraRLJob"}}')) for form in ("whole", "compact")}


class Ceiling(System):
    name = "ceiling"

    def __init__(self, *args, concurrency: int = 32, **kwargs):
        super().__init__(*args, **kwargs)
        self.concurrency = concurrency

    def command(self, namespace: str) -> list[str]:
        return [sys.executable, "-m", "bench.ceiling", "--kubeconfig", str(self.kubeconfig), "--namespace", namespace, "--concurrency", str(self.concurrency)]

    def ready(self) -> bool:
        try:
            return "ceiling: ready" in self.log_path.read_text(errors="replace")
        except OSError:
            return False


class KubeRay(System):
    name = "kuberay"

    def command(self, namespace: str) -> list[str]:
        self.probe_port, self.metrics_port = free_port(), free_port()
        return [
            str(self.cp.bin_dir / "kuberay-operator"),
            f"--kubeconfig={self.kubeconfig}",
            f"--metrics-addr=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            "--enable-leader-election=false",
            f"--watch-namespace={namespace}",
        ]

    def ready(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.probe_port}/readyz")
