"""Chaos: the operator crashes, is down while the world changes, and shares the status with
other writers. The oracle is the API server (objects, owners, status), never the operator's word;
its log is only used to kill it at points where it is busy."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from lorarl.reporter.kubeapi import ApiConfig, Patcher

from tests.chaos.world import JOB, apply_jobs, converge, delete_jobs, drive, gone, problems
from tests.helpers import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.controlplane]


def test_sigkill_at_random_points_during_a_burst_of_creates(control_plane, namespace, kube, operators, figures):
    """50 jobs applied in 5 bursts; after each burst the operator is SIGKILLed once it has logged
    a random number (1-8) of reconciles, and started again. Afterwards: one RayJob (and one of each
    child) per job, every status Pending at its generation, no finalizer; then deleting every job
    leaves nothing behind."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    print(f"random seed {seed}")
    names = [f"burst-{i:02d}" for i in range(50)]
    op = operators(control_plane, namespace, resync_seconds=10)
    kills = []
    for batch in range(5):
        apply_jobs(control_plane, namespace, names[batch * 10 : (batch + 1) * 10])
        seen = len(op.reconciles(namespace))
        wanted = seen + rng.randint(1, 8)
        wait_for(lambda: len(op.reconciles(namespace)) >= wanted, timeout=90, interval=0.02, what=f"{wanted} reconciles")  # noqa: B023 (called within this iteration)
        kills.append(len(op.reconciles(namespace)) - seen)
        op.kill(signal.SIGKILL)
        op.start()
    restarted = time.monotonic()
    seconds = converge(kube, namespace, {n: "Pending" for n in names}, since=restarted, timeout=180)
    figures("sigkill-burst", "SIGKILL x5 during 50 creates", converge_after_last_restart=seconds, reconciles_before_each_kill=kills, seed=seed)
    control_plane.kubectl("delete", "lorarljobs", "--all", "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)
    deleted = time.monotonic()
    wait_for(gone(kube, namespace, names), timeout=120, what="every job and child gone")
    figures("sigkill-burst", "delete all 50 after the chaos", children_gone_after=time.monotonic() - deleted)


def test_operator_down_while_rayjobs_change_and_jobs_come_and_go(control_plane, namespace, kube, operators, figures):
    """While the operator is down: RayJobs move to every state, a job is deleted, one is created,
    one is created and deleted again. Started again (resync every 10 min, so only its start-up
    listing can have found the changes), every status is right and deleted jobs left nothing."""
    names = ["down-pending", "down-preparing", "down-running", "down-succeeded", "down-failed", "down-deleted"]
    op = operators(control_plane, namespace, resync_seconds=600)
    apply_jobs(control_plane, namespace, names)
    converge(kube, namespace, {n: "Pending" for n in names}, since=time.monotonic())
    op.kill(signal.SIGKILL)
    for state in ("preparing", "running", "succeeded", "failed"):
        drive(kube, namespace, f"down-{state}", state)
    delete_jobs(control_plane, namespace, ["down-deleted"])
    apply_jobs(control_plane, namespace, ["down-created", "down-transient"])
    delete_jobs(control_plane, namespace, ["down-transient"])
    wait_for(
        lambda: kube.get(*JOB, namespace, "down-deleted") is None and kube.get(*JOB, namespace, "down-transient") is None,
        what="the deleted jobs gone from the API server",
    )
    op.start()
    started = time.monotonic()
    expected = {
        "down-pending": "Pending",
        "down-preparing": "Preparing",
        "down-running": "Running",
        "down-succeeded": "Succeeded",
        "down-failed": "Failed",
        "down-created": "Pending",
    }
    seconds = converge(kube, namespace, expected, since=started)
    wait_for(gone(kube, namespace, ["down-deleted", "down-transient"]), timeout=60, what="the deleted jobs' children gone")
    figures("operator-down", "operator down while RayJobs change, jobs created and deleted", converge_after_start=seconds)


def _reporter_token(control_plane, namespace: str, tmp_path) -> str:
    """A ServiceAccount token allowed what the in-job reporter is allowed: patch the status."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reporter", "namespace": namespace},
        "rules": [{"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs/status"], "verbs": ["get", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reporter", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reporter"},
        "subjects": [{"kind": "ServiceAccount", "name": "reporter", "namespace": namespace}],
    }
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    control_plane.ensure_service_account(namespace, "reporter")
    path = tmp_path / "reporter-token"
    path.write_text(control_plane.service_account_token(namespace, "reporter"))
    return str(path)


def test_concurrent_status_writers_lose_nothing(control_plane, namespace, kube, operators, tmp_path, figures):
    """Three writers on one status at once: the in-job reporter (merge patches of progress and
    metrics, its real Patcher), the operator (phase, conditions, observedGeneration: it reacts to
    each metrics write, which flips training health, and to each RayJob write) and a third client
    that replaces the whole status with its resourceVersion (eval scores; it retries on 409).
    Afterwards each writer's last value is there, and the operator's fields match the last facts."""
    name, rounds = "writers", 40
    op = operators(control_plane, namespace, resync_seconds=1)
    apply_jobs(control_plane, namespace, [name])
    converge(kube, namespace, {name: "Pending"}, since=time.monotonic())
    patcher = Patcher(ApiConfig(control_plane.server, _reporter_token(control_plane, namespace, tmp_path), str(control_plane.ca_file)), namespace, name)
    custom = k8s.CustomObjectsApi(kube.client)
    conflicts, errors = [0], []
    written_before = sum("status written" in line for line in op.reconciles(namespace, name))

    def reporter():
        for i in range(1, rounds + 1):
            diff = 0.05 if i % 2 else 0.01  # over, then under the 0.03 threshold: health flips each time
            if not patcher.send(
                {"progress": {"rollout": i, "total": rounds, "percent": 100 * i // rounds}, "metrics": {"step": i, "trainRolloutLogprobAbsDiffMean": diff}}
            ):
                errors.append(f"reporter patch {i} failed")

    def evaluator():
        for i in range(1, rounds + 1):
            while True:
                body = custom.get_namespaced_custom_object_status("lorarl.dev", "v1alpha1", namespace, "lorarljobs", name)
                body["status"]["eval"] = [{"name": "gsm8k", "latest": i / rounds, "latestRollout": i, "best": i / rounds, "bestRollout": i}]
                try:
                    custom.replace_namespaced_custom_object_status("lorarl.dev", "v1alpha1", namespace, "lorarljobs", name, body)
                    break
                except ApiException as err:
                    if err.status != 409:
                        errors.append(f"evaluator: {err.status} {err.reason}")
                        return
                    conflicts[0] += 1

    def kuberay():
        drive(kube, namespace, name, "running")

    threads = [threading.Thread(target=t) for t in (reporter, evaluator, kuberay)]
    begun = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    ended = time.monotonic()
    assert not errors, errors

    def final():
        st = kube.get(*JOB, namespace, name)["status"]
        conditions = {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}
        return (
            st.get("progress", {}).get("rollout") == rounds
            and st.get("metrics", {}).get("step") == rounds
            and st.get("eval") == [{"name": "gsm8k", "latest": 1.0, "latestRollout": rounds, "best": 1.0, "bestRollout": rounds}]
            and st.get("phase") == "Running"
            and conditions.get("TrainingHealthy") == ("True", "WithinThresholds")
            and st.get("rayJob", {}).get("jobDeploymentStatus") == "Running"
        )

    wait_for(final, timeout=60, what="every writer's last value in the status")
    converged = time.monotonic() - ended
    operator_writes = sum("status written" in line for line in op.reconciles(namespace, name)) - written_before
    assert operator_writes > 0  # the operator did write while the others did
    # and it keeps them: two more resyncs later, nothing was overwritten
    resyncs = sum("(resync)" in line for line in op.reconciles(namespace, name))
    wait_for(lambda: sum("(resync)" in line for line in op.reconciles(namespace, name)) >= resyncs + 2, what="two more resyncs")
    assert final() and not problems(kube, namespace, {name: "Running"})
    figures(
        "status-writers",
        "3 concurrent status writers",
        writes_per_writer=rounds,
        evaluator_409s=conflicts[0],
        operator_status_writes=operator_writes,
        window=ended - begun,
        converge_after_writers=converged,
    )
