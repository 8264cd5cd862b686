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
from lorarl.runtime.kube import Api

from tests.helpers import seed_doc, wait_for

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
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "lorarl-data"},
        "spec": {"capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "", "hostPath": {"path": "/tmp/lorarl-data"}},
    }
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(pv))
    doc = copy.deepcopy(seed_doc())
    doc["metadata"]["namespace"] = ns
    doc["spec"]["checkpoint"] = {"storage": {"storageClassName": ""}}
    log = open(tmp_path / "operator.log", "wb")
    op = subprocess.Popen(
        [sys.executable, "-m", "lorarl.cli", "run", "-n", ns, "--liveness", "", "--metrics-port", "0", "--resync-seconds", "1", "--log-format", "plain"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **cp.env()},
        start_new_session=True,
    )
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
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["lorarl-reporter-install", "prepare"]
        env = {e["name"] for e in ray["env"]}
        assert "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES" in env and "ROCR_VISIBLE_DEVICES" not in env
        assert pod["spec"]["serviceAccountName"] == f"{NAME}-reporter"
        _assert_ray_token_wiring(cp, ns, cluster, pod)
        # whatever KubeRay does next, the LoraRLJob reports it with a defined phase and reason
        final = wait_for(lambda: (lambda s: s if s.get("phase") == "Failed" else None)(status()), timeout=240, what="KubeRay to end the run")
        failed = {c["type"]: c for c in final["conditions"]}["Failed"]
        assert failed["status"] == "True" and failed["reason"] == final["rayJob"]["reason"]
    finally:
        op.terminate()
        op.wait(timeout=30)
        log.close()
        client.close()


def _assert_ray_token_wiring(cp, ns: str, cluster: str, head: dict) -> None:
    """Ray's token authentication as the real KubeRay (v1.5.1) wires it from the rendered
    `authOptions: {mode: token}`: one Secret named after the RayCluster and owned by it
    (raycluster_controller.go:361-411), RAY_AUTH_MODE and RAY_AUTH_TOKEN from it in the head's Ray
    container (common/pod.go:249-280) and in the submitter (rayjob_controller.go:604-606), not in
    the prepare container; and the job's own ServiceAccount may not read it (the pods get it by
    reference, the kubelet reads it). The token's value is never printed."""
    secret = wait_for(
        lambda: json.loads(cp.kubectl("get", "secret", cluster, "-n", ns, "-o", "json", check=False).stdout or "null"),
        timeout=60,
        what="KubeRay's token Secret",
    )
    assert sorted(secret["data"]) == ["auth_token"] and secret["type"] == "Opaque"
    assert [(o["kind"], o["name"], o.get("controller")) for o in secret["metadata"]["ownerReferences"]] == [("RayCluster", cluster, True)]
    ref = {"name": cluster, "key": "auth_token"}

    def auth_env(container):
        env = {e["name"]: e for e in container.get("env", [])}
        return env.get("RAY_AUTH_MODE", {}).get("value"), (env.get("RAY_AUTH_TOKEN", {}).get("valueFrom") or {}).get("secretKeyRef")

    assert auth_env(head["spec"]["containers"][0]) == ("token", ref)
    for init in head["spec"]["initContainers"]:  # the reporter's copy, prepare: no Ray, no token
        assert auth_env(init) == (None, None), init["name"]

    def submitter():
        jobs = json.loads(cp.kubectl("get", "jobs", "-n", ns, "-o", "json").stdout)["items"]
        return jobs[0] if jobs else None

    job = wait_for(submitter, timeout=120, what="KubeRay's submitter Job")
    assert auth_env(job["spec"]["template"]["spec"]["containers"][0]) == ("token", ref)
    reporter = f"system:serviceaccount:{ns}:{NAME}-reporter"
    can = cp.kubectl("auth", "can-i", "get", f"secret/{cluster}", "-n", ns, f"--as={reporter}", check=False)
    assert can.stdout.strip() == "no", can.stdout


class RayJobRecorder:
    """Every status the real KubeRay operator writes to the RayJobs of a namespace, in order:
    a watch from before their creation sees each write (polling could miss New "", which
    lasts one reconcile)."""

    def __init__(self, api_client, namespace: str):
        import threading

        from kubernetes import client, watch

        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.statuses: dict[str, list[dict]] = {}
        self.stopped = False
        listed = self.custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs")
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, args=(listed["metadata"]["resourceVersion"],), daemon=True)
        self.thread.start()

    def _run(self, resource_version: str) -> None:
        try:
            for event in self.watch.stream(
                self.custom.list_namespaced_custom_object, "ray.io", "v1", self.namespace, "rayjobs", resource_version=resource_version, timeout_seconds=600
            ):
                obj = event["object"]
                seen = self.statuses.setdefault(obj["metadata"]["name"], [])
                st = obj.get("status") or {}
                if not seen or seen[-1] != st:
                    seen.append(st)
        except Exception as err:  # the connection closes under the stopped watch
            if not self.stopped:
                raise AssertionError(f"the RayJob watch broke: {err}") from err

    def deployment_statuses(self, name: str) -> list[str]:
        """The distinct jobDeploymentStatus values in the order KubeRay wrote them."""
        out: list[str] = []
        for st in self.statuses.get(name, []):
            value = st.get("jobDeploymentStatus", "")
            if not out or out[-1] != value:
                out.append(value)
        return out

    def writes(self, name: str) -> list[dict]:
        """One status per jobDeploymentStatus/jobStatus change (KubeRay writes on those only,
        rayjob_controller.go:859-860; the watch also sees metadata-only updates)."""
        out: list[dict] = []
        for st in self.statuses.get(name, []):
            if not out or (out[-1].get("jobDeploymentStatus"), out[-1].get("jobStatus")) != (st.get("jobDeploymentStatus"), st.get("jobStatus")):
                out.append(st)
        return out

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()


def small_rayjob(name: str, ns: str, schedulable: bool = True, **spec) -> dict:
    """A RayJob the kwok nodes can run (or, with schedulable=False, whose head never schedules,
    so the RayCluster never becomes ready and the RayJob stays Initializing)."""
    pod = {
        "containers": [
            {
                "name": "ray-head",
                "image": "rayproject/ray:2.52.0",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
            }
        ]
    }
    if not schedulable:
        pod["nodeSelector"] = {"lorarl.dev/no-such-node": "true"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod}}},
            **spec,
        },
    }


def shape(st: dict) -> tuple:
    """A status without its generated names and times: what the stand-in must reproduce."""
    return (
        st.get("jobDeploymentStatus", ""),
        st.get("jobStatus", ""),
        st.get("reason", ""),
        st.get("failed"),
        st.get("succeeded"),
        tuple(sorted(k for k in st if k in ("jobId", "rayClusterName", "dashboardURL", "startTime", "endTime"))),
    )


def test_stand_in_sequences_match_the_real_kuberay_operator(fake_cluster):
    """Suspend/resume, activeDeadlineSeconds and a retry, as the real kuberay-operator v1.5.0 writes
    them, against the same steps of lorarl_dev.kuberay_sim. Not reachable here: a Ray job that runs
    (no Ray head executes in a kwok pod, so jobStatus RUNNING/SUCCEEDED and AppFailed never come);
    the retry is KubeRay's own: the submitter pod "completes" on kwok, the dashboard never answers,
    and 30 s later KubeRay fails the attempt (rayjob_controller.go:270-272, 1126-1148)."""
    from lorarl_dev.kuberay_sim import FakeKubeRay

    from tests.operator.kuberay_steps import MemoryKube

    cp = fake_cluster
    ns = "kuberay-sequences"
    cp.kubectl("create", "namespace", ns)
    client = cp.api_client()
    recorder = RayJobRecorder(client, ns)
    try:
        jobs = [
            small_rayjob("suspend", ns, schedulable=False),
            small_rayjob("deadline", ns, schedulable=False, activeDeadlineSeconds=5, backoffLimit=2),
            small_rayjob("retry", ns, backoffLimit=1),
        ]
        for rj in jobs:
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(rj))

        def reached(name, *statuses):
            return lambda: recorder.deployment_statuses(name)[-len(statuses) :] == list(statuses)

        wait_for(reached("suspend", "Initializing"), timeout=60, what="suspend: Initializing")
        cp.kubectl("patch", "rayjob", "suspend", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        wait_for(reached("suspend", "Suspended"), timeout=60, what="suspend: Suspended")
        cp.kubectl("patch", "rayjob", "suspend", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
        wait_for(reached("suspend", "", "Initializing"), timeout=60, what="suspend: resumed to Initializing")
        wait_for(reached("deadline", "Failed"), timeout=60, what="deadline: Failed")
        wait_for(lambda: (recorder.writes("retry") or [{}])[-1].get("failed") == 2, timeout=400, what="retry: the second attempt failed")

        real = {name: recorder.writes(name) for name in ("suspend", "deadline", "retry")}
        print({name: [shape(w) for w in writes] for name, writes in real.items()})

        # the stand-in, driven through the same steps
        ray = FakeKubeRay(MemoryKube({}), ns, "suspend")
        ray.initializing()
        ray.suspending()
        ray.suspended()
        ray.resumed()
        ray.initializing()
        assert [shape(w) for w in real["suspend"]] == [shape({})] + [shape(w) for w in ray.writes]
        assert real["suspend"][1]["rayClusterName"] != real["suspend"][-1]["rayClusterName"]  # a new cluster after the resume

        ray = FakeKubeRay(MemoryKube({"activeDeadlineSeconds": 5, "backoffLimit": 2}), ns, "deadline")
        ray.initializing()
        ray.deadline_exceeded()
        assert [shape(w) for w in real["deadline"]] == [shape({})] + [shape(w) for w in ray.writes]
        assert real["deadline"][-1]["message"].startswith("The RayJob has passed the activeDeadlineSeconds.")

        ray = FakeKubeRay(MemoryKube({"backoffLimit": 1}), ns, "retry")
        ray.initializing()
        ray.submitted()
        ray.submitter_finished_timeout()
        ray.new_attempt()
        ray.initializing()
        ray.submitted()
        ray.submitter_finished_timeout()
        assert [shape(w) for w in real["retry"]] == [shape({})] + [shape(w) for w in ray.writes]
        assert recorder.deployment_statuses("retry") == ["", "Initializing", "Running", "Retrying", "", "Initializing", "Running", "Failed"]

        # and what the real writes make of a LoraRLJob: one Preparing from the first cluster to the end of the retry
        from tests.operator.kuberay_steps import walk

        phases, events = walk([(False, st, False, None) for st in real["retry"]], None)
        assert phases == ["Pending", "Preparing", "Preparing", "Preparing", "Preparing", "Preparing", "Preparing", "Failed"]
        assert events == [("Normal", "Pending"), ("Normal", "Preparing"), ("Warning", "Failed")]
    finally:
        recorder.stop()
        recorder.thread.join(timeout=10)
        client.close()
