"""Version skew never stalls jobs: today's operator keeps reconciling every job after a newer CRD
adds a defaulted field (stored jobs then carry a field this operator does not know).

The old controller parsed stored objects strictly (unknown fields refused) and re-ran the CRD's
CEL rules, which turned every admitted job into InvalidSpec under such a CRD."""

from __future__ import annotations

import copy
import json

import pytest
from lorarl.admission import crdgen
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.api.apiserver import dry_run_create
from tests.helpers import PROBE_NAME, apply_crd, seed_doc, wait_for
from tests.operator.conftest import OperatorProcess

pytestmark = pytest.mark.controlplane

NEW_FIELD = "topologyAware"


def newer_crd() -> dict:
    """Today's CRD plus one defaulted field, as a later release could add it."""
    crd = copy.deepcopy(crdgen.crd())
    hardware = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["hardware"]
    hardware["properties"][NEW_FIELD] = {"type": "boolean", "default": True, "description": "A field of a newer release."}
    return crd


@pytest.fixture
def newer_crd_installed(control_plane, kube_api, namespace):
    apply_crd(control_plane, newer_crd())
    probe = seed_doc()
    probe["metadata"]["name"] = PROBE_NAME
    probe["spec"]["hardware"][NEW_FIELD] = False
    wait_for(lambda: dry_run_create(kube_api, namespace, probe).accepted, what="the newer CRD to be served")
    try:
        yield
    finally:  # the control plane is shared by the session: put today's CRD back
        apply_crd(control_plane, crdgen.crd())
        wait_for(lambda: not dry_run_create(kube_api, namespace, probe).accepted, what="today's CRD to be served again")


def create(control_plane, namespace, name, **hardware):
    doc = seed_doc()
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["hardware"].update(hardware)
    control_plane.kubectl("create", "-f", "-", input=json.dumps(doc))


def test_todays_operator_keeps_reconciling_under_a_newer_crd(control_plane, namespace, kube_api, newer_crd_installed, tmp_path):
    from lorarl.runtime.kube import Api

    kube = Api(kube_api)
    create(control_plane, namespace, "skew-defaulted")  # the API server adds topologyAware: true
    create(control_plane, namespace, "skew-explicit", **{NEW_FIELD: False})
    create(control_plane, namespace, "skew-running")
    for name in ("skew-defaulted", "skew-explicit", "skew-running"):
        stored = kube.get("lorarl.dev/v1alpha1", "LoraRLJob", namespace, name)
        assert NEW_FIELD in stored["spec"]["hardware"]  # every stored job carries the unknown field

    operator = OperatorProcess(control_plane, namespace, tmp_path).start()
    try:

        def phase(name, wanted):
            def check():
                st = (kube.get("lorarl.dev/v1alpha1", "LoraRLJob", namespace, name) or {}).get("status") or {}
                return st if st.get("phase") == wanted else None

            return check

        for name in ("skew-defaulted", "skew-explicit", "skew-running"):
            st = wait_for(phase(name, "Pending"), what=f"{name} Pending")
            stalled = {c["type"]: c for c in st["conditions"]}["Stalled"]
            assert stalled["status"] == "False", stalled
            assert kube.get("ray.io/v1", "RayJob", namespace, name) is not None
        # and it keeps following the run (many reconciles later)
        ray = FakeKubeRay(kube, namespace, "skew-running")
        ray.initializing()
        ray.submitted()
        ray.running()
        wait_for(phase("skew-running", "Running"), what="skew-running Running")
        ray.succeeded()
        wait_for(phase("skew-running", "Succeeded"), what="skew-running Succeeded")
    finally:
        operator.stop()
    log = operator.output()
    for name in ("skew-defaulted", "skew-explicit", "skew-running"):
        reports = [line for line in log.splitlines() if f"{namespace}/{name} has fields this operator does not know" in line]
        assert len(reports) == 1, reports  # reported once, not at every resync
        assert f"spec.hardware.{NEW_FIELD}" in reports[0]
    assert "InvalidSpec" not in log
