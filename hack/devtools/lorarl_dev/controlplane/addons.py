"""What runs beside the core: the default CRDs, the KubeRay operator, Kueue, Flux and Argo CD
(their flags and manifests are in :mod:`lorarl_dev.kuberay`, :mod:`lorarl_dev.kueue`,
:mod:`lorarl_dev.flux` and :mod:`lorarl_dev.argocd`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
import time
import urllib.parse
import warnings

from lorarl_dev import argocd, flux
from lorarl_dev.certs import TinyCA
from lorarl_dev.controlplane.kubeconfig import write_json
from lorarl_dev.errors import ControlPlaneError, KubectlError
from lorarl_dev.kuberay import kuberay_crd_path
from lorarl_dev.kueue import METRICS_CERT_DIR, kueue_crd_paths, manager_config, webhook_configurations
from lorarl_dev.locations import module_child_env, repo_root
from lorarl_dev.node import netns
from lorarl_dev.processes import free_port

LORARL_CRD = "crds/lorarl.dev_lorarljobs.yaml"


class AddOns:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that installs CRDs and starts the
    add-ons."""

    def _install_default_crds(self) -> None:
        """KubeRay's RayJob and RayCluster CRDs, then lorarl's own generated CRD.

        ``LORARL_CONTROLPLANE_SKIP_LORARL_CRD=1`` skips lorarl's CRD (handy while
        iterating on a CRD that the API server rejects).
        """
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

    def _start_kuberay_operator(self) -> None:
        """The real KubeRay operator (v1.5.0) as a local process, watching all namespaces."""
        # it watches all three kinds and will not start without their CRDs
        self.install_crds([kuberay_crd_path(k) for k in ("RayCluster", "RayJob", "RayService")])
        metrics, probes = free_port(), free_port()
        # with a real node it runs in the cluster's namespace and resolves cluster names through
        # CoreDNS: it GETs http://<head-svc>.<ns>.svc.cluster.local:8265 for each RayJob
        # (ray-operator/controllers/ray/utils/dashboardclient, v1.5.0)
        prefix = self.node.dns_exec_prefix() if self.node is not None else None
        self.spawn(
            "kuberay-operator",
            [
                f"--kubeconfig={self.child_kubeconfig}",
                f"--metrics-addr=127.0.0.1:{metrics}",
                f"--health-probe-bind-address=127.0.0.1:{probes}",
                "--enable-leader-election=false",
            ],
            prefix=prefix,
        )
        self.wait_http("kuberay-operator", f"http://127.0.0.1:{probes}/readyz", 60)

    def _start_kueue(self) -> None:
        """The real Kueue manager (lorarl_dev.kueue) as a local process with its webhooks
        registered by URL (the API server calls https://127.0.0.1:<port>/<path>)."""
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
        write_json(config, manager_config(webhook_port=webhook, cert_dir=certs, health_port=health), 0o644)
        self.kubectl("create", "namespace", "kueue-system", check=False)
        self.spawn("kueue", [f"--kubeconfig={self.child_kubeconfig}", f"--config={config}", "--zap-log-level=2"])
        self.wait_http("kueue", f"http://127.0.0.1:{health}/readyz", 90)
        hooks = webhook_configurations(f"https://127.0.0.1:{webhook}", ca.cert_pem)
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lorarl-testing", "-f", "-", input="\n".join(json.dumps(h) for h in hooks))

    def _start_flux(self) -> None:
        """The real Flux source-controller and kustomize-controller (lorarl_dev.flux) as local
        processes; kustomize-controller downloads artifacts from source-controller's storage
        server on 127.0.0.1.

        With a real node they stay in the root network namespace, beside the tests' Git server
        (lorarl_dev.gitserver, on the root's 127.0.0.1), and reach the API server through the
        relay (``kubeconfig``); no pod or kubelet needs to reach them."""
        self.install_crds(flux.crd_paths())
        storage = self.workdir / "flux-artifacts"
        storage.mkdir(exist_ok=True)
        # ctrl.GetConfig: no --kubeconfig flag in their pflag set
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        root = [] if self.netns is not None else None  # an empty prefix: not entered into the namespace
        health = free_port()
        self.spawn("source-controller", flux.source_controller_args(storage=storage, storage_port=free_port(), health_port=health), env=env, prefix=root)
        self.wait_http("source-controller", f"http://127.0.0.1:{health}/readyz", 90, in_netns=False)
        health = free_port()
        self.spawn("kustomize-controller", flux.kustomize_controller_args(health_port=health), env=env, prefix=root)
        self.wait_http("kustomize-controller", f"http://127.0.0.1:{health}/readyz", 90, in_netns=False)

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
        redis = shutil.which("redis-server")
        if redis is None:
            raise ControlPlaneError("Argo CD needs a Redis: redis-server is not installed (hack/gitops/packages.sh)")
        self.install_crds(argocd.crd_paths())
        self.kubectl("create", "namespace", argocd.NAMESPACE, check=False)
        self.kubectl("apply", "--server-side", "--field-manager=lorarl-testing", "-f", "-", input="\n".join(json.dumps(o) for o in argocd.settings_objects()))
        root: list[str] = []  # an empty prefix: in the root namespace even beside a real node
        redis_port = free_port()
        (self.workdir / "redis").mkdir(exist_ok=True)
        self.spawn("redis-server", argocd.redis_args(port=redis_port, workdir=self.workdir / "redis"), exe=redis, prefix=root)
        self._wait_redis(redis_port, 30)
        env = {**os.environ, **argocd.environment(self.workdir, self.kubeconfig)}
        repo, health = free_port(), free_port()
        self.spawn("argocd-repo-server", argocd.repo_server_args(port=repo, metrics_port=health, redis_port=redis_port), env=env, prefix=root)
        self.wait_http("argocd-repo-server", f"http://127.0.0.1:{health}/healthz?full=true", 90, in_netns=False)

        self._argocd_netns = netns.create_owned("argocd-" + hashlib.sha256(str(self.workdir).encode()).hexdigest()[:6])
        api_port = urllib.parse.urlsplit(self.server).port
        self._start_relay_into(self._argocd_netns, "argocd-relay", [api_port, redis_port, repo])
        health = free_port()
        args = argocd.application_controller_args(repo_port=repo, metrics_port=health, redis_port=redis_port, resync_seconds=10)
        self.spawn("argocd-application-controller", args, env=env, prefix=netns.nsenter_prefix(self._argocd_netns))
        probe = netns.NetnsThread(self._argocd_netns)
        try:
            self.wait_http("argocd-application-controller", f"http://127.0.0.1:{health}/healthz", 90, via=probe)
        finally:
            probe.close()

    def _start_relay_into(self, namespace: str, name: str, ports: list[int]) -> None:
        """A relay from 127.0.0.1:<port> inside ``namespace`` to 127.0.0.1:<port> in the root
        namespace, for each port: the sockets are made in there, the relay runs out here."""

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
            env = module_child_env()
            self.spawn(name, args, exe=sys.executable, pass_fds=[listener.fileno() for listener in listeners], env=env, prefix=[])
        finally:
            for listener in listeners:
                listener.close()  # the relay holds its own copies

    def _wait_redis(self, port: int, timeout: float) -> None:
        """Until the Redis on 127.0.0.1:``port`` answers PING (RESP inline command) with +PONG."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive("redis-server")
            with contextlib.suppress(OSError):
                with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(64).startswith(b"+PONG"):
                        return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"redis-server not answering after {timeout:.0f}s:\n{self.log_tail('redis-server')}")
            time.sleep(0.2)
