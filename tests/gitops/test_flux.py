"""The real Flux on the embedded control plane (no node): source-controller clones a repository
that Debian's git serves on 127.0.0.1 (lorarl_dev.gitserver: git http-backend), and
kustomize-controller applies the commit's kustomization with server-side apply.

The oracles are git (the commit SHAs it printed) and the API server (the objects and their field
managers), not Flux: a GitRepository's artifact names the commit, the Kustomization's last applied
revision names it, the ConfigMap holds the data of that commit and kustomize-controller owns it.
Skipped with the reason when the Flux binaries are not built (lorarl_dev.pytest_plugin.flux_cluster).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml
from lorarl_dev.flux import KUSTOMIZE_API_VERSION, SOURCE_API_VERSION
from lorarl_dev.gitserver import GitServer, commit_tree

from tests.helpers import SEED, wait_for

#: first sync of a fresh controller pair on a loaded 2-core machine: a bound, not a measurement
WAIT = 180


def config_tree(**configmaps: str) -> dict[str, str]:
    """A configuration repository with one kustomization: a ConfigMap per keyword (its name) whose
    data says the keyword's value."""
    files = {}
    for name, greeting in configmaps.items():
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"greeting": greeting}}
        files[f"apps/demo/{name}.yaml"] = yaml.safe_dump(configmap)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{name}.yaml" for name in configmaps]}
    return {**files, "apps/demo/kustomization.yaml": yaml.safe_dump(kustomization)}


def flux_objects(namespace: str, url: str) -> list[dict]:
    git_repository = {
        "apiVersion": SOURCE_API_VERSION,
        "kind": "GitRepository",
        "metadata": {"name": "config", "namespace": namespace},
        "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1m", "timeout": "60s"},
    }
    kustomization = {
        "apiVersion": KUSTOMIZE_API_VERSION,
        "kind": "Kustomization",
        "metadata": {"name": "demo", "namespace": namespace},
        "spec": {
            "sourceRef": {"kind": "GitRepository", "name": "config"},
            "path": "./apps/demo",
            "targetNamespace": namespace,
            "prune": True,
            "interval": "1m",
            "timeout": "60s",
        },
    }
    return [git_repository, kustomization]


def get(cp, kind: str, namespace: str, name: str) -> dict | None:
    proc = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--show-managed-fields", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def ready(obj: dict | None) -> dict | None:
    """The object when its Ready condition is True for its latest generation, else None."""
    status = (obj or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True" and status.get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
    return None


@pytest.fixture
def flux_namespace(flux_cluster):
    name = f"flux-{uuid.uuid4().hex[:6]}"
    flux_cluster.kubectl("create", "namespace", name)
    yield name
    flux_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_a_commit_becomes_ready_and_applied(flux_cluster, flux_namespace, tmp_path):
    cp, ns = flux_cluster, flux_namespace
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = commit_tree(bare, config_tree(greeting="one"), "demo: greeting one")
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in flux_objects(ns, server.url("config"))))

        repo = wait_for(lambda: ready(get(cp, "gitrepository", ns, "config")), WAIT, 1, "the GitRepository Ready")
        assert repo["status"]["artifact"]["revision"] == f"main@sha1:{first}"
        applied = wait_for(lambda: ready(get(cp, "kustomization", ns, "demo")), WAIT, 1, "the Kustomization Ready")
        assert applied["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
        configmap = get(cp, "configmap", ns, "greeting")
        assert configmap["data"] == {"greeting": "one"}
        assert "kustomize-controller" in {m["manager"] for m in configmap["metadata"]["managedFields"] if m["operation"] == "Apply"}
        # the source-controller really cloned from this server (smart HTTP, git-upload-pack)
        assert any("/config.git/git-upload-pack" in line for line in server.requests)

        # a change committed to Git: asked to reconcile now (as `flux reconcile source git`
        # does), source-controller fetches the new commit and kustomize-controller applies it
        second = commit_tree(bare, config_tree(greeting="two"), "demo: greeting two")
        cp.kubectl("annotate", "--overwrite", "-n", ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        wait_for(
            lambda: (get(cp, "kustomization", ns, "demo") or {}).get("status", {}).get("lastAppliedRevision") == f"main@sha1:{second}",
            WAIT,
            1,
            "the second commit applied",
        )
        assert get(cp, "configmap", ns, "greeting")["data"] == {"greeting": "two"}

        # an object removed from Git is pruned (spec.prune), one added is created
        third = commit_tree(bare, config_tree(farewell="three"), "demo: greeting gone, farewell added")
        cp.kubectl("annotate", "--overwrite", "-n", ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        wait_for(
            lambda: (get(cp, "kustomization", ns, "demo") or {}).get("status", {}).get("lastAppliedRevision") == f"main@sha1:{third}",
            WAIT,
            1,
            "the third commit applied",
        )
        assert get(cp, "configmap", ns, "farewell")["data"] == {"greeting": "three"}
        wait_for(lambda: get(cp, "configmap", ns, "greeting") is None, WAIT, 1, "the pruned ConfigMap gone")


def test_the_seed_job_from_git_is_applied(flux_cluster, flux_namespace, tmp_path):
    """The seed LoraRLJob, committed to Git as the file ships, goes through kustomize-controller's
    server-side apply and the LoraRLJob CRD (no operator runs here: nothing reconciles it)."""
    cp, ns = flux_cluster, flux_namespace
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [SEED.name]}
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        commit = commit_tree(bare, {f"apps/demo/{SEED.name}": SEED.read_text(), "apps/demo/kustomization.yaml": yaml.safe_dump(kustomization)}, "the seed job")
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in flux_objects(ns, server.url("config"))))
        applied = wait_for(lambda: ready(get(cp, "kustomization", ns, "demo")), WAIT, 1, "the Kustomization Ready")
    assert applied["status"]["lastAppliedRevision"] == f"main@sha1:{commit}"
    seed = yaml.safe_load(SEED.read_text())
    job = get(cp, "lorarljob", ns, seed["metadata"]["name"])
    assert job["spec"]["model"]["name"] == seed["spec"]["model"]["name"]
    assert job["spec"]["hardware"]["accelerator"] == seed["spec"]["hardware"]["accelerator"]
    assert "kustomize-controller" in {m["manager"] for m in job["metadata"]["managedFields"] if m["operation"] == "Apply"}
