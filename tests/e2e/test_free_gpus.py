"""A finished job frees its GPUs at once (issue 36, point 1), on the real node.

Two jobs that each ask for every GPU of the node (16 fake ``amd.com/gpu``, one head pod each):
the second's head is Unschedulable while the first runs, and is scheduled as soon as the first's
RayCluster is gone, not ``ttlSecondsAfterFinished`` (formerly 600 s) later. After the first's
cluster is gone its trainer log is still there through ``lorarl logs`` (the submitter pod, which
KubeRay keeps), its status keeps the final progress, and its ``status.progress.gpuHours`` counts
the GPUs from the head's scheduling to their release: at least to the run's end, at most to the
pod's disappearance.

Oracles outside the operator: KubeRay's RayJob endTime, the scheduler's PodScheduled condition
and the API server's view of the RayCluster and pods. The seconds are printed; the only time
bounds are generous ones that tell a release at the run's end from a 600 s TTL."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import MEASURED

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
NODE_GPUS = 16  # lorarl_dev.pytest_plugin.REAL_NODE_GPUS
ALL_GPUS = {"hardware": {"gpusPerNode": NODE_GPUS}}
#: well below the old default TTL (600 s): a release that waited for it fails
RELEASE_BOUND = 120


def _t(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _cluster(cp, ns, name) -> str | None:
    return ((seedrun.get(cp, "rayjob", name, ns) or {}).get("status") or {}).get("rayClusterName")


def _head(cp, ns, cluster: str) -> dict | None:
    pods = seedrun.pods(cp, ns, f"ray.io/cluster={cluster},ray.io/node-type=head")
    return pods[0] if pods else None


def _scheduled(pod: dict) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def _scheduled_head(cp, ns, rayjob: str) -> tuple[str, dict] | None:
    """(RayCluster name, head pod) once the RayJob's current cluster has a scheduled head. The
    name is read again on every probe: a RayJob created suspended for Kueue gets a cluster name
    before admission and a new one after it (KubeRay starts a new cluster), so a name read once
    may never get a head."""
    cluster = _cluster(cp, ns, rayjob)
    head = _head(cp, ns, cluster) if cluster else None
    return (cluster, head) if head and (_scheduled(head) or {}).get("status") == "True" else None


def _workload(cp, ns, rayjob: str) -> dict | None:
    """Kueue's Workload of a RayJob (owned by it)."""
    out = cp.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json", check=False)
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return next((w for w in items if any(o.get("name") == rayjob for o in w["metadata"].get("ownerReferences") or [])), None)


def _condition(obj: dict | None, type_: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def test_a_finished_job_frees_its_gpus_for_the_next_and_keeps_its_log_and_hours(real_node_cluster, hub, node_images, job_ns):
    """Without a queue: the second's head waits on the scheduler (Unschedulable)."""
    cp, ns = real_node_cluster, job_ns

    def second_waits(second: str, explain) -> float | None:
        cluster_b = seedrun.wait_for("the second's RayCluster", lambda: _cluster(cp, ns, second), RUN_TIMEOUT, explain=explain)

        def b_waits():
            head = _head(cp, ns, cluster_b)
            cond = _scheduled(head) if head else None
            return cond if cond and cond["status"] == "False" else None

        waiting = seedrun.wait_for("the second's head Unschedulable", b_waits, RUN_TIMEOUT, explain=explain)
        assert waiting["reason"] == "Unschedulable" and "amd.com/gpu" in waiting.get("message", ""), waiting
        return None

    _two_jobs_on_every_gpu(cp, ns, hub, node_images, {}, second_waits, "free GPUs")


def test_with_kueue_the_next_admitted_job_gets_the_gpus_at_once(kueue_on_node, hub, node_images, job_ns):
    """With Kueue (a ClusterQueue of the node's 16 GPUs): the second waits in the queue (its
    Workload without quota), and once admitted at the first's end its head is scheduled on the
    GPUs the first's RayCluster gave back, not after a 600 s TTL."""
    from lorarl_dev.pytest_plugin import kueue_queue_in

    cp, ns = kueue_on_node, job_ns
    with kueue_queue_in(cp, ns, gpus=NODE_GPUS) as queue:

        def second_waits(second: str, explain):
            def queued():
                reserved = _condition(_workload(cp, ns, second), "QuotaReserved")
                return reserved if reserved and reserved["status"] == "False" else None

            reserved = seedrun.wait_for("the second's Workload waiting for quota", queued, RUN_TIMEOUT, explain=explain)
            assert "amd.com/gpu" in reserved.get("message", ""), reserved
            assert seedrun.get(cp, "rayjob", second, ns)["spec"]["suspend"] is True

            def admitted_at():
                admitted = _condition(_workload(cp, ns, second), "Admitted")
                return _t(admitted["lastTransitionTime"]) if admitted and admitted["status"] == "True" else None

            return admitted_at

        _two_jobs_on_every_gpu(cp, ns, hub, node_images, {"scheduling": {"queueName": queue.local_queue}}, second_waits, "free GPUs with Kueue")


def _two_jobs_on_every_gpu(cp, ns, hub, node_images, extra: dict, second_waits, label: str) -> None:
    first, second = "free-first", "free-second"
    spec = {**ALL_GPUS, **extra}
    # 100 rollouts: ~10 s of training; Ray's 16 one-GPU bundles at 0.05 CPU each fit the head's one Ray CPU
    revision = hub.revision({"seconds_per_rollout": 0.1, "cpu_scale": 0.05})
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=first, namespace=ns, model_revision=revision, spec=spec)
    cluster_a, head_a = seedrun.wait_for("the first's head scheduled", lambda: _scheduled_head(cp, ns, first), RUN_TIMEOUT, explain=explain)
    scheduled_a = _t(_scheduled(head_a)["lastTransitionTime"])

    # the second, while the first holds every GPU: it waits
    seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=second, namespace=ns, model_revision=revision, spec=spec)
    admitted_at = second_waits(second, explain)
    assert seedrun.job_status(cp, ns, first).get("phase") not in ("Succeeded", "Failed"), "the first ended before the second waited: no contest"

    final_a = seedrun.wait_finished(cp, ns, first, RUN_TIMEOUT, explain)
    assert final_a["phase"] == "Succeeded", explain()
    rayjob_a = seedrun.get(cp, "rayjob", first, ns)
    ended_a = _t(rayjob_a["status"]["endTime"])  # KubeRay's own end of the run
    assert rayjob_a["spec"]["ttlSecondsAfterFinished"] == 0

    # the first's RayCluster and its head go; the second's head gets the GPUs
    seedrun.wait_for("the first's RayCluster gone", lambda: seedrun.get(cp, "raycluster", cluster_a, ns) is None, RELEASE_BOUND, explain=explain)
    gone_a = time.time()
    seedrun.wait_for("the first's head pod gone", lambda: _head(cp, ns, cluster_a) is None, RELEASE_BOUND, explain=explain)
    pod_gone_a = time.time()

    _, head_b = seedrun.wait_for("the second's head scheduled", lambda: _scheduled_head(cp, ns, second), RELEASE_BOUND, explain=explain)
    scheduled_b = _t(_scheduled(head_b)["lastTransitionTime"])
    admitted = f", the second admitted by Kueue {seedrun.wait_for('the second admitted', admitted_at, 60) - ended_a:.0f} s" if admitted_at else ""
    seedrun.wait_for("the second Running", lambda: seedrun.job_status(cp, ns, second).get("phase") in ("Running", "Succeeded"), RUN_TIMEOUT, explain=explain)
    running_b = time.time()

    to_cluster_gone, to_pod_gone = gone_a - ended_a, pod_gone_a - ended_a
    to_scheduled, to_running = scheduled_b - ended_a, running_b - ended_a
    line = (
        f"{label}: first ended (RayJob endTime) -> its RayCluster gone {to_cluster_gone:.0f} s, its head pod gone {to_pod_gone:.0f} s{admitted}, "
        f"the second's head scheduled {to_scheduled:.0f} s, the second Running {to_running:.0f} s"
    )
    print(line)
    MEASURED.append(line)
    assert to_scheduled < RELEASE_BOUND, line  # not the 600 s of the old default TTL

    # what the user inspects after the end, without the cluster: the trainer's whole log ...
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    logs = subprocess.run([sys.executable, "-m", "lorarl.cli", "logs", first, "-n", ns], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert logs.returncode == 0, logs.stderr
    assert "rollout 0: " in logs.stdout and "rollout 99: " in logs.stdout, logs.stdout[-2000:]
    # ... and the final status: the reporter's progress, and the operator's GPU-hours settled
    settled = seedrun.wait_for(
        "the first's GPU-hours settled",
        lambda: (st := seedrun.job_status(cp, ns, first)) and not any(p.get("holding") for p in (st.get("gpuAccounting") or {}).get("pods") or []) and st,
        120,
        explain=explain,
    )
    assert settled["phase"] == "Succeeded" and settled["progress"]["rollout"] == settled["progress"]["total"] == 100
    hours = settled["progress"]["gpuHours"]
    low = NODE_GPUS * (ended_a - scheduled_a - 2) / 3600  # held at least until the run ended (seconds-precision stamps)
    high = NODE_GPUS * (pod_gone_a - scheduled_a + 2) / 3600  # released by the time the pod was gone
    line = f"{label}: the first's gpuHours {hours} (bounds {low:.4f}..{high:.4f}; 600 s idle would add {NODE_GPUS * 600 / 3600:.2f})"
    print(line)
    MEASURED.append(line)
    assert low <= hours <= high, line
