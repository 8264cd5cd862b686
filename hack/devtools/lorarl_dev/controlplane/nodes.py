"""The cluster's nodes: kwok's fake ones, or the network namespace of the one real node
(:mod:`lorarl_dev.node.realnode` starts the node itself)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from lorarl_dev.controlplane.apiserver import SERVICE_CIDR
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.node import netns, realnode

#: Annotation that tells kwok to manage (fake) a Node.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


class Nodes:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that gives it nodes."""

    def _create_netns(self) -> None:
        """The cluster's network namespace, claimed as this machine's one real node."""
        name = "lorarl-" + hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:8]
        realnode.claim(name, self.workdir)  # refuses a second live node; sweeps a dead one
        netns.delete(name)  # a leftover of the same name (claim swept its processes)
        netns.create(name, realnode.NODE_IP, service_cidr=SERVICE_CIDR)
        self.netns = name
        self._netns_thread = netns.NetnsThread(name)

    def _start_kwok(self) -> None:
        """kwok fakes kubelets: Nodes annotated ``kwok.x-k8s.io/node=fake`` become Ready and
        pods bound to them go Running (and Succeeded/deleted per kwok's fast stages)."""
        stages = self.bin_dir.parent / "kwok-stages.yaml"
        if not stages.is_file():
            raise ControlPlaneError(f"{stages} missing; run hack/controlplane/build.sh kwok")
        self.spawn(
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
