"""kube-scheduler + kwok fake nodes + the real KubeRay operator on the embedded control plane."""

from __future__ import annotations

import json

import pytest
import yaml
from lorarl_dev.pytest_plugin import namespace_name

from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane


def _get(cp, *args):
    return json.loads(cp.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture
def ns(fake_cluster, request):
    name = namespace_name(request.node.name)
    fake_cluster.kubectl("create", "namespace", name)
    yield name
    fake_cluster.kubectl("delete", "namespace", name, "--wait=false")


def _pod(name, ns, gpus):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none", "resources": {"limits": {"amd.com/gpu": str(gpus)}}}]},
    }


def test_fake_nodes_are_ready_with_gpus(fake_cluster):
    nodes = _get(fake_cluster, "nodes")["items"]
    assert len(nodes) == 2
    for node in nodes:
        assert node["status"]["allocatable"]["amd.com/gpu"] == "8"
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"


def test_scheduler_binds_gpu_pods_and_rejects_oversized_ones(fake_cluster, ns):
    fake_cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod("fits", ns, 4)))
    fake_cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod("too-big", ns, 9)))
    fake_cluster.kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/fits", "-n", ns, "--timeout=60s", timeout=90)
    assert _get(fake_cluster, "pod", "fits", "-n", ns)["spec"]["nodeName"].startswith("kwok-node-")

    def unschedulable():
        conds = _get(fake_cluster, "pod", "too-big", "-n", ns)["status"].get("conditions", [])
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    wait_for(unschedulable, timeout=60, interval=0.5, what="too-big to be Unschedulable")


def test_kuberay_operator_turns_a_rayjob_into_a_ready_raycluster(fake_cluster, ns):
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rl", "namespace": ns},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.49.0"}]}}},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 2,
                        "minReplicas": 2,
                        "maxReplicas": 2,
                        "rayStartParams": {},
                        "template": {
                            "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.49.0", "resources": {"limits": {"amd.com/gpu": "8"}}}]}
                        },
                    }
                ],
            },
        },
    }
    fake_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(rayjob))

    def cluster_name():
        return _get(fake_cluster, "rayjob", "rl", "-n", ns).get("status", {}).get("rayClusterName")

    name = wait_for(cluster_name, timeout=60, interval=0.5, what="the RayJob to name its RayCluster")

    def ready():
        rc = _get(fake_cluster, "raycluster", name, "-n", ns)
        return rc.get("status", {}).get("state") == "ready" and rc

    rc = wait_for(ready, timeout=90, interval=0.5, what=f"RayCluster {name} to be ready")
    assert rc["status"]["readyWorkerReplicas"] == 2
    assert rc["status"]["desiredGPU"] == "16"
    owners = rc["metadata"]["ownerReferences"]
    assert owners[0]["kind"] == "RayJob" and owners[0]["name"] == "rl"
    pods = _get(fake_cluster, "pods", "-n", ns, "-l", f"ray.io/cluster={name}")["items"]
    assert sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods) == ["head", "worker", "worker"]
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    # two 8-GPU workers on two 8-GPU nodes: one each
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert len({p["spec"]["nodeName"] for p in workers}) == 2
