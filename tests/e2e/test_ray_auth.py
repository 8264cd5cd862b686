"""Ray's token authentication on the real node (issue 19, finding 1; docs/security.md "The Ray
head"): the rendered RayJob asks KubeRay for `authOptions: {mode: token}`, KubeRay makes the
per-cluster token Secret and hands it to Ray, and real Ray then refuses a job submission from a
pod in another namespace that does not hold the token, and accepts it with the token.

The oracle is Ray's own answer over the cluster network (the address KubeRay publishes in the
RayJob's status.dashboardURL, as any pod reaches it): 401 without a token, 403 with a wrong one (ray 2.55.1
_private/authentication/http_token_authentication.py:70-78), 200 with KubeRay's token. No CNI
here enforces NetworkPolicy, so the prober does reach the head: the token is what refuses it."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from lorarl_dev import seedrun

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900

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
def hanging_job(real_node_cluster, hub, node_images, lorarl_operator):
    """The seed job whose trainer stand-in stays alive at rollout 2: its head is up and its
    trainer process alive while the tests look at them."""
    cp, ns, name = real_node_cluster, f"e2e-{uuid.uuid4().hex[:6]}", "qwen3-4b-lora-amd"
    cp.kubectl("create", "namespace", ns)
    revision = hub.revision({"seconds_per_rollout": 0.5, "hang_at_rollout": 2})
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision)
    # KubeRay's submitter got the token (its `ray job submit` went through) and so did its
    # dashboard client (it reports the Ray job's status): the job is RUNNING, as Ray says it
    rayjob = seedrun.wait_for("RayJob RUNNING", lambda: _running(cp, ns, name), RUN_TIMEOUT, explain=explain)
    yield cp, ns, name, rayjob, explain
    cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_pod_without_the_token_cannot_submit_to_the_ray_head(hanging_job, node_images):
    cp, ns, name, rayjob, explain = hanging_job
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


def test_the_trainer_cannot_open_a_token_file(hanging_job):
    """Finding 7: the reporter's token is mounted in the head pod's reporter sidecar only; the
    Ray container, where the trainer runs, has none (the sidecar sends what the trainer's
    reporter spools). The sidecar does hold it (so the check can fail), and the status the
    sidecar sent is there."""
    cp, ns, name, _, explain = hanging_job
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
