"""The seed LoraRLJob end to end on the real node: the operator (helm-installed, in its own Pod)
makes the RayJob; the real KubeRay operator makes the RayCluster and the submitter Job; the head
pod's init container downloads the inputs from the Hub stand-in with the real hf CLI; real Ray
runs the trainer stand-in under the reporter, which patches the status with its projected token.
The same run survives its submitter pod deleted mid-run, and the LoraRLJob deleted at the end
leaves no child and no pod (one seed run for both: they were two tests, docs/development.md).

The oracles are outside lorarl: KubeRay's RayJob status (from the real Ray dashboard), the pods'
own container states and logs, and the files on the provisioned volume."""

from __future__ import annotations

import json
import pathlib

import pytest
from lorarl_dev import seedrun

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900  # 2 shared cores: image unpack, Ray start and the trainer stand-in


def test_the_seed_job_survives_its_submitter_pod_succeeds_with_its_checkpoints_and_leaves_nothing(real_node_cluster, hub, node_images, job_ns):
    cp, ns, name = real_node_cluster, job_ns, "qwen3-4b-lora-amd"
    revision = hub.revision({"seconds_per_rollout": 0.5})
    # the pods run hardened (docs/security.md "Pod Security levels"): the API server's PodSecurity
    # admits them where "baseline" is enforced (and would refuse a privileged setting)
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision)

    # Running, as KubeRay says it from the real Ray job (not a stand-in)
    seen = seedrun.wait_for("RayJob RUNNING", lambda: _running_snapshot(cp, ns, name), RUN_TIMEOUT, explain=explain)
    head, rayjob_running = seen
    prepare = next(s for s in head["status"]["initContainerStatuses"] if s["name"] == "prepare")
    assert prepare["state"]["terminated"]["exitCode"] == 0
    prepare_log = cp.kubectl("logs", "-n", ns, head["metadata"]["name"], "-c", "prepare").stdout
    assert "prepare: all inputs present" in prepare_log
    assert "prepare: downloading model Qwen/Qwen3-4B@" + revision in prepare_log
    assert rayjob_running["status"]["jobDeploymentStatus"] == "Running"
    _assert_hardened(head)
    _assert_submitter_holds_no_token(cp, ns, name)
    seedrun.wait_for("LoraRLJob Running", lambda: seedrun.job_status(cp, ns, name).get("phase") in ("Running", "Succeeded"), 120, explain=explain)

    # the submitter pod deleted mid-run: the run goes on (KubeRay's Job makes another submitter,
    # which follows the same Ray job)
    seedrun.wait_for("rollout >= 5", lambda: seedrun.rollout_at_least(cp, ns, name, 5), RUN_TIMEOUT, explain=explain)
    submitters = [p for p in seedrun.pods(cp, ns) if "job-name" in (p["metadata"].get("labels") or {})]
    assert len(submitters) == 1, [p["metadata"]["name"] for p in submitters]
    cp.kubectl("delete", "pod", "-n", ns, submitters[0]["metadata"]["name"], "--grace-period=0", "--force")

    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    assert rayjob["status"]["jobStatus"] == "SUCCEEDED"
    assert rayjob["status"]["jobDeploymentStatus"] == "Complete"
    assert status["rayJob"]["jobStatus"] == "SUCCEEDED"
    # the reporter's fields, written from inside the pod with the job's projected token
    assert status["progress"]["rollout"] == status["progress"]["total"] == 100
    assert status["progress"]["gpuHours"] > 0  # the operator's, from the real pods' scheduling and termination
    assert status["checkpoints"]["latestIteration"] == 99
    assert status["eval"][0]["name"] == "aime24"

    # the checkpoints are on the volume KCM's provisioner made (read from its host directory)
    pvc = seedrun.get(cp, "pvc", f"{name}-data", ns)
    pv = seedrun.get(cp, "pv", pvc["spec"]["volumeName"], "")
    host = pathlib.Path(pv["spec"]["hostPath"]["path"])
    latest = status["checkpoints"]["latestPath"]
    assert latest.startswith("/root/shared_data/")
    adapter = host / "shared_data" / latest.removeprefix("/root/shared_data/")
    files = sorted(p.name for p in adapter.iterdir())
    assert "adapter_config.json" in files and "adapter_model.bin" in files, files
    assert any(f.startswith("adapter_megatron_rank") for f in files), files

    # the LoraRLJob deleted: every child it owned and every pod go
    cp.kubectl("delete", "lorarljob", "-n", ns, name, "--wait=true", "--timeout=300s", timeout=330)

    def nothing_left():
        out = cp.kubectl(
            "get",
            "rayjobs,rayclusters,jobs,pods,configmaps,pvc,serviceaccounts,roles,rolebindings,networkpolicies",
            "-n",
            ns,
            "-l",
            f"lorarl.dev/job={name}",
            "-o",
            "name",
        ).stdout.split()
        pods = seedrun.pods(cp, ns)
        rayjobs = cp.kubectl("get", "rayjobs,rayclusters", "-n", ns, "-o", "name").stdout.split()
        return not out and not pods and not rayjobs

    seedrun.wait_for("every child and pod gone", nothing_left, 300, explain=explain)


def _running_snapshot(cp, ns, name):
    """(head pod, RayJob) once KubeRay reports the Ray job RUNNING and the head pod is up."""
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    if not rayjob or rayjob.get("status", {}).get("jobStatus") not in ("RUNNING", "SUCCEEDED"):
        return None
    running = [p for p in seedrun.pods(cp, ns, "ray.io/node-type=head") if p["status"].get("phase") == "Running"]
    return (running[0], rayjob) if running else None


def _assert_hardened(pod):
    for container in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], container["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, container["name"]
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


def _assert_submitter_holds_no_token(cp, ns, name):
    """KubeRay's submitter pod, as KubeRay made it from the rendered template: no API token, no GPU."""
    pods = json.loads(cp.kubectl("get", "pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={name}", "-o", "json").stdout)["items"]
    assert pods, "no submitter pod"
    for pod in pods:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        tokens = [v for v in spec.get("volumes", []) if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", []))]
        assert not tokens, tokens
        for container in spec["containers"]:
            assert not [m for m in container.get("volumeMounts", []) if m["mountPath"].startswith("/var/run/secrets/kubernetes.io")]
            assert not [r for r in container["resources"].get("limits", {}) if r.endswith("gpu")], container["resources"]
        _assert_hardened(pod)
