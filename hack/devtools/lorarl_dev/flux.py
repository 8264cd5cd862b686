"""The real Flux source-controller and kustomize-controller for the embedded control plane: their
CRDs read from the Go module cache (never copied), their command lines.

The binaries are built by ``hack/controlplane/build.sh source-controller kustomize-controller``
from the versions pinned in ``hack/controlplane/helm/go.mod`` (in one go build with helm, whose
Helm v4 source-controller links), as part of ``.ci/run``'s build; tests skip without them.
:meth:`lorarl_dev.controlplane.ControlPlane._start_flux` runs them as local processes.
File references below are to the modules at :data:`FLUX_VERSIONS`.
"""

from __future__ import annotations

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
        "--log-level=debug",
    ]
