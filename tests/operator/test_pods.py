"""The pod mapping on pods as the real kubelet wrote them (recorded on the real node by
tests/e2e/test_failures.py's jobs: KubeRay's head pods, trimmed as the operator's cache trims)."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
from lorarl.control import pods

RECORDED = pathlib.Path(__file__).resolve().parent / "recorded_pods"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "name,reason,words",
    [
        ("prepare-image-never-pull", pods.IMAGE_PULL, ("init container prepare", "not-there:never", "ErrImageNeverPull")),
        (
            "prepare-download-crash-loop",
            pods.INPUT_DOWNLOAD_FAILED,
            ("init container prepare exited 4", "could not download model Qwen/Qwen3-4B@not-on-the-hub"),
        ),
        ("ray-head-secret-missing", pods.CONFIG_ERROR, ("container ray-head", 'secret "wandb-missing" not found')),
    ],
)
def test_a_recorded_pod_is_named_with_its_container_and_cause(name, reason, words):
    trouble = pods.diagnose([pods.trim_pod(recorded(name))])
    assert trouble is not None and trouble.reason == reason and trouble.stuck
    for word in words:
        assert word in trouble.message


def test_a_ray_head_running_again_after_one_exit_is_not_stuck():
    """Seen on the node: three Ray heads starting together at load ~40 each missed the raylet's
    30 s and exited 1 once, then ran. Running again after one exit is no crash loop; after
    CRASH_LOOP_RESTARTS exits, or while it waits in back-off or has just exited, it is."""
    body = recorded("ray-head-restarted-once-running")
    (head,) = body["status"]["containerStatuses"]
    assert head["restartCount"] == 1 and "running" in head["state"] and head["lastState"]["terminated"]["exitCode"] == 1
    assert pods.diagnose([pods.trim_pod(body)]) is None
    many = copy.deepcopy(body)
    many["status"]["containerStatuses"][0]["restartCount"] = pods.CRASH_LOOP_RESTARTS
    assert pods.diagnose([pods.trim_pod(many)]).reason == pods.CRASH_LOOP
    exited = copy.deepcopy(body)
    exited["status"]["containerStatuses"][0]["state"] = {"terminated": head["lastState"]["terminated"]}
    assert pods.diagnose([pods.trim_pod(exited)]).reason == pods.CRASH_LOOP


def _on_a_lost_node(body: dict) -> dict:
    """``body`` as the node controller leaves a pod of a node that stopped reporting: Ready False,
    ContainersReady as the kubelet last wrote it (MarkPodsNotReady changes Ready only)."""
    lost = copy.deepcopy(body)
    for cond in lost["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond.update(status="False", lastTransitionTime="2026-12-06T17:02:11Z")
        if cond["type"] == "ContainersReady":
            cond["status"] = "True"
    return lost


def test_a_running_pod_whose_node_stopped_reporting_is_named_with_its_node_and_its_eviction():
    """Recorded on the real node by tests/e2e/test_faults.py (LORARL_RECORD_TESTDATA=1): the head
    pod of a 2-node job 55 s after the node's kubelet stopped, as the node controller left it."""
    body = recorded("ray-head-node-not-ready")
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    assert body["status"]["phase"] == "Running" and (conditions["Ready"]["status"], conditions["ContainersReady"]["status"]) == ("False", "True")
    trouble = pods.node_not_ready([pods.trim_pod(body)])
    assert trouble is not None and trouble.reason == pods.NODE_NOT_READY and not trouble.stuck
    name, node, since = body["metadata"]["name"], body["spec"]["nodeName"], conditions["Ready"]["lastTransitionTime"]
    assert trouble.message.startswith(f"pod {name}: its node {node} is not ready since {since}"), trouble.message
    # a pod the kubelet itself reports not ready (both conditions False) is not the node's trouble
    assert pods.node_not_ready([pods.trim_pod(recorded("ray-head-restarted-once-running"))]) is None
    # the toleration the API server's DefaultTolerationSeconds gave the recorded pod
    seconds = {t["key"]: t.get("tolerationSeconds") for t in body["spec"]["tolerations"]}
    assert f"evicts the pod {seconds['node.kubernetes.io/unreachable']} s after" in trouble.message


def test_a_pod_that_is_not_ready_for_its_own_reasons_is_no_node_trouble():
    """A failing readiness probe makes the kubelet write both Ready and ContainersReady False; a
    pod being deleted or not running is someone else's story."""
    body = recorded("ray-head-restarted-once-running")
    probe_failed = copy.deepcopy(body)
    for cond in probe_failed["status"]["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["status"] = "False"
    deleting = _on_a_lost_node(body)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T17:07:11Z"
    pending = _on_a_lost_node(body)
    pending["status"]["phase"] = "Pending"
    for pod in (probe_failed, deleting, pending):
        assert pods.node_not_ready([pods.trim_pod(pod)]) is None


def test_only_the_current_clusters_pods_that_stay_are_the_runs():
    """A retry's old cluster (KubeRay replaces a lost worker there until it deletes the cluster)
    and pods being deleted say nothing about the run; a pod of no cluster (the submitter's) does."""
    body = recorded("prepare-image-never-pull")
    cluster = body["metadata"]["labels"]["ray.io/cluster"]
    old = copy.deepcopy(body)
    old["metadata"]["labels"]["ray.io/cluster"] = "an-older-cluster"
    going = copy.deepcopy(body)
    going["metadata"]["deletionTimestamp"] = "2026-12-06T17:00:00Z"
    submitter = copy.deepcopy(body)
    del submitter["metadata"]["labels"]["ray.io/cluster"]
    trimmed = [pods.trim_pod(p) for p in (body, old, going, submitter)]
    assert pods.current(trimmed, cluster) == [trimmed[0], trimmed[3]]
    assert pods.current(trimmed, None) == [trimmed[0], trimmed[1], trimmed[3]]  # no cluster named yet
    assert pods.diagnose(pods.current(trimmed[1:3], cluster)) is None
