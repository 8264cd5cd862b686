"""A run's life on the real node beyond success: the operator's only Pod killed mid-run, the job
suspended and resumed, and the run's deadline. KubeRay's own end-to-end cases mirrored here
(ray-project/kuberay v1.5.0, ray-operator/test/e2erayjob/):

- rayjob_suspend_test.go "Suspend the RayJob when its status is 'Running', and then resume it"
  (lines 29-75): Suspended, the RayCluster and the submitter Job gone, then Running again. Here
  through the LoraRLJob's ``spec.suspend``, and further than KubeRay goes: the pods go (KubeRay's
  test leaves that as a TODO, line 67), and the resumed run continues from its newest save.
- rayjob_retry_test.go "RayJob has passed ActiveDeadlineSeconds" (lines 143-174): Failed with
  reason DeadlineExceeded, failed 1, succeeded 0, whatever the backoffLimit (not retried:
  rayjob_controller.go 510-516). Here through ``spec.runPolicy.activeDeadlineSeconds`` and
  ``backoffLimit``.
- rayjob_retry_test.go "Failing RayJob without cluster shutdown after finished" (lines 28-85): an
  app that fails every attempt, retried until ``backoffLimit`` is used up: Failed, FAILED,
  AppFailed, failed = backoffLimit + 1, succeeded 0, and the submitter Job itself succeeded (an
  app failure is not a submitter failure, line 65). Here the trainer stand-in exits 1 in every
  attempt (``exit_at_rollout``), and the LoraRLJob's message says the attempts were used up.

Oracles: KubeRay's RayJob status, pod UIDs from the kubelet, the Lease, the new operator Pod's
own log, the attempt ledger the reporter keeps on the volume."""

from __future__ import annotations

import json
import re

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import make_namespace, release_namespace

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
#: one GPU, one train rank: what these tests check does not depend on the size, and every
#: rank is a Ray actor process on the node's two cores
ONE_GPU = {"gpusPerNode": 1, "cpu": "100m", "memory": "3Gi"}
#: status fields the operator writes (the reporter writes progress, metrics, checkpoints, eval)
OPERATOR_FIELDS = ("phase", "conditions", "rayJob", "observedGeneration")


def _merge_patch(cp, ns, name, patch):
    cp.kubectl("patch", "lorarljob", name, "-n", ns, "--type=merge", "-p", patch)


def test_the_only_operator_pod_killed_mid_run_then_suspend_and_resume_from_the_newest_save(real_node_cluster, hub, node_images, job_ns, lorarl_operator):
    cp, ns, name = real_node_cluster, job_ns, "seed-life"
    seedrun.scale_operator(cp, 1, lorarl_operator)
    try:
        # the kill and the suspend land in the first attempt; the resumed one goes at 0.2 s
        revision = hub.revision({"seconds_per_rollout": 1.5, "resumed_seconds_per_rollout": 0.2})
        # a head that restarts under load (Ray's own start-up waits) costs the submitter its tries:
        # more of them, as the README's troubleshooting table advises for a slow dashboard
        explain = seedrun.apply_seed(
            cp,
            image=node_images["job"],
            endpoint=hub.endpoint,
            name=name,
            namespace=ns,
            model_revision=revision,
            spec={"hardware": ONE_GPU, "runPolicy": {"submitterBackoffLimit": 6}},
        )
        seedrun.wait_for("rollout >= 5", lambda: seedrun.rollout_at_least(cp, ns, name, 5), RUN_TIMEOUT, explain=explain)

        # 1. the operator's only Pod killed: the Deployment's new Pod takes the Lease once it
        # expires, reconciles the job, finds its status right and writes nothing
        (old,) = seedrun.operator_pods(cp, lorarl_operator)
        before = seedrun.job_status(cp, ns, name)
        rayjob_generation = seedrun.get(cp, "rayjob", name, ns)["metadata"]["generation"]
        cp.kubectl("delete", "pod", "-n", lorarl_operator, old["metadata"]["name"], "--grace-period=0", "--force")
        new = seedrun.wait_for(
            "the new operator Pod leads",
            lambda: (holder := seedrun.leader(cp, lorarl_operator)) not in (None, old["metadata"]["name"]) and holder,
            180,
            explain=explain,
        )
        line = re.compile(rf"\[{ns}/{name}\] reconcile [0-9a-f]{{8}} \((\S+)\): (.*)")

        def takeover_reconcile():
            log = cp.kubectl("logs", "-n", lorarl_operator, new, check=False).stdout
            return [m.group(2) for m in map(line.search, log.splitlines()) if m]

        first = seedrun.wait_for("the new Pod reconciles the job", takeover_reconcile, 120, explain=explain)[0]
        assert first.startswith("phase Running,") and "status unchanged" in first, first
        after = seedrun.job_status(cp, ns, name)
        assert {k: after.get(k) for k in OPERATOR_FIELDS} == {k: before.get(k) for k in OPERATOR_FIELDS}
        assert seedrun.get(cp, "rayjob", name, ns)["metadata"]["generation"] == rayjob_generation
        assert after["progress"]["rollout"] >= before["progress"]["rollout"]  # the run went on

        # 2. suspended after the first save (iteration 49): KubeRay deletes the RayCluster and the
        # submitter Job, and the pods go
        seedrun.wait_for("rollout >= 55", lambda: seedrun.rollout_at_least(cp, ns, name, 55), RUN_TIMEOUT, explain=explain)
        assert seedrun.job_status(cp, ns, name)["checkpoints"]["latestIteration"] == 49
        (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
        _merge_patch(cp, ns, name, '{"spec": {"suspend": true}}')
        seedrun.wait_for("phase Suspended", lambda: seedrun.job_status(cp, ns, name).get("phase") == "Suspended", 300, explain=explain)
        # the job is Suspended (reason Suspending) while KubeRay still deletes the cluster: wait for KubeRay's end of it
        seedrun.wait_for(
            "the RayJob Suspended",
            lambda: seedrun.get(cp, "rayjob", name, ns)["status"]["jobDeploymentStatus"] == "Suspended",
            300,
            explain=explain,
        )
        seedrun.wait_for("every pod gone", lambda: not seedrun.pods(cp, ns), 300, explain=explain)
        assert not cp.kubectl("get", "rayclusters,jobs", "-n", ns, "-o", "name").stdout.split()
        suspended = seedrun.job_status(cp, ns, name)
        assert suspended["progress"]["rollout"] < 100, suspended["progress"]

        # 3. resumed: a new RayCluster and head pod, and the run continues from the save at 49
        _merge_patch(cp, ns, name, '{"spec": {"suspend": false}}')
        seedrun.wait_for(
            "a new head pod",
            lambda: [p for p in seedrun.pods(cp, ns, "ray.io/node-type=head") if p["metadata"]["uid"] != head["metadata"]["uid"]],
            RUN_TIMEOUT,
            explain=explain,
        )
        final = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
        assert final["phase"] == "Succeeded", explain()
        assert final["progress"]["rollout"] == 100
        assert final["progress"]["attempts"] == 2
        # trained 0..(55 + what ran before the pods went), then 50..99: far fewer than 2 x 100
        assert final["progress"]["trainedRollouts"] < 100 + (suspended["progress"]["rollout"] + 15 - 50), final["progress"]
        assert final["checkpoints"]["latestIteration"] == 99
        assert final["rayJob"]["rayClusterName"] != before["rayJob"]["rayClusterName"]
    finally:
        seedrun.scale_operator(cp, 2, lorarl_operator)


@pytest.fixture(scope="module")
def ending_runs(real_node_cluster, hub, node_images, lorarl_operator):
    """The deadline's run and the retries' run side by side, each in its namespace (they were one
    after the other, docs/development.md); the second is applied once the first's Ray head is up
    (`ray start` gives the raylet a fixed 30 s to register, ray/_private/node.py:409-425, Ray
    2.55.1, which heads starting together on 2 loaded cores can miss)."""
    cp = real_node_cluster
    deadline_ns, retry_ns = make_namespace(cp), make_namespace(cp)
    try:
        deadline = _apply(
            cp,
            hub,
            node_images,
            deadline_ns,
            "seed-deadline",
            {"seconds_per_rollout": 5},  # 500 s of training: the 60 s deadline comes first
            {"hardware": ONE_GPU, "runPolicy": {"activeDeadlineSeconds": 60, "backoffLimit": 2, "ttlSecondsAfterFinished": 0}},
        )
        seedrun.wait_for("the deadline run's Ray head up", lambda: seedrun.ray_head_up(cp, deadline_ns, "seed-deadline"), RUN_TIMEOUT, explain=deadline)
        retry = _apply(
            cp,
            hub,
            node_images,
            retry_ns,
            "seed-retry",
            {"exit_at_rollout": 1},  # a RuntimeError, exit 1, in every attempt
            {"hardware": ONE_GPU, "runPolicy": {"backoffLimit": 1, "submitterBackoffLimit": 6, "ttlSecondsAfterFinished": 0}},
        )
        yield {"deadline": (deadline_ns, deadline), "retry": (retry_ns, retry)}
    finally:
        release_namespace(cp, deadline_ns)
        release_namespace(cp, retry_ns)


def _apply(cp, hub, node_images, ns: str, name: str, knobs: dict, spec: dict):
    revision = hub.revision(knobs)
    return seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, spec=spec)


def _heads_scheduled(cp, ns: str) -> set[str]:
    """The UIDs of the head pods the scheduler bound in ``ns`` (its Scheduled Events, which stay
    after the pods are gone): one per attempt, KubeRay's retry being a new RayCluster."""
    out = cp.kubectl("get", "events", "-n", ns, "--field-selector", "reason=Scheduled,involvedObject.kind=Pod", "-o", "json")
    return {e["involvedObject"]["uid"] for e in json.loads(out.stdout)["items"] if "-head-" in e["involvedObject"]["name"]}


def test_the_deadline_fails_the_run_once_whatever_the_backoff_limit(real_node_cluster, ending_runs):
    cp, name = real_node_cluster, "seed-deadline"
    ns, explain = ending_runs["deadline"]
    final = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert final["phase"] == "Failed", explain()
    failed = next(c for c in final["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "DeadlineExceeded", failed
    # KubeRay's own account: one failure, no retry although backoffLimit allows two (it sets
    # Retrying in the same reconcile when it retries, so a stored Failed with failed 1 < 3 is
    # the decision not to)
    rayjob = seedrun.get(cp, "rayjob", name, ns)["status"]
    assert (rayjob["jobDeploymentStatus"], rayjob["reason"], rayjob["failed"], rayjob.get("succeeded", 0)) == ("Failed", "DeadlineExceeded", 1, 0), rayjob
    assert final["rayJob"]["reason"] == "DeadlineExceeded"
    assert (final.get("progress") or {}).get("attempts", 1) == 1
    # ttlSecondsAfterFinished 0: KubeRay deletes the RayCluster at once and its pods go
    seedrun.wait_for("the Ray pods gone", lambda: not seedrun.pods(cp, ns, "ray.io/node-type"), 300, explain=explain)


def test_a_trainer_that_fails_every_attempt_uses_up_the_retries(real_node_cluster, ending_runs):
    cp, name = real_node_cluster, "seed-retry"
    ns, explain = ending_runs["retry"]
    final = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert final["phase"] == "Failed", explain()
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    st = rayjob["status"]
    # KubeRay's own account (rayjob_retry_test.go:47-60): one try and one retry, both failed
    assert (st["jobDeploymentStatus"], st["jobStatus"], st["reason"], st["failed"], st.get("succeeded", 0)) == ("Failed", "FAILED", "AppFailed", 2, 0), st
    heads = _heads_scheduled(cp, ns)
    assert len(heads) >= 2, heads  # two attempts, two head pods (the scheduler's record)
    # the submitter Job ran `ray job submit` to its end: the app failed, not the submission
    # (rayjob_retry_test.go:62-66); with shutdownAfterJobFinishes KubeRay keeps it (line 134-135)
    submitter = seedrun.get(cp, "job", name, ns)
    if submitter is not None:
        assert submitter["spec"]["backoffLimit"] == 6
        assert (submitter["status"].get("failed", 0), submitter["status"].get("succeeded")) == (0, 1), submitter["status"]
    failed = next(c for c in final["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "AppFailed"), failed
    assert failed["message"].startswith("all 2 attempts failed, no retry left (runPolicy.backoffLimit 1); the last: "), failed["message"]
    assert "exit code 1" in failed["message"], failed["message"]  # KubeRay's words for the last attempt
    assert final["progress"]["attempts"] == 2, final["progress"]
    assert final["rayJob"]["reason"] == "AppFailed"
    seedrun.wait_for("the Ray pods gone", lambda: not seedrun.pods(cp, ns, "ray.io/node-type"), 300, explain=explain)
