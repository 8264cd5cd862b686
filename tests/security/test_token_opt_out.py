"""A ServiceAccount that opts out of token automounting gets no token in a job's pods. The oracle
is the API server of the real-node cluster, which runs the ServiceAccount admission plugin (the
one that adds the token volume; the plain test control plane runs without it): each rendered Ray
pod is dry-run created and the pod it would store is read back."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from lorarl.job import render

from tests.api.apiserver import pods_of
from tests.helpers import job_from, seed_doc

pytestmark = pytest.mark.node


def token_volumes(pod: dict) -> list[str]:
    return [v["name"] for v in pod["spec"].get("volumes", []) if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", []))]


def stored(cp, pod: dict) -> dict:
    return json.loads(cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod)).stdout)


def head_and_worker(namespace: str, account: str | None) -> tuple[dict, dict]:
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["hardware"]["nodes"] = 2
    if account:
        doc["spec"]["scheduling"] = {"serviceAccountName": account}
    rayjob = next(c for c in render.render(job_from(doc)) if c["kind"] == "RayJob")
    head, worker = pods_of(rayjob)
    return head, worker


def test_a_token_is_mounted_only_where_the_account_allows_it(real_node_cluster):
    cp = real_node_cluster
    ns = f"token-opt-out-{uuid.uuid4().hex[:5]}"
    cp.kubectl("create", "namespace", ns)
    try:
        accounts = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "opted-out", "namespace": ns}, "automountServiceAccountToken": False},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "automounts", "namespace": ns}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "job-reporter", "namespace": ns}, "automountServiceAccountToken": False},
        ]
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(accounts))

        head, worker = (stored(cp, p) for p in head_and_worker(ns, "opted-out"))
        assert token_volumes(head) == [] and token_volumes(worker) == []

        head, worker = (stored(cp, p) for p in head_and_worker(ns, "automounts"))
        assert len(token_volumes(head)) == 1 and token_volumes(worker) == []  # the plugin's own volume, on the head only

        # the per-job account (automount off) still gets the one explicit volume, in the reporter sidecar only
        per_job = dict(head_and_worker(ns, None)[0])
        per_job["spec"] = {**per_job["spec"], "serviceAccountName": "job-reporter"}
        head = stored(cp, per_job)
        assert token_volumes(head) == [render.API_ACCESS_VOLUME]
        mounted = [
            c["name"]
            for c in head["spec"]["containers"] + head["spec"].get("initContainers", [])
            if any(m["name"] == render.API_ACCESS_VOLUME for m in c.get("volumeMounts", []))
        ]
        assert mounted == [render.SIDECAR_CONTAINER]
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
