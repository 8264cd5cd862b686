"""The ControlPlane: what it starts and in which order, how it stops, and how a detached one is
re-attached. Each component's own start is in the module named for it (a base class each)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from lorarl_dev.binaries import NODE_BINARIES, REQUIRED_BINARIES, ensure_binaries, missing_binaries
from lorarl_dev.certs import TinyCA
from lorarl_dev.controlplane import exit_hooks, leftovers, pki
from lorarl_dev.controlplane.addons import AddOns
from lorarl_dev.controlplane.apiserver import ApiServer
from lorarl_dev.controlplane.children import Children
from lorarl_dev.controlplane.clients import Clients
from lorarl_dev.controlplane.controller_manager import ControllerManager
from lorarl_dev.controlplane.etcd import Etcd
from lorarl_dev.controlplane.kubeconfig import write_json
from lorarl_dev.controlplane.leftovers import STOP_ORDER
from lorarl_dev.controlplane.nodes import Nodes
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.node import netns, realnode
from lorarl_dev.node.netns import NetnsThread
from lorarl_dev.node.realnode import RealNode, missing_requirements
from lorarl_dev.processes import kill_group, pid_alive


class ControlPlane(Etcd, ApiServer, ControllerManager, Nodes, AddOns, Children, Clients):
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
        self.ca: TinyCA | None = None  # issues the real node's certificates, after start()
        self._ssl: ssl.SSLContext | None = None
        self._api_client = None

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
            reasons = missing_requirements()
            if reasons:
                raise ControlPlaneError("cannot start a real node: " + "; ".join(reasons))
        if self.workdir is None:
            leftovers.sweep_stale_workdirs()
            self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="lorarl-cp-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.detached:
            exit_hooks.install()
            exit_hooks.LIVE.add(self)
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
            self.write_state()
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
            self.write_state()
            self._wait_controller_manager()
            if self.real_node:
                self.node = RealNode(self, gpus=self.gpus, profile=self.node_profile)
                self.node.start()
                self.write_state()
                if self.kuberay_operator:  # after CoreDNS: it calls each head's dashboard by name
                    self._start_kuberay_operator()
                    self.write_state()
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
            with contextlib.suppress(OSError, ValueError):
                node_state = json.loads(realnode.RECORD.read_text())
                if node_state.get("netns") == self.netns:
                    node_state["pids"] = dict(self.pids)
                    realnode.teardown(node_state)
                else:
                    node_state = None
        # a child not named in the order (a test's server spawned beside the node) goes first
        for name in [n for n in self.pids if n not in STOP_ORDER] + list(STOP_ORDER):
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
        exit_hooks.LIVE.discard(self)
        if self._argocd_netns is not None:
            netns.delete(self._argocd_netns)
            self._argocd_netns = None
        if self.netns is not None:
            if self._netns_thread is not None:
                self._netns_thread.close()
                self._netns_thread = None
            netns.delete(self.netns)
            if node_state is not None:
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

    def _write_certs(self) -> None:
        written = pki.write(self.workdir, rsa_key=self.real_node)
        self.ca, self.ca_file, self._ca_pem = written.ca, written.ca_file, written.ca.cert_pem
        self._admin, self._kcm, self._sched = written.admin, written.controller_manager, written.scheduler
        self._ssl = pki.admin_ssl_context(self.ca_file, written.directory)

    def write_state(self) -> None:
        """``state.json``: what :meth:`attach` and :func:`~lorarl_dev.controlplane.down` read; written
        again after a child is added (a server a test starts beside the node) so it stops with the rest."""
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
        write_json(self.workdir / "state.json", state, 0o644)

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
            cp.netns, cp.real_node, cp.gpus = state["netns"], True, state.get("gpus") or 0
            cp._netns_thread = NetnsThread(cp.netns)
            cp.node = RealNode(cp, gpus=cp.gpus)
        cp._ssl = pki.admin_ssl_context(cp.ca_file, workdir / "pki")
        return cp

    def healthy(self) -> bool:
        if not self.running:
            return False
        try:
            return self.get("/readyz", timeout=3)[0] == 200
        except (OSError, ssl.SSLError):
            return False
