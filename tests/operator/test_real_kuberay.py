"""The operator with the real KubeRay operator, kube-scheduler and kwok GPU nodes: the rendered
RayJob passes KubeRay's own validation, becomes a RayCluster whose GPU pods are really
scheduled, and the LoraRLJob status follows what KubeRay itself writes. (Nothing executes in
kwok pods and the Ray dashboard cannot be reached, so the real run ends when KubeRay gives up
on the job status; that terminal path is mapped too.)"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from lorarl.kube import Api
from tests.helpers import seed_doc
from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane
NAME = "qwen3-4b-lora-amd"


def test_real_kuberay_runs_the_rendered_rayjob(fake_cluster, tmp_path):
    cp = fake_cluster
    ns = "real-kuberay"
    cp.kubectl("create", "namespace", ns)
    # what the AMD node labeller publishes for MI355X nodes
    for node in json.loads(cp.kubectl("get", "nodes", "-o", "json").stdout)["items"]:
        cp.kubectl("label", "node", node["metadata"]["name"], "amd.com/gpu.device-id=75a3", "--overwrite")
    # a static volume for the job's PVC (no provisioner here); the PV controller binds it
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "lorarl-data"},
          "spec": {"capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                   "hostPath": {"path": "/tmp/lorarl-data"}}}
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(pv))
    doc = copy.deepcopy(seed_doc())
    doc["metadata"]["namespace"] = ns
    doc["spec"]["checkpoint"] = {"storage": {"storageClassName": ""}}
    log = open(tmp_path / "operator.log", "wb")
    op = subprocess.Popen([sys.executable, "-m", "lorarl.cli", "run", "-n", ns, "--liveness", "", "--metrics-port", "0",
                           "--resync-seconds", "1", "--log-format", "plain"],
                          stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **cp.env()}, start_new_session=True)
    client = cp.api_client()
    kube = Api(client)
    try:
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))

        def status():
            return (kube.get("lorarl.dev/v1alpha1", "LoraRLJob", ns, NAME) or {}).get("status") or {}

        # KubeRay accepted the spec (no ValidationFailed) and is creating the cluster
        st = wait_for(lambda: (lambda s: s if s.get("rayJob", {}).get("rayClusterName") else None)(status()), timeout=90, what="a RayCluster name from KubeRay")
        assert st["rayJob"]["jobDeploymentStatus"] != "ValidationFailed"
        cluster = st["rayJob"]["rayClusterName"]
        wait_for(lambda: status().get("phase") in ("Preparing", "Running", "Failed"), timeout=60, what="Preparing")

        def head_pod():
            pods = json.loads(cp.kubectl("get", "pods", "-n", ns, "-l", f"ray.io/cluster={cluster},ray.io/node-type=head", "-o", "json").stdout)["items"]
            return pods[0] if pods and pods[0]["spec"].get("nodeName") else None

        pod = wait_for(head_pod, timeout=120, what="the head pod scheduled on a GPU node")
        ray = pod["spec"]["containers"][0]
        assert ray["resources"]["limits"]["amd.com/gpu"] == "8"
        assert pod["spec"]["nodeSelector"] == {"amd.com/gpu.device-id": "75a3"}
        assert [c["name"] for c in pod["spec"]["initContainers"]][0] == "prepare"
        env = {e["name"] for e in ray["env"]}
        assert "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES" in env and "ROCR_VISIBLE_DEVICES" not in env
        assert pod["spec"]["serviceAccountName"] == f"{NAME}-reporter"
        # whatever KubeRay does next, the LoraRLJob reports it with a defined phase and reason
        final = wait_for(lambda: (lambda s: s if s.get("phase") == "Failed" else None)(status()), timeout=240, what="KubeRay to end the run")
        failed = {c["type"]: c for c in final["conditions"]}["Failed"]
        assert failed["status"] == "True" and failed["reason"] == final["rayJob"]["reason"]
    finally:
        op.terminate()
        op.wait(timeout=30)
        log.close()
        client.close()
