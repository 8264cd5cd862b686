"""The real Kueue (sigs.k8s.io/kueue) for the embedded control plane: its CRDs, its manager
configuration and its webhook registrations, all read from the Go module cache (never copied).

The manager binary is built by ``hack/controlplane/build.sh kueue`` (``cmd/kueue`` of the version
pinned in ``hack/controlplane/kueue/go.mod``); :meth:`ControlPlane._start_kueue` runs it.
File references below are to the module at :data:`KUEUE_VERSION`.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import yaml

from . import gomodules

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = os.environ.get("LORARL_KUEUE_VERSION", "v0.17.0")
#: Kueue's storage version (the CRD bases serve v1beta1 and v1beta2; without the conversion
#: webhook of config/components/crd/kustomization.yaml everyone must speak the storage version).
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"

#: The CRDs Kueue's manager watches (config/components/crd/kustomization.yaml resources).
CRD_FILES = (
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_cohorts.yaml",
    "kueue.x-k8s.io_workloads.yaml",
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_admissionchecks.yaml",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "kueue.x-k8s.io_multikueueconfigs.yaml",
    "kueue.x-k8s.io_multikueueclusters.yaml",
    "kueue.x-k8s.io_topologies.yaml",
)

#: Webhook paths served for what this harness enables (the ray.io/rayjob integration and Kueue's
#: own objects); the manifest also lists every other integration's paths, which a manager without
#: those integrations does not serve (a registered-but-unserved path with failurePolicy Fail would
#: block, e.g., every Pod).
_WEBHOOK_PATH_PARTS = ("-ray-io-v1-rayjob", "-kueue-x-k8s-io-")

#: Where cmd/kueue/main.go:205-216 (v0.17.0) reads the metrics server's certificate when
#: internalCertManagement is off: a fixed path, no flag or config field overrides it.
METRICS_CERT_DIR = pathlib.Path("/etc/kueue/metrics/certs")


def kueue_module_dir(version: str = KUEUE_VERSION) -> pathlib.Path:
    """The Kueue module's directory (downloaded once)."""
    return gomodules.module_dir(KUEUE_MODULE, version)


def kueue_crd_paths(version: str = KUEUE_VERSION) -> list[pathlib.Path]:
    base = kueue_module_dir(version) / "config" / "components" / "crd" / "bases"
    paths = [base / name for name in CRD_FILES]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(path)
    return paths


def manager_config(*, webhook_port: int, cert_dir: pathlib.Path, health_port: int) -> dict[str, Any]:
    """Kueue's Configuration (apis/config/v1beta2/configuration_types.go), starting from its
    shipped defaults (config/components/manager/controller_manager_config.yaml) with:
    a single replica (no leader election), webhooks on 127.0.0.1 with the harness's certificate
    (no internal cert rotation: it needs in-cluster Services and Secrets), no metrics listener,
    no visibility API server (an aggregated API server: feature VisibilityOnDemand), and only
    the ray.io/rayjob integration."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": ["ray.io/rayjob"]},
    }


def webhook_configurations(url_base: str, ca_bundle_pem: bytes, version: str = KUEUE_VERSION) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfigurations (config/components/webhook/manifests.yaml)
    pointed at ``url_base`` instead of the in-cluster Service, for the paths this harness serves."""
    import base64

    path = kueue_module_dir(version) / "config" / "components" / "webhook" / "manifests.yaml"
    bundle = base64.b64encode(ca_bundle_pem).decode()
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            hook_path = service.get("path", "")
            if not any(part in hook_path for part in _WEBHOOK_PATH_PARTS):
                continue
            hook = dict(hook)
            hook["clientConfig"] = {"url": url_base.rstrip("/") + hook_path, "caBundle": bundle}
            hooks.append(hook)
        doc = dict(doc)
        doc["metadata"] = {"name": doc["metadata"]["name"]}
        doc["webhooks"] = hooks
        out.append(doc)
    return out
