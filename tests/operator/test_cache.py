"""The watch caches (pure): echoes of the operator's own writes, uid-checked deletes, trimming."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lorarl.control.cache import Caches, Memo, merge_patch


def job(rv, status=None, generation=1, uid="u1", **meta):
    return {
        "apiVersion": "lorarl.dev/v1alpha1",
        "kind": "LoraRLJob",
        "metadata": {
            "namespace": "ns",
            "name": "a",
            "uid": uid,
            "generation": generation,
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl"}],
            **meta,
        },
        "spec": {"suspend": False},
        "status": status or {},
    }


def test_an_echo_is_known_by_its_resource_version_or_by_what_was_written():
    caches = Caches()
    store = caches.jobs
    assert store.put(job("1")) is False  # someone else's write
    store.note_own_write(job("2", {"phase": "Pending"}))
    assert store.put(job("2", {"phase": "Pending"})) is True  # the echo
    # the echo arrives before the writer saw the answer: known by the stated fingerprint
    store.expect(("ns", "a"), (1, None, {"phase": "Pending", "observedGeneration": 1}))
    assert store.put(job("3", {"phase": "Pending", "observedGeneration": 1})) is True
    store.note_own_write(job("3", {"phase": "Pending", "observedGeneration": 1}))  # late answer: no harm
    assert store.get(("ns", "a"))["metadata"]["resourceVersion"] == "3"
    # the reporter's patch is not an echo
    assert store.put(job("4", {"phase": "Pending", "observedGeneration": 1, "progress": {"rollout": 1}})) is False
    # a spec edit is not, even with the same status
    store.expect(("ns", "a"), (1, None, {"phase": "Running"}))
    assert store.put(job("5", {"phase": "Running"}, generation=2)) is False


def test_a_late_answer_never_replaces_a_newer_event_and_deletes_check_the_uid():
    store = Caches().jobs
    store.put(job("10", {"phase": "Running"}))
    store.note_own_write(job("9", {"phase": "Pending"}))
    assert store.get(("ns", "a"))["status"] == {"phase": "Running"}
    assert store.delete(job("11", uid="old")) is False  # an older object of that name
    assert store.get(("ns", "a")) is not None
    assert store.delete(job("11")) is True and store.get(("ns", "a")) is None


def test_cached_objects_are_trimmed_to_what_the_reconcile_reads():
    caches = Caches()
    last = "kubectl.kubernetes.io/last-applied-configuration"
    caches.jobs.put(job("1", annotations={last: "{...}", "keep": "me"}))
    meta = caches.jobs.get(("ns", "a"))["metadata"]
    assert "managedFields" not in meta and meta["annotations"] == {"keep": "me"}
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"namespace": "ns", "name": "a", "uid": "r", "resourceVersion": "1"},
        "spec": {"suspend": True, "backoffLimit": 2, "entrypoint": "python3 ...", "rayClusterSpec": {"headGroupSpec": {}}},
        "status": {"jobStatus": "RUNNING"},
    }
    caches.rayjobs.put(rayjob)
    assert caches.rayjobs.get(("ns", "a"))["spec"] == {"suspend": True, "backoffLimit": 2}
    assert caches.rayjobs.get(("ns", "a"))["status"] == {"jobStatus": "RUNNING"}


def test_merge_patch_follows_rfc_7386():
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None, "e": 4}, "f": [1]}) == {"a": 1, "b": {"d": 3, "e": 4}, "f": [1]}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_memo_is_bounded_and_computes_once():
    memo = Memo(size=2)
    calls = []
    for key in ("a", "a", "b", "c", "a"):
        memo.get(key, lambda k=key: calls.append(k) or k.upper())
    assert calls == ["a", "b", "c", "a"] and len(memo) == 2


def test_rayjob_cache_keeps_who_owns_suspend_and_nothing_else_of_managed_fields():
    """queueing.owns_suspend reads managedFields: the cached RayJob must still answer it."""
    from lorarl.control import queueing
    from lorarl.control.cache import trim_rayjob

    live = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "r",
            "namespace": "ns",
            "managedFields": [
                {
                    "manager": queueing.FIELD_MANAGER,
                    "operation": "Apply",
                    "fieldsV1": {"f:spec": {"f:suspend": {}, "f:entrypoint": {}}, "f:metadata": {"f:labels": {}}},
                },
                {"manager": "kuberay-operator", "operation": "Update", "fieldsV1": {"f:status": {}}},
            ],
        },
        "spec": {"suspend": True, "entrypoint": "x"},
    }
    trimmed = trim_rayjob(live)
    assert queueing.owns_suspend(live) and queueing.owns_suspend(trimmed)
    assert trimmed["metadata"]["managedFields"] == [{"manager": queueing.FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:suspend": {}}}}]
    assert "entrypoint" not in trimmed["spec"]
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].pop("f:suspend")
    assert not queueing.owns_suspend(trim_rayjob(live))
    assert "managedFields" not in trim_rayjob(live)["metadata"]


def test_a_cached_job_keeps_its_spec_as_text_and_gives_it_back_whole():
    from lorarl.control.cache import SPEC_TEXT, trim_job, whole_job

    body = job("1", {"phase": "Pending"})
    body["spec"] = {"model": {"name": "Qwen/Qwen3-4B", "revision": "ünïcode"}, "extraArgs": ["--x", "1"], "suspend": False}
    cached = trim_job(body)
    assert "spec" not in cached and isinstance(cached[SPEC_TEXT], str)
    assert whole_job(cached)["spec"] == body["spec"]
    assert whole_job(cached)["status"] == body["status"] and SPEC_TEXT not in whole_job(cached)
    assert whole_job(body) is body  # a whole object (a GET) passes through


def test_a_status_only_event_reuses_the_cached_spec_text_and_a_new_generation_does_not():
    from lorarl.control.cache import SPEC_TEXT, whole_job

    store, key = Caches().jobs, ("ns", "a")
    store.put(job("1"))
    text = store.read(key)[0][SPEC_TEXT]
    store.put(job("2", {"phase": "Running"}))  # a reporter's status patch: same uid and generation
    store.note_own_write(job("3", {"phase": "Running", "observedGeneration": 1}))
    assert store.read(key)[0][SPEC_TEXT] is text  # not encoded again
    edited = job("4", generation=2)
    edited["spec"] = {"suspend": True}
    store.put(edited)
    assert whole_job(store.read(key)[0])["spec"] == {"suspend": True}
    recreated = job("5", uid="u2")  # deleted and created again under the same name, generation 1
    recreated["spec"] = {"suspend": False, "x": 1}
    store.put(recreated)
    assert whole_job(store.read(key)[0])["spec"] == {"suspend": False, "x": 1}


def test_settle_keeps_only_finished_observed_jobs_compact_and_drops_their_memos():
    def finished(body):
        st = body.get("status") or {}
        return st.get("phase") == "Succeeded" and st.get("observedGeneration") == body["metadata"]["generation"]

    caches = Caches()
    key = ("ns", "a")
    caches.jobs.put(job("1", {"phase": "Running", "observedGeneration": 1}))
    caches.parsed.get(("u1", 1), lambda: "parsed")
    caches.digests.get(("u1", 1), lambda: "digest")
    assert caches.settle(key, finished) is False  # still running: stays whole
    assert caches.jobs.read(key)[1] is True and len(caches.parsed) == 1

    caches.jobs.put(job("2", {"phase": "Succeeded", "observedGeneration": 1, "conditions": [{"type": "Ready"}]}))
    assert caches.settle(key, finished) is True
    small, whole = caches.jobs.read(key)
    assert whole is False and len(caches.parsed) == 0 and len(caches.digests) == 0
    assert small == {
        "apiVersion": "lorarl.dev/v1alpha1",
        "kind": "LoraRLJob",
        "metadata": {"namespace": "ns", "name": "a", "uid": "u1", "generation": 1, "resourceVersion": "2"},
        "status": {"phase": "Succeeded", "observedGeneration": 1, "conditions": [{"type": "Ready"}]},  # Ready's reason: for jobmetrics
    }
    caches.parsed.get(("u1", 1), lambda: "parsed again")  # the reconcile of the stand-in read and parsed the job
    assert caches.settle(key, finished) is False and len(caches.parsed) == 0  # already compact; its memo dropped again

    # the next watch event brings the whole object back; a delete forgets the mark
    caches.jobs.put(job("3", {"phase": "Succeeded", "observedGeneration": 1, "progress": {"rollout": 9}}))
    assert caches.jobs.read(key)[1] is True
    caches.settle(key, finished)
    assert caches.jobs.delete(job("4")) is True and caches.jobs.read(key) == (None, True)
    # a spec edit of a finished job (not yet observed) is not settled
    caches.jobs.put(job("5", {"phase": "Succeeded", "observedGeneration": 1}, generation=2))
    assert caches.settle(key, finished) is False


def _controller():
    import kopf
    import kubernetes
    from lorarl.control.options import Options
    from lorarl.controller import Controller
    from lorarl.runtime.kube import Api

    return Controller(Api(kubernetes.client.ApiClient()), Options(namespaces=("ns",)), kopf.OperatorSettings())


def test_the_echo_of_a_finished_jobs_last_write_leaves_it_compact():
    """The answer to the final status write comes back first and the job is settled; then the
    watch delivers that write's echo (the whole object): no reconcile follows an echo, so the
    watch handler itself keeps the job compact. A real change (not an echo) stays whole until
    its reconcile."""
    from lorarl.control import reconcile

    ctl = _controller()
    caches, key = ctl.caches, ("ns", "a")
    final = job("5", {"phase": "Succeeded", "observedGeneration": 1})
    caches.jobs.note_own_write(final)
    assert caches.settle(key, reconcile.settled_finished) is True
    ctl.on_job("MODIFIED", final, False)
    assert caches.jobs.read(key)[1] is False and ctl.queue.waiting() == {}

    ctl.on_job("MODIFIED", job("6", {"phase": "Succeeded", "observedGeneration": 1, "progress": {"rollout": 3}}), False)
    assert caches.jobs.read(key)[1] is True and list(ctl.queue.waiting()) == [key]


def rayjob_of(owner, rv="1", name=None):
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "spec": {},
        "metadata": {"namespace": "ns", "name": name or owner, "uid": f"r-{owner}", "resourceVersion": rv, "labels": {"lorarl.dev/job": owner}},
    }


def test_a_listed_finished_job_is_kept_compact_and_not_reconciled():
    """At start-up a finished, settled job is a stand-in at once and queues nothing (nor does its
    RayJob); a finished job with a TTL, an unfinished one and one whose new generation was not
    yet observed are reconciled ("change")."""
    ctl = _controller()
    done = {"phase": "Succeeded", "observedGeneration": 1}
    ctl.on_job("ADDED", job("1", done), True)
    with_ttl = job("2", done, uid="u2")
    with_ttl["metadata"]["name"] = "ttl"
    with_ttl["spec"]["ttlSecondsAfterFinished"] = 60
    ctl.on_job("ADDED", with_ttl, True)
    running = job("3", {"phase": "Running", "observedGeneration": 1}, uid="u3")
    running["metadata"]["name"] = "running"
    ctl.on_job("ADDED", running, True)
    edited = job("4", done, generation=2, uid="u4")
    edited["metadata"]["name"] = "edited"
    ctl.on_job("ADDED", edited, True)
    ctl.on_rayjob("ADDED", rayjob_of("a"), True)
    ctl.on_rayjob("ADDED", rayjob_of("running"), True)
    assert ctl.caches.jobs.read(("ns", "a")) == (
        {
            "apiVersion": "lorarl.dev/v1alpha1",
            "kind": "LoraRLJob",
            "metadata": {"namespace": "ns", "name": "a", "uid": "u1", "generation": 1, "resourceVersion": "1"},
            "status": done,
        },
        False,
    )
    assert sorted(ctl.queue.waiting()) == [("ns", "edited"), ("ns", "running"), ("ns", "ttl")]
    assert ctl.caches.jobs.compact_count() == 1 and len(ctl.caches.rayjobs) == 2
    # a watch event about the finished job (not a listing) is reconciled, whole again
    ctl.on_rayjob("DELETED", {"metadata": {"namespace": "ns", "name": "a", "uid": "r-a", "resourceVersion": "9"}}, True)
    assert ("ns", "a") in ctl.queue.waiting() and len(ctl.caches.rayjobs) == 1  # a re-list's deletion: the owner from the cache


def test_jobs_outside_the_watched_namespaces_are_ignored():
    from lorarl.controller import scopes, watched

    assert scopes(("a", "b", "a")) == ["a", "b"] and scopes(()) == [None] and scopes(("team-*",)) == [None]
    assert watched(("team-*",), "team-x") and not watched(("team-*",), "other") and watched((), "any")
    ctl = _controller()
    other = job("1")
    other["metadata"]["namespace"] = "elsewhere"
    ctl.on_job("ADDED", other, True)
    assert len(ctl.caches.jobs) == 0 and ctl.queue.waiting() == {}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "delete", "note"]),
            st.sampled_from(["ns-a", "ns-b"]),
            st.sampled_from(["p1", "p2", "p3", "p4"]),
            st.sampled_from([None, "job-1", "job-2"]),
            st.sampled_from(["u1", "u2"]),
        ),
        max_size=40,
    )
)
def test_a_jobs_pods_by_index_are_those_a_full_scan_finds(ops):
    # the oracle: a scan of every cached pod, as pods_of did before the index
    caches = Caches()
    rv = 0
    for op, namespace, name, job, uid in ops:
        rv += 1
        labels = {"lorarl.dev/job": job} if job else {}
        body = {"metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": str(rv), "labels": labels}, "status": {}}
        if op == "put":
            caches.pods.put(body)
        elif op == "note":
            caches.pods.note_own_write(body)
        else:
            caches.pods.delete(body)
    for namespace in ("ns-a", "ns-b"):
        for job in ("job-1", "job-2"):
            scan = sorted(
                p["metadata"]["name"]
                for p in caches.pods.values()
                if p["metadata"]["namespace"] == namespace and (p["metadata"].get("labels") or {}).get("lorarl.dev/job") == job
            )
            assert sorted(p["metadata"]["name"] for p in caches.pods_of(namespace, job)) == scan
