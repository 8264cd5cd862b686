"""The real Flux source-controller and kustomize-controller for the embedded control plane: their
CRDs read from the Go module cache (never copied), their command lines.

The binaries are built by ``hack/controlplane/build.sh source-controller kustomize-controller``
from the versions pinned in ``hack/controlplane/helm/go.mod`` (in one go build with helm, whose
Helm v4 source-controller links), as part of ``.ci/run``'s build; tests skip without them.
:meth:`lorarl_dev.controlplane.ControlPlane._start_flux` runs them as local processes.
File references below are to the modules at :data:`FLUX_VERSIONS`.
"""

from __future__ import annotations

import json
import pathlib

from . import gomodules

SOURCE_CONTROLLER = "github.com/fluxcd/source-controller"
KUSTOMIZE_CONTROLLER = "github.com/fluxcd/kustomize-controller"
#: the one place the versions are written (build.sh builds the binaries from the same file)
_GO_MOD = pathlib.Path(__file__).resolve().parents[2] / "controlplane" / "helm" / "go.mod"

#: The binary (build.sh target) of each controller's module.
BINARIES = {SOURCE_CONTROLLER: "source-controller", KUSTOMIZE_CONTROLLER: "kustomize-controller"}

#: Flux's API versions used here (source.toolkit.fluxcd.io/v1 GitRepository, kustomize.toolkit.
#: fluxcd.io/v1 Kustomization, both served by the versions pinned).
SOURCE_API_VERSION = "source.toolkit.fluxcd.io/v1"
KUSTOMIZE_API_VERSION = "kustomize.toolkit.fluxcd.io/v1"


def _go_mod_versions() -> dict[str, str]:
    versions = {}
    for line in _GO_MOD.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words and words[0] == "require":
            words = words[1:]
        if len(words) >= 2 and words[0] in BINARIES:
            versions[words[0]] = words[1]
    missing = set(BINARIES) - set(versions)
    if missing:
        raise RuntimeError(f"{_GO_MOD}: no requirement of {', '.join(sorted(missing))}")
    return versions


FLUX_VERSIONS = _go_mod_versions()


def crd_paths() -> list[pathlib.Path]:
    """Every CRD both controllers watch: source-controller's config/crd/bases (it starts a
    reconciler for each of its kinds and will not start without them) and kustomize-controller's
    Kustomization."""
    paths = []
    for module, version in FLUX_VERSIONS.items():
        paths += sorted((gomodules.module_dir(module, version) / "config" / "crd" / "bases").glob("*.yaml"))
    if not paths:
        raise FileNotFoundError(f"no Flux CRDs under the module cache for {FLUX_VERSIONS}")
    return paths


def source_controller_args(*, storage: pathlib.Path, storage_port: int, health_port: int) -> list[str]:
    """source-controller (main.go flags, plus pkg/artifact/config's storage flags): artifacts in
    ``storage``, served and advertised at 127.0.0.1:``storage_port`` (the URL kustomize-controller
    downloads from), no leader election, no metrics listener, no events receiver."""
    return [
        f"--storage-path={storage}",
        f"--storage-addr=127.0.0.1:{storage_port}",
        f"--storage-adv-addr=127.0.0.1:{storage_port}",
        f"--health-addr=127.0.0.1:{health_port}",
        "--metrics-addr=0",
        "--enable-leader-election=false",
        "--watch-all-namespaces=true",
        "--log-level=debug",
    ]


def kustomize_controller_args(*, health_port: int) -> list[str]:
    """kustomize-controller (main.go flags): no leader election, no metrics listener, no events
    receiver; it applies as its own identity (the harness's kubeconfig) unless a Kustomization
    names a service account."""
    return [
        f"--health-addr=127.0.0.1:{health_port}",
        "--metrics-addr=0",
        "--enable-leader-election=false",
        "--watch-all-namespaces=true",
        "--no-remote-bases=true",
        # a Kustomization waiting on another (dependsOn) looks again after 5 s instead of the
        # default 30 s (main.go:116): the tests wait on Flux's order, not on its interval
        "--requeue-dependency=5s",
        "--log-level=debug",
    ]


#: kustomize-controller's opt-out of pruning, read from the object in the cluster when it deletes
#: (kustomize-controller internal/controller/kustomization_controller.go:1442-1458 deleteObjects;
#: fluxcd/pkg/ssa v0.76.2 manager_delete.go:87 AnyInMetadata on the existing object)
PRUNE_DISABLED = ("kustomize.toolkit.fluxcd.io/prune", "disabled")
#: the labels kustomize-controller sets on every object it applies (its owner labels)
OWNER_LABELS = ("kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace")


def inventory(kustomization: dict) -> list[tuple[str, str, str, str]]:
    """What a Kustomization applied, from its ``status.inventory``: (namespace, name, group,
    kind) per object (cli-utils ObjMetadata ids, ``<namespace>_<name>_<group>_<kind>``)."""
    entries = ((kustomization.get("status") or {}).get("inventory") or {}).get("entries") or []
    return [tuple(entry["id"].split("_", 3)) for entry in entries]  # type: ignore[misc]


def remove_all(cp, namespace: str, *, keep_kinds: tuple[str, ...] = ("CustomResourceDefinition",), timeout: float = 300) -> None:
    """Delete every Kustomization and GitRepository in ``namespace`` and wait until Flux has
    pruned what they applied (each Kustomization's finalizer deletes its inventory when its
    ``spec.prune`` is true) and all of it is gone. Objects of ``keep_kinds`` are kept, as helm
    keeps a chart's CRDs: annotated with :data:`PRUNE_DISABLED` first, then given back without
    that annotation and Flux's owner labels."""
    from .waiting import wait_for

    kustomizations = json.loads(cp.kubectl("get", "kustomizations", "-n", namespace, "-o", "json").stdout)["items"]
    pruned, kept = [], []
    for kustomization in kustomizations:
        for obj in inventory(kustomization):
            if not kustomization["spec"].get("prune"):
                continue  # Flux leaves them (and the deletion of their namespace may take them)
            (kept if obj[3] in keep_kinds else pruned).append(obj)
    for obj in kept:
        cp.kubectl("annotate", "--overwrite", "--field-manager=lorarl-testing", *_ref(obj), "=".join(PRUNE_DISABLED))
    cp.kubectl("delete", "kustomizations", "--all", "-n", namespace, "--wait=false")
    wait_for(f"the Kustomizations of {namespace} gone", lambda: not _names(cp, "kustomizations", namespace), timeout, explain=lambda: _describe(cp, namespace))
    cp.kubectl("delete", "gitrepositories", "--all", "-n", namespace, "--wait=false")
    wait_for(f"the GitRepositories of {namespace} gone", lambda: not _names(cp, "gitrepositories", namespace), timeout)
    for obj in pruned:
        wait_for(f"{obj} pruned", lambda obj=obj: cp.kubectl("get", *_ref(obj), check=False).returncode != 0, timeout)
    for obj in kept:
        if cp.kubectl("get", *_ref(obj), check=False).returncode != 0:
            raise AssertionError(f"{obj} annotated {'='.join(PRUNE_DISABLED)} was pruned all the same")
        cp.kubectl("annotate", *_ref(obj), f"{PRUNE_DISABLED[0]}-")
        cp.kubectl("label", *_ref(obj), *(f"{label}-" for label in OWNER_LABELS))


def _ref(obj: tuple[str, str, str, str]) -> list[str]:
    ns, name, group, kind = obj
    return [f"{kind}.{group}" if group else kind, name, *(("-n", ns) if ns else ())]


def _names(cp, resource: str, namespace: str) -> list[str]:
    return cp.kubectl("get", resource, "-n", namespace, "-o", "name").stdout.split()


def _describe(cp, namespace: str) -> str:
    return cp.kubectl("get", "kustomizations", "-n", namespace, "-o", "yaml", check=False).stdout[-4000:]
