"""The real kstatus library (hack/kstatus, sigs.k8s.io/cli-utils v0.37.2) on every status the
pure mapping can write, and on the objects the operator wrote on the API server (recorded)."""

from __future__ import annotations

import pytest
import yaml

from tests.gitops.kstatus_tool import kstatus
from tests.helpers import REPO
from tests.operator import kstatus_expected as live
from tests.operator import status_table as table

# needs the Go-built tool from hack/controlplane/build.sh, like the control-plane binaries
pytestmark = pytest.mark.controlplane

TESTDATA = REPO / "hack" / "argocd" / "lorarl.dev" / "LoraRLJob" / "testdata"


def as_object(status_):
    return {"apiVersion": "lorarl.dev/v1alpha1", "kind": "LoraRLJob", "metadata": {"name": "j", "namespace": "ns", "generation": 3}, "status": status_}


def test_every_mapping_row_as_kstatus_sees_it():
    cases = list(table.TABLE)
    got = kstatus([as_object(table.computed(case)) for case in cases])
    assert {case: g["status"] for case, g in zip(cases, got, strict=False)} == {case: table.TABLE[case][-1] for case in cases}


def test_kstatus_message_is_the_deciding_condition():
    """Flux and kpt print kstatus's message: for an InProgress or Failed job it must say why."""
    got = kstatus([as_object(table.computed("initializing")), as_object(table.computed("complete-failed"))])
    assert got[0]["message"] == "creating the Ray cluster and downloading inputs"
    assert got[1]["message"] == "the Ray job ended with FAILED"


def test_recorded_objects_as_kstatus_sees_them():
    states = list(live.EXPECTED)
    objects = [yaml.safe_load((TESTDATA / f"{state}.yaml").read_text()) for state in states]
    got = kstatus(objects)
    assert {s: g["status"] for s, g in zip(states, got, strict=False)} == {s: live.EXPECTED[s][0] for s in states}
    by_state = dict(zip(states, got, strict=False))
    assert by_state["stale-generation"]["message"] == "LoraRLJob generation is 2, but latest observed generation is 1"
    # the CRD defaults status.observedGeneration to 0: a job no operator has handled is not Current
    assert by_state["new"]["message"] == "LoraRLJob generation is 1, but latest observed generation is 0"


def test_stale_generation_wins_over_conditions():
    """Even a Stalled job is InProgress while its latest spec is unobserved (generic.go:38-41)."""
    obj = as_object(table.computed("complete-failed"))
    obj["metadata"]["generation"] = 4
    assert kstatus([obj])[0]["status"] == "InProgress"
