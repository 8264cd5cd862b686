"""Ray's token authentication in the render (issue 19, finding 1; docs/security.md "The Ray
head"): every RayJob asks KubeRay for `authOptions: {mode: token}` with a rayVersion KubeRay
accepts for it, and the real API server, with KubeRay's own CRD, keeps the field (a CRD without it
would refuse it under strict field validation, or prune it under a plain apply). KubeRay's side
(the Secret, the containers) is checked with the real KubeRay operator in
tests/operator/test_real_kuberay.py; Ray's refusal on the real node in tests/e2e/test_seed.py."""

from __future__ import annotations

import json

import pytest
from lorarl.job import render

from tests.api.apiserver import dry_run_applied, dry_run_apply
from tests.helpers import MANIFESTS, job_from, load

EXAMPLES = sorted(MANIFESTS.glob("*.yaml"))
# KubeRay refuses token mode below this Ray version (utils/validation.go:194-208, v1.5.1)
KUBERAY_MIN_RAY = (2, 52, 0)


def rayjob_of(path, namespace="team-a"):
    doc = load(path)
    doc["metadata"]["namespace"] = namespace
    return render.render(job_from(doc))[-1]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_asks_for_token_authentication(path):
    cluster = rayjob_of(path)["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert tuple(int(x) for x in cluster["rayVersion"].split(".")) >= KUBERAY_MIN_RAY
    # the token is KubeRay's: never rendered, nor referenced by the render
    assert "RAY_AUTH" not in json.dumps(rayjob_of(path))


@pytest.mark.controlplane
def test_the_api_server_keeps_the_auth_options(kube_api, namespace):
    rayjob = rayjob_of(EXAMPLES[0], namespace)
    assert dry_run_apply(kube_api, rayjob).accepted  # strict: an unknown field would be refused
    cluster = dry_run_applied(kube_api, rayjob)["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"} and cluster["rayVersion"] == render.RAY_VERSION
