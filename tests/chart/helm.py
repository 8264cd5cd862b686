"""The real helm (built by hack/controlplane/build.sh) for tests: a `helm` fixture, rendering
helpers, and the prometheus-operator ServiceMonitor CRD read from its Go module.

Import the fixture where it is needed: ``from tests.chart.helm import helm  # noqa: F401``."""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from lorarl_dev import gomodules
from lorarl_dev.binaries import ensure_binaries

from tests.helpers import REPO

CHART = REPO / "charts" / "lorarl-operator"
RELEASE = "lorarl"
PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")


class Helm:
    """The helm CLI with its own (empty) config/cache/data homes: no user repositories or plugins."""

    def __init__(self, binary: pathlib.Path, home: pathlib.Path):
        self.binary = binary
        self.env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(
        self, *args: Any, kubeconfig: os.PathLike | str | None = None, check: bool = True, input: str | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), *map(str, args)]
        if kubeconfig is not None:
            cmd.append(f"--kubeconfig={kubeconfig}")
        proc = subprocess.run(cmd, env=self.env, text=True, capture_output=True, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def template(self, *args: Any, namespace: str = "lorarl-system", values: dict | None = None, release: str = RELEASE) -> str:
        extra: list[Any] = []
        if values is not None:
            extra = ["--values", "-"]
        return self("template", release, CHART, "--namespace", namespace, *extra, *args, input=yaml.safe_dump(values) if values is not None else None).stdout

    def render(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.template(*args, **kwargs)) if d]


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def operator_rbac(helm: Helm, namespace: str, release: str, watch_namespaces: list[str] | None = None) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC objects for a release in ``namespace``: cluster-wide,
    or for ``watch_namespaces``. Use a unique ``release``: it names the ClusterRole/Binding."""
    values = {"watch": {"allNamespaces": False, "namespaces": watch_namespaces}} if watch_namespaces else {}
    # the operator's own: not the tenants' roles or the metrics reader (cluster-scoped, fixed names)
    docs = helm.render(namespace=namespace, release=release, values=values)
    return [d for d in docs if d["kind"] in RBAC_KINDS and d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"]


@pytest.fixture(scope="session")
def helm(tmp_path_factory) -> Helm:
    binary = ensure_binaries(("helm",)) / "helm"
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


def pick(docs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name) and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''} {namespace or ''}, found {len(found)}"
    return found[0]


def cluster_role(docs: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    """The chart's ClusterRole ``<fullname>-<suffix>`` (view, edit, metrics-reader): named after
    the release, and the suffix survives the name's truncation."""
    found = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(f"-{suffix}")]
    assert len(found) == 1, f"expected one ClusterRole *-{suffix}, found {len(found)}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


@functools.cache
def servicemonitor_crd_path() -> pathlib.Path:
    """prometheus-operator's own ServiceMonitor CRD, from its Go module (like KubeRay's CRDs)."""
    return gomodules.module_dir(*PROMETHEUS_OPERATOR) / "example" / "prometheus-operator-crd" / "monitoring.coreos.com_servicemonitors.yaml"


NAMESPACED_HA = {
    "watch": {"allNamespaces": False, "namespaces": ["team-a", "team-b"]},
    "replicaCount": 2,
    "podDisruptionBudget": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": False}},
    "extraArgs": ["--resync-seconds", "60"],
    "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "priorityClassName": "system-cluster-critical",
    "podLabels": {"team": "ml"},
    "image": {"repository": "registry.example/lorarl", "digest": "sha256:" + "a" * 64},
}
