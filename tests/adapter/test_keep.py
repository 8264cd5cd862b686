"""spec.checkpoint.retain on the real API server and garbage collector (kube-controller-manager):
a retained claim outlives its LoraRLJob, an owned one goes with it; retain may be changed on a
stored job."""

from __future__ import annotations

import pytest
from lorarl.api import types as api
from lorarl.job import render

from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane


def _doc(namespace: str) -> dict:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": "keep-me", "namespace": namespace},
        "spec": {"model": {"name": "Qwen/Qwen3-4B"}, "hardware": {"accelerator": "MI355X"}, "checkpoint": {"retain": "Delete"}},
    }


def test_a_retained_claim_outlives_its_job_and_an_owned_one_does_not(kube_api, namespace):
    from kubernetes import client

    custom, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    stored = custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, _doc(namespace))
    # retain is mutable on a stored job (the rest of spec.checkpoint is not: tests/api/hostile/edit-checkpoint-storage.yaml)
    patched = custom.patch_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, "keep-me", {"spec": {"checkpoint": {"retain": "Retain"}}})
    assert patched["spec"]["checkpoint"]["retain"] == "Retain"

    owned = render.persistent_volume_claim(api.LoraRLJob.model_validate(stored))
    kept = render.persistent_volume_claim(api.LoraRLJob.model_validate(patched))
    assert owned["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"] and "ownerReferences" not in kept["metadata"]
    kept["metadata"]["name"] = "keep-me-data-kept"
    for pvc in (owned, kept):
        core.create_namespaced_persistent_volume_claim(namespace, pvc)

    custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, "keep-me", propagation_policy="Background")
    names = lambda: {p.metadata.name for p in core.list_namespaced_persistent_volume_claim(namespace).items}  # noqa: E731
    wait_for(lambda: "keep-me-data" not in names(), timeout=120, what="the garbage collector to delete the owned claim")
    assert "keep-me-data-kept" in names()
