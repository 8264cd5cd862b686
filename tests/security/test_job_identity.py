"""Static half of "the job cannot forge its verdict": what the renderer and the chart ship.
The live half (the real API server enforcing it) is tests/operator/test_job_status_policy.py."""

from __future__ import annotations

import re

import yaml
from lorarl.job import render
from lorarl.reporter.kubeapi import OWNED_FIELDS

from tests.helpers import REPO, job_from, seed_doc

CRD = REPO / "crds" / "lorarl.dev_lorarljobs.yaml"


def status_keys() -> set[str]:
    crd = yaml.safe_load(CRD.read_text())
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])


def test_the_policy_guards_every_status_key_but_the_reporters(helm):
    """A status key added to the API is the operator's unless the reporter claims it: the
    policy must then guard it, or this fails."""
    policy = next(d for d in helm.render() if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-job-status"))
    guarded = set()
    for validation in policy["spec"]["validations"]:
        match = re.fullmatch(r"object\.\?status\.\?(\w+(?:\.\?\w+)*) == oldObject\.\?status\.\?(\w+(?:\.\?\w+)*)", validation["expression"])
        if match is None:  # a bound on what the job writes (names, paths), not a guard
            continue
        assert match[1] == match[2], validation["expression"]
        guarded.add(match[1].replace(".?", "."))
    # every key the reporter does not own is guarded whole; inside its own, only progress.gpuHours
    # (the operator's count of the pods' GPU time) is the operator's
    assert {k for k in guarded if "." not in k} == status_keys() - set(OWNED_FIELDS)
    assert {k for k in guarded if "." in k} == {"progress.gpuHours"}
    assert set(OWNED_FIELDS) <= status_keys()
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = next(d for d in helm.render() if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"]["policyName"] == policy["metadata"]["name"])
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]


def test_the_policies_can_be_left_out(helm):
    assert not [d for d in helm.render("--set", "admissionPolicy.enabled=false") if "ValidatingAdmissionPolicy" in d["kind"]]


def test_the_rendered_pods_mount_the_token_only_where_the_reporter_runs():
    """Static half of the design, on the renderer: the ServiceAccount and every pod opt out of
    the automatic token; only the head's reporter sidecar mounts a projected one."""

    doc = seed_doc()
    doc["spec"]["hardware"]["nodes"] = 2
    children = render.render(job_from(doc))
    sa = next(c for c in children if c["kind"] == "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    cluster = next(c for c in children if c["kind"] == "RayJob")["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    for pod in (head, worker):
        assert pod["automountServiceAccountToken"] is False
    token_volumes = {
        v["name"] for pod in (head, worker) for v in pod["volumes"] if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", []))
    }
    assert token_volumes == {render.API_ACCESS_VOLUME}
    assert render.API_ACCESS_VOLUME not in {v["name"] for v in worker["volumes"]}

    def mounts(container):
        return {m["name"] for m in container.get("volumeMounts", [])}

    # the reporter sidecar alone: not the Ray container, where the trainer runs (finding 7)
    sidecar = next(c for c in head["containers"] if c["name"] == render.SIDECAR_CONTAINER)
    assert render.API_ACCESS_VOLUME in mounts(sidecar)
    others = [c for c in head["containers"] if c is not sidecar] + head.get("initContainers", []) + worker["containers"] + worker.get("initContainers", [])
    assert head["containers"][0]["name"] == "ray-head" and head["containers"][0] in others
    assert others and not any(render.API_ACCESS_VOLUME in mounts(c) for c in others)
    token = next(v for v in head["volumes"] if v["name"] == render.API_ACCESS_VOLUME)["projected"]["sources"][0]["serviceAccountToken"]
    assert token["expirationSeconds"] <= 3600 and "audience" not in token
