"""The ResourceQuota example of docs/security.md ("How many jobs a namespace may hold") on the
real API server: its object-count quota of LoraRLJobs refuses the job beyond the limit, naming
the quota (the API server's ResourceQuota admission and kube-controller-manager's quota controller)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.helpers import REPO, apply_job, seed_doc, wait_for

pytestmark = pytest.mark.controlplane


def quota_example() -> dict:
    text = (REPO / "docs" / "security.md").read_text()
    section = text.split("## How many jobs a namespace may hold", 1)[1]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def test_the_documented_quota_caps_a_namespaces_jobs(control_plane, namespace):
    quota = quota_example()
    assert quota["kind"] == "ResourceQuota" and "count/lorarljobs.lorarl.dev" in quota["spec"]["hard"]
    quota["metadata"]["namespace"] = namespace
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(quota))
    limit = int(quota["spec"]["hard"]["count/lorarljobs.lorarl.dev"])

    def synced():  # the quota controller counted the jobs: admission refuses every create
        # ("status unknown for quota") until status.used has the resource, which takes the
        # controller's next discovery of a custom resource (every 30 s in kube-controller-manager)
        got = json.loads(control_plane.kubectl("get", "resourcequota", quota["metadata"]["name"], "-n", namespace, "-o", "json").stdout)
        return "count/lorarljobs.lorarl.dev" in (got.get("status") or {}).get("used", {})

    wait_for(synced, timeout=120, what="the quota's status")
    for n in range(limit):
        doc = seed_doc()
        doc["metadata"]["name"] = f"job-{n}"
        apply_job(control_plane, namespace, doc)
    doc = seed_doc()
    doc["metadata"]["name"] = f"job-{limit}"
    doc["metadata"]["namespace"] = namespace
    refused = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert refused.returncode != 0
    assert "exceeded quota: lorarl-jobs" in refused.stderr and f"limited: count/lorarljobs.lorarl.dev={limit}" in refused.stderr, refused.stderr
