"""The real Argo CD application controller and repo server for the embedded control plane: their
CRDs and stock ``argocd-cm`` read from the Go module cache (never copied), the settings objects the
API server would have made (not run here), and their command lines.

The binaries are built by ``hack/controlplane/build.sh argocd-application-controller
argocd-repo-server`` from the version pinned in ``hack/controlplane/argocd/go.mod`` (with the Go
toolchain that file names: argo-cd v3.6 needs Go 1.27), as part of ``.ci/run``'s build; tests skip
without them. :meth:`lorarl_dev.controlplane.ControlPlane._start_argocd` runs them, and the Redis
they share (Debian's ``redis-server``), as local processes. The way they run outside a cluster is
argo-cd's own for its development and e2e tests (``Procfile`` at the module's root:
``ARGOCD_FAKE_IN_CLUSTER``, ``--redis``, ``--repo-server``). File references below are to
``github.com/argoproj/argo-cd/v3`` at :data:`ARGOCD_VERSION`.
"""

from __future__ import annotations

import os
import pathlib
import secrets

import yaml

from . import gomodules

ARGO_CD = "github.com/argoproj/argo-cd/v3"
#: the one place the version (and the toolchain) is written; build.sh builds from the same file
_GO_MOD = pathlib.Path(__file__).resolve().parents[2] / "controlplane" / "argocd" / "go.mod"
#: our health check, as docs/gitops.md puts it into argocd-cm
HEALTH_LUA = pathlib.Path(__file__).resolve().parents[2] / "argocd" / "lorarl.dev" / "LoraRLJob" / "health.lua"
HEALTH_KEY = "resource.customizations.health.lorarl.dev_LoraRLJob"

#: the build.sh targets (package names in hack/controlplane/argocd)
APPLICATION_CONTROLLER = "argocd-application-controller"
REPO_SERVER = "argocd-repo-server"
BINARIES = (APPLICATION_CONTROLLER, REPO_SERVER)

NAMESPACE = "argocd"
API_VERSION = "argoproj.io/v1alpha1"
#: the destination of an Application in the cluster Argo CD runs in (KubernetesInternalAPIServerAddr)
IN_CLUSTER = "https://kubernetes.default.svc"
#: the annotation that asks the application controller to refresh an Application now ("normal":
#: compare with the latest commit; "hard": also drop the repo server's manifest cache)
REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"


def _go_mod() -> tuple[str, str]:
    version = toolchain = ""
    for line in _GO_MOD.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words and words[0] == "require":
            words = words[1:]
        if len(words) >= 2 and words[0] == ARGO_CD:
            version = words[1]
        elif len(words) >= 2 and words[0] == "toolchain":
            toolchain = words[1]
    if not version or not toolchain:
        raise RuntimeError(f"{_GO_MOD}: no requirement of {ARGO_CD} or no toolchain line")
    return version, toolchain


ARGOCD_VERSION, TOOLCHAIN = _go_mod()


def module_dir() -> pathlib.Path:
    return gomodules.module_dir(ARGO_CD, ARGOCD_VERSION, toolchain=TOOLCHAIN)


def crd_paths() -> list[pathlib.Path]:
    """The Application and AppProject CRDs (manifests/crds; the ApplicationSet's is not needed: its
    controller does not run here)."""
    crds = module_dir() / "manifests" / "crds"
    return [crds / "application-crd.yaml", crds / "appproject-crd.yaml"]


def argocd_cm() -> dict:
    """argo-cd's stock argocd-cm (manifests/base/config/argocd-cm.yaml: its resource exclusions and
    ignoreResourceUpdates, as an install has them) with our health check added under its key, as
    docs/gitops.md tells a user to."""
    cm = yaml.safe_load((module_dir() / "manifests" / "base" / "config" / "argocd-cm.yaml").read_text(encoding="utf-8"))
    cm["metadata"]["namespace"] = NAMESPACE
    cm.setdefault("data", {})[HEALTH_KEY] = HEALTH_LUA.read_text(encoding="utf-8")
    return cm


def settings_objects() -> list[dict]:
    """What the controller reads besides argocd-cm: argocd-secret (manifests/base/config/
    argocd-secret.yaml; its ``server.secretkey``, which argocd-server would generate at its first
    start, util/settings/settings.go:1884-1888, is random here and never printed) and the
    ``default`` AppProject that argocd-server creates (server/server.go:293-301)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "argocd-secret",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "argocd-secret", "app.kubernetes.io/part-of": "argocd"},
        },
        "type": "Opaque",
        "stringData": {"server.secretkey": secrets.token_urlsafe(32)},
    }
    project = {
        "apiVersion": API_VERSION,
        "kind": "AppProject",
        "metadata": {"name": "default", "namespace": NAMESPACE},
        "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}], "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]},
    }
    return [argocd_cm(), secret, project]


def redis_args(*, port: int, workdir: pathlib.Path) -> list[str]:
    """Debian's redis-server (7.0) as a cache only: on 127.0.0.1, no snapshots, no append-only
    file, no password (loopback, this harness's own process)."""
    return ["--bind", "127.0.0.1", "--port", str(port), "--protected-mode", "yes", "--save", "", "--appendonly", "no", "--dir", str(workdir)]


def environment(workdir: pathlib.Path, kubeconfig: pathlib.Path) -> dict[str, str]:
    """The environment both run with (besides the harness's own):

    - ``ARGOCD_FAKE_IN_CLUSTER=true`` with ``KUBECONFIG``: the in-cluster destination
      (https://kubernetes.default.svc) is the kubeconfig's cluster
      (pkg/apis/application/v1alpha1/types.go:4019-4022, cluster_constants.go:14), as in the Procfile;
    - ``ARGOCD_GPG_ENABLED=false``: no GnuPG keyring (util/sourceintegrity/source_integrity.go:267-271);
    - ``ARGOCD_ASK_PASS_SOCK`` and ``TMPDIR``: the repo server's askpass socket (util/askpass/common.go:7,19)
      and its clones (util/git/client.go:304: under os.TempDir()) in the workdir, not in a shared /tmp;
    - ``ARGOCD_TLS_DATA_PATH``/``ARGOCD_SSH_DATA_PATH``: empty directories for repository TLS
      certificates and SSH known hosts (common/common.go:271-274), as in the Procfile;
    - ``PATH`` led by the scripts argo-cd's image puts in /usr/local/bin (Dockerfile:62-65), from
      the module's hack/: the repo server runs git-verify-wrapper.sh on every commit it generates
      manifests from, signed or not, and fails the generation without it
      (reposerver/repository/repository.go:556-559, util/git/client.go:1172-1177).
    """
    base = workdir / "argocd"
    tmp, tls, ssh, bin_dir = base / "tmp", base / "tls", base / "ssh", base / "bin"
    for directory in (tmp, tls, ssh, bin_dir):
        directory.mkdir(parents=True, exist_ok=True)
    for script in ("git-verify-wrapper.sh", "gpg-wrapper.sh"):
        target = bin_dir / script
        target.write_bytes((module_dir() / "hack" / script).read_bytes())
        target.chmod(0o755)  # the module cache keeps no mode bits
    return {
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "/usr/bin:/bin")]),
        "ARGOCD_FAKE_IN_CLUSTER": "true",
        "KUBECONFIG": str(kubeconfig),
        "ARGOCD_GPG_ENABLED": "false",
        "ARGOCD_ASK_PASS_SOCK": str(base / "askpass.sock"),
        "TMPDIR": str(tmp),
        "ARGOCD_TLS_DATA_PATH": str(tls),
        "ARGOCD_SSH_DATA_PATH": str(ssh),
    }


def repo_server_args(*, port: int, metrics_port: int, redis_port: int) -> list[str]:
    """argocd-repo-server (cmd/argocd-repo-server/commands/argocd_repo_server.go): gRPC and its
    metrics/health server on 127.0.0.1 (:255-258), plain gRPC (:278; the mTLS client CA path,
    which --disable-tls refuses, emptied: :143-145, :279), the Redis (util/cache/cache.go:225)."""
    return [
        "--address=127.0.0.1",
        f"--port={port}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics_port}",
        "--disable-tls",
        "--client-ca-path=",
        f"--redis=127.0.0.1:{redis_port}",
        "--logformat=text",
        "--loglevel=info",
    ]


def application_controller_args(*, repo_port: int, metrics_port: int, redis_port: int, resync_seconds: int) -> list[str]:
    """argocd-application-controller (cmd/argocd-application-controller/commands/
    argocd_application_controller.go), settings in namespace ``argocd`` (util/cli/cli.go:111-117:
    kubectl's --namespace), the repo server in plain gRPC (:256, :275), the Redis, each
    Application compared with Git every ``resync_seconds`` (:252; default 120 s) without the jitter
    added to that (:254; default up to 60 s), each managed
    resource's health stored in the Application's status.resources[] (:287), which tests read.
    Its metrics and health server listens on 0.0.0.0:``metrics_port`` (controller/appcontroller.go:293:
    no flag for the address), so the harness runs it in a network namespace of its own
    (ControlPlane._start_argocd)."""
    return [
        f"--namespace={NAMESPACE}",
        f"--repo-server=127.0.0.1:{repo_port}",
        "--repo-server-plaintext",
        f"--redis=127.0.0.1:{redis_port}",
        f"--metrics-port={metrics_port}",
        f"--app-resync={resync_seconds}",
        "--app-resync-jitter=0",
        "--persist-resource-health",
        "--logformat=text",
        "--loglevel=info",
    ]
