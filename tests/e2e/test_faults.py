"""Faults during a real run on the real node, each observed mid-run (the status says rollout >= K)
rather than slept into: a 2-node job (head + worker through the head's Service) whose operator
leader is killed, whose node's kubelet is stopped and started again, and whose head pod is
killed; then, side by side, a 2-node job whose worker pod is killed and whose retry cannot pull
its image at first, and a job whose head's Ray processes all die mid-run. (The submitter pod deleted mid-run and the LoraRLJob deleted at the end are in test_seed.py, on
the seed's own run; the other faults and what the operator does about each: docs/reliability.md.)

Oracles: pod UIDs and container states from the kubelet, KubeRay's RayJob status, the attempt
ledger and checkpoints on the volume."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import pytest
from lorarl_dev import seedrun
from lorarl_dev.node.realnode import NODE_NAME

from tests.e2e.conftest import MEASURED, Scenario, make_namespace, release_namespace

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
KUBERAY_FAILURES = ("SubmissionFailed", "JobDeploymentStatusTransitionGracePeriodExceeded", "AppFailed")
RECORDED_PODS = pathlib.Path(__file__).resolve().parents[1] / "operator" / "recorded_pods"


def _ready(st: dict) -> dict:
    """The job's Ready condition ({} before the operator wrote one)."""
    return next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})


def test_two_nodes_survive_the_operator_leaders_death_a_node_not_ready_and_resume_after_the_head_pod_is_killed(
    real_node_cluster, hub, node_images, job_ns, lorarl_operator
):
    """A 2-node job through three faults. The operator's leader killed: the standby takes over, the
    run is unaffected. The node's kubelet stopped (issue 36, point 2): the node controller marks the
    node, then its pods, not ready; the job says NodeNotReady, naming the pod and the node, while
    the containers run on; the kubelet back, the reason clears and the run goes on in the same
    attempt. The head pod killed after the first save: a new head, and the next attempt resumes
    from that save."""
    cp, ns, name = real_node_cluster, job_ns, "seed-2n"
    # the faults land in the first attempt (2 s a rollout: the node's 50 s of grace and the
    # kubelet's return fit before rollout 100); the resumed one (rollouts 50-99) goes at 0.2 s
    revision = hub.revision({"seconds_per_rollout": 2.0, "resumed_seconds_per_rollout": 0.2})
    spec = {"hardware": {"gpusPerNode": 2, "cpu": "100m", "memory": "3Gi"}, "runPolicy": {"backoffLimit": 1}}
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, nodes=2, spec=spec)

    seedrun.wait_for("rollout >= 5", lambda: seedrun.rollout_at_least(cp, ns, name, 5), RUN_TIMEOUT, explain=explain)
    workers = seedrun.pods(cp, ns, "ray.io/node-type=worker")
    assert len(workers) == 1 and workers[0]["status"]["phase"] == "Running"
    gpus = sum(
        # every container of the Ray pods (the head's reporter sidecar asks for none)
        int(((c.get("resources") or {}).get("limits") or {}).get("amd.com/gpu", 0))
        for p in (*workers, *seedrun.pods(cp, ns, "ray.io/node-type=head"))
        for c in p["spec"]["containers"]
    )
    assert gpus == 4

    # 1. the operator's leader killed: the standby takes over, the run is unaffected
    old_leader = seedrun.leader(cp, lorarl_operator)
    assert old_leader in {p["metadata"]["name"] for p in seedrun.operator_pods(cp, lorarl_operator)}
    before = seedrun.job_status(cp, ns, name)
    cp.kubectl("delete", "pod", "-n", lorarl_operator, old_leader, "--grace-period=0", "--force")
    new_leader = seedrun.wait_for("a new leader", lambda: (holder := seedrun.leader(cp, lorarl_operator)) != old_leader and holder, 180, explain=explain)
    assert new_leader != old_leader
    after = seedrun.job_status(cp, ns, name)
    assert after["phase"] == before["phase"] == "Running"
    assert after["rayJob"]["rayClusterName"] == before["rayJob"]["rayClusterName"]

    # 2. the node's kubelet stopped: NodeNotReady, naming a pod of the job and the node; the
    # containers run on (the reporter still reports), and the kubelet's return clears it
    (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
    cp.node.stop_kubelet()
    stopped = time.monotonic()
    try:

        def not_ready():
            st = seedrun.job_status(cp, ns, name)
            return (st, _ready(st)) if _ready(st).get("reason") == "NodeNotReady" else None

        st, ready = seedrun.wait_for("the job to say its node is not ready", not_ready, 300, explain=explain)
        said = time.monotonic() - stopped
        if os.environ.get("LORARL_RECORD_TESTDATA"):  # the pod as the node controller left it, for tests/operator/test_pods.py
            pod = json.loads(cp.kubectl("get", "pod", "-n", ns, head["metadata"]["name"], "-o", "json").stdout)
            (RECORDED_PODS / "ray-head-node-not-ready.json").write_text(json.dumps(pod, indent=1, sort_keys=True) + "\n")
    finally:
        cp.node.start_kubelet()
    MEASURED.append(f"kubelet stopped: NodeNotReady said {said:.0f} s later: {ready['message'][:300]}")
    assert st["phase"] == "Running", st
    assert ready["status"] == "False" and ready["message"].startswith("pod ") and f"its node {NODE_NAME} is not ready" in ready["message"], ready
    assert {c["type"]: c["status"] for c in st["conditions"]}.get("Reconciling") == "True", st["conditions"]
    # the run went on meanwhile in the same attempt, and the reason clears with the kubelet back
    seedrun.wait_for(
        "NodeNotReady cleared",
        lambda: _ready(seedrun.job_status(cp, ns, name)).get("reason") != "NodeNotReady",
        180,
        explain=explain,
    )
    assert seedrun.job_status(cp, ns, name)["progress"]["attempts"] == 1

    # 3. the head pod killed after the first save (iteration 49): a new head, and the next attempt
    # resumes from that save
    seedrun.wait_for("rollout >= 55", lambda: seedrun.rollout_at_least(cp, ns, name, 55), RUN_TIMEOUT, explain=explain)
    assert seedrun.job_status(cp, ns, name)["checkpoints"]["latestIteration"] == 49
    (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
    old_uid = head["metadata"]["uid"]
    at_kill = seedrun.job_status(cp, ns, name)["progress"]["rollout"]
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
    # the second attempt trained from the save at 49, not from scratch: the first ran to about
    # at_kill (a little more before Ray saw the head go), the second 50..99
    assert final["progress"]["trainedRollouts"] < at_kill + 1 + 50 + 15, (at_kill, final["progress"])
    assert final["checkpoints"]["latestIteration"] == 99


def _phase_events(cp, ns: str, name: str) -> list[str]:
    """The operator's phase-transition Events of the job ("Old -> New: Reason: message")."""
    out = cp.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.kind=LoraRLJob,involvedObject.name={name}", "-o", "json")
    return [e.get("message", "") for e in json.loads(out.stdout)["items"] if " -> " in e.get("message", "")]


@pytest.fixture(scope="module")
def one_pod_faults(real_node_cluster, hub, node_images, lorarl_operator):
    """The worker's run and the head's run side by side, each in its namespace and thread (they
    were one after the other, docs/development.md): neither fault reaches past its own pods. The
    second starts once the first's Ray head is up (`ray start` gives the raylet a fixed 30 s to
    register, ray/_private/node.py:409-425, Ray 2.55.1, which heads starting together on 2 loaded
    cores can miss)."""
    cp = real_node_cluster
    worker_ns, head_ns = make_namespace(cp), make_namespace(cp)
    try:
        worker = Scenario("worker pod killed", lambda: _worker_pod_killed(cp, hub, node_images, worker_ns))
        seedrun.wait_for("the worker run's Ray head up", lambda: seedrun.ray_head_up(cp, worker_ns, "worker-lost") or worker.done(), RUN_TIMEOUT)
        head = Scenario("head restarted", lambda: _head_restarted(cp, hub, node_images, head_ns))
        yield {"worker": worker, "head": head}
    finally:
        release_namespace(cp, worker_ns)
        release_namespace(cp, head_ns)


def test_a_worker_pod_killed_mid_run_fails_the_attempt_truthfully_and_the_retry_resumes(one_pod_faults):
    """Issue 36, point 2: a worker pod of a 2-node job force-deleted after the first save. Its
    train rank dies with it, miles' driver (here the stand-in, which calls every rank) ends with an
    error, Ray marks the job FAILED and KubeRay retries on a new cluster (backoffLimit 1); the
    job says which attempt failed and why, then resumes from the save, not from rollout 0.

    And the retry's image cannot be pulled: the job's image is gone from the node by then (the
    kubelet's image GC, a registry that lost the tag), so the new cluster's pods wait in
    ImagePullBackOff and the job says Preparing, naming the pod and the image; once the image is
    back, the kubelet's next pull starts them and the run resumes.

    Oracles: the kubelet's pods (a new worker UID) and container states, KubeRay's RayJob counters
    (failed, succeeded), the operator's phase Events, the checkpoints on the volume as status
    reports them."""
    one_pod_faults["worker"].result(2 * RUN_TIMEOUT)


def test_a_head_restarted_mid_run_does_not_leave_the_job_training(one_pod_faults):
    """The Ray head's container dies mid-run (``ray stop --force`` in it: every Ray process of the
    head, the job's driver among them, ends; ``ray start --block`` exits and the kubelet restarts
    the container in place). KubeRay v1.5.0 reads the job's status from that head, whose new GCS
    does not know the job: the job must not stay ``Training`` with a dead driver.

    What may truthfully follow (which one is recorded and printed): the operator's ``DriverLost``
    (naming the head pod's Ray container); KubeRay's own failure (the submitter's retries used up:
    ``SubmissionFailed``, or its 30 s after a finished submitter); or the submitter re-submitting
    the job to the restarted head (a new Ray job start in the RayJob's ``rayJobInfo.startTime``).
    The oracles: the kubelet's container state (the Ray container's, read by name: the kubelet
    sorts the statuses by name and the reporter sidecar's comes first), KubeRay's RayJob status,
    the LoraRLJob status."""
    one_pod_faults["head"].result(2 * RUN_TIMEOUT)


def _worker_pod_killed(cp, hub, node_images, ns: str) -> None:
    name = "worker-lost"
    # the job's image under a name of its own, so that removing it leaves the other tests' image
    image = f"{node_images['job']}-{ns}"
    cp.node.tag_image(node_images["job"], image)
    # one GPU per node: rank 0 on the head, rank 1 on the worker (miles' PACK placement group
    # spills the second bundle over); the resumed attempt (rollouts 50-99) goes at 0.2 s
    revision = hub.revision({"seconds_per_rollout": 0.5, "resumed_seconds_per_rollout": 0.2})
    spec = {"hardware": {"gpusPerNode": 1, "cpu": "100m", "memory": "3Gi"}, "runPolicy": {"backoffLimit": 1}}
    explain = seedrun.apply_seed(cp, image=image, endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, nodes=2, spec=spec)

    seedrun.wait_for("rollout >= 52", lambda: seedrun.rollout_at_least(cp, ns, name, 52), RUN_TIMEOUT, explain=explain)
    assert seedrun.job_status(cp, ns, name)["checkpoints"]["latestIteration"] == 49
    cp.node.remove_image(image)  # the running containers keep theirs; the next attempt's pods must pull
    (worker,) = seedrun.pods(cp, ns, "ray.io/node-type=worker")
    cp.kubectl("delete", "pod", "-n", ns, worker["metadata"]["name"], "--grace-period=0", "--force")
    killed = time.monotonic()

    def retrying():
        # "Running -> Preparing: Retrying: attempt 1 failed (AppFailed) ...", or, when the pods
        # already say why they cannot start, "...: ImagePullBackOff: pod ...; attempt 1 failed (AppFailed) ..."
        said = [m for m in _phase_events(cp, ns, name) if m.startswith("Running -> Preparing: ") and "attempt 1 failed (AppFailed)" in m]
        return said[0] if said else None

    said = seedrun.wait_for("the job to say attempt 1 failed and a new cluster starts", retrying, RUN_TIMEOUT, explain=explain)
    to_said = time.monotonic() - killed

    def pull_refused():
        st = seedrun.job_status(cp, ns, name)
        return st if (st.get("phase"), _ready(st).get("reason")) == ("Preparing", "ImagePullBackOff") else None

    ready = _ready(seedrun.wait_for("the job to say the retry's image cannot be pulled", pull_refused, RUN_TIMEOUT, explain=explain))
    assert f"cannot pull image {image}" in ready["message"] and " pod " in f" {ready['message']}", ready
    MEASURED.append(f"the retry's image gone: {ready['reason']}: {ready['message'][:300]}")
    cp.node.tag_image(node_images["job"], image)  # the image is back: the kubelet's next try starts the pods
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


def _head_restarted(cp, hub, node_images, ns: str) -> None:
    name = "f-driver"
    revision = hub.revision({"seconds_per_rollout": 2.0})
    # a head of 200m CPU (Ray still gets one: KubeRay rounds the request up, common/pod.go), so
    # that this run and the worker's fit the node's 2 CPUs side by side
    spec = {"hardware": {"cpu": "200m"}}
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, spec=spec)
    seedrun.wait_for("rollout >= 3", lambda: seedrun.rollout_at_least(cp, ns, name, 3), RUN_TIMEOUT, explain=explain)
    started = (seedrun.get(cp, "rayjob", name, ns)["status"].get("rayJobInfo") or {}).get("startTime")
    (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
    head_name = head["metadata"]["name"]
    cp.kubectl("exec", "-n", ns, head_name, "-c", "ray-head", "--", "ray", "stop", "--force", check=False, timeout=120)
    killed = time.monotonic()
    seen: dict[str, float] = {}

    def outcome():
        st = seedrun.job_status(cp, ns, name)
        ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        seen.setdefault(ready.get("reason", "?"), round(time.monotonic() - killed, 1))
        rayjob = (seedrun.get(cp, "rayjob", name, ns) or {}).get("status") or {}
        head_pod = (seedrun.pods(cp, ns, "ray.io/node-type=head") or [{}])[0]
        # the Ray container's status by name: the kubelet sorts the statuses by name, and the
        # reporter sidecar's comes first
        ray_head = next((cs for cs in (head_pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == "ray-head"), {})
        restarted = ray_head.get("restartCount", 0)
        if ready.get("reason") == "DriverLost" or ready.get("reason") in KUBERAY_FAILURES or st.get("phase") == "Failed":
            return ready.get("reason"), ready.get("message", ""), st
        if restarted and (rayjob.get("rayJobInfo") or {}).get("startTime") not in (None, started):
            return "Resubmitted", json.dumps(rayjob.get("rayJobInfo")), st
        if restarted and st.get("phase") == "Succeeded":  # re-submitted and finished between two polls
            return "Succeeded", json.dumps(rayjob.get("rayJobInfo")), st
        return None

    reason, message, st = seedrun.wait_for("the job to say the driver is gone (or KubeRay to act)", outcome, RUN_TIMEOUT, explain=explain)
    MEASURED.append(f"head restarted: after the head's ray stop: {reason} (first seen, seconds after: {json.dumps(seen, sort_keys=True)})")
    print(f"\n{name}: {st.get('phase')} {reason}: {message}", file=sys.stderr)
    if reason == "DriverLost":
        assert st["phase"] == "Running" and st["rayJob"]["jobStatus"] == "RUNNING", st
        assert f"head pod {head_name}" in message and "after the Ray job started" in message, message
