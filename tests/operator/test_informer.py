"""The operator's own list-then-watch on the real API server: paged listing, a re-list reports
only what changed (deletions included), a watch delivers changes, and a 410 Gone is a re-list."""

from __future__ import annotations

import threading

import pytest
from lorarl.api import types as api
from lorarl.control.cache import compact_job
from lorarl.controller import decode_job
from lorarl.runtime.informer import Informer

from tests.helpers import seed_doc, wait_for

pytestmark = pytest.mark.controlplane


def create(kube, namespace, name):
    doc = seed_doc()
    doc["metadata"] = {"name": name, "namespace": namespace}
    kube.apply(doc, force=True)


def test_listing_in_pages_then_only_changes(control_plane, namespace, kube):
    for i in range(5):
        create(kube, namespace, f"job-{i}")
    seen: list[tuple[str, str, bool]] = []
    informer = Informer(
        kube.client,
        api.GROUP,
        api.VERSION,
        api.PLURAL,
        namespace,
        lambda type_, body, listed: seen.append((type_, body["metadata"]["name"], listed)),
        page_size=2,
    )
    assert informer.list() == 5  # three pages
    assert sorted(seen) == [("ADDED", f"job-{i}", True) for i in range(5)]

    # what changed while nobody watched: one deleted, one edited, one new; the other three not reported
    seen.clear()
    kube.delete(api.API_VERSION, api.KIND, namespace, "job-0")
    kube.patch_status(api.API_VERSION, api.KIND, namespace, "job-1", {"phase": "Pending"})
    create(kube, namespace, "job-5")
    assert informer.list() == 5
    assert sorted(seen) == [("ADDED", "job-5", True), ("DELETED", "job-0", True), ("MODIFIED", "job-1", True)]

    # a watch from the listing's resourceVersion sees what happens next
    seen.clear()
    stop = threading.Event()
    thread = threading.Thread(target=informer.watch, args=(stop,), daemon=True)
    thread.start()
    try:
        create(kube, namespace, "job-6")
        wait_for(lambda: ("ADDED", "job-6", False) in seen, what="the watch event of job-6")
    finally:
        stop.set()


def test_a_resource_version_too_old_is_a_relist(control_plane, namespace, kube):
    create(kube, namespace, "kept")
    create(kube, namespace, "removed")
    seen: list[tuple[str, str, bool]] = []
    informer = Informer(
        kube.client, api.GROUP, api.VERSION, api.PLURAL, namespace, lambda type_, body, listed: seen.append((type_, body["metadata"]["name"], listed))
    )
    informer.list()
    kube.delete(api.API_VERSION, api.KIND, namespace, "removed")
    informer.resource_version = "1"  # compacted long ago: the API server answers 410 Gone
    seen.clear()
    stop = threading.Event()
    threading.Thread(target=informer.watch, args=(stop,), daemon=True).start()
    try:
        wait_for(lambda: ("DELETED", "removed", True) in seen, what="the deletion reported by a re-list")
        assert ("DELETED", "removed", False) not in seen and not any(name == "kept" for _, name, _ in seen)
    finally:
        stop.set()


def test_a_listed_finished_job_arrives_as_its_stub_and_every_other_object_whole(control_plane, namespace, kube):
    """The controller's decode hook on the real API server's answers: only a listed job that is
    finished and settled, without a TTL, is cut to its stub (what ``on_job`` keeps of it); a
    finished job with a TTL (still to be deleted), an unfinished one and every watch event come
    whole."""
    finished = {"phase": "Succeeded", "observedGeneration": 1}
    for name, ttl, st in (("done", None, finished), ("done-ttl", 60, finished), ("pending", None, {"phase": "Pending", "observedGeneration": 1})):
        doc = seed_doc()
        doc["metadata"] = {"name": name, "namespace": namespace}
        if ttl:
            doc["spec"]["ttlSecondsAfterFinished"] = ttl
        kube.apply(doc, force=True)
        kube.patch_status(api.API_VERSION, api.KIND, namespace, name, st)
    seen: dict[tuple[str, bool], dict] = {}
    informer = Informer(
        kube.client,
        api.GROUP,
        api.VERSION,
        api.PLURAL,
        namespace,
        lambda type_, body, listed: seen.__setitem__((body["metadata"]["name"], listed), body),
        page_size=1,
        decode=decode_job,
    )
    assert informer.list() == 3
    whole = {name: kube.get(api.API_VERSION, api.KIND, namespace, name) for name in ("done", "done-ttl", "pending")}
    assert seen[("done", True)] == compact_job(whole["done"]) and "spec" not in seen[("done", True)]
    assert seen[("done-ttl", True)]["spec"] == whole["done-ttl"]["spec"]
    assert seen[("pending", True)]["spec"] == whole["pending"]["spec"]

    stop = threading.Event()
    threading.Thread(target=informer.watch, args=(stop,), daemon=True).start()
    try:
        kube.patch_status(api.API_VERSION, api.KIND, namespace, "done", {"progress": {"rollout": 1}})
        wait_for(lambda: ("done", False) in seen, what="the watch event of the finished job")
        assert seen[("done", False)]["spec"] == whole["done"]["spec"]
    finally:
        stop.set()
