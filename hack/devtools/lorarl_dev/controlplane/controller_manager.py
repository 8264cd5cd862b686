"""kube-controller-manager and kube-scheduler."""

from __future__ import annotations

import time
import warnings

from lorarl_dev.controlplane.apiserver import SERVICE_CIDR
from lorarl_dev.controlplane.kubeconfig import kubeconfig_of, write_json


class ControllerManager:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that starts the controller
    manager (and waits until it works) and the scheduler."""

    def _start_controller_manager(self) -> None:
        pki = self.workdir / "pki"
        kcm_kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        write_json(
            kcm_kubeconfig,
            kubeconfig_of(self._inner_server, self._ca_pem, "system:kube-controller-manager", self._kcm.cert_pem, self._kcm.key_pem),
        )
        # a real node's PVCs bind through KCM's own hostpath provisioner (realnode.STORAGE_CLASS)
        node_flags = ["--enable-hostpath-provisioner=true"] if self.real_node else []
        self.spawn(
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
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--controllers={self.controllers}",
                "--concurrent-gc-syncs=5",
                # a quota made before the quota controller discovered a new CRD (every 30 s) counts
                # that CRD's objects only at the next full re-count: 5 min by default, 20 s here
                "--resource-quota-sync-period=20s",
                *node_flags,
                "--v=0",
            ],
        )

    def _wait_controller_manager(self, timeout: float = 60.0) -> None:
        """The serviceaccount controller creating ``default/default`` proves KCM is working."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive("kube-controller-manager")
            code, _ = self.get("/api/v1/namespaces/default/serviceaccounts/default")
            if code == 200:
                return
            time.sleep(0.2)
        warnings.warn(
            f"kube-controller-manager did not create default/default ServiceAccount within {timeout}s:\n{self.log_tail('kube-controller-manager')}",
            stacklevel=2,
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.component_kubeconfig("kube-scheduler", self._sched)
        self.spawn(
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
