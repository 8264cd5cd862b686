"""Training pods of every accelerator profile: never privileged, no host path or host namespace,
and every device, capability, group and volume they get is in docs/security.md ("Pods"), which
this test reads, so the documentation and the renderer cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lorarl.job import render
from lorarl.job.profiles import PROFILES

from tests.helpers import doc_table, job_from, seed_doc

STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi"}
VOLUME_TYPES = ("emptyDir", "persistentVolumeClaim", "configMap", "projected", "secret", "hostPath", "downwardAPI")


def documented(profile: str) -> set[tuple[str, str]]:
    """(setting, first word of the value) rows that apply to ``profile``."""
    rows = doc_table("Pods")
    assert rows, "docs/security.md has no Pods table"
    out = set()
    for row in rows:
        profiles = [p.strip() for p in row["Profiles"].split(",")]
        assert all(p == "all" or p in PROFILES for p in profiles), row
        assert len(row["Why"]) > 20, row
        if "all" in profiles or profile in profiles:
            out.add((row["Setting"], row["Value"].split()[0]))
    return out


def pod_specs(profile: str) -> Iterator[dict[str, Any]]:
    for nodes in (1, 2):
        doc = seed_doc()
        doc["spec"]["hardware"] = {"accelerator": profile, "nodes": nodes}
        cluster = next(c for c in render.render(job_from(doc)) if c["kind"] == "RayJob")["spec"]["rayClusterSpec"]
        yield cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster.get("workerGroupSpecs", []):
            yield group["template"]["spec"]


def settings(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """Everything about a pod that touches the node: each is a row of the Pods table."""
    out: set[tuple[str, str]] = set()
    for flag in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        if flag in pod:
            out.add((flag, str(pod[flag]).lower()))
    for group in (pod.get("securityContext") or {}).get("supplementalGroups", []):
        out.add(("supplementalGroup", str(group)))
    for volume in pod.get("volumes", []):
        [kind] = [k for k in volume if k != "name"]
        out.add(("volume", kind))
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        ctx = container.get("securityContext") or {}
        if "privileged" in ctx:
            out.add(("privileged", str(ctx["privileged"]).lower()))
        for cap in (ctx.get("capabilities") or {}).get("add", []):
            out.add(("capability", cap))
        for device in container.get("volumeDevices", []):
            out.add(("device", device["devicePath"]))
        for key in (container.get("resources") or {}).get("limits", {}):
            if key not in STANDARD_RESOURCES:
                out.add(("resource", key))
    return out


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_pods_are_unprivileged_and_documented(profile):
    rendered: set[tuple[str, str]] = set()
    for pod in pod_specs(profile):
        found = settings(pod)
        assert ("privileged", "true") not in found
        assert ("volume", "hostPath") not in found
        assert not any(flag in ("hostNetwork", "hostPID", "hostIPC") and value == "true" for flag, value in found)
        assert not [
            c for c in pod.get("containers", []) + pod.get("initContainers", []) if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is True
        ]
        rendered |= found
    assert rendered == documented(profile)


def test_shared_memory_is_a_memory_emptydir_not_host_ipc():
    for pod in pod_specs("MI300X"):
        shm = next(v for v in pod["volumes"] if v["name"] == render.SHM_VOLUME)
        assert shm["emptyDir"]["medium"] == "Memory"
        assert "hostIPC" not in pod
