"""The embedded control plane itself: does it behave like a real cluster?"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from lorarl_dev import controlplane as cpmod
from lorarl_dev.binaries import REQUIRED_BINARIES, find_kubectl, kubernetes_version
from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.locations import repo_root
from lorarl_dev.processes import pid_alive

from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane


def _pids_gone(pids: dict[str, int], timeout: float = 15) -> None:
    wait_for(lambda: not any(pid_alive(p) for p in pids.values()), timeout, what=f"processes {pids} to exit")


def test_starts_cleanly(control_plane):
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(control_plane.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == kubernetes_version() == "v1.37.2"
    assert control_plane.version == "v1.37.2"
    assert control_plane.kubeconfig == control_plane.workdir / "kubeconfig"
    assert control_plane.server.startswith("https://127.0.0.1:")
    assert set(control_plane.pids) == set(REQUIRED_BINARIES)
    assert control_plane.running
    names = control_plane.kubectl("get", "crd", "-o", "name").stdout.split()
    assert "customresourcedefinition.apiextensions.k8s.io/rayjobs.ray.io" in names
    assert "customresourcedefinition.apiextensions.k8s.io/rayclusters.ray.io" in names


_CEL_CRD = textwrap.dedent(
    """
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.harness.lorarl.dev
    spec:
      group: harness.lorarl.dev
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
      versions:
      - name: v1
        served: true
        storage: true
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                x-kubernetes-validations:
                - rule: "self.replicas <= self.maxReplicas"
                  message: "replicas must not exceed maxReplicas"
                properties:
                  replicas: {type: integer}
                  maxReplicas: {type: integer}
    """
)


def test_crd_cel_rule_rejects_bad_object(control_plane, namespace, tmp_path):
    crd = tmp_path / "crd.yaml"
    crd.write_text(_CEL_CRD)
    control_plane.install_crds([crd])

    def widget(name, replicas, max_replicas):
        return yaml.safe_dump(
            {
                "apiVersion": "harness.lorarl.dev/v1",
                "kind": "Widget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": replicas, "maxReplicas": max_replicas},
            }
        )

    control_plane.kubectl("apply", "-f", "-", input=widget("good", 1, 2))
    bad = control_plane.kubectl("apply", "-f", "-", input=widget("bad", 3, 2), check=False)
    assert bad.returncode != 0
    assert "replicas must not exceed maxReplicas" in bad.stderr
    assert "Invalid" in bad.stderr


def test_restricted_service_account_is_forbidden_until_a_role_allows(control_plane, kube_api, namespace):
    kubeconfig = control_plane.restricted_kubeconfig(namespace, "limited")

    denied = control_plane.kubectl("get", "configmaps", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr, denied.stderr
    assert f"system:serviceaccount:{namespace}:limited" in denied.stderr

    # the same identity through the python client: 403
    from kubernetes import config

    sa_api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        with pytest.raises(ApiException) as exc:
            client.CoreV1Api(sa_api).list_namespaced_config_map(namespace)
        assert exc.value.status == 403

        rbac = client.RbacAuthorizationV1Api(kube_api)
        rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="read-configmaps"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
            ),
        )
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="limited-reads-configmaps"),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-configmaps"),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="limited", namespace=namespace)],
            ),
        )

        def allowed():
            try:
                client.CoreV1Api(sa_api).list_namespaced_config_map(namespace)
                return True
            except ApiException as e:
                if e.status == 403:
                    return False
                raise

        wait_for(allowed, timeout=10, what="the RoleBinding to take effect")
        ok = control_plane.kubectl("get", "configmaps", "-n", namespace, kubeconfig=kubeconfig)
        assert ok.returncode == 0
        # ... but still nothing beyond what the Role grants
        with pytest.raises(ApiException) as exc:
            client.CoreV1Api(sa_api).list_namespaced_secret(namespace)
        assert exc.value.status == 403
        with pytest.raises(ApiException) as exc:
            client.CoreV1Api(sa_api).create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope")))
        assert exc.value.status == 403
    finally:
        sa_api.close()


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_garbage_collector_deletes_owned_objects(kube_api, namespace, propagation):
    core = client.CoreV1Api(kube_api)
    owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"role": "owner"}))
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="owned",
                owner_references=[
                    client.V1OwnerReference(
                        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, controller=True, block_owner_deletion=True
                    )
                ],
            ),
            data={"role": "owned"},
        ),
    )
    # an unrelated object must survive
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bystander")))

    core.delete_namespaced_config_map("owner", namespace, propagation_policy=propagation)

    def gone(name):
        try:
            core.read_namespaced_config_map(name, namespace)
            return False
        except ApiException as e:
            if e.status == 404:
                return True
            raise

    wait_for(lambda: gone("owned"), timeout=60, what="the garbage collector to delete 'owned'")
    wait_for(lambda: gone("owner"), timeout=60, what="'owner' to be deleted")
    assert not gone("bystander")


def test_kuberay_rayjob_crd_accepts_a_minimal_rayjob(control_plane, namespace):
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "minimal", "namespace": namespace},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.49.0"}]}},
                },
            },
        },
    }
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(rayjob))
    got = json.loads(control_plane.kubectl("get", "rayjob", "minimal", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["entrypoint"] == "python -c 'print(1)'"
    assert got["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"] == "ray-head"

    bad = dict(rayjob, metadata={"name": "bad", "namespace": namespace}, spec={"rayClusterSpec": {"headGroupSpec": "not-an-object"}})
    rejected = control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert rejected.returncode != 0
    assert "headGroupSpec" in rejected.stderr


def test_lorarl_crd_installed_when_generated(control_plane):
    crd = repo_root() / cpmod.LORARL_CRD
    if not crd.is_file():
        pytest.skip(f"{crd} not generated yet")
    if os.environ.get("LORARL_CONTROLPLANE_SKIP_LORARL_CRD"):
        pytest.skip("LORARL_CONTROLPLANE_SKIP_LORARL_CRD is set")
    name = yaml.safe_load(crd.read_text())["metadata"]["name"]
    control_plane.kubectl("get", "crd", name)


def test_stop_leaves_no_processes(tmp_path):
    cp = ControlPlane(install_default_crds=False)
    with cp:
        pids = dict(cp.pids)
        workdir = cp.workdir
        assert json.loads((workdir / "pids.json").read_text()) == pids
        assert cp.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
        # kube-controller-manager is doing its job
        assert cp.kubectl("get", "serviceaccount", "default", "-n", "default").returncode == 0
    _pids_gone(pids, timeout=1)
    assert not workdir.exists()
    assert cp.pids == {}


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from lorarl_dev.controlplane import ControlPlane
    cp = ControlPlane(install_default_crds=False).start()
    print(json.dumps({"pids": cp.pids, "workdir": str(cp.workdir)}), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_owner_process_dying_takes_the_control_plane_down(sig):
    """Even a SIGKILLed test process leaves nothing behind (PR_SET_PDEATHSIG); SIGTERM runs stop()."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        line = proc.stdout.readline()
        assert line, "child did not start a control plane"
        started = json.loads(line)
        pids, workdir = started["pids"], pathlib.Path(started["workdir"])
        assert all(pid_alive(p) for p in pids.values())
        proc.send_signal(sig)
        proc.wait(timeout=30)
        _pids_gone(pids)
        if sig == signal.SIGTERM:
            assert not workdir.exists()  # stop() ran
        else:
            # nothing could clean up after SIGKILL; the next start sweeps it
            assert workdir.exists()
            assert workdir in cpmod.sweep_stale_workdirs(workdir.parent)
            assert not workdir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_detached_up_env_down(tmp_path):
    """``lorarl-dev controlplane up`` semantics: survives the process that started it."""
    state = tmp_path / "state"
    code = "import sys; from lorarl_dev.controlplane import up; up(sys.argv[1], verbose=False)"
    subprocess.run([sys.executable, "-c", code, str(state)], check=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    workdir = state / "controlplane"
    pids = json.loads((workdir / "pids.json").read_text())
    try:
        assert all(pid_alive(p) for p in pids.values())
        environ = cpmod.env(state)
        assert pathlib.Path(environ["KUBECONFIG"]).is_file()
        out = subprocess.run([find_kubectl(), "get", "--raw", "/readyz"], text=True, capture_output=True, env={**os.environ, **environ}, check=True)
        assert out.stdout.strip() == "ok"
        # up() again reuses the running one
        again = cpmod.up(state, verbose=False)
        assert again.pids == pids
    finally:
        assert cpmod.down(state) is True
    _pids_gone(pids, timeout=1)
    assert not workdir.exists()
    assert cpmod.down(state) is False
