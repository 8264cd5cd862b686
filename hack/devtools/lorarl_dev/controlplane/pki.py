"""The cluster's certificates and keys, under ``<workdir>/pki``."""

from __future__ import annotations

import dataclasses
import pathlib
import ssl

from lorarl_dev.certs import KeyPair, TinyCA, service_account_keypair
from lorarl_dev.node.realnode import NODE_IP


@dataclasses.dataclass(frozen=True)
class ClusterPki:
    ca: TinyCA  # also issues the real node's client certificates
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    directory: pathlib.Path

    @property
    def ca_file(self) -> pathlib.Path:
        return self.directory / "ca.crt"


def write(workdir: pathlib.Path, *, rsa_key: bool) -> ClusterPki:
    """A fresh CA, the API server's serving and kubelet-client certificates, the admin's, the
    controller manager's and the scheduler's, and the ServiceAccount signing key."""
    pki = workdir / "pki"
    pki.mkdir(exist_ok=True)
    ca = TinyCA()
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    (pki / "ca.key").write_bytes(ca.key_pem)
    (pki / "ca.key").chmod(0o600)
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
        rsa_key=rsa_key,
    )
    # the API server's identity towards the kubelet (logs, exec, port-forward)
    ca.client_cert("kube-apiserver-kubelet-client", ("system:masters",)).write(pki, "apiserver-kubelet-client")
    serving.write(pki, "apiserver")
    admin = ca.client_cert("lorarl-admin", ("system:masters",))
    admin.write(pki, "admin")
    controller_manager = ca.client_cert("system:kube-controller-manager")
    controller_manager.write(pki, "kube-controller-manager")
    scheduler = ca.client_cert("system:kube-scheduler")
    scheduler.write(pki, "kube-scheduler")
    sa_key, sa_pub = service_account_keypair()
    (pki / "sa.key").write_bytes(sa_key)
    (pki / "sa.key").chmod(0o600)
    (pki / "sa.pub").write_bytes(sa_pub)
    return ClusterPki(ca=ca, admin=admin, controller_manager=controller_manager, scheduler=scheduler, directory=pki)


def admin_ssl_context(ca_file: pathlib.Path, pki: pathlib.Path) -> ssl.SSLContext:
    """TLS as the admin, trusting only the cluster's CA (the harness's own API calls)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx
