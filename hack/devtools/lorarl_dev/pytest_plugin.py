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

Tests using these fixtures are marked ``controlplane`` automatically, so
``pytest -m "not controlplane"`` deselects them.
"""

from __future__ import annotations

import os
import pathlib
import re
import uuid

import pytest

from lorarl_dev.controlplane import ControlPlane

_FIXTURES = {"control_plane", "kube_api", "namespace", "fake_cluster"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.controlplane)


@pytest.fixture(scope="session")
def control_plane():
    state_dir = os.environ.get("LORARL_CONTROLPLANE_STATE_DIR")
    if state_dir:
        cp = ControlPlane.attach(pathlib.Path(state_dir) / "controlplane")
        if not cp.healthy():
            pytest.fail(f"LORARL_CONTROLPLANE_STATE_DIR={state_dir}: control plane is not healthy")
        yield cp
        return
    with ControlPlane(verbose=True) as cp:
        yield cp


@pytest.fixture(scope="session")
def fake_cluster():
    with ControlPlane(verbose=True, fake_nodes=2, gpus_per_node=8, kuberay_operator=True) as cp:
        yield cp


@pytest.fixture(scope="session")
def kube_api(control_plane):
    client = control_plane.api_client()
    try:
        yield client
    finally:
        client.close()


def _namespace_name(nodename: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", nodename.lower()).strip("-")[:40].strip("-") or "test"
    return f"{base}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def namespace(request, kube_api):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = _namespace_name(request.node.name)
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"lorarl.dev/test": "true"})))
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise
