"""manifests/install: generated from the chart (no drift), and `kubectl apply -k` installs the
operator on the real API server, client-side and server-side."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.helpers import REPO, wait_for

INSTALL = REPO / "manifests" / "install"
GENERATOR = REPO / "hack" / "gen-install-manifests.sh"


@pytest.mark.controlplane  # the helm binary comes from hack/controlplane/build.sh
def test_install_manifests_match_the_chart(helm, tmp_path):
    subprocess.run(["bash", str(GENERATOR), str(tmp_path)], check=True, capture_output=True, env={**helm.env, "HELM": str(helm.binary)})
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in INSTALL.iterdir()) == ["crds.yaml", "kustomization.yaml", "namespace.yaml", "operator.yaml"]
    stale = [name for name in generated if (tmp_path / name).read_bytes() != (INSTALL / name).read_bytes()]
    assert stale == [], f"manifests/install is stale ({stale}): run `make generate` (or bash {GENERATOR.relative_to(REPO)})"


def test_install_manifests_contents():
    docs = [d for f in ("namespace.yaml", "crds.yaml", "operator.yaml") for d in yaml.safe_load_all((INSTALL / f).read_text()) if d]
    assert yaml.safe_load((INSTALL / "crds.yaml").read_text()) == yaml.safe_load((REPO / "crds" / "lorarl.dev_lorarljobs.yaml").read_text())
    assert sorted(d["kind"] for d in docs) == [
        *["ClusterRole"] * 4,  # the operator's, its -metrics-reader, -view and -edit
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Namespace",
        "NetworkPolicy",  # the metrics port: Prometheus only
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        *["ValidatingAdmissionPolicy"] * 4,
        *["ValidatingAdmissionPolicyBinding"] * 4,
    ]
    assert all(
        d["metadata"].get("namespace") == "lorarl-system"
        for d in docs
        if d["kind"]
        not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    )


def test_flux_pruning_the_bundle_keeps_the_crd():
    """Deleting the CRD deletes every LoraRLJob and, by owner references, their runs: the bundle
    (as kustomize builds it, which is what Flux's kustomize-controller applies) marks the CRD,
    and only the CRD, for kustomize-controller's prune to skip (kustomize-controller v1.9.6
    internal/controller/kustomization_controller.go:1442-1458), as helm keeps a chart's crds/.
    tests/e2e/test_flux_install.py sees Flux apply it and leave the CRD when it prunes."""
    from lorarl_dev.binaries import find_kubectl

    built = subprocess.run([find_kubectl(), "kustomize", str(INSTALL)], capture_output=True, text=True, check=True).stdout
    annotated = {d["kind"]: (d["metadata"].get("annotations") or {}).get("kustomize.toolkit.fluxcd.io/prune") for d in yaml.safe_load_all(built) if d}
    assert annotated.pop("CustomResourceDefinition") == "disabled"
    assert set(annotated.values()) == {None}, annotated


@pytest.mark.parametrize("mode", [["--server-side", "--field-manager=lorarl-install-test"], []], ids=["server-side", "client-side"])
def test_kubectl_apply_k_installs_the_operator(control_plane, mode):
    """The CRD is already there (the harness installs it); apply -k must still accept it unchanged."""
    operator_yaml = INSTALL / "operator.yaml"
    try:
        out = control_plane.kubectl("apply", *mode, "-k", INSTALL)
        for name in (
            "namespace/lorarl-system",
            "customresourcedefinition.apiextensions.k8s.io/lorarljobs.lorarl.dev",
            "serviceaccount/lorarl-lorarl-operator",
            "clusterrole.rbac.authorization.k8s.io/lorarl-lorarl-operator",
            "clusterrolebinding.rbac.authorization.k8s.io/lorarl-lorarl-operator",
            "role.rbac.authorization.k8s.io/lorarl-lorarl-operator-leader-election",
            "deployment.apps/lorarl-lorarl-operator",
            "service/lorarl-lorarl-operator-metrics",
        ):
            assert name in out.stdout, out.stdout
        ns = json.loads(control_plane.kubectl("get", "namespace", "lorarl-system", "-o", "json").stdout)
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        control_plane.kubectl("wait", "--for=condition=Established", "crd/lorarljobs.lorarl.dev", "--timeout=30s")
        # the Deployment's Pod is admitted into the restricted namespace
        wait_for(
            lambda: json.loads(
                control_plane.kubectl("get", "pods", "-n", "lorarl-system", "-l", "app.kubernetes.io/name=lorarl-operator", "-o", "json").stdout
            )["items"],
            timeout=60,
            what="the operator Pod",
        )
    finally:
        # everything but the CRD (other tests of this session use it)
        control_plane.kubectl("delete", "-f", operator_yaml, "--ignore-not-found", "--wait=false")
        control_plane.kubectl("delete", "namespace", "lorarl-system", "--ignore-not-found", "--wait=true", timeout=180)
