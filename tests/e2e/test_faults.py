"""Faults during a real run on the real node, each observed mid-run (the status says rollout >= K)
rather than slept into: a 2-node job (head + worker through the head's Service) whose operator
leader and then head pod are killed; a 2-node job whose worker pod is killed. (The submitter pod
deleted mid-run and the LoraRLJob deleted at the end are in test_seed.py, on the seed's own run;
the other faults and what the operator does about each: docs/reliability.md.)

Oracles: pod UIDs and container states from the kubelet, KubeRay's RayJob status, the attempt
ledger and checkpoints on the volume."""

from __future__ import annotations

import json
import time

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import MEASURED

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900


def test_two_nodes_survive_the_operator_leaders_death_and_resume_after_the_head_pod_is_killed(real_node_cluster, hub, node_images, job_ns, lorarl_operator):
    cp, ns, name = real_node_cluster, job_ns, "seed-2n"
    # the faults land in the first attempt; the resumed one (rollouts 50-99) goes at 0.2 s
    revision = hub.revision({"seconds_per_rollout": 1.0, "resumed_seconds_per_rollout": 0.2})
    explain = seedrun.apply_seed(
        cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, nodes=2, spec={"runPolicy": {"backoffLimit": 1}}
    )

    seedrun.wait_for("rollout >= 5", lambda: seedrun.rollout_at_least(cp, ns, name, 5), RUN_TIMEOUT, explain=explain)
    workers = seedrun.pods(cp, ns, "ray.io/node-type=worker")
    assert len(workers) == 1 and workers[0]["status"]["phase"] == "Running"
    gpus = sum(
        # every container of the Ray pods (the head's reporter sidecar asks for none)
        int(((c.get("resources") or {}).get("limits") or {}).get("amd.com/gpu", 0))
        for p in (*workers, *seedrun.pods(cp, ns, "ray.io/node-type=head"))
        for c in p["spec"]["containers"]
    )
    assert gpus == 16

    # the operator's leader killed: the standby takes over, the run is unaffected
    old_leader = seedrun.leader(cp, lorarl_operator)
    assert old_leader in {p["metadata"]["name"] for p in seedrun.operator_pods(cp, lorarl_operator)}
    before = seedrun.job_status(cp, ns, name)
    cp.kubectl("delete", "pod", "-n", lorarl_operator, old_leader, "--grace-period=0", "--force")
    new_leader = seedrun.wait_for("a new leader", lambda: (holder := seedrun.leader(cp, lorarl_operator)) != old_leader and holder, 180, explain=explain)
    assert new_leader != old_leader
    after = seedrun.job_status(cp, ns, name)
    assert after["phase"] == before["phase"] == "Running"
    assert after["rayJob"]["rayClusterName"] == before["rayJob"]["rayClusterName"]

    # the head pod killed after the first save (iteration 49): a new head, and the next attempt
    # resumes from that save
    seedrun.wait_for("rollout >= 55", lambda: seedrun.rollout_at_least(cp, ns, name, 55), RUN_TIMEOUT, explain=explain)
    assert seedrun.job_status(cp, ns, name)["checkpoints"]["latestIteration"] == 49
    (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
    old_uid = head["metadata"]["uid"]
    cp.kubectl("delete", "pod", "-n", ns, head["metadata"]["name"], "--grace-period=0", "--force")

    def new_head():
        heads = [
            p
            for p in seedrun.pods(cp, ns, "ray.io/node-type=head")
            if p["metadata"]["uid"] != old_uid and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        return heads[0] if heads else None

    seedrun.wait_for("a new head pod", new_head, RUN_TIMEOUT, explain=explain)
    final = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert final["phase"] == "Succeeded", explain()
    assert final["progress"]["rollout"] == 100
    assert final["progress"]["attempts"] >= 2
    # the second attempt trained from the save at 49, not from scratch: at most 100 + (55..~60 - 50)
    assert final["progress"]["trainedRollouts"] < 130, final["progress"]
    assert final["checkpoints"]["latestIteration"] == 99


def _phase_events(cp, ns: str, name: str) -> list[str]:
    """The operator's phase-transition Events of the job ("Old -> New: Reason: message")."""
    out = cp.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.kind=LoraRLJob,involvedObject.name={name}", "-o", "json")
    return [e.get("message", "") for e in json.loads(out.stdout)["items"] if " -> " in e.get("message", "")]


def test_a_worker_pod_killed_mid_run_fails_the_attempt_truthfully_and_the_retry_resumes(real_node_cluster, hub, node_images, job_ns):
    """Issue 36, point 2: a worker pod of a 2-node job force-deleted after the first save. Its
    train rank dies with it, miles' driver (here the stand-in, which calls every rank) ends with an
    error, Ray marks the job FAILED and KubeRay retries on a new cluster (backoffLimit 1); the
    job says which attempt failed and why, then resumes from the save, not from rollout 0.

    Oracles: the kubelet's pods (a new worker UID), KubeRay's RayJob counters (failed, succeeded),
    the operator's phase Events, the checkpoints on the volume as status reports them."""
    cp, ns, name = real_node_cluster, job_ns, "worker-lost"
    # one GPU per node: rank 0 on the head, rank 1 on the worker (miles' PACK placement group
    # spills the second bundle over); the resumed attempt (rollouts 50-99) goes at 0.2 s
    revision = hub.revision({"seconds_per_rollout": 0.5, "resumed_seconds_per_rollout": 0.2})
    spec = {"hardware": {"gpusPerNode": 1, "cpu": "100m", "memory": "3Gi"}, "runPolicy": {"backoffLimit": 1}}
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, nodes=2, spec=spec)

    seedrun.wait_for("rollout >= 52", lambda: seedrun.rollout_at_least(cp, ns, name, 52), RUN_TIMEOUT, explain=explain)
    assert seedrun.job_status(cp, ns, name)["checkpoints"]["latestIteration"] == 49
    (worker,) = seedrun.pods(cp, ns, "ray.io/node-type=worker")
    cp.kubectl("delete", "pod", "-n", ns, worker["metadata"]["name"], "--grace-period=0", "--force")
    killed = time.monotonic()

    def retrying():
        said = [m for m in _phase_events(cp, ns, name) if ": Retrying: attempt 1 failed" in m]
        return said[0] if said else None

    said = seedrun.wait_for("the job to say attempt 1 failed and a new cluster starts", retrying, RUN_TIMEOUT, explain=explain)
    to_said = time.monotonic() - killed
    final = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    line = f"worker pod killed at rollout >= 52: 'Retrying' said {to_said:.0f} s later: {said[:300]}"
    print(line)
    MEASURED.append(line)
    assert final["phase"] == "Succeeded", explain()
    assert final["progress"]["rollout"] == 100 and final["progress"]["attempts"] == 2, final["progress"]
    # the first attempt trained rollouts 0..K (52 <= K <= 98: it ran on until Ray saw the rank
    # die), the second 50..99 from the save at 49: K + 51 <= 149; from rollout 0 it would be
    # K + 101 >= 153
    trained = final["progress"]["trainedRollouts"]
    MEASURED.append(f"worker pod killed: {trained} rollouts trained in all (the first attempt ran to about {trained - 51})")
    assert trained < 150, final["progress"]
    assert final["checkpoints"]["latestIteration"] == 99
    rayjob = seedrun.get(cp, "rayjob", name, ns)["status"]
    assert rayjob.get("failed") == 1 and rayjob.get("succeeded") == 1, rayjob
    assert worker["metadata"]["uid"] not in {p["metadata"]["uid"] for p in seedrun.pods(cp, ns, "ray.io/node-type=worker")}
