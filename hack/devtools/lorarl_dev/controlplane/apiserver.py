"""kube-apiserver: its flags (admission, audit, the real node's), its relay out of the cluster's
network namespace, and waiting until it is ready."""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request

from lorarl_dev.controlplane.kubeconfig import kubeconfig_of, write_json
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.locations import module_child_env
from lorarl_dev.node.realnode import APISERVER_PORT, NODE_IP
from lorarl_dev.processes import free_port

SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

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


def admission_and_audit_flags(workdir: pathlib.Path) -> list[str]:
    """kube-apiserver flags for :data:`ADMISSION_PLUGINS` and the audit log in ``workdir``.

    Mode ``blocking`` (the default of the log backend, made explicit): the event is written in
    the request's own goroutine before the handler returns, so once a client has seen a response
    its audit line is in the file; a test can read the log without waiting. ``batch`` would
    buffer events for up to --audit-log-batch-max-wait and make every reader poll. The cost is
    one small append (O_APPEND write) per request to a local file.
    """
    policy = workdir / "audit-policy.json"
    write_json(policy, AUDIT_POLICY, 0o644)
    return [
        "--enable-admission-plugins=" + ",".join(ADMISSION_PLUGINS),
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",  # one plain file, never rotated (default: lumberjack at 100 MB)
    ]


class ApiServer:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that starts, stops and reaches
    kube-apiserver."""

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        if self.netns is not None:
            port = APISERVER_PORT  # the namespace is ours: every port is free in it
            self._inner_server = f"https://{NODE_IP}:{port}"
            address_flags = self._node_apiserver_flags(pki)
            admission = [
                f.replace("--enable-admission-plugins=", "--enable-admission-plugins=NodeRestriction,") for f in admission_and_audit_flags(self.workdir)
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
            admission = admission_and_audit_flags(self.workdir)
        self._ports["apiserver"] = port
        self.spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self._ports['etcd']}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                *address_flags,
                f"--secure-port={port}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--v=0",
                *admission,
            ],
        )
        self.server = self._start_relay(port) if self.netns is not None else self._inner_server
        kubeconfig = kubeconfig_of(self.server, self._ca_pem, "lorarl-admin", self._admin.cert_pem, self._admin.key_pem)
        if self.netns is not None:
            # for children inside the namespace (kwok, the KubeRay operator, Kueue)
            write_json(
                self.workdir / "kubeconfig-inner", kubeconfig_of(self._inner_server, self._ca_pem, "lorarl-admin", self._admin.cert_pem, self._admin.key_pem)
            )
        self.kubeconfig = self.workdir / "kubeconfig"
        write_json(self.kubeconfig, kubeconfig)

    def _node_apiserver_flags(self, pki: pathlib.Path) -> list[str]:
        """What a cluster with a real node needs: the API server on the node IP (the ``kubernetes``
        Service's endpoint, reachable from pods), ServiceAccount admission (projected tokens),
        the Node authorizer and NodeRestriction for the kubelet, and a client certificate to
        reach the kubelet (logs, exec) whose serving certificate it verifies."""
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

    def _start_relay(self, port: int) -> str:
        """A relay from 127.0.0.1:<free port> (root namespace) to the API server in ours."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        try:
            fd = listener.fileno()
            env = module_child_env()
            self.spawn("relay", ["-m", "lorarl_dev.node.relay", f"--listen-fd={fd}", f"--to={NODE_IP}:{port}"], exe=sys.executable, pass_fds=(fd,), env=env)
            return f"https://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            listener.close()  # the relay holds its own copy

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET ``path`` from the API server as the admin: (status, body), an HTTP error's too."""
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
            self.check_alive("etcd")
            self.check_alive("kube-apiserver")
            try:
                code, body = self.get("/readyz")
                if code == 200:
                    break
                last = body.decode(errors="replace")
            except (OSError, ssl.SSLError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"kube-apiserver not ready after {self.start_timeout}s ({last[-2000:]}):\n{self.log_tail('kube-apiserver')}")
            time.sleep(0.2)
        code, body = self.get("/version")
        self.version = json.loads(body).get("gitVersion")

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
