"""The controller core on the real API server: reads from the watch caches, writes only on
change, its own writes trigger nothing, finished jobs are left alone, ttlSecondsAfterFinished,
and repeated Events aggregated into one with a count."""

from __future__ import annotations

import datetime
import urllib.request

import pytest
from kubernetes import client as k8s
from lorarl.runtime.events import EventRecorder
from lorarl_dev.processes import free_port

from tests.helpers import (
    NAME,
    apply_job,
    await_reconciles,
    count_reconciles,
    job,
    phase_is,
    poke_and_await,
    rayjob,
    seed_doc,
    started,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def test_settled_job_is_resynced_from_the_cache_and_nothing_is_written(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    wait_for(phase_is(kube, namespace, "Pending"), what="status Pending")
    wait_for(lambda: count_reconciles(operator, namespace, "(resync): phase Pending") >= 1, what="a first resync")
    versions = (job(kube, namespace)["metadata"]["resourceVersion"], rayjob(kube, namespace)["metadata"]["resourceVersion"])
    await_reconciles(operator, namespace, "(resync): phase Pending, 0 applied, status unchanged", 3)
    assert (job(kube, namespace)["metadata"]["resourceVersion"], rayjob(kube, namespace)["metadata"]["resourceVersion"]) == versions
    # the create path: one reconcile applied the seven children and wrote the status once
    assert count_reconciles(operator, namespace, "(change): phase Pending, 7 applied, status written") == 1
    assert count_reconciles(operator, namespace, " applied, status written") == 1
    assert count_reconciles(operator, namespace, "(change)") == 1


def test_own_writes_trigger_no_reconcile(control_plane, namespace, kube, tmp_path):
    from tests.operator.conftest import OperatorProcess

    op = OperatorProcess(control_plane, namespace, tmp_path, resync_seconds=3600).start()
    try:
        apply_job(control_plane, namespace, seed_doc())
        wait_for(phase_is(kube, namespace, "Pending"), what="status Pending")
        # the creation's reconcile is logged after its status write: counted before the poke,
        # else the poke's wait below could be met by this line instead of its own (a loaded run)
        wait_for(lambda: count_reconciles(op, namespace, "(change): phase Pending") >= 1, what="the creation's reconcile logged")
        # a write by someone else (the reporter) after the operator's own status write and
        # RayJob apply: kopf delivers one object's events in order, so once this is reconciled,
        # the echoes of the operator's writes have been seen
        poke_and_await(kube, op, namespace, "Pending", 1)
        lines = [line for line in op.output().splitlines() if f"[{namespace}/{NAME}] reconcile " in line]
        assert len(lines) == 2, lines  # the creation, the reporter's patch: no reconcile of an echo
        assert "(change): phase Pending, 7 applied, status written" in lines[0]
        assert "(job-event): phase Pending, 0 applied, status unchanged" in lines[1]
    finally:
        op.stop()


def test_finished_jobs_are_not_resynced(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    ray.initializing()
    ray.succeeded()
    wait_for(phase_is(kube, namespace, "Succeeded"), what="Succeeded")
    wait_for(lambda: count_reconciles(operator, namespace, "phase Succeeded, 0 applied, status written") >= 1, what="the final write")
    before = count_reconciles(operator, namespace, "(resync)")
    other = seed_doc()
    other["metadata"]["name"] = "still-pending"
    apply_job(control_plane, namespace, other)
    # observe resyncs of an unfinished job in the same operator, then count the finished one's
    await_reconciles(operator, namespace, "(resync): phase Pending", 3, name="still-pending")
    assert count_reconciles(operator, namespace, "(resync)") == before


def test_a_finished_job_kept_compact_still_answers_its_events(control_plane, namespace, kube, tmp_path):
    """After its last write a finished job is cached as a compact stand-in (memory grows with
    running jobs, not with history), whether that write's echo comes before or after the answer.
    A later RayJob event makes the operator read the whole job (a reconcile of the stand-in alone
    would find no spec and call it invalid); a later job event brings the whole job back: neither
    re-runs it nor rewrites its status, and it is compact again afterwards."""
    from tests.operator.conftest import OperatorProcess

    port = free_port()
    operator = OperatorProcess(
        control_plane, namespace, tmp_path, extra_args=("--metrics-port", str(port), "--metrics-auth", "none")
    ).start()  # the content, not the auth (test_metrics_auth.py)

    def cached(form):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return None
        return next(
            (float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f'lorarl_cached_objects{{form="{form}",kind="LoraRLJob"}}')), None
        )

    try:
        apply_job(control_plane, namespace, seed_doc())
        ray = started(kube, namespace)
        wait_for(lambda: cached("whole") == 1 and cached("compact") == 0, what="the running job cached whole")
        ray.initializing()
        ray.succeeded()
        wait_for(lambda: count_reconciles(operator, namespace, "phase Succeeded, 0 applied, status written") >= 1, what="the final write")
        wait_for(lambda: cached("compact") == 1 and cached("whole") == 0, what="the finished job kept compact")
        before = job(kube, namespace)["status"]
        seen = count_reconciles(operator, namespace, "(rayjob-event): phase Succeeded, 0 applied, status unchanged")
        kube.delete("ray.io/v1", "RayJob", namespace, NAME)  # as KubeRay's ttlSecondsAfterFinished does
        wait_for(
            lambda: count_reconciles(operator, namespace, "(rayjob-event): phase Succeeded, 0 applied, status unchanged") > seen,
            what="the reconcile of the RayJob's deletion",
        )
        assert rayjob(kube, namespace) is None and job(kube, namespace)["status"] == before
        poke_and_await(kube, operator, namespace, "Succeeded", 7)
        after = job(kube, namespace)["status"]
        assert after.pop("progress") == {"rollout": 7} and after == before
        assert count_reconciles(operator, namespace, "(job-event): phase Succeeded, 0 applied, status unchanged") == 1
        wait_for(lambda: cached("compact") == 1 and cached("whole") == 0, what="compact again after the job event")
    finally:
        operator.stop()


def test_ttl_after_finished_deletes_the_job(control_plane, namespace, kube, operator):
    doc = seed_doc()
    # long enough that the poll below sees Failed before the deletion, even when a GET takes
    # seconds under load (with 3 s a loaded run once missed it and waited for a job already gone)
    doc["spec"]["ttlSecondsAfterFinished"] = 10
    apply_job(control_plane, namespace, doc)
    uid = job(kube, namespace)["metadata"]["uid"]
    ray = started(kube, namespace)
    ray.initializing()
    ray.app_failed()
    st = wait_for(phase_is(kube, namespace, "Failed"), what="Failed")
    assert st["completionTime"]
    wait_for(lambda: job(kube, namespace) is None, timeout=90, what="the job deleted after its TTL")
    assert f"[{namespace}/{NAME}] reconcile " in operator.output()
    # the reconcile's log line follows the deletion it reports
    operator.wait_for_log("(timer): ttlSecondsAfterFinished passed; deleted the job")
    # a job without the field stays (observe the operator finish it first)
    keep = seed_doc()
    keep["metadata"]["name"] = "kept"
    apply_job(control_plane, namespace, keep)
    assert job(kube, namespace, "kept")["metadata"]["uid"] != uid
    wait_for(phase_is(kube, namespace, "Pending", name="kept"), what="kept Pending")
    await_reconciles(operator, namespace, "(resync): phase Pending", 2, name="kept")
    assert job(kube, namespace, "kept") is not None


def test_a_repeated_warning_is_one_event_with_a_count(control_plane, namespace, kube):
    stored = apply_job(control_plane, namespace, seed_doc())
    body = job(kube, namespace)
    recorder = EventRecorder(kube)

    def now():
        moment = datetime.datetime.now(datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ"), moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    for _ in range(3):
        recorder.record(body, "Warning", "ApplyFailed", "applying RayJob: refused", *now())
    recorder.record(body, "Warning", "ApplyFailed", "another message", *now())  # a different Event
    items = k8s.CoreV1Api(kube.client).list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME}").items
    counts = sorted((e.message, e.count) for e in items if e.reason == "ApplyFailed")
    assert counts == [("another message", 1), ("applying RayJob: refused", 3)]
    same = next(e for e in items if e.message == "applying RayJob: refused")
    assert same.first_timestamp <= same.last_timestamp
    out = control_plane.kubectl("events", "-n", namespace, "--for", f"lorarljob/{NAME}").stdout
    line = next(text for text in out.splitlines() if "applying RayJob: refused" in text)
    assert "(x3 over" in line, out
    # an Event deleted meanwhile (expired) is created again, not patched
    k8s.CoreV1Api(kube.client).delete_namespaced_event(same.metadata.name, namespace)
    again = recorder.record(body, "Warning", "ApplyFailed", "applying RayJob: refused", *now())
    assert again["metadata"]["name"] != same.metadata.name and again["count"] == 1
    assert stored["metadata"]["name"] == NAME
