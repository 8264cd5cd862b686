"""The seed LoraRLJob end to end on the real node, and the Ray head's token, on two seed runs side
by side (they were three runs in two files, docs/development.md).

The seed run: the operator (helm-installed, in its own Pod) makes the RayJob; the real KubeRay
operator makes the RayCluster and the submitter Job; the head pod's init container downloads the
inputs from the Hub stand-in with the real hf CLI; real Ray runs the trainer stand-in under the
reporter, which patches the status with its projected token. The same run survives its submitter
pod deleted mid-run, and the LoraRLJob deleted at the end leaves no child and no pod. The oracles
are outside lorarl: KubeRay's RayJob status (from the real Ray dashboard), the pods' own container
states and logs, and the files on the provisioned volume.

Ray's token authentication (docs/security.md "The Ray head"), on a second run of the seed job
whose trainer hangs at rollout 2, so that its head is up and its trainer alive while the tests
look at them: the rendered RayJob asks KubeRay for `authOptions: {mode: token}`, KubeRay makes
the per-cluster token Secret and hands it to Ray, and real Ray then refuses a job submission from
a pod in another namespace that does not hold the token, and accepts it with the token. The
oracle is Ray's own answer over the cluster network (the address KubeRay publishes in the
RayJob's status.dashboardURL, as any pod reaches it): 401 without a token, 403 with a wrong one
(ray 2.55.1 _private/authentication/http_token_authentication.py:70-78), 200 with KubeRay's
token. No CNI here enforces NetworkPolicy, so the prober does reach the head: the token is what
refuses it."""

from __future__ import annotations

import base64
import json
import pathlib
import uuid

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import Scenario, make_namespace, release_namespace

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900  # 2 shared cores: image unpack, Ray start and the trainer stand-in

# What the prober pod runs: the job submission API of the head, with no token, a wrong one and
# the right one (from its environment: never on a command line); it prints status codes only.
PROBE = r"""
import json, os, time, urllib.error, urllib.request
url = os.environ["RAY_URL"] + "/api/jobs/"
def call(method, token, body=None, tries=20):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method=method), timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except urllib.error.URLError:  # not reached yet (a new pod's first lookups): try again
        if tries <= 1:
            raise
        time.sleep(3)
        return call(method, token, body, tries - 1)
job = {"entrypoint": "echo submitted-from-another-namespace"}
out = {}
out["post_without_token"] = call("POST", None, job)[0]
out["post_wrong_token"] = call("POST", "not-the-token-" + "x" * 32, job)[0]
out["get_without_token"] = call("GET", None)[0]
status, body = call("POST", os.environ["RAY_TOKEN"], job)
out["post_with_token"] = status
out["submitted"] = (body or {}).get("submission_id")
status, body = call("GET", os.environ["RAY_TOKEN"])
out["get_with_token"] = status
out["listed"] = sorted(j.get("submission_id") or "" for j in (body or []))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def seed_runs(real_node_cluster, hub, node_images, lorarl_operator):
    """The hanging run first, until Ray says it is RUNNING (its head up: `ray start` gives the
    raylet a fixed 30 s to register, ray/_private/node.py:409-425, Ray 2.55.1, which heads starting
    together on 2 loaded cores can miss); then the seed run in a thread of its own, while the token
    tests look at the hanging one. The hanging run's head asks for 200m CPU (Ray still gets one:
    KubeRay rounds the request up, common/pod.go), so that both runs fit the node's 2 CPUs."""
    cp, name = real_node_cluster, "qwen3-4b-lora-amd"
    hanging_ns, seed_ns = make_namespace(cp), make_namespace(cp)
    try:
        revision = hub.revision({"seconds_per_rollout": 0.5, "hang_at_rollout": 2})
        spec = {"hardware": {"cpu": "200m"}}
        explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=hanging_ns, model_revision=revision, spec=spec)
        # KubeRay's submitter got the token (its `ray job submit` went through) and so did its
        # dashboard client (it reports the Ray job's status): the job is RUNNING, as Ray says it
        rayjob = seedrun.wait_for("RayJob RUNNING", lambda: _running(cp, hanging_ns, name), RUN_TIMEOUT, explain=explain)
        seed = Scenario("seed", lambda: _seed_run(cp, hub, node_images, seed_ns))
        yield {"hanging": (cp, hanging_ns, name, rayjob, explain), "seed": seed}
    finally:
        release_namespace(cp, hanging_ns)
        release_namespace(cp, seed_ns)


def test_a_pod_without_the_token_cannot_submit_to_the_ray_head(seed_runs, node_images):
    cp, ns, name, rayjob, explain = seed_runs["hanging"]
    cluster, job_id = rayjob["status"]["rayClusterName"], rayjob["status"]["jobId"]

    # KubeRay's Secret: named after the RayCluster, owned by it, one key (raycluster_controller.go
    # createAuthSecret, v1.5.1)
    secret = seedrun.get(cp, "secret", cluster, ns)
    assert secret is not None, explain()
    assert sorted(secret["data"]) == ["auth_token"]
    assert [(o["kind"], o["name"]) for o in secret["metadata"]["ownerReferences"]] == [("RayCluster", cluster)]
    head = seedrun.pods(cp, ns, "ray.io/node-type=head")[0]
    env = {e["name"]: e for e in head["spec"]["containers"][0]["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": cluster, "key": "auth_token"}

    # a pod in another namespace: a copy of the token in its own Secret (through stdin), then
    # the same requests with no token, a wrong one and the token
    probe_ns = f"prober-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", probe_ns)
    try:
        token_copy = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "ray-token", "namespace": probe_ns},
            "data": {"token": secret["data"]["auth_token"]},
        }
        cp.kubectl("apply", "-f", "-", input=json.dumps(token_copy))
        cp.kubectl("apply", "-f", "-", input=json.dumps(_prober(probe_ns, node_images["job"], "http://" + rayjob["status"]["dashboardURL"])))
        phase = seedrun.wait_for("the prober pod finished", lambda: _phase(cp, probe_ns), 300, explain=lambda: seedrun.describe(cp, probe_ns))
        logs = cp.kubectl("logs", "-n", probe_ns, "prober").stdout
        assert phase == "Succeeded", logs
        answer = json.loads(logs.strip().splitlines()[-1])
    finally:
        cp.kubectl("delete", "namespace", probe_ns, "--wait=false", check=False)

    assert base64.b64decode(secret["data"]["auth_token"]).decode() not in logs  # the prober printed codes only
    assert answer["post_without_token"] == 401, answer
    assert answer["post_wrong_token"] == 403, answer
    assert answer["get_without_token"] == 401, answer
    # the same request with KubeRay's token is Ray's to run: the oracle that the refusals above
    # are the token's doing (not an unreachable head)
    assert answer["post_with_token"] == 200 and answer["submitted"], answer
    assert job_id in answer["listed"] and answer["submitted"] in answer["listed"], answer


# Run in the head's Ray container: the trainer's processes (train.py) and whether each can open
# a token file through its own view of the filesystem (/proc/PID/root); prints no file content.
TRAINER_VIEW = r"""
import json, os
paths = ["/var/run/secrets/kubernetes.io/serviceaccount/token", "/var/run/secrets/tokens/token"]
out = {"trainers": 0, "opened": []}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if not any(w.endswith(b"/root/miles/train.py") for w in cmd):
        continue
    out["trainers"] += 1
    for path in paths:
        try:
            open(f"/proc/{pid}/root{path}").close()
            out["opened"].append(path)
        except OSError:
            pass
out["any_secrets_dir"] = os.path.exists("/var/run/secrets")
print(json.dumps(out))
"""


def test_the_trainer_cannot_open_a_token_file(seed_runs):
    """Finding 7: the reporter's token is mounted in the head pod's reporter sidecar only; the
    Ray container, where the trainer runs, has none (the sidecar sends what the trainer's
    reporter spools). The sidecar does hold it (so the check can fail), and the status the
    sidecar sent is there."""
    cp, ns, name, _, explain = seed_runs["hanging"]
    head = seedrun.pods(cp, ns, "ray.io/node-type=head")[0]["metadata"]["name"]
    view = json.loads(cp.kubectl("exec", "-n", ns, head, "-c", "ray-head", "--", "python3", "-c", TRAINER_VIEW).stdout.strip().splitlines()[-1])
    assert view["trainers"] >= 1, view  # the trainer stand-in is alive (it hangs at rollout 2)
    assert view["opened"] == [] and view["any_secrets_dir"] is False, view
    sidecar = cp.kubectl(
        "exec", "-n", ns, head, "-c", "lorarl-reporter", "--", "python3", "-c",
        "print(len(open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()) > 0)",
    )  # fmt: skip
    assert sidecar.stdout.strip() == "True"
    # the reporter's progress reached the status through the sidecar
    seedrun.wait_for("the reporter's progress", lambda: seedrun.rollout_at_least(cp, ns, name, 1), 300, explain=explain)


def test_the_seed_job_survives_its_submitter_pod_succeeds_with_its_checkpoints_and_leaves_nothing(seed_runs):
    seed_runs["seed"].result(3 * RUN_TIMEOUT)


def _seed_run(cp, hub, node_images, ns: str) -> None:
    name = "qwen3-4b-lora-amd"
    revision = hub.revision({"seconds_per_rollout": 0.5})
    # the pods run hardened (docs/security.md "Pod Security levels"): the API server's PodSecurity
    # admits them where "baseline" is enforced (and would refuse a privileged setting)
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision)

    # Running, as KubeRay says it from the real Ray job (not a stand-in)
    seen = seedrun.wait_for("RayJob RUNNING", lambda: _running_snapshot(cp, ns, name), RUN_TIMEOUT, explain=explain)
    head, rayjob_running = seen
    prepare = next(s for s in head["status"]["initContainerStatuses"] if s["name"] == "prepare")
    assert prepare["state"]["terminated"]["exitCode"] == 0
    prepare_log = cp.kubectl("logs", "-n", ns, head["metadata"]["name"], "-c", "prepare").stdout
    assert "prepare: all inputs present" in prepare_log
    assert "prepare: downloading model Qwen/Qwen3-4B@" + revision in prepare_log
    assert rayjob_running["status"]["jobDeploymentStatus"] == "Running"
    _assert_hardened(head)
    _assert_submitter_holds_no_token(cp, ns, name)
    seedrun.wait_for("LoraRLJob Running", lambda: seedrun.job_status(cp, ns, name).get("phase") in ("Running", "Succeeded"), 120, explain=explain)

    # the submitter pod deleted mid-run: the run goes on (KubeRay's Job makes another submitter,
    # which follows the same Ray job)
    seedrun.wait_for("rollout >= 5", lambda: seedrun.rollout_at_least(cp, ns, name, 5), RUN_TIMEOUT, explain=explain)
    submitters = [p for p in seedrun.pods(cp, ns) if "job-name" in (p["metadata"].get("labels") or {})]
    assert len(submitters) == 1, [p["metadata"]["name"] for p in submitters]
    cp.kubectl("delete", "pod", "-n", ns, submitters[0]["metadata"]["name"], "--grace-period=0", "--force")

    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    assert rayjob["status"]["jobStatus"] == "SUCCEEDED"
    assert rayjob["status"]["jobDeploymentStatus"] == "Complete"
    assert status["rayJob"]["jobStatus"] == "SUCCEEDED"
    # the reporter's fields, written from inside the pod with the job's projected token
    assert status["progress"]["rollout"] == status["progress"]["total"] == 100
    assert status["progress"]["gpuHours"] > 0  # the operator's, from the real pods' scheduling and termination
    assert status["checkpoints"]["latestIteration"] == 99
    assert status["eval"][0]["name"] == "aime24"

    # the checkpoints are on the volume KCM's provisioner made (read from its host directory)
    pvc = seedrun.get(cp, "pvc", f"{name}-data", ns)
    pv = seedrun.get(cp, "pv", pvc["spec"]["volumeName"], "")
    host = pathlib.Path(pv["spec"]["hostPath"]["path"])
    latest = status["checkpoints"]["latestPath"]
    assert latest.startswith("/root/shared_data/")
    adapter = host / "shared_data" / latest.removeprefix("/root/shared_data/")
    files = sorted(p.name for p in adapter.iterdir())
    assert "adapter_config.json" in files and "adapter_model.bin" in files, files
    assert any(f.startswith("adapter_megatron_rank") for f in files), files

    # the LoraRLJob deleted: every child it owned and every pod go
    cp.kubectl("delete", "lorarljob", "-n", ns, name, "--wait=true", "--timeout=300s", timeout=330)

    def nothing_left():
        out = cp.kubectl(
            "get",
            "rayjobs,rayclusters,jobs,pods,configmaps,pvc,serviceaccounts,roles,rolebindings,networkpolicies",
            "-n",
            ns,
            "-l",
            f"lorarl.dev/job={name}",
            "-o",
            "name",
        ).stdout.split()
        pods = seedrun.pods(cp, ns)
        rayjobs = cp.kubectl("get", "rayjobs,rayclusters", "-n", ns, "-o", "name").stdout.split()
        return not out and not pods and not rayjobs

    seedrun.wait_for("every child and pod gone", nothing_left, 300, explain=explain)


def _running_snapshot(cp, ns, name):
    """(head pod, RayJob) once KubeRay reports the Ray job RUNNING and the head pod is up."""
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    if not rayjob or rayjob.get("status", {}).get("jobStatus") not in ("RUNNING", "SUCCEEDED"):
        return None
    running = [p for p in seedrun.pods(cp, ns, "ray.io/node-type=head") if p["status"].get("phase") == "Running"]
    return (running[0], rayjob) if running else None


def _assert_hardened(pod):
    for container in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], container["name"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, container["name"]
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


def _assert_submitter_holds_no_token(cp, ns, name):
    """KubeRay's submitter pod, as KubeRay made it from the rendered template: no API token, no GPU."""
    pods = json.loads(cp.kubectl("get", "pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={name}", "-o", "json").stdout)["items"]
    assert pods, "no submitter pod"
    for pod in pods:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        tokens = [v for v in spec.get("volumes", []) if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", []))]
        assert not tokens, tokens
        for container in spec["containers"]:
            assert not [m for m in container.get("volumeMounts", []) if m["mountPath"].startswith("/var/run/secrets/kubernetes.io")]
            assert not [r for r in container["resources"].get("limits", {}) if r.endswith("gpu")], container["resources"]
        _assert_hardened(pod)


def _running(cp, ns, name):
    rayjob = seedrun.get(cp, "rayjob", name, ns)
    st = (rayjob or {}).get("status") or {}
    if st.get("jobStatus") == "RUNNING" and st.get("rayClusterName") and st.get("jobId") and st.get("dashboardURL"):
        return rayjob
    if st.get("jobStatus") in ("SUCCEEDED", "FAILED", "STOPPED"):
        raise AssertionError(f"the Ray job ended before the probe: {st}")
    return None


def _phase(cp, ns):
    pod = seedrun.get(cp, "pod", "prober", ns) or {}
    phase = (pod.get("status") or {}).get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def _prober(ns: str, image: str, url: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "prober", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "prober",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", PROBE],
                    "env": [
                        {"name": "RAY_URL", "value": url},
                        {"name": "RAY_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-token", "key": "token"}}},
                    ],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                }
            ],
        },
    }
