"""pytest fixtures backed by a real, embedded control plane.

Enable with ``pytest_plugins = ["lorarl_dev.pytest_plugin"]`` in a
conftest. Fixtures:

``control_plane``
    session-scoped :class:`~lorarl_dev.controlplane.ControlPlane`
    (etcd + kube-apiserver + kube-controller-manager, the LoRARLJob CRD if
    generated, KubeRay's RayJob and RayCluster CRDs). Started once, stopped at
    the end of the session. Builds the binaries on first use if needed.
    With ``LORARL_CONTROLPLANE_STATE_DIR`` set, attaches to a control plane
    that ``lorarl-dev controlplane up`` started there instead (and leaves it up).
``kube_api``
    session-scoped admin ``kubernetes.client.ApiClient``.
``namespace``
    a fresh namespace for one test (its name, a str); deleted afterwards.
``fake_cluster``
    session-scoped second control plane that also runs kube-scheduler, kwok
    with two fake Nodes (8 ``amd.com/gpu`` each; pods bound to them go
    Running) and the real KubeRay operator (RayJob -> RayCluster -> pods).
    Nothing real runs in the pods: no Ray dashboard answers, so RayJobs end
    ``Failed`` a while after their submitter Job "completes".
``kueue_cluster``
    session-scoped control plane like ``fake_cluster`` (one kwok node with 8 ``amd.com/gpu``,
    labelled as an MI355X node) that also runs the real Kueue manager
    (:mod:`lorarl_dev.kueue`, webhooks registered), with the ResourceFlavor ``mi355x`` and the
    WorkloadPriorityClasses ``lorarl-low`` (100) and ``lorarl-high`` (1000).
``flux_cluster``
    session-scoped control plane that also runs the real Flux source-controller and
    kustomize-controller (:mod:`lorarl_dev.flux`) as local processes, with Flux's CRDs, and the
    real Kueue manager with the objects of ``kueue_cluster`` (no nodes, no KubeRay operator:
    Kueue admits by quota alone; a queue is :func:`kueue_queue_in`; Kueue adds about 3 s to the
    start, 12.8 s -> 15.6 s measured on the 2-core machine). Skipped
    (with the reason) when their binaries are not built (``.ci/run`` builds them;
    ``hack/controlplane/build.sh source-controller kustomize-controller`` alone).
``argocd_cluster``
    session-scoped control plane that also runs the real Argo CD application controller and repo
    server (:mod:`lorarl_dev.argocd`) and their Redis as local processes, with Argo CD's CRDs,
    ``argocd-cm`` holding our LoraRLJob health check, and the ``default`` AppProject; and the real
    Kueue manager with the objects of ``kueue_cluster``, as ``flux_cluster``. Skipped (with
    the reason) when their binaries are not built (``.ci/run`` builds them;
    ``hack/controlplane/build.sh argocd-application-controller argocd-repo-server`` alone) or
    Debian's redis-server is missing (``hack/gitops/packages.sh``).
``real_node_cluster``
    session-scoped control plane with one real node (:mod:`lorarl_dev.node`): containerd,
    kubelet, kube-proxy, CoreDNS and :data:`REAL_NODE_GPUS` fake ``amd.com/gpu`` from a device
    plugin (two seed-sized Ray pods), the real KubeRay operator in the cluster's namespace, the node labelled
    as an MI355X node, the busybox image imported (``lorarl_dev.node.images.BUSYBOX_IMAGE``), a
    default StorageClass; the whole cluster inside a network namespace of its own. Tests using
    it are marked ``node``; they are skipped (with the reason) only when not root or the Debian
    packages of hack/node/packages.sh are missing. Flux's source-controller and
    kustomize-controller run beside it (``cp.flux``) when their binaries are built (as for
    ``flux_cluster``), in the root network namespace with the Git server of the tests.
``kueue_queue``
    a fresh namespace with its own ClusterQueue (quota: 8 ``amd.com/gpu`` of flavor ``mi355x``,
    i.e. exactly one seed job; preemption of lower priority within the queue) and a LocalQueue
    ``gpus`` pointing at it: a :class:`KueueQueue`. Deleted afterwards.

Tests using these fixtures are marked ``controlplane`` automatically, so
``pytest -m "not controlplane"`` deselects them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import sys
import uuid

import pytest

from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.errors import ControlPlaneError

_FIXTURES = {"control_plane", "kube_api", "namespace", "fake_cluster", "kueue_cluster", "kueue_queue", "real_node_cluster", "flux_cluster", "argocd_cluster"}


def pytest_configure(config):
    config.addinivalue_line("markers", "node: runs pods on the real node (root and Debian packages needed)")


@contextlib.contextmanager
def started(what: str, cp: ControlPlane):
    """``cp`` started for a session fixture, or the whole run stopped with one line naming what
    could not start (a binary missing and no Go to build it, a failed build, a port taken, a part
    that exited): one message instead of the same error repeated by every test that needs it."""
    try:
        cp.start()  # stops what it had started when it fails
    except (ControlPlaneError, OSError) as e:
        detail = str(e).strip()
        first, _, rest = detail.partition("\n")
        if rest:
            print(rest, file=sys.stderr)
        pytest.exit(f"{what} could not start: {first}", returncode=3)
    try:
        yield cp
    finally:
        cp.stop()


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = getattr(item, "fixturenames", ())
        if _FIXTURES.intersection(names):
            item.add_marker(pytest.mark.controlplane)
        if "real_node_cluster" in names:
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def control_plane():
    state_dir = os.environ.get("LORARL_CONTROLPLANE_STATE_DIR")
    if state_dir:
        cp = ControlPlane.attach(pathlib.Path(state_dir) / "controlplane")
        if not cp.healthy():
            pytest.fail(f"LORARL_CONTROLPLANE_STATE_DIR={state_dir}: control plane is not healthy")
        yield cp
        return
    with started("the control plane", ControlPlane(verbose=True)) as cp:
        yield cp


@pytest.fixture(scope="session")
def fake_cluster():
    with started("fake_cluster (kwok nodes, KubeRay)", ControlPlane(verbose=True, fake_nodes=2, gpus_per_node=8, kuberay_operator=True)) as cp:
        yield cp


def flux_missing() -> str | None:
    """Why the Flux controllers cannot run here (their binaries not built), or None."""
    from lorarl_dev.binaries import bin_dir
    from lorarl_dev.flux import BINARIES

    missing = [name for name in BINARIES.values() if not os.access(bin_dir() / name, os.X_OK)]
    if missing:
        return f"Flux {', '.join(missing)} not built in {bin_dir()}: hack/controlplane/build.sh {' '.join(BINARIES.values())}"
    return None


@pytest.fixture(scope="session")
def flux_cluster():
    reason = flux_missing()
    if reason:
        pytest.skip(reason)
    with started("flux_cluster (Flux, Kueue)", ControlPlane(verbose=True, flux=True, kueue=True)) as cp:
        install_kueue_objects(cp)
        yield cp


@pytest.fixture(scope="session")
def argocd_cluster():
    import shutil

    from lorarl_dev.argocd import BINARIES
    from lorarl_dev.binaries import bin_dir

    missing = [name for name in BINARIES if not os.access(bin_dir() / name, os.X_OK)]
    if missing:
        pytest.skip(f"Argo CD {', '.join(missing)} not built in {bin_dir()}: hack/controlplane/build.sh {' '.join(BINARIES)}")
    if shutil.which("redis-server") is None:
        pytest.skip("Argo CD needs a Redis: redis-server is not installed (hack/gitops/packages.sh)")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("Argo CD's application controller runs in a network namespace of its own (its metrics server binds 0.0.0.0): needs root and iproute2's ip")
    with started("argocd_cluster (Argo CD, Kueue)", ControlPlane(verbose=True, argocd=True, kueue=True)) as cp:
        install_kueue_objects(cp)
        yield cp


#: The machine as it was before the session's real node started (lorarl_dev.node.realnode.machine_snapshot).
REAL_NODE_BASELINE = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def real_node_cluster(request):
    from lorarl_dev.node import netns, realnode

    reasons = realnode.missing_requirements()
    if reasons:
        pytest.skip("real node: " + "; ".join(reasons))
    realnode.sweep()  # a node left by a killed run goes before the baseline is taken
    netns.ensure_dir_mounted()  # /run/netns's own mount is not the node's to make or remove
    request.config.stash[REAL_NODE_BASELINE] = realnode.machine_snapshot()
    # Flux where its binaries are built (a test that needs it skips on cp.flux, naming the build)
    flux = flux_missing() is None
    # Kueue (its webhooks on RayJobs and its own kinds only) when a selected test asks for it
    # (the fixture ``kueue_on_node``), with the objects of ``kueue_cluster``
    kueue = any("kueue_on_node" in getattr(item, "fixturenames", ()) for item in request.session.items)
    node = ControlPlane(verbose=True, node=True, gpus=REAL_NODE_GPUS, node_profile="MI355X", kuberay_operator=True, flux=flux, kueue=kueue)
    with started("the real node", node) as cp:
        if kueue:
            install_kueue_objects(cp)
        yield cp


#: The real node's fake GPUs: a 2-node seed job (head + worker, 8 each) fits.
REAL_NODE_GPUS = 16


@pytest.fixture(scope="session")
def kube_api(control_plane):
    client = control_plane.api_client()
    try:
        yield client
    finally:
        client.close()


def namespace_name(nodename: str) -> str:
    """The one naming of a test's namespace: the test's name, cut to a DNS label, and a random tail."""
    base = re.sub(r"[^a-z0-9-]+", "-", nodename.lower()).strip("-")[:40].strip("-") or "test"
    return f"{base}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def namespace(request, kube_api):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = namespace_name(request.node.name)
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"lorarl.dev/test": "true"})))
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise


#: What the AMD GPU node labeller publishes for MI355X nodes (the seed job's node selector).
MI355X_NODE_LABELS = {"amd.com/gpu.device-id": "75a3"}


def install_kueue_objects(cp) -> None:
    """The cluster-wide Kueue objects of ``kueue_cluster``: the ResourceFlavor ``mi355x`` and the
    WorkloadPriorityClasses ``lorarl-low`` (100) and ``lorarl-high`` (1000)."""
    from lorarl_dev.kueue import KUEUE_API_VERSION

    objects = [
        {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": "mi355x"}, "spec": {"nodeLabels": dict(MI355X_NODE_LABELS)}},
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "lorarl-low"},
            "value": 100,
            "description": "preemptible training runs",
        },
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "lorarl-high"},
            "value": 1000,
            "description": "runs that may preempt lorarl-low",
        },
    ]
    cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in objects))


@pytest.fixture(scope="session")
def kueue_cluster():
    with started(
        "kueue_cluster (kwok node, KubeRay, Kueue)", ControlPlane(verbose=True, fake_nodes=1, gpus_per_node=8, kuberay_operator=True, kueue=True)
    ) as cp:
        for node in json.loads(cp.kubectl("get", "nodes", "-o", "json").stdout)["items"]:
            cp.kubectl("label", "node", node["metadata"]["name"], "--overwrite", *(f"{k}={v}" for k, v in MI355X_NODE_LABELS.items()))
        install_kueue_objects(cp)
        yield cp


@dataclasses.dataclass(frozen=True)
class KueueQueue:
    namespace: str
    local_queue: str
    cluster_queue: str


def cluster_queue(name: str, namespace: str, gpus: int = 8) -> dict:
    """A ClusterQueue for ``namespace`` alone: ``gpus`` amd.com/gpu of flavor ``mi355x`` (8: one
    seed job, 1 node x 8 GPUs), preemption of lower priority within the queue."""
    from lorarl_dev.kueue import KUEUE_API_VERSION

    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "amd.com/gpu"],
                    "flavors": [
                        {
                            "name": "mi355x",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "512Gi"},
                                {"name": "amd.com/gpu", "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }


@contextlib.contextmanager
def kueue_queue_in(cp, namespace: str, gpus: int = 8):
    """For an existing ``namespace``: its own ClusterQueue (named as the namespace, see
    :func:`cluster_queue`) and a LocalQueue ``gpus`` pointing at it; the ClusterQueue is deleted
    afterwards."""
    from lorarl_dev.kueue import KUEUE_API_VERSION

    local_queue = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": "gpus", "namespace": namespace},
        "spec": {"clusterQueue": namespace},
    }
    cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in (cluster_queue(namespace, namespace, gpus), local_queue)))
    try:
        yield KueueQueue(namespace=namespace, local_queue="gpus", cluster_queue=namespace)
    finally:
        cp.kubectl("delete", "clusterqueue", namespace, "--wait=false", check=False)


@pytest.fixture
def kueue_queue(request, kueue_cluster):
    cp = kueue_cluster
    ns = namespace_name(request.node.name)
    cp.kubectl("create", "namespace", ns)
    try:
        with kueue_queue_in(cp, ns) as queue:
            yield queue
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``rep_call``): fixtures dump logs at teardown
    only when the test itself failed (``call_failed``)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def call_failed(node) -> bool:
    """True when the test's body failed (read by fixtures at teardown to print a log tail)."""
    rep = getattr(node, "rep_call", None)
    return rep is not None and rep.failed
