"""Start-up that waits only for the unfinished jobs (controller.Controller.start), on the real API
server: the CRD's selectable ``status.phase`` selects them, the finished ones are listed after the
operator is ready (``Informer.backfill``), and nothing that is not listed yet can make a
reconcile act wrongly (a RayJob absent from the cache before the RayJobs are listed is read
with a GET, so it is never re-created)."""

from __future__ import annotations

import threading

import kubernetes
from kubernetes.client.rest import ApiException
from lorarl.admission import crdgen
from lorarl.api import types as api
from lorarl.control import status
from lorarl.control.cache import Caches
from lorarl.control.reconcile import Reconciler
from lorarl.controller import UNFINISHED_JOBS, decode_job
from lorarl.job import render
from lorarl.runtime.informer import Informer
from lorarl_dev.operatorproc import OperatorProcess

from tests.helpers import seed_doc, wait_for

FINISHED = {"phase": "Succeeded", "observedGeneration": 1}


def create(kube, namespace, name, st=None) -> str:
    """The job (and its status): the resourceVersion of the last write."""
    doc = seed_doc()
    doc["metadata"] = {"name": name, "namespace": namespace}
    written = kube.apply(doc, force=True)
    if st:
        written = kube.patch_status(api.API_VERSION, api.KIND, namespace, name, st)
    return written["metadata"]["resourceVersion"]


def cache_has_seen(kube, namespace, resource_version: str) -> None:
    """Wait until the API server's watch cache has seen ``resource_version``: the informer's
    selected listing reads that cache (resourceVersion "0", which may lag the last write, as
    client-go's Reflector accepts); a list with resourceVersionMatch=NotOlderThan is answered only
    once the cache has caught up (Kubernetes API concepts, "Semantics for get and list")."""
    kubernetes.client.CustomObjectsApi(kube.client).list_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, resource_version=resource_version, resource_version_match="NotOlderThan"
    )


def test_unfinished_jobs_are_listed_first_the_rest_after_and_a_deletion_meanwhile_stays_deleted(control_plane, namespace, kube):
    create(kube, namespace, "a-done", FINISHED)
    create(kube, namespace, "b-failed", {"phase": "Failed", "observedGeneration": 1})
    create(kube, namespace, "c-running", {"phase": "Running", "observedGeneration": 1})
    create(kube, namespace, "d-new")  # no status yet: the absent field selects as "", so unfinished
    cache_has_seen(kube, namespace, create(kube, namespace, "zz-late", FINISHED))
    seen: list[tuple[str, str, bool]] = []
    backfilling = threading.Event()
    deleted_meanwhile = threading.Event()

    def decode(raw, listed):
        body = decode_job(raw, listed)
        if backfilling.is_set() and not deleted_meanwhile.is_set():
            # the backfill read its first page; its later pages are the same snapshot (the continue
            # token keeps the resourceVersion), so they still hold zz-late after this deletion
            deleted_meanwhile.set()
            kube.delete(api.API_VERSION, api.KIND, namespace, "zz-late")
            wait_for(lambda: ("DELETED", "zz-late", False) in seen, what="the watch reporting zz-late deleted")
        return body

    informer = Informer(
        kube.client,
        api.GROUP,
        api.VERSION,
        api.PLURAL,
        namespace,
        lambda type_, body, listed: seen.append((type_, body["metadata"]["name"], listed)),
        page_size=1,
        decode=decode,
        ready_selector=UNFINISHED_JOBS,
    )
    assert informer.list() == 2 and informer.split
    assert sorted(seen) == [("ADDED", "c-running", True), ("ADDED", "d-new", True)]

    stop = threading.Event()
    threading.Thread(target=informer.watch, args=(stop,), daemon=True).start()
    try:
        kube.patch_status(api.API_VERSION, api.KIND, namespace, "c-running", FINISHED)  # finishes: the one watch for all reports it
        wait_for(lambda: ("MODIFIED", "c-running", False) in seen, what="the watch event of c-running finishing")
        seen.clear()
        backfilling.set()
        assert informer.backfill() == 2 and not informer.split
        # the finished jobs, once each; not what the first listing or the watch reported, and
        # not zz-late, deleted while the backfill's snapshot still held it
        assert sorted(x for x in seen if x[2]) == [("ADDED", "a-done", True), ("ADDED", "b-failed", True)]
        assert deleted_meanwhile.is_set() and ("ADDED", "zz-late", True) not in seen
        create(kube, namespace, "e-after")
        wait_for(lambda: ("ADDED", "e-after", False) in seen, what="the watch going on after the backfill")
    finally:
        stop.set()


def test_before_the_rayjobs_are_listed_an_unfinished_jobs_rayjob_is_read_not_recreated(control_plane, namespace, kube):
    """The case the GET guards: a job still running when the operator restarts. With only the
    cache (no RayJob listed yet) its RayJob would look deleted: a RayJobRecreated warning and
    the children applied again over the live RayJob."""
    create(kube, namespace, "running")
    first = Reconciler(kube).reconcile(namespace, "running")  # with GETs: makes the children and the status
    job = kube.get(api.API_VERSION, api.KIND, namespace, "running")
    assert first.applied > 0 and kube.get(render.RAYJOB_API_VERSION, "RayJob", namespace, job["status"][status.RAY_JOB]["name"]) is not None

    def restarted(rayjobs_listed: bool):
        caches = Caches(rayjobs_listed=rayjobs_listed)
        caches.jobs.put(kube.get(api.API_VERSION, api.KIND, namespace, "running"))  # listed as unfinished
        return Reconciler(kube, caches=caches).reconcile(namespace, "running", apply_children=False)

    before_listed = restarted(rayjobs_listed=False)
    assert before_listed.applied == 0 and not [e for e in before_listed.events if e.reason == "RayJobRecreated"]
    # the oracle: trusting the cache before the RayJobs are listed is the wrong act this guards
    trusted = restarted(rayjobs_listed=True)
    assert [e.reason for e in trusted.events if e.reason == "RayJobRecreated"] and trusted.applied > 0


def test_a_restarted_operator_is_ready_after_the_unfinished_jobs_and_still_handles_the_finished(control_plane, namespace, kube, tmp_path):
    """The real process over a finished job, a finished job whose TTL ran out while no operator
    ran, and a running job: ready once the running one is listed; the rest listed afterwards,
    the expired job deleted then, the finished one not reconciled, the running one's RayJob not
    re-created."""
    create(kube, namespace, "done", FINISHED)
    expired = seed_doc()
    expired["metadata"] = {"name": "done-ttl", "namespace": namespace}
    expired["spec"]["ttlSecondsAfterFinished"] = 1
    kube.apply(expired, force=True)
    kube.patch_status(api.API_VERSION, api.KIND, namespace, "done-ttl", {**FINISHED, status.COMPLETION_TIME: "2026-01-01T00:00:00Z"})
    create(kube, namespace, "running")
    Reconciler(kube).reconcile(namespace, "running")  # an earlier operator's work: children and status
    op = OperatorProcess(control_plane, namespace, tmp_path, resync_seconds=30).start()
    try:
        op.wait_for_log(f"listed 1 lorarljobs.lorarl.dev in {namespace} (unfinished)")
        op.wait_for_log(f"listed 2 lorarljobs.lorarl.dev in {namespace} (the rest, after start-up)")
        op.wait_for_log(f"rayjobs.ray.io in {namespace} (after start-up)")
        wait_for(lambda: kube.get(api.API_VERSION, api.KIND, namespace, "done-ttl") is None, what="the expired job deleted after the backfill")
        op.wait_for_log(f"[{namespace}/running] reconcile ")
        assert not op.reconciles(namespace, "done")
        reasons = [e.get("reason") for e in kube.list("v1", "Event", namespace)]
        assert "RayJobRecreated" not in reasons
    finally:
        op.stop()
    op.assert_no_tracebacks()


def test_the_cache_never_goes_back_to_an_older_state_of_the_same_object():
    """A listing that began before a newer state was cached (the backfill beside the watch, the
    RayJob listing beside a reconcile's own write) leaves the newer state in place."""
    store = Caches().jobs
    newer = {"metadata": {"namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "20"}, "status": {"phase": "Succeeded"}}
    older = {"metadata": {"namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "10"}, "status": {"phase": "Running"}}
    store.put(newer)
    assert store.put(older) is True  # nothing new: no reconcile follows
    assert store.get(("ns", "a"))["status"] == {"phase": "Succeeded"}
    recreated = {"metadata": {"namespace": "ns", "name": "a", "uid": "v", "resourceVersion": "5"}, "status": {}}
    assert store.put(recreated) is False and store.get(("ns", "a"))["metadata"]["uid"] == "v"  # another object of that name


def test_a_crd_without_the_selectable_field_is_listed_whole_before_ready(control_plane, namespace, kube, request):
    """An operator upgraded before its CRD: the API server refuses the field selector (400), and
    the informer lists every job before it is ready, as before the split (slower, never wrong)."""
    create(kube, namespace, "done", FINISHED)
    create(kube, namespace, "pending")
    ext = kubernetes.client.ApiextensionsV1Api(kube.client)
    custom = kubernetes.client.CustomObjectsApi(kube.client)

    def refused() -> bool:
        try:
            custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, field_selector=UNFINISHED_JOBS, limit=1)
        except ApiException as err:
            return err.status == 400
        return False

    def set_selectable(fields) -> None:
        crd = ext.read_custom_resource_definition(crdgen.CRD_NAME)
        crd.spec.versions[0].selectable_fields = fields
        ext.replace_custom_resource_definition(crdgen.CRD_NAME, crd)

    def restore() -> None:
        set_selectable([kubernetes.client.V1SelectableField(json_path=f["jsonPath"]) for f in crdgen.SELECTABLE_FIELDS])
        wait_for(lambda: not refused(), what="the selectable field served again")

    request.addfinalizer(restore)
    set_selectable(None)
    wait_for(refused, what="the field selector refused by the older CRD")
    seen: list[str] = []
    informer = Informer(
        kube.client,
        api.GROUP,
        api.VERSION,
        api.PLURAL,
        namespace,
        lambda type_, body, listed: seen.append(body["metadata"]["name"]),
        ready_selector=UNFINISHED_JOBS,
    )
    assert informer.list() == 2 and not informer.split and sorted(seen) == ["done", "pending"]
    assert informer.backfill() == 0
