"""Real pods on the real node (lorarl_dev.node): GPUs from the device plugin, the scheduler's
refusal over capacity, Services by name and ClusterIP, a projected token against the real API
server, PVCs from KCM's provisioner shared by two pods, and ``kubectl logs`` through the relay.

Each check's oracle is outside the code under test: the kubelet's own device checkpoint, the
scheduler's condition, what the pod itself printed, the API server's status codes."""

from __future__ import annotations

import json
import pathlib
import uuid

import pytest
from lorarl_dev.node import images, realnode
from lorarl_dev.pytest_plugin import REAL_NODE_GPUS

pytestmark = pytest.mark.node

BUSYBOX = images.BUSYBOX_IMAGE


@pytest.fixture
def ns(real_node_cluster):
    name = f"node-{uuid.uuid4().hex[:6]}"
    real_node_cluster.kubectl("create", "namespace", name)
    yield name
    real_node_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pod(name, command, *, gpus=0, volumes=(), sa=None, labels=None, restart="Never"):
    container = {"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
    if gpus:
        container["resources"] = {"limits": {"amd.com/gpu": str(gpus)}}
    if volumes:
        container["volumeMounts"] = [{"name": claim, "mountPath": path} for claim, path in volumes]
    spec = {"containers": [container], "restartPolicy": restart, "terminationGracePeriodSeconds": 0}
    if volumes:
        spec["volumes"] = [{"name": claim, "persistentVolumeClaim": {"claimName": claim}} for claim, _ in volumes]
    if sa:
        spec["serviceAccountName"] = sa
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}}, "spec": spec}


def _apply(cp, ns, *objs):
    cp.kubectl("apply", "-n", ns, "-f", "-", input="\n".join(json.dumps(o) for o in objs))


def _wait_phase(cp, ns, pod, phase, timeout=120):
    cp.kubectl("wait", "-n", ns, f"pod/{pod}", f"--for=jsonpath={{.status.phase}}={phase}", f"--timeout={timeout}s", timeout=timeout + 30)


def _logs(cp, ns, pod):
    return cp.kubectl("logs", "-n", ns, pod).stdout


def test_node_is_ready_with_the_device_plugins_gpus_and_the_labellers_labels(real_node_cluster):
    node = json.loads(real_node_cluster.kubectl("get", "node", realnode.NODE_NAME, "-o", "json").stdout)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert node["status"]["capacity"]["amd.com/gpu"] == str(REAL_NODE_GPUS)
    assert node["status"]["allocatable"]["amd.com/gpu"] == str(REAL_NODE_GPUS)
    assert node["metadata"]["labels"]["amd.com/gpu.device-id"] == "75a3"  # the MI355X profile's selector
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    assert {"type": "InternalIP", "address": realnode.NODE_IP} in node["status"]["addresses"]
    # the kubelet learnt the GPUs from the plugin (not from a status patch): its own checkpoint
    # lists the registered resource
    checkpoint = json.loads((realnode.DEVICE_PLUGIN_DIR / "kubelet_internal_checkpoint").read_text())
    assert "amd.com/gpu" in checkpoint["Data"]["RegisteredDevices"]
    assert len(checkpoint["Data"]["RegisteredDevices"]["amd.com/gpu"]) == REAL_NODE_GPUS


def test_gpu_pod_runs_with_two_devices_and_a_pod_over_capacity_stays_pending(real_node_cluster, ns):
    cp = real_node_cluster
    _apply(cp, ns, _pod("two-gpus", "sleep 3600", gpus=2))
    _wait_phase(cp, ns, "two-gpus", "Running")
    pod = json.loads(cp.kubectl("get", "pod", "-n", ns, "two-gpus", "-o", "json").stdout)
    checkpoint = json.loads((realnode.DEVICE_PLUGIN_DIR / "kubelet_internal_checkpoint").read_text())
    mine = [e for e in checkpoint["Data"]["PodDeviceEntries"] if e["PodUID"] == pod["metadata"]["uid"]]
    assert len(mine) == 1 and mine[0]["ResourceName"] == "amd.com/gpu"
    assert sum(len(ids) for ids in mine[0]["DeviceIDs"].values()) == 2

    _apply(cp, ns, _pod("too-many", "true", gpus=REAL_NODE_GPUS - 1))  # 2 + (N - 1) > N
    cp.kubectl("wait", "-n", ns, "pod/too-many", "--for=condition=PodScheduled=False", "--timeout=60s", timeout=90)
    cond = next(
        c for c in json.loads(cp.kubectl("get", "pod", "-n", ns, "too-many", "-o", "json").stdout)["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert cond["reason"] == "Unschedulable"
    assert "Insufficient amd.com/gpu" in cond["message"]


def test_a_pod_resolves_a_service_by_name_and_reaches_it_through_its_cluster_ip(real_node_cluster, ns):
    cp = real_node_cluster
    token = uuid.uuid4().hex
    _apply(
        cp,
        ns,
        _pod("web", f"mkdir -p /www && echo {token} > /www/index.html && exec httpd -f -p 8080 -h /www"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
    )
    _wait_phase(cp, ns, "web", "Running")
    ip = cp.kubectl("get", "svc", "-n", ns, "web", "-o", "jsonpath={.spec.clusterIP}").stdout
    fqdn = f"web.{ns}.svc.{realnode.CLUSTER_DOMAIN}"
    # retried: the Service's endpoints reach kube-proxy and CoreDNS a moment after the pod is Running
    script = f"for i in $(seq 60); do nslookup {fqdn} && wget -qO- http://web/ && wget -qO- http://{ip}/ && exit 0; sleep 1; done; exit 1"
    _apply(cp, ns, _pod("client", script))
    _wait_phase(cp, ns, "client", "Succeeded")
    out = _logs(cp, ns, "client")
    assert f"Address: {ip}" in out or f"Address 1: {ip}" in out, out
    assert out.count(token) == 2, out  # once by the short name, once by the ClusterIP


def test_a_pod_calls_the_api_server_with_its_projected_token(real_node_cluster, ns):
    cp = real_node_cluster
    url = f"https://kubernetes.default.svc/api/v1/namespaces/{ns}/pods"
    tok = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    call = f'wget -q -O- --no-check-certificate --header "Authorization: Bearer $(cat {tok})" {url} 2>&1; echo "exit=$?"'
    _apply(cp, ns, _pod("denied", f"cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; {call}"))
    _wait_phase(cp, ns, "denied", "Succeeded")
    out = _logs(cp, ns, "denied")
    assert out.splitlines()[0] == ns
    assert "403" in out, out  # authenticated as system:serviceaccount:NS:default, not authorized

    _apply(
        cp,
        ns,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pod-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
        },
    )
    _apply(cp, ns, _pod("allowed", call))
    _wait_phase(cp, ns, "allowed", "Succeeded")
    body = _logs(cp, ns, "allowed")
    listing = json.loads(body[: body.rindex("exit=")])
    assert listing["kind"] == "PodList"
    assert {"denied", "allowed"} <= {p["metadata"]["name"] for p in listing["items"]}


def test_rwo_and_rwx_claims_bind_and_two_pods_share_them(real_node_cluster, ns):
    cp = real_node_cluster
    claims = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}},
        }
        for name, mode in (("rwo", "ReadWriteOnce"), ("rwx", "ReadWriteMany"))
    ]
    _apply(cp, ns, *claims)
    for name in ("rwo", "rwx"):
        cp.kubectl("wait", "-n", ns, f"pvc/{name}", "--for=jsonpath={.status.phase}=Bound", "--timeout=60s", timeout=90)
    token = uuid.uuid4().hex
    _apply(cp, ns, _pod("writer", f"echo {token} > /rwo/f && echo {token} > /rwx/f && sleep 3600", volumes=[("rwo", "/rwo"), ("rwx", "/rwx")]))
    _wait_phase(cp, ns, "writer", "Running")
    # the second pod runs while the first still has both volumes mounted
    _apply(cp, ns, _pod("reader", "for i in $(seq 30); do cat /rwo/f /rwx/f && exit 0; sleep 1; done; exit 1", volumes=[("rwo", "/rwo"), ("rwx", "/rwx")]))
    _wait_phase(cp, ns, "reader", "Succeeded")
    assert _logs(cp, ns, "reader").split() == [token, token]
    pv = cp.kubectl("get", "pvc", "-n", ns, "rwx", "-o", "jsonpath={.spec.volumeName}").stdout
    path = cp.kubectl("get", "pv", pv, "-o", "jsonpath={.spec.hostPath.path}").stdout
    assert pathlib.Path(path, "f").read_text().strip() == token  # on the node's disk, where KCM provisioned it


def test_kubectl_logs_reaches_the_kubelet_through_the_relay(real_node_cluster, ns):
    cp = real_node_cluster
    token = uuid.uuid4().hex
    _apply(cp, ns, _pod("hello", f"echo hello {token}"))
    _wait_phase(cp, ns, "hello", "Succeeded")
    assert cp.server.startswith("https://127.0.0.1:")  # the tests' kubeconfig points at the relay
    assert cp.kubectl("logs", "-n", ns, "hello").stdout == f"hello {token}\n"
