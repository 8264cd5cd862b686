"""A finished job frees its GPUs at once (issue 36, point 1), on the real node, with and without a
queue, in one chain of three jobs that each ask for every GPU of the node (16 fake
``amd.com/gpu``, one head pod each):

- ``first`` is not queued; ``second`` is queued in Kueue (a ClusterQueue of the node's 16 GPUs),
  which admits it at once: the quota is free, as Kueue counts only its own workloads. So its head
  waits on the scheduler (Unschedulable) while the first runs, and is scheduled as soon as the
  first's RayCluster is gone, not ``ttlSecondsAfterFinished`` (formerly 600 s) later;
- ``third`` is queued too and waits in the queue (its Workload without quota) while the second
  holds the quota; admitted at the second's end, its head is scheduled on the GPUs the second's
  RayCluster gave back.

After a job's cluster is gone its trainer log is still there through ``lorarl logs`` (the
submitter pod, which KubeRay keeps), its status keeps the final progress, and its
``status.progress.gpuHours`` counts the GPUs from the head's scheduling to their release: at least
to the run's end, at most to the pod's disappearance. (The chain was two tests of two jobs each,
docs/development.md.)

Oracles outside the operator: KubeRay's RayJob endTime, the scheduler's PodScheduled condition,
Kueue's Workload conditions and the API server's view of the RayCluster and pods. The seconds are
printed; the only time bounds are generous ones that tell a release at the run's end from a 600 s
TTL."""

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


def _unschedulable_head(cp, ns, rayjob: str) -> dict | None:
    """The PodScheduled condition of the RayJob's current head once the scheduler refused it."""
    cluster = _cluster(cp, ns, rayjob)
    head = _head(cp, ns, cluster) if cluster else None
    cond = _scheduled(head) if head else None
    return cond if cond and cond["status"] == "False" else None


def _workload(cp, ns, rayjob: str) -> dict | None:
    """Kueue's Workload of a RayJob (owned by it)."""
    out = cp.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json", check=False)
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return next((w for w in items if any(o.get("name") == rayjob for o in w["metadata"].get("ownerReferences") or [])), None)


def _condition(obj: dict | None, type_: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def test_a_finished_job_frees_its_gpus_for_the_next_with_or_without_kueue_and_keeps_its_log_and_hours(kueue_on_node, hub, node_images, job_ns):
    from lorarl_dev.pytest_plugin import kueue_queue_in

    cp, ns = kueue_on_node, job_ns
    # 100 rollouts: ~10 s of training; Ray's 16 one-GPU bundles at 0.05 CPU each fit the head's one Ray CPU
    revision = hub.revision({"seconds_per_rollout": 0.1, "cpu_scale": 0.05})
    with kueue_queue_in(cp, ns, gpus=NODE_GPUS) as queue:
        queued = {**ALL_GPUS, "scheduling": {"queueName": queue.local_queue}}

        def apply(name: str, spec: dict):
            return seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, spec=spec)

        explain = apply("first", ALL_GPUS)
        _, head_first = seedrun.wait_for("the first's head scheduled", lambda: _scheduled_head(cp, ns, "first"), RUN_TIMEOUT, explain=explain)

        # the second, admitted by Kueue, waits on the scheduler while the first holds every GPU
        apply("second", queued)
        waiting = seedrun.wait_for("the second's head Unschedulable", lambda: _unschedulable_head(cp, ns, "second"), RUN_TIMEOUT, explain=explain)
        assert waiting["reason"] == "Unschedulable" and "amd.com/gpu" in waiting.get("message", ""), waiting

        # the third waits in the queue while the second holds the quota
        apply("third", queued)

        def third_queued():
            reserved = _condition(_workload(cp, ns, "third"), "QuotaReserved")
            return reserved if reserved and reserved["status"] == "False" else None

        reserved = seedrun.wait_for("the third's Workload waiting for quota", third_queued, RUN_TIMEOUT, explain=explain)
        assert "amd.com/gpu" in reserved.get("message", ""), reserved
        assert seedrun.get(cp, "rayjob", "third", ns)["spec"]["suspend"] is True
        assert seedrun.job_status(cp, ns, "first").get("phase") not in ("Succeeded", "Failed"), "the first ended before the others waited: no contest"

        head_second = _handover(cp, ns, "first", head_first, "second", None, "free GPUs", explain)

        def third_admitted_at():
            admitted = _condition(_workload(cp, ns, "third"), "Admitted")
            return _t(admitted["lastTransitionTime"]) if admitted and admitted["status"] == "True" else None

        _handover(cp, ns, "second", head_second, "third", third_admitted_at, "free GPUs with Kueue", explain)


def _handover(cp, ns, first: str, head_first: dict, second: str, admitted_at, label: str, explain) -> dict:
    """``first`` runs to Succeeded and gives its GPUs back; ``second``, waiting for them, gets
    them and runs. Prints the seconds, checks what stays of ``first`` (log, status, GPU-hours);
    returns the second's scheduled head."""
    scheduled_first = _t(_scheduled(head_first)["lastTransitionTime"])
    cluster_first = head_first["metadata"]["labels"]["ray.io/cluster"]
    final = seedrun.wait_finished(cp, ns, first, RUN_TIMEOUT, explain)
    assert final["phase"] == "Succeeded", explain()
    rayjob = seedrun.get(cp, "rayjob", first, ns)
    ended = _t(rayjob["status"]["endTime"])  # KubeRay's own end of the run
    assert rayjob["spec"]["ttlSecondsAfterFinished"] == 0

    # the first's RayCluster and its head go; the second's head gets the GPUs
    seedrun.wait_for(f"{first}'s RayCluster gone", lambda: seedrun.get(cp, "raycluster", cluster_first, ns) is None, RELEASE_BOUND, explain=explain)
    gone = time.time()
    seedrun.wait_for(f"{first}'s head pod gone", lambda: _head(cp, ns, cluster_first) is None, RELEASE_BOUND, explain=explain)
    pod_gone = time.time()

    _, head_second = seedrun.wait_for(f"{second}'s head scheduled", lambda: _scheduled_head(cp, ns, second), RELEASE_BOUND, explain=explain)
    scheduled_second = _t(_scheduled(head_second)["lastTransitionTime"])
    admitted = f", {second} admitted by Kueue {seedrun.wait_for(f'{second} admitted', admitted_at, 60) - ended:.0f} s" if admitted_at else ""
    seedrun.wait_for(f"{second} Running", lambda: seedrun.job_status(cp, ns, second).get("phase") in ("Running", "Succeeded"), RUN_TIMEOUT, explain=explain)
    running = time.time()

    line = (
        f"{label}: {first} ended (RayJob endTime) -> its RayCluster gone {gone - ended:.0f} s, its head pod gone {pod_gone - ended:.0f} s{admitted}, "
        f"{second}'s head scheduled {scheduled_second - ended:.0f} s, {second} Running {running - ended:.0f} s"
    )
    print(line)
    MEASURED.append(line)
    assert scheduled_second - ended < RELEASE_BOUND, line  # not the 600 s of the old default TTL

    # what the user inspects after the end, without the cluster: the trainer's whole log ...
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    logs = subprocess.run([sys.executable, "-m", "lorarl.cli", "logs", first, "-n", ns], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert logs.returncode == 0, logs.stderr
    assert "rollout 0: " in logs.stdout and "rollout 99: " in logs.stdout, logs.stdout[-2000:]
    # ... and the final status: the reporter's progress, and the operator's GPU-hours settled
    settled = seedrun.wait_for(
        f"{first}'s GPU-hours settled",
        lambda: (st := seedrun.job_status(cp, ns, first)) and not any(p.get("holding") for p in (st.get("gpuAccounting") or {}).get("pods") or []) and st,
        120,
        explain=explain,
    )
    assert settled["phase"] == "Succeeded" and settled["progress"]["rollout"] == settled["progress"]["total"] == 100
    hours = settled["progress"]["gpuHours"]
    low = NODE_GPUS * (ended - scheduled_first - 2) / 3600  # held at least until the run ended (seconds-precision stamps)
    high = NODE_GPUS * (pod_gone - scheduled_first + 2) / 3600  # released by the time the pod was gone
    line = f"{label}: {first}'s gpuHours {hours} (bounds {low:.4f}..{high:.4f}; 600 s idle would add {NODE_GPUS * 600 / 3600:.2f})"
    print(line)
    MEASURED.append(line)
    assert low <= hours <= high, line
    return head_second
