"""The Argo CD health check (hack/argocd/lorarl.dev/LoraRLJob, laid out like argo-cd's
resource_customizations/<group>/<kind>/) on the objects the operator really wrote, run the way
Argo CD runs it, driven by its health_test.yaml (argo-cd util/lua/health_test.go's format)."""

from __future__ import annotations

import pytest
import yaml
from lupa.lua51 import LuaError

from tests.gitops.argo_lua import run_health
from tests.helpers import REPO

HERE = REPO / "hack" / "argocd" / "lorarl.dev" / "LoraRLJob"
SCRIPT = (HERE / "health.lua").read_text()
CASES = yaml.safe_load((HERE / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_health_of_recorded_objects(case):
    obj = yaml.safe_load((HERE / case["inputPath"]).read_text())
    assert run_health(SCRIPT, obj) == case["healthStatus"]


def test_every_recording_has_a_case():
    recorded = {f"testdata/{p.name}" for p in (HERE / "testdata").glob("*.yaml")}
    assert recorded == {c["inputPath"] for c in CASES}


def test_every_argo_status_is_covered():
    assert {c["healthStatus"]["status"] for c in CASES} == {"Healthy", "Progressing", "Degraded", "Suspended"}


def test_sandbox_refuses_what_argo_refuses():
    """The runner is as strict as Argo CD: no string library, and only valid statuses."""
    with pytest.raises(LuaError):
        run_health('return {status = ("progressing"):upper()}', {})
    assert run_health('return {status = "Fine"}', {}) == {"status": "Unknown", "message": "Lua returned an invalid health status"}


def test_missing_conditions_wait_for_the_operator():
    obj = {"apiVersion": "lorarl.dev/v1alpha1", "kind": "LoraRLJob", "metadata": {"name": "j", "generation": 1}, "status": {"progress": {"rollout": 3}}}
    assert run_health(SCRIPT, obj) == {"status": "Progressing", "message": "waiting for the operator"}


@pytest.mark.parametrize(("case", "health"), [("succeeded-serving", "Progressing"), ("succeeded-served", "Healthy"), ("succeeded-serve-failed", "Degraded")])
def test_spec_serve_states_as_argo_cd_sees_them(case, health):
    """AdapterServed as the pure mapping writes it (tests/operator/status_table.py): loading is
    Progressing, a refusal Degraded (as a failed export), a served adapter Healthy."""
    from tests.operator import status_table as table

    obj = {"apiVersion": "lorarl.dev/v1alpha1", "kind": "LoraRLJob", "metadata": {"name": "j", "generation": 3}, "status": table.computed(case)}
    got = run_health(SCRIPT, obj)
    assert got["status"] == health, got
    if health != "Healthy":
        assert got["message"].startswith(("Loading", "LoadRefused")), got
