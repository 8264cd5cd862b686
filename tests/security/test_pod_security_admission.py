"""The Pod Security level each accelerator profile's pods meet, as the real API server's
PodSecurity admission judges them: every rendered pod (Ray head, Ray worker, KubeRay's submitter)
is dry-run created in a namespace that enforces "restricted" and in one that enforces "baseline".
The verdicts must equal the table in docs/security.md ("Pod Security levels")."""

from __future__ import annotations

import pytest
from kubernetes import client
from lorarl.job import render
from lorarl.job.profiles import PROFILES

from tests.api.apiserver import dry_run_apply, pods_of
from tests.helpers import doc_table, job_from, seed_doc

pytestmark = pytest.mark.controlplane

LEVELS = ("restricted", "baseline")  # strictest first
NON_ROOT = {"runAsUser": 1000}
# the groups of the device nodes on an Ubuntu host (video, render): any non-zero GIDs do here
DEVICE_GROUPS = [44, 109]


def rendered_pods(profile: str, non_root: bool, namespace: str) -> list[dict]:
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["hardware"] = {"accelerator": profile, "nodes": 2}
    if non_root:
        doc["spec"]["runPolicy"] = {**doc["spec"].get("runPolicy", {}), **NON_ROOT}
        doc["spec"]["hardware"]["deviceGroups"] = DEVICE_GROUPS
    rayjob = next(c for c in render.render(job_from(doc)) if c["kind"] == "RayJob")
    pods = pods_of(rayjob)
    template = rayjob["spec"]["submitterPodTemplate"]
    pods.append(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "submitter", "namespace": namespace}, "spec": template["spec"]}
    )
    assert len(pods) == 3
    return pods


@pytest.fixture
def enforcing(kube_api, namespace):
    """One namespace per level, labelled as a cluster admin would (pod-security.kubernetes.io)."""
    core = client.CoreV1Api(kube_api)
    names = {}
    for level in LEVELS:
        name = f"{namespace[:50]}-{level[:4]}"
        labels = {"lorarl.dev/test": "true", "pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
        names[level] = name
    try:
        yield names
    finally:
        for name in names.values():
            core.delete_namespace(name, propagation_policy="Background")


def level_met(kube_api, enforcing: dict[str, str], profile: str, non_root: bool) -> str:
    """The strictest level whose namespace admits every pod; 'privileged' when none does."""
    for level in LEVELS:
        answers = [dry_run_apply(kube_api, pod) for pod in rendered_pods(profile, non_root, enforcing[level])]
        refused = [a.message for a in answers if not a.accepted]
        if not refused:
            return level
        # what the other level must be refused for: PodSecurity's own message, nothing else
        assert all(f'violates PodSecurity "{level}:latest"' in m for m in refused), refused
    return "privileged"


def documented() -> dict[str, tuple[str, str]]:
    rows = doc_table("Pod Security levels")
    out = {}
    for row in rows:
        for profile in (p.strip() for p in row["Profiles"].split(",")):
            out[profile] = (row["Default (image's user)"], row["runPolicy.runAsUser + hardware.deviceGroups"])
    return out


def test_every_profile_meets_the_documented_pod_security_level(kube_api, enforcing):
    table = documented()
    assert set(table) == set(PROFILES)
    found = {profile: (level_met(kube_api, enforcing, profile, False), level_met(kube_api, enforcing, profile, True)) for profile in sorted(PROFILES)}
    assert found == table
    # and the point of the table: a non-root image gets every profile to "restricted"
    assert {levels[1] for levels in found.values()} == {"restricted"}


def test_restricted_names_what_a_root_image_lacks(kube_api, enforcing):
    """A root image's pods are refused by "restricted" for running as root only: every other
    restricted check (capabilities, privilege escalation, seccomp, volume types) passes."""
    for pod in rendered_pods("MI355X", False, enforcing["restricted"]):
        answer = dry_run_apply(kube_api, pod)
        assert not answer.accepted
        reasons = answer.message.split(":latest", 1)[1]
        assert "runAsNonRoot != true" in reasons, answer.message
        for other in ("allowPrivilegeEscalation", "unrestricted capabilities", "seccompProfile", "restricted volume types"):
            assert other not in reasons, answer.message
