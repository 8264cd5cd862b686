"""A real, embedded Kubernetes control plane for tests and the local demo.

etcd + kube-apiserver + kube-controller-manager, built from the Go module
proxy by ``hack/controlplane/build.sh`` into a per-version cache outside the
repository, started as local processes bound to 127.0.0.1 on free ports.

Typical use::

    with ControlPlane() as cp:
        cp.kubectl("get", "ns")

or through the pytest plugin (``lorarl_dev.pytest_plugin``), or detached
for the demo via :func:`up` / :func:`down` / :func:`env`
(``lorarl-dev controlplane up|down|env``).

Children are started in their own sessions (process groups) and killed in
:meth:`ControlPlane.stop`; a non-detached control plane also stops on
interpreter exit (atexit), on SIGTERM/SIGHUP, and — through
``PR_SET_PDEATHSIG`` — when its parent process dies outright. Pids are
recorded in ``<workdir>/pids.json`` so that :func:`down` can clean up.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lorarl_dev.binaries import NODE_BINARIES, REQUIRED_BINARIES, bin_dir, ensure_binaries, find_kubectl, kubernetes_version, missing_binaries
from lorarl_dev.errors import ControlPlaneError, KubectlError
from lorarl_dev.locations import controlplane_dir, default_state_dir, repo_root
from lorarl_dev.processes import die_with_parent, free_port, kill_group, pid_alive, pid_is

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "REQUIRED_BINARIES",
    "bin_dir",
    "controlplane_dir",
    "default_state_dir",
    "down",
    "ensure_binaries",
    "env",
    "find_kubectl",
    "kubernetes_version",
    "sweep_stale_workdirs",
    "up",
]

#: The order processes are stopped in (reverse of start order).
_STOP_ORDER = (
    "crane",  # the export tests' OCI registry (seedrun.start_registry)
    "moto_server",  # the export tests' S3 server (seedrun.start_s3)
    "hubstub",
    "argocd-application-controller",
    "argocd-relay",  # the application controller's way out of its namespace
    "argocd-repo-server",
    "redis-server",  # Argo CD's cache
    "kustomize-controller",
    "source-controller",
    "kueue",
    "kuberay-operator",
    "kwok",
    "fakegpu",
    "coredns",
    "kube-proxy",
    "kubelet",
    "containerd",
    "kube-scheduler",
    "kube-controller-manager",
    "relay",
    "kube-apiserver",
    "etcd",
)

#: Annotation that tells kwok to manage (fake) a Node.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

_SERVICE_CIDR = "10.0.0.0/24"
_SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

LORARL_CRD = "crds/lorarl.dev_lorarljobs.yaml"

# --- API server admission and audit (the one place these kube-apiserver flags are set) -------
#: Admission plugins named explicitly, on top of kube-apiserver's default-on set.
#: OwnerReferencesPermissionEnforcement is off by default (kubernetes pkg/kubeapiserver/options/
#: plugins.go DefaultOffAdmissionPlugins) but on in many production clusters (OpenShift, hardened
#: distributions): with it, setting ``blockOwnerDeletion: true`` on a child needs ``update`` on the
#: owner's ``finalizers`` subresource (plugin/pkg/admission/gc/gc_admission.go), so tests catch an
#: operator RBAC that lacks it. PodSecurity is default-on; it is listed so that it stays on.
ADMISSION_PLUGINS = ("OwnerReferencesPermissionEnforcement", "PodSecurity")

#: Audit policy: every request at level Metadata (who, verb, resource, name, response code; no
#: bodies), written once at ResponseComplete. ResponseStarted is kept because the API server emits
#: it only for long-running requests (watches), where it is the only record of a watch that is
#: still open. Read with :mod:`lorarl_dev.audit`.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "Panic"],
    "rules": [{"level": "Metadata"}],
}


def _admission_and_audit_flags(workdir: pathlib.Path) -> list[str]:
    """kube-apiserver flags for :data:`ADMISSION_PLUGINS` and the audit log in ``workdir``.

    Mode ``blocking`` (the default of the log backend, made explicit): the event is written in
    the request's own goroutine before the handler returns, so once a client has seen a response
    its audit line is in the file; a test can read the log without waiting. ``batch`` would
    buffer events for up to --audit-log-batch-max-wait and make every reader poll. The cost is
    one small append (O_APPEND write) per request to a local file.
    """
    policy = workdir / "audit-policy.json"
    _write_json(policy, AUDIT_POLICY, 0o644)
    return [
        "--enable-admission-plugins=" + ",".join(ADMISSION_PLUGINS),
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",  # one plain file, never rotated (default: lumberjack at 100 MB)
    ]


# ----------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------
# process bookkeeping

_live: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_hooks_installed = False
_hooks_lock = threading.Lock()


def _stop_all_live() -> None:
    for cp in list(_live):
        with contextlib.suppress(Exception):
            cp.stop()


def _on_signal(signum, frame):  # pragma: no cover - exercised by hand
    _stop_all_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
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


def sweep_stale_workdirs(parent: str | os.PathLike[str] | None = None) -> list[pathlib.Path]:
    """Remove temporary ``lorarl-cp-*`` workdirs whose processes are all gone.

    Such a directory (about 120 MB, mostly etcd's preallocated WAL) is left
    only when the process that owned it was SIGKILLed; its children died with
    it (PR_SET_PDEATHSIG) but nothing could remove the files. A directory
    without ``pids.json`` is never touched (it may be starting up).
    """
    removed = []
    for d in pathlib.Path(parent or tempfile.gettempdir()).glob("lorarl-cp-*"):
        try:
            pids = json.loads((d / "pids.json").read_text())
        except (OSError, ValueError):
            continue
        if any(pid_alive(int(pid)) and pid_is(int(pid), name) for name, pid in pids.items()):
            continue
        from lorarl_dev.node import realnode

        # mounts, cgroups and namespaces of a killed real node first
        with contextlib.suppress(OSError, ValueError):
            if json.loads(realnode.RECORD.read_text()).get("workdir") == str(d):
                realnode.sweep()
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


# --------------------------------------------------------------------------
# the control plane


def _kubeconfig(
    server: str, ca_pem: bytes, user: str, cert_pem: bytes | None = None, key_pem: bytes | None = None, token: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    creds: dict[str, Any] = {}
    if cert_pem is not None:
        creds["client-certificate-data"] = b64(cert_pem)
        creds["client-key-data"] = b64(key_pem or b"")
    if token is not None:
        creds["token"] = token
    ctx: dict[str, Any] = {"cluster": "lorarl", "user": user}
    if namespace:
        ctx["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lorarl", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": user, "context": ctx}],
        "current-context": user,
        "preferences": {},
    }


def _write_json(path: pathlib.Path, data: Any, mode: int = 0o600) -> None:
    # kubeconfig is YAML, and JSON is YAML; kubectl and the python client read it.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.chmod(mode)
    tmp.replace(path)


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1.

    Attributes (valid after :meth:`start`): ``kubeconfig``, ``server``,
    ``ca_file``, ``bin_dir``, ``workdir``, ``version``, ``audit_log_path``
    (the API server's JSON-lines audit log, see :data:`AUDIT_POLICY`).

    ``node=True``: the whole cluster runs in a network namespace of its own with one real node
    (containerd, kubelet, kube-proxy, CoreDNS, ``gpus`` fake ``amd.com/gpu`` from a device
    plugin, labelled as a ``node_profile`` node) and kube-scheduler; ``server`` is then a relay on
    127.0.0.1 into the namespace, and ``node`` is the :class:`lorarl_dev.node.realnode.RealNode`
    (``node.import_image(archive)``). Needs root and the Debian packages of hack/node/packages.sh.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        install_default_crds: bool = True,
        extra_crds: Sequence[str | os.PathLike[str]] = (),
        controllers: str = "*",
        detached: bool = False,
        start_timeout: float = 90.0,
        verbose: bool = False,
        scheduler: bool | None = None,
        fake_nodes: int = 0,
        gpus_per_node: int = 8,
        gpu_resource: str = "amd.com/gpu",
        kuberay_operator: bool = False,
        kueue: bool = False,
        flux: bool = False,
        argocd: bool = False,
        node: bool = False,
        gpus: int = 8,
        node_profile: str = "MI355X",
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = pathlib.Path(workdir) if workdir is not None else None
        self.bin_dir = pathlib.Path(bin_dir) if bin_dir is not None else None
        self.install_default_crds = install_default_crds
        self.extra_crds = [pathlib.Path(p) for p in extra_crds]
        self.controllers = controllers
        self.detached = detached
        self.start_timeout = start_timeout
        self.verbose = verbose
        self.fake_nodes = fake_nodes
        self.scheduler = bool(fake_nodes or node) if scheduler is None else scheduler
        self.real_node = node
        self.gpus = gpus
        self.node_profile = node_profile
        self.netns: str | None = None  # the cluster's network namespace (node=True)
        self.node = None  # the RealNode (node=True), after start()
        self._inner_server: str | None = None  # the API server's address inside the namespace
        self._netns_thread = None
        self._argocd_netns: str | None = None  # Argo CD's application controller's own namespace
        self.gpus_per_node = gpus_per_node
        self.gpu_resource = gpu_resource
        self.kuberay_operator = kuberay_operator
        self.kueue = kueue
        self.flux = flux
        self.argocd = argocd
        self.kubeconfig: pathlib.Path | None = None
        self.server: str | None = None
        self.ca_file: pathlib.Path | None = None
        self.version: str | None = None
        self.pids: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._ports: dict[str, int] = {}
        self._args: dict[str, list[str]] = {}  # each child's flags, to restart it the same way
        self._exes: dict[str, str] = {}  # children that are not in bin_dir (containerd)
        self._prefixes: dict[str, list[str]] = {}  # children entered into the netns another way
        self._ssl: ssl.SSLContext | None = None
        self._api_client = None

    # -- lifecycle ------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def audit_log_path(self) -> pathlib.Path | None:
        """The API server's audit log (JSON lines; :mod:`lorarl_dev.audit` reads it)."""
        return None if self.workdir is None else self.workdir / "audit.log"

    def __repr__(self) -> str:
        return f"<ControlPlane server={self.server} workdir={self.workdir} pids={self.pids}>"

    @property
    def binaries(self) -> list[str]:
        names = list(REQUIRED_BINARIES)
        if self.scheduler:
            names.append("kube-scheduler")
        if self.fake_nodes:
            names.append("kwok")
        if self.kuberay_operator:
            names.append("kuberay-operator")
        if self.kueue:
            names.append("kueue")
        if self.flux:
            names += ["source-controller", "kustomize-controller"]
        if self.argocd:
            names += ["argocd-application-controller", "argocd-repo-server"]
        if self.real_node:
            names += [n for n in NODE_BINARIES if n not in names]
        return names

    @property
    def running(self) -> bool:
        return bool(self.pids) and all(pid_alive(p) for p in self.pids.values())

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"lorarl-dev controlplane: {msg}", file=sys.stderr, flush=True)

    def start(self) -> ControlPlane:
        if self.pids:
            raise ControlPlaneError("control plane already started")
        t0 = time.monotonic()
        if self.bin_dir is None:
            self.bin_dir = ensure_binaries(self.binaries)
        else:
            missing = missing_binaries(self.bin_dir, self.binaries)
            if missing:
                raise ControlPlaneError(f"{self.bin_dir} lacks {', '.join(missing)}")
        if self.real_node:
            from lorarl_dev.node.realnode import missing_requirements

            reasons = missing_requirements()
            if reasons:
                raise ControlPlaneError("cannot start a real node: " + "; ".join(reasons))
        if self.workdir is None:
            sweep_stale_workdirs()
            self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="lorarl-cp-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.detached:
            _install_exit_hooks()
            _live.add(self)
        try:
            self._write_certs()
            if self.real_node:
                self._create_netns()
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready()
            self._start_controller_manager()
            if self.scheduler:
                self._start_scheduler()
            if self.fake_nodes:
                self._start_kwok()
            self._write_state()
            if self.install_default_crds:
                self._install_default_crds()
            if self.extra_crds:
                self.install_crds(self.extra_crds)
            if self.kuberay_operator and not self.real_node:
                self._start_kuberay_operator()
            if self.kueue:
                self._start_kueue()
            if self.flux:
                self._start_flux()
            if self.argocd:
                self._start_argocd()
            self._write_state()
            self._wait_controller_manager()
            if self.real_node:
                from lorarl_dev.node.realnode import RealNode

                self.node = RealNode(self, gpus=self.gpus, profile=self.node_profile)
                self.node.start()
                self._write_state()
                if self.kuberay_operator:  # after CoreDNS: it calls each head's dashboard by name
                    self._start_kuberay_operator()
                    self._write_state()
        except BaseException:
            self.stop()
            raise
        self._log(f"ready in {time.monotonic() - t0:.1f}s at {self.server} (kubeconfig {self.kubeconfig})")
        return self

    def stop(self) -> None:
        """Kill every child (process group), wait for it, and remove a temporary workdir.

        A real node goes first: its processes, then its pods and shims, mounts, cgroups and the
        directories it wrote (:func:`lorarl_dev.node.realnode.teardown`); the namespace last.
        """
        node_state = None
        if self.netns is not None:
            from lorarl_dev.node import realnode

            with contextlib.suppress(OSError, ValueError):
                node_state = json.loads(realnode.RECORD.read_text())
                if node_state.get("netns") == self.netns:
                    node_state["pids"] = dict(self.pids)
                    realnode.teardown(node_state)
                else:
                    node_state = None
        # a child not named in the order (a test's server spawned beside the node) goes first
        for name in [n for n in self.pids if n not in _STOP_ORDER] + list(_STOP_ORDER):
            pid = self.pids.get(name)
            if pid is None:
                continue
            kill_group(pid, name)
            proc = self._procs.get(name)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
        for proc in self._procs.values():
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    with contextlib.suppress(Exception):
                        stream.close()
        self._procs.clear()
        _live.discard(self)
        if self._argocd_netns is not None:
            from lorarl_dev.node import netns

            netns.delete(self._argocd_netns)
            self._argocd_netns = None
        if self.netns is not None:
            from lorarl_dev.node import netns

            if self._netns_thread is not None:
                self._netns_thread.close()
                self._netns_thread = None
            netns.delete(self.netns)
            if node_state is not None:
                from lorarl_dev.node import realnode

                realnode.release(node_state)
            self.netns = None
            self.node = None
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
        if self.workdir is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.workdir / "pids.json").unlink()
            if self._own_workdir and not os.environ.get("LORARL_KEEP_CONTROLPLANE"):
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None  # a later start() makes a fresh one
        self.pids = {}

    # -- faults, for the chaos tests ------------------------------------

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
        self._spawn(name, self._args[name], exe=self._exes.get(name), prefix=self._prefixes.get(name))
        self._write_state()

    def stop_child(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Stop child ``name`` (a node's kubelet, say); :meth:`start_child` starts it again."""
        self._halt(name, sig)

    def start_child(self, name: str) -> None:
        """Start child ``name`` again with the same command line (its readiness is the caller's)."""
        self._respawn(name)

    def stop_apiserver(self, sig: int = signal.SIGKILL) -> None:
        """Stop kube-apiserver (SIGKILL: a crash; SIGTERM: its graceful shutdown, which waits for
        open requests, so SIGKILL follows after 10 s). etcd keeps the data."""
        self._halt("kube-apiserver", sig)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, with the same flags and certificates."""
        self._respawn("kube-apiserver")
        self._wait_ready()

    def restart_apiserver(self, sig: int = signal.SIGKILL) -> None:
        self.stop_apiserver(sig)
        self.start_apiserver()

    def stop_etcd(self) -> None:
        """Kill etcd outright (SIGKILL); :meth:`start_etcd` brings it back on the same data dir."""
        self._halt("etcd", signal.SIGKILL)

    def start_etcd(self) -> None:
        self._respawn("etcd")
        self._wait_http("etcd", f"http://127.0.0.1:{self._ports['etcd']}/health", 30, lambda body: json.loads(body).get("health") == "true")
        self._wait_ready()

    # -- start steps ----------------------------------------------------

    def _write_certs(self) -> None:
        from lorarl_dev.certs import TinyCA, service_account_keypair

        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        ca = TinyCA()
        self.ca_file = pki / "ca.crt"
        self.ca_file.write_bytes(ca.cert_pem)
        (pki / "ca.key").write_bytes(ca.key_pem)
        (pki / "ca.key").chmod(0o600)
        from lorarl_dev.node.realnode import NODE_IP

        self._ca = ca
        serving = ca.serving_cert(
            "kube-apiserver",
            [
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                NODE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            # with pods: RSA, as kubeadm issues it; busybox's TLS client (wget in the node's test
            # pods) offers only rsa_pkcs1 signatures, and Go refuses a P-256 key to such a client
            rsa_key=self.real_node,
        )
        # the API server's identity towards the kubelet (logs, exec, port-forward)
        ca.client_cert("kube-apiserver-kubelet-client", ("system:masters",)).write(pki, "apiserver-kubelet-client")
        serving.write(pki, "apiserver")
        self._admin = ca.client_cert("lorarl-admin", ("system:masters",))
        self._admin.write(pki, "admin")
        self._kcm = ca.client_cert("system:kube-controller-manager")
        self._kcm.write(pki, "kube-controller-manager")
        self._sched = ca.client_cert("system:kube-scheduler")
        self._sched.write(pki, "kube-scheduler")
        sa_key, sa_pub = service_account_keypair()
        (pki / "sa.key").write_bytes(sa_key)
        (pki / "sa.key").chmod(0o600)
        (pki / "sa.pub").write_bytes(sa_pub)
        self._ca_pem = ca.cert_pem

        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._ssl = ctx

    def _create_netns(self) -> None:
        """The cluster's network namespace, claimed as this machine's one real node."""
        from lorarl_dev.node import netns, realnode

        name = "lorarl-" + hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:8]
        realnode.claim(name, self.workdir)  # refuses a second live node; sweeps a dead one
        netns.delete(name)  # a leftover of the same name (claim swept its processes)
        netns.create(name, realnode.NODE_IP, service_cidr=_SERVICE_CIDR)
        self.netns = name
        self._netns_thread = netns.NetnsThread(name)

    def _start_relay(self, port: int) -> str:
        """A relay from 127.0.0.1:<free port> (root namespace) to the API server in ours."""
        from lorarl_dev.node.realnode import NODE_IP

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        try:
            fd = listener.fileno()
            devtools = str(pathlib.Path(__file__).resolve().parents[1])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([devtools, os.environ.get("PYTHONPATH", "")])}
            self._spawn("relay", ["-m", "lorarl_dev.node.relay", f"--listen-fd={fd}", f"--to={NODE_IP}:{port}"], exe=sys.executable, pass_fds=(fd,), env=env)
            return f"https://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            listener.close()  # the relay holds its own copy

    def _spawn(
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
            from lorarl_dev.node.netns import nsenter_prefix

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
        _write_json(self.workdir / "pids.json", self.pids, 0o644)
        if self.netns is not None:
            from lorarl_dev.node import realnode

            realnode.record_pids(self.pids)

    def _log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _check_alive(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise ControlPlaneError(f"{name} exited with {proc.returncode}; last log lines:\n{self._log_tail(name)}")

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self._ports.update(etcd=client, etcd_peer=peer)
        data = self.workdir / "etcd"
        data.mkdir(exist_ok=True)
        data.chmod(0o700)
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                # the default backend quota is 2 GiB; `make bench` keeps thousands of jobs of three
                # systems (each job's ConfigMap ~88 KB) in one etcd: 8 GiB, etcd's suggested maximum
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"http://127.0.0.1:{client}/health", 30, lambda body: json.loads(body).get("health") == "true")

    def _node_apiserver_flags(self, pki: pathlib.Path) -> list[str]:
        """What a cluster with a real node needs: the API server on the node IP (the ``kubernetes``
        Service's endpoint, reachable from pods), ServiceAccount admission (projected tokens),
        the Node authorizer and NodeRestriction for the kubelet, and a client certificate to
        reach the kubelet (logs, exec) whose serving certificate it verifies."""
        from lorarl_dev.node.realnode import NODE_IP

        return [
            f"--bind-address={NODE_IP}",
            f"--advertise-address={NODE_IP}",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=lease",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        if self.netns is not None:
            from lorarl_dev.node.realnode import APISERVER_PORT, NODE_IP

            port = APISERVER_PORT  # the namespace is ours: every port is free in it
            self._inner_server = f"https://{NODE_IP}:{port}"
            address_flags = self._node_apiserver_flags(pki)
            admission = [
                f.replace("--enable-admission-plugins=", "--enable-admission-plugins=NodeRestriction,") for f in _admission_and_audit_flags(self.workdir)
            ]
        else:
            port = free_port()
            self._inner_server = f"https://127.0.0.1:{port}"
            address_flags = [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
            ]
            admission = _admission_and_audit_flags(self.workdir)
        self._ports["apiserver"] = port
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self._ports['etcd']}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                *address_flags,
                f"--secure-port={port}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--service-account-issuer={_SA_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--v=0",
                *admission,
            ],
        )
        self.server = self._start_relay(port) if self.netns is not None else self._inner_server
        kubeconfig = _kubeconfig(self.server, self._ca_pem, "lorarl-admin", self._admin.cert_pem, self._admin.key_pem)
        if self.netns is not None:
            # for children inside the namespace (kwok, the KubeRay operator, Kueue)
            _write_json(
                self.workdir / "kubeconfig-inner", _kubeconfig(self._inner_server, self._ca_pem, "lorarl-admin", self._admin.cert_pem, self._admin.key_pem)
            )
        self.kubeconfig = self.workdir / "kubeconfig"
        _write_json(self.kubeconfig, kubeconfig)

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while True:
            self._check_alive("etcd")
            self._check_alive("kube-apiserver")
            try:
                code, body = self._get("/readyz")
                if code == 200:
                    break
                last = body.decode(errors="replace")
            except (OSError, ssl.SSLError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"kube-apiserver not ready after {self.start_timeout}s ({last[-2000:]}):\n{self._log_tail('kube-apiserver')}")
            time.sleep(0.2)
        code, body = self._get("/version")
        self.version = json.loads(body).get("gitVersion")

    def _start_controller_manager(self) -> None:
        pki = self.workdir / "pki"
        kcm_kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        _write_json(
            kcm_kubeconfig,
            _kubeconfig(self._inner_server, self._ca_pem, "system:kube-controller-manager", self._kcm.cert_pem, self._kcm.key_pem),
        )
        # a real node's PVCs bind through KCM's own hostpath provisioner (realnode.STORAGE_CLASS)
        node_flags = ["--enable-hostpath-provisioner=true"] if self.real_node else []
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                f"--controllers={self.controllers}",
                "--concurrent-gc-syncs=5",
                # a quota made before the quota controller discovered a new CRD (every 30 s) counts
                # that CRD's objects only at the next full re-count: 5 min by default, 20 s here
                "--resource-quota-sync-period=20s",
                *node_flags,
                "--v=0",
            ],
        )

    def _component_kubeconfig(self, name: str, pair, *, inner: bool = True, context: str | None = None) -> pathlib.Path:
        """A kubeconfig for child ``name``; ``inner``: the API server's address as seen from
        inside the cluster's namespace (the same as ``server`` without a real node)."""
        path = self.workdir / f"{name}.kubeconfig"
        config = _kubeconfig(self._inner_server if inner else self.server, self._ca_pem, name, pair.cert_pem, pair.key_pem)
        if context:
            config["contexts"][0]["name"] = config["current-context"] = context
        _write_json(path, config)
        return path

    @property
    def child_kubeconfig(self) -> pathlib.Path:
        """The admin kubeconfig for children this harness starts (inside the namespace if any)."""
        return self.workdir / "kubeconfig-inner" if self.netns is not None else self.kubeconfig

    def _start_scheduler(self) -> None:
        kubeconfig = self._component_kubeconfig("kube-scheduler", self._sched)
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=0",
            ],
        )

    def _start_kwok(self) -> None:
        """kwok fakes kubelets: Nodes annotated ``kwok.x-k8s.io/node=fake`` become Ready and
        pods bound to them go Running (and Succeeded/deleted per kwok's fast stages)."""
        stages = self.bin_dir.parent / "kwok-stages.yaml"
        if not stages.is_file():
            raise ControlPlaneError(f"{stages} missing; run hack/controlplane/build.sh kwok")
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.child_kubeconfig}",
                f"--config={stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.1/16",
                "--server-address=",
                "--v=0",
            ],
        )
        for i in range(self.fake_nodes):
            self.add_fake_node(f"kwok-node-{i}", wait=False)
        self.kubectl("wait", "--for=condition=Ready", "node", "-l", "type=kwok", "--timeout=60s", timeout=90)

    def add_fake_node(
        self, name: str, *, cpu: str = "64", memory: str = "512Gi", gpus: int | None = None, labels: Mapping[str, str] | None = None, wait: bool = True
    ) -> None:
        """Register a kwok-managed fake Node (needs ``fake_nodes`` > 0 at start)."""
        gpus = self.gpus_per_node if gpus is None else gpus
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "1Ti"}
        if gpus:
            capacity[self.gpu_resource] = str(gpus)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **(labels or {})},
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        self.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(node))
        if wait:
            self.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=60s", timeout=90)

    def _start_kuberay_operator(self) -> None:
        """The real KubeRay operator (v1.5.0) as a local process, watching all namespaces."""
        from lorarl_dev.kuberay import kuberay_crd_path

        # it watches all three kinds and will not start without their CRDs
        self.install_crds([kuberay_crd_path(k) for k in ("RayCluster", "RayJob", "RayService")])
        metrics, probes = free_port(), free_port()
        # with a real node it runs in the cluster's namespace and resolves cluster names through
        # CoreDNS: it GETs http://<head-svc>.<ns>.svc.cluster.local:8265 for each RayJob
        # (ray-operator/controllers/ray/utils/dashboardclient, v1.5.0)
        prefix = self.node.dns_exec_prefix() if self.node is not None else None
        self._spawn(
            "kuberay-operator",
            [
                f"--kubeconfig={self.child_kubeconfig}",
                f"--metrics-addr=127.0.0.1:{metrics}",
                f"--health-probe-bind-address=127.0.0.1:{probes}",
                "--enable-leader-election=false",
            ],
            prefix=prefix,
        )
        self._wait_http("kuberay-operator", f"http://127.0.0.1:{probes}/readyz", 60)

    def _start_kueue(self) -> None:
        """The real Kueue manager (lorarl_dev.kueue) as a local process with its webhooks
        registered by URL (the API server calls https://127.0.0.1:<port>/<path>)."""
        from lorarl_dev.certs import TinyCA
        from lorarl_dev.kueue import METRICS_CERT_DIR, kueue_crd_paths, manager_config, webhook_configurations

        self.install_crds(kueue_crd_paths())
        ca = TinyCA("kueue-webhook-ca")
        certs = self.workdir / "kueue-certs"
        certs.mkdir(exist_ok=True)
        ca.serving_cert("kueue-webhook", ["127.0.0.1", "localhost"]).write(certs, "tls")
        if not (METRICS_CERT_DIR / "tls.crt").is_file():
            # Kueue reads its metrics certificate from this fixed path when it does not manage its
            # own certificates (cmd/kueue/main.go:205-216 in v0.17.0); the server itself is off.
            try:
                METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
                ca.serving_cert("kueue-metrics", ["127.0.0.1"]).write(METRICS_CERT_DIR, "tls")
            except OSError as err:
                raise ControlPlaneError(f"Kueue needs a certificate in {METRICS_CERT_DIR} (a fixed path): {err}") from err
        webhook, health = free_port(), free_port()
        config = self.workdir / "kueue-config.yaml"
        _write_json(config, manager_config(webhook_port=webhook, cert_dir=certs, health_port=health), 0o644)
        self.kubectl("create", "namespace", "kueue-system", check=False)
        self._spawn("kueue", [f"--kubeconfig={self.child_kubeconfig}", f"--config={config}", "--zap-log-level=2"])
        self._wait_http("kueue", f"http://127.0.0.1:{health}/readyz", 90)
        hooks = webhook_configurations(f"https://127.0.0.1:{webhook}", ca.cert_pem)
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lorarl-testing", "-f", "-", input="\n".join(json.dumps(h) for h in hooks))

    def _start_flux(self) -> None:
        """The real Flux source-controller and kustomize-controller (lorarl_dev.flux) as local
        processes; kustomize-controller downloads artifacts from source-controller's storage
        server on 127.0.0.1.

        With a real node they stay in the root network namespace, beside the tests' Git server
        (lorarl_dev.gitserver, on the root's 127.0.0.1), and reach the API server through the
        relay (``kubeconfig``); no pod or kubelet needs to reach them."""
        from lorarl_dev import flux

        self.install_crds(flux.crd_paths())
        storage = self.workdir / "flux-artifacts"
        storage.mkdir(exist_ok=True)
        # ctrl.GetConfig: no --kubeconfig flag in their pflag set
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        root = [] if self.netns is not None else None  # an empty prefix: not entered into the namespace
        health = free_port()
        self._spawn("source-controller", flux.source_controller_args(storage=storage, storage_port=free_port(), health_port=health), env=env, prefix=root)
        self._wait_http("source-controller", f"http://127.0.0.1:{health}/readyz", 90, in_netns=False)
        health = free_port()
        self._spawn("kustomize-controller", flux.kustomize_controller_args(health_port=health), env=env, prefix=root)
        self._wait_http("kustomize-controller", f"http://127.0.0.1:{health}/readyz", 90, in_netns=False)

    def _start_argocd(self) -> None:
        """The real Argo CD application controller and repo server (lorarl_dev.argocd) and the
        Redis they share (Debian's redis-server) as local processes, with the settings of
        namespace ``argocd``: argocd-cm with our health check, argocd-secret, the ``default``
        AppProject.

        Redis and the repo server listen on the root namespace's 127.0.0.1 (beside the tests' Git
        server, which the repo server clones from). The application controller's metrics and
        health server binds 0.0.0.0 with no flag to change it (controller/appcontroller.go:293),
        so it runs in a network namespace of its own that has only a loopback: the API server,
        Redis and the repo server reach it through a relay (lorarl_dev.node.relay) from
        listening sockets made in there, on the same ports, to the root's 127.0.0.1."""
        from lorarl_dev import argocd
        from lorarl_dev.node import netns

        redis = shutil.which("redis-server")
        if redis is None:
            raise ControlPlaneError("Argo CD needs a Redis: redis-server is not installed (hack/gitops/packages.sh)")
        self.install_crds(argocd.crd_paths())
        self.kubectl("create", "namespace", argocd.NAMESPACE, check=False)
        self.kubectl("apply", "--server-side", "--field-manager=lorarl-testing", "-f", "-", input="\n".join(json.dumps(o) for o in argocd.settings_objects()))
        root: list[str] = []  # an empty prefix: in the root namespace even beside a real node
        redis_port = free_port()
        (self.workdir / "redis").mkdir(exist_ok=True)
        self._spawn("redis-server", argocd.redis_args(port=redis_port, workdir=self.workdir / "redis"), exe=redis, prefix=root)
        self._wait_redis(redis_port, 30)
        env = {**os.environ, **argocd.environment(self.workdir, self.kubeconfig)}
        repo, health = free_port(), free_port()
        self._spawn("argocd-repo-server", argocd.repo_server_args(port=repo, metrics_port=health, redis_port=redis_port), env=env, prefix=root)
        self._wait_http("argocd-repo-server", f"http://127.0.0.1:{health}/healthz?full=true", 90, in_netns=False)

        self._argocd_netns = netns.create_owned("argocd-" + hashlib.sha256(str(self.workdir).encode()).hexdigest()[:6])
        api_port = urllib.parse.urlsplit(self.server).port
        self._start_relay_into(self._argocd_netns, "argocd-relay", [api_port, redis_port, repo])
        health = free_port()
        args = argocd.application_controller_args(repo_port=repo, metrics_port=health, redis_port=redis_port, resync_seconds=10)
        self._spawn("argocd-application-controller", args, env=env, prefix=netns.nsenter_prefix(self._argocd_netns))
        probe = netns.NetnsThread(self._argocd_netns)
        try:
            self._wait_http("argocd-application-controller", f"http://127.0.0.1:{health}/healthz", 90, via=probe)
        finally:
            probe.close()

    def _start_relay_into(self, namespace: str, name: str, ports: list[int]) -> None:
        """A relay from 127.0.0.1:<port> inside ``namespace`` to 127.0.0.1:<port> in the root
        namespace, for each port: the sockets are made in there, the relay runs out here."""
        from lorarl_dev.node import netns

        def listen(port: int) -> socket.socket:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", port))
            listener.listen(128)
            return listener

        inside = netns.NetnsThread(namespace)
        try:
            listeners = [inside.call(listen, port) for port in ports]
        finally:
            inside.close()
        try:
            args = ["-m", "lorarl_dev.node.relay"]
            for listener, port in zip(listeners, ports, strict=True):
                args += [f"--listen-fd={listener.fileno()}", f"--to=127.0.0.1:{port}"]
            devtools = str(pathlib.Path(__file__).resolve().parents[1])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([devtools, os.environ.get("PYTHONPATH", "")])}
            self._spawn(name, args, exe=sys.executable, pass_fds=[listener.fileno() for listener in listeners], env=env, prefix=[])
        finally:
            for listener in listeners:
                listener.close()  # the relay holds its own copies

    def _wait_redis(self, port: int, timeout: float) -> None:
        """Until the Redis on 127.0.0.1:``port`` answers PING (RESP inline command) with +PONG."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive("redis-server")
            with contextlib.suppress(OSError):
                with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(64).startswith(b"+PONG"):
                        return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"redis-server not answering after {timeout:.0f}s:\n{self._log_tail('redis-server')}")
            time.sleep(0.2)

    def _wait_http(self, name: str, url: str, timeout: float, healthy=lambda body: True, *, in_netns: bool = True, via=None) -> None:
        """Poll a plain-HTTP health endpoint of child ``name`` until it answers 200 and ``healthy``
        (from inside the cluster's namespace, if there is one, unless ``in_netns`` is False)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(name)
            try:
                if self._http_ok(url, healthy, in_netns=in_netns, via=via):
                    return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not healthy after {timeout:.0f}s:\n{self._log_tail(name)}")
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

    def _wait_controller_manager(self, timeout: float = 60.0) -> None:
        """The serviceaccount controller creating ``default/default`` proves KCM is working."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive("kube-controller-manager")
            code, _ = self._get("/api/v1/namespaces/default/serviceaccounts/default")
            if code == 200:
                return
            time.sleep(0.2)
        warnings.warn(
            f"kube-controller-manager did not create default/default ServiceAccount within {timeout}s:\n{self._log_tail('kube-controller-manager')}",
            stacklevel=2,
        )

    def _install_default_crds(self) -> None:
        """KubeRay's RayJob and RayCluster CRDs, then lorarl's own generated CRD.

        ``LORARL_CONTROLPLANE_SKIP_LORARL_CRD=1`` skips lorarl's CRD (handy while
        iterating on a CRD that the API server rejects).
        """
        from lorarl_dev.kuberay import kuberay_crd_path

        self.install_crds([kuberay_crd_path(kind) for kind in ("RayJob", "RayCluster")])
        own = repo_root() / LORARL_CRD
        if os.environ.get("LORARL_CONTROLPLANE_SKIP_LORARL_CRD"):
            return
        if not own.is_file():
            warnings.warn(f"{own} does not exist yet; not installing the LoRARLJob CRD", stacklevel=3)
            return
        try:
            self.install_crds([own])
        except KubectlError as e:
            raise ControlPlaneError(f"kube-apiserver rejected {LORARL_CRD} (set LORARL_CONTROLPLANE_SKIP_LORARL_CRD=1 to start without it):\n{e.stderr}") from e

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "bin_dir": str(self.bin_dir),
            "workdir": str(self.workdir),
            "version": self.version,
            "pids": self.pids,
            "own_workdir": self._own_workdir,
            "netns": self.netns,
            "inner_server": self._inner_server,
            "gpus": self.gpus if self.real_node else None,
        }
        _write_json(self.workdir / "state.json", state, 0o644)

    # -- client helpers -------------------------------------------------

    @property
    def kubectl_path(self) -> str:
        return find_kubectl(self.bin_dir)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: str | os.PathLike[str] | None = None, timeout: float | None = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (text mode, output captured)."""
        cmd = [self.kubectl_path, f"--kubeconfig={kubeconfig or self.kubeconfig}", *map(str, args)]
        proc = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def install_crds(self, paths: Iterable[str | os.PathLike[str]], timeout: float = 60) -> None:
        """Server-side apply CRD files, then wait until every CRD is Established."""
        files: list[str] = []
        for p in paths:
            files += ["-f", str(p)]
        if not files:
            return
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lorarl-testing", *files)
        # `kubectl wait` fails at once (instead of waiting) while a new CRD has no
        # status.conditions yet, so retry until the deadline
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(1, int(deadline - time.monotonic()))
            proc = self.kubectl("wait", "--for=condition=Established", f"--timeout={remaining}s", *files, timeout=remaining + 30, check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() >= deadline or "accessor error" not in proc.stderr:
                raise KubectlError(proc.returncode, proc.args, proc.stdout, proc.stderr)
            time.sleep(0.5)

    def api_client(self):
        """A fresh ``kubernetes.client.ApiClient`` with admin credentials."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def _shared_client(self):
        if self._api_client is None:
            self._api_client = self.api_client()
        return self._api_client

    def service_account_token(self, namespace: str, name: str, audiences: Sequence[str] | None = None, expiration_seconds: int = 3600) -> str:
        """A bound token for ServiceAccount ``namespace/name`` via the TokenRequest API."""
        from kubernetes import client

        api = client.CoreV1Api(self._shared_client())
        # a plain body: the typed V1TokenRequestSpec of the kubernetes 30 client insists on audiences,
        # which the API server defaults (to its own) when they are left out
        spec: dict = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        resp = api.create_namespaced_service_account_token(name, namespace, body)
        return resp.status.token

    def ensure_service_account(self, namespace: str, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        api = client.CoreV1Api(self._shared_client())
        try:
            api.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as e:
            if e.status != 409:
                raise

    def restricted_kubeconfig(self, namespace: str, sa_name: str, *, expiration_seconds: int = 24 * 3600) -> pathlib.Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/sa_name``.

        The ServiceAccount is created if it does not exist; it has only the
        permissions that RBAC grants it.
        """
        self.ensure_service_account(namespace, sa_name)
        token = self.service_account_token(namespace, sa_name, expiration_seconds=expiration_seconds)
        user = f"system:serviceaccount:{namespace}:{sa_name}"
        path = self.workdir / f"kubeconfig-{namespace}-{sa_name}"
        _write_json(path, _kubeconfig(self.server, self._ca_pem, user, token=token, namespace=namespace))
        return path

    def env(self) -> dict[str, str]:
        """Environment variables that point tools at this control plane."""
        kubectl_dir = str(pathlib.Path(self.kubectl_path).parent)
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "LORARL_CONTROLPLANE_SERVER": str(self.server),
            "LORARL_CONTROLPLANE_BIN_DIR": str(self.bin_dir),
            "PATH": os.pathsep.join([kubectl_dir, str(self.bin_dir), os.environ.get("PATH", "")]),
        }

    # -- re-attaching to a detached control plane -----------------------

    @classmethod
    def attach(cls, workdir: str | os.PathLike[str]) -> ControlPlane:
        """A handle on a control plane that another process started in ``workdir``."""
        workdir = pathlib.Path(workdir)
        state = json.loads((workdir / "state.json").read_text())
        cp = cls(workdir, bin_dir=state["bin_dir"], detached=True)
        cp._own_workdir = False
        cp.server = state["server"]
        cp.kubeconfig = pathlib.Path(state["kubeconfig"])
        cp.ca_file = pathlib.Path(state["ca_file"])
        cp.version = state.get("version")
        cp.pids = {k: int(v) for k, v in state["pids"].items()}
        cp._ca_pem = cp.ca_file.read_bytes()
        cp._inner_server = state.get("inner_server") or cp.server
        if state.get("netns"):
            from lorarl_dev.node.netns import NetnsThread
            from lorarl_dev.node.realnode import RealNode

            cp.netns, cp.real_node, cp.gpus = state["netns"], True, state.get("gpus") or 0
            cp._netns_thread = NetnsThread(cp.netns)
            cp.node = RealNode(cp, gpus=cp.gpus)
        ctx = ssl.create_default_context(cafile=str(cp.ca_file))
        ctx.load_cert_chain(str(workdir / "pki" / "admin.crt"), str(workdir / "pki" / "admin.key"))
        cp._ssl = ctx
        return cp

    def healthy(self) -> bool:
        if not self.running:
            return False
        try:
            return self._get("/readyz", timeout=3)[0] == 200
        except (OSError, ssl.SSLError):
            return False


# --------------------------------------------------------------------------
# detached sessions: ``lorarl-dev controlplane up|down|env``


def _state_dir(state_dir: str | os.PathLike[str] | None) -> pathlib.Path:
    return pathlib.Path(state_dir) if state_dir is not None else default_state_dir()


def up(
    state_dir: str | os.PathLike[str] | None = None, *, verbose: bool = True, extra_crds: Sequence[str | os.PathLike[str]] = (), **options: Any
) -> ControlPlane:
    """Start a control plane that outlives this process; reuse a healthy one already there.

    ``options`` go to :class:`ControlPlane` (``fake_nodes=``, ``kuberay_operator=``, ...)
    and only matter when a new control plane is started.
    """
    workdir = _state_dir(state_dir) / "controlplane"
    if (workdir / "state.json").is_file():
        try:
            cp = ControlPlane.attach(workdir)
        except (OSError, ValueError, KeyError):
            cp = None
        if cp is not None and cp.healthy():
            if extra_crds:
                cp.install_crds(extra_crds)
            return cp
        down(state_dir)
    cp = ControlPlane(workdir, detached=True, verbose=verbose, extra_crds=extra_crds, **options)
    cp._own_workdir = False
    return cp.start()


def down(state_dir: str | os.PathLike[str] | None = None) -> bool:
    """Stop a control plane started by :func:`up` and remove its state. True if one was running."""
    workdir = _state_dir(state_dir) / "controlplane"
    pids: Mapping[str, int] = {}
    for fname in ("pids.json", "state.json"):
        try:
            data = json.loads((workdir / fname).read_text())
        except (OSError, ValueError):
            continue
        pids = data.get("pids", data) if fname == "state.json" else data
        if pids:
            break
    was_running = any(pid_alive(int(p)) and pid_is(int(p), n) for n, p in pids.items())
    netns_name = None
    with contextlib.suppress(OSError, ValueError):
        netns_name = json.loads((workdir / "state.json").read_text()).get("netns")
    if netns_name:
        from lorarl_dev.node import realnode

        with contextlib.suppress(OSError, ValueError):
            record = json.loads(realnode.RECORD.read_text())
            if record.get("netns") == netns_name:
                record["pids"] = {**record.get("pids", {}), **pids}
                realnode.teardown(record)  # the node, its pods, mounts and cgroups first
    for name in [n for n in pids if n not in _STOP_ORDER] + list(_STOP_ORDER):
        pid = pids.get(name)
        if pid is None:
            continue
        kill_group(int(pid), name)
    if netns_name:
        from lorarl_dev.node import netns, realnode

        netns.delete(netns_name)
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(realnode.RECORD.read_text())
            if record.get("netns") == netns_name:
                realnode.release(record)
    shutil.rmtree(workdir, ignore_errors=True)
    return was_running


def env(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Environment for a control plane started by :func:`up` (KUBECONFIG etc.)."""
    workdir = _state_dir(state_dir) / "controlplane"
    if not (workdir / "state.json").is_file():
        raise ControlPlaneError(f"no control plane in {workdir}; run 'lorarl-dev controlplane up'")
    return ControlPlane.attach(workdir).env()
