"""Shared test helpers (plain functions, no fixtures)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from kubernetes import client as k8s
from lorarl.admission import crdgen
from lorarl.admission.validation import parse_job
from lorarl.api import types as api
from lorarl.control.reconcile import Reconciler
from lorarl.job import artifact, render
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.api.apiserver import dry_run_create
from tests.reporter.reporter_testlib import CHILD, generate_miles_log

REPO = pathlib.Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
SEED = MANIFESTS / "qwen3-4b-lora-amd.yaml"


def load(path: pathlib.Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def seed_doc() -> dict[str, Any]:
    return load(SEED)


def job_from(doc: dict[str, Any]) -> api.LoraRLJob:
    return parse_job(copy.deepcopy(doc))


def with_spec(**overrides: Any) -> dict[str, Any]:
    """The seed document with spec keys replaced (camelCase, as in YAML)."""
    doc = seed_doc()
    doc["spec"].update(copy.deepcopy(overrides))
    return doc


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() is truthy; return its value (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def http_get(port: int, path: str) -> tuple[int | None, str]:
    """(status, body) of GET http://127.0.0.1:port/path; (None, "") when nothing listens there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return None, ""


NAME = "qwen3-4b-lora-amd"
# the seed's children, in apply order: (apiVersion, kind, name)
CHILD_KINDS = [
    ("v1", "ServiceAccount", f"{NAME}-reporter"),
    ("rbac.authorization.k8s.io/v1", "Role", f"{NAME}-reporter"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", f"{NAME}-reporter"),
    ("v1", "ConfigMap", f"{NAME}-lorarl"),
    ("v1", "PersistentVolumeClaim", f"{NAME}-data"),
    ("networking.k8s.io/v1", "NetworkPolicy", f"{NAME}-ray"),
    ("ray.io/v1", "RayJob", NAME),
]


def kubectl_rows(text: str, having: str = "NAME") -> list[dict[str, str]]:
    """The rows of the last table in ``kubectl get`` output whose header has the column ``having``,
    by column name (kubectl aligns each column under its header, and an empty cell is blank, so
    rows are cut at the header's offsets)."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("NAME ") and having in line.split())
    header = lines[start]
    names = header.split()
    offsets, at = [], 0
    for name in names:
        at = header.index(name, at)
        offsets.append(at)
        at += len(name)
    rows = []
    for line in lines[start + 1 :]:
        if not line[:1].strip() or line.startswith("NAME "):  # a row starts with its name: the table ends
            break
        cuts = [*offsets[1:], None]
        rows.append({name: line[begin:end].strip() for name, begin, end in zip(names, offsets, cuts, strict=True)})
    return rows


def apply_job(control_plane, namespace, doc):
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    return doc


def job(kube, namespace, name=NAME):
    return kube.get("lorarl.dev/v1alpha1", "LoraRLJob", namespace, name)


def rayjob(kube, namespace, name=NAME):
    return kube.get("ray.io/v1", "RayJob", namespace, name)


def phase_is(kube, namespace, phase, name=NAME):
    def check():
        st = (job(kube, namespace, name) or {}).get("status") or {}
        return st if st.get("phase") == phase else None

    return check


def conditions(st):
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


def events(kube, namespace, name=NAME):
    core = k8s.CoreV1Api(kube.client)
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=LoraRLJob").items
    return [(e.type, e.reason) for e in sorted(items, key=lambda e: e.event_time)]


def started(kube, namespace):
    wait_for(lambda: rayjob(kube, namespace), what="the RayJob")
    return FakeKubeRay(kube, namespace, NAME)


def running(kube, namespace):
    """Apply-to-Running as KubeRay goes: Initializing, submitted, RUNNING. The operator is seen in
    Preparing first: tests count the phase Events, and one that caught Initializing and RUNNING in
    one read would post Pending -> Running (as it should; a loaded CI machine did)."""
    ray = started(kube, namespace)
    ray.initializing()
    wait_for(phase_is(kube, namespace, "Preparing"), what="Preparing")
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running")
    return ray


def count_reconciles(operator, namespace: str, outcome: str, name: str = NAME) -> int:
    """Reconcile log lines of the job containing ``outcome`` (e.g. "(resync): phase Pending")."""
    line = f"[{namespace}/{name}] reconcile "
    return sum(1 for text in operator.output().splitlines() if line in text and outcome in text)


def await_reconciles(operator, namespace: str, outcome: str, count: int, name: str = NAME) -> None:
    """Wait until the operator's log shows ``count`` more reconciles of the job ending in ``outcome``
    (e.g. "(resync): phase Preparing"): evidence that it looked again, before asserting it did nothing."""
    seen = count_reconciles(operator, namespace, outcome, name)
    wait_for(lambda: count_reconciles(operator, namespace, outcome, name) >= seen + count, timeout=60, what=f"{count} more reconciles with {outcome}")


def poke_and_await(kube, operator, namespace: str, phase: str, rollout: int) -> None:
    """Make the operator look at the job now (a reporter-like status patch is a job event) and
    wait for that reconcile's log line: evidence, before asserting that it did nothing. Any
    trigger's line counts: an event that comes while an earlier one of the job still waits in the
    queue runs in one reconcile with it, named by the more telling trigger (a RayJob's deletion
    just before the poke made the poke's reconcile a "(rayjob-event)" one, under load)."""
    seen = count_reconciles(operator, namespace, f"): phase {phase}")
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"progress": {"rollout": rollout}})
    wait_for(lambda: count_reconciles(operator, namespace, f"): phase {phase}") > seen, timeout=60, what=f"a reconcile after the poke ({phase})")


def make_job(control_plane, namespace, kube, name):
    doc = seed_doc()
    doc["metadata"]["name"] = name
    apply_job(control_plane, namespace, doc)
    Reconciler(kube).reconcile(namespace, name)  # renders and applies the SA, Role, RoleBinding and ConfigMap
    return name


def shipped_reporter(directory):
    """The reporter as the job runs it: the zipapp the operator image's build writes (and the
    head's init container copies; tests/image/test_built_images.py checks they are the same)."""
    path = directory / "reporter.pyz"
    path.write_bytes(artifact.reporter_zipapp())
    return [sys.executable, "-I", "-S", str(path)]


def reporter_env(control_plane, token_file):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LORARL_"))}
    env.update(LORARL_API_SERVER=control_plane.server, LORARL_TOKEN_FILE=str(token_file), LORARL_CA_FILE=str(control_plane.ca_file))
    return env


def run_reporter(control_plane, namespace, mine, tmp_path, log: bytes, total_rollouts: int):
    """The shipped reporter, as the job's own ServiceAccount, over a trainer that prints ``log``
    (miles' output): the finished process."""
    token = tmp_path / "token"
    token.write_text(control_plane.service_account_token(namespace, f"{mine}-reporter"))
    log_file = tmp_path / "miles.log"
    log_file.write_bytes(log)
    return subprocess.run(
        [
            *shipped_reporter(tmp_path),
            "--namespace",
            namespace,
            "--name",
            mine,
            "--total-rollouts",
            str(total_rollouts),
            "--interval",
            "0.2",
            "--",
            sys.executable,
            "-c",
            CHILD,
            str(log_file),
            "0",
        ],
        capture_output=True,
        env=reporter_env(control_plane, token),
        timeout=300,
    )


def run_reporter_on_200_rollouts(control_plane, kube, namespace, mine, tmp_path):
    """The shipped reporter, as the job's own ServiceAccount, over a 200-rollout miles log:
    (the finished process, the log)."""
    # the seed spec's one eval set (the job-status policy admits eval entries named as the spec's)
    log = generate_miles_log(num_rollouts=200, save_dir=f"/root/shared_data/{mine}/checkpoints", datasets=("aime24",))
    return run_reporter(control_plane, namespace, mine, tmp_path, log.data, 200), log


#: the prefix of a miles trainer's metric line (reporter/logparse.py's doc)
MILES_HEADER = "(MegatronTrainRayActor pid=4242, ip=10.0.0.5) [2026-12-01 10:00:00.000 miles] log_utils.py:123 - "


def miles_lines(first: int, last: int, loss: str) -> list[str]:
    """Rollouts first..last as miles prints them: the rollout line (reward), then a step (loss, gap)."""
    out = []
    for r in range(first, last + 1):
        out.append(f"{MILES_HEADER}rollout {r}: {{'rollout/raw_reward': 0.5, 'rollout/response_len/mean': 100.0}}")
        out.append(f"{MILES_HEADER}step {r}: {{'train/loss': {loss}, 'train/train_rollout_logprob_abs_diff': 0.01, 'train/ppo_kl': 0.0}}")
    return out


DENIAL = "RayJobs are refused in this namespace (lorarl test policy)"


def deny_rayjobs(namespace):
    """A ValidatingAdmissionPolicy (CEL `false`) and its binding for this namespace only."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"deny-rayjobs-{namespace}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["ray.io"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["rayjobs"]}]},
            "validations": [{"expression": "false", "message": DENIAL}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"deny-rayjobs-{namespace}"},
        "spec": {
            "policyName": policy["metadata"]["name"],
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    return policy, binding


def probe_rayjob(namespace):
    """The seed's RayJob under another name, for a server-side dry run."""
    doc = copy.deepcopy(seed_doc())
    doc["metadata"]["namespace"] = namespace
    rj = render.rayjob(parse_job(doc))
    rj["metadata"]["name"] = "admission-probe"
    rj["metadata"].pop("ownerReferences", None)
    return rj


def refuse_rayjobs(control_plane, namespace, request):
    """Install the policy for ``namespace`` and wait until the API server enforces it (a
    server-side dry-run create is refused); removed when the test ends. Returns the binding's name."""
    policy, binding = deny_rayjobs(namespace)
    name = binding["metadata"]["name"]
    request.addfinalizer(
        lambda: control_plane.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found", check=False)
    )
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([policy, binding]))
    probe = yaml.safe_dump(probe_rayjob(namespace))
    wait_for(
        lambda: DENIAL in control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).stderr,
        timeout=60,
        what="the admission policy to be enforced",
    )
    return name


def apply_crd(control_plane, crd: dict) -> None:
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lorarl-testing", "-f", "-", input=yaml.safe_dump(crd))


PROBE_NAME = "crd-version-probe"  # no test job has this name


def install_crd_with_accelerator(request, accelerator: str) -> None:
    """For the rest of one test: a newer CRD that knows one more accelerator profile (which this
    operator cannot render). Today's CRD is put back when the test ends."""
    control_plane, kube_api, namespace = (request.getfixturevalue(f) for f in ("control_plane", "kube_api", "namespace"))
    crd = copy.deepcopy(crdgen.crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["hardware"]["properties"]["accelerator"]["enum"].append(accelerator)
    probe = seed_doc()
    probe["metadata"]["name"] = PROBE_NAME  # a dry run still answers 409 for a name that exists
    probe["spec"]["hardware"]["accelerator"] = accelerator

    def restore():
        apply_crd(control_plane, crdgen.crd())
        wait_for(lambda: not dry_run_create(kube_api, namespace, probe).accepted, what="today's CRD to be served again")

    request.addfinalizer(restore)
    apply_crd(control_plane, crd)
    wait_for(lambda: dry_run_create(kube_api, namespace, probe).accepted, what="the newer CRD to be served")


GITOPS_DOC = REPO / "docs" / "gitops.md"


def gitops_doc_objects() -> list[dict[str, Any]]:
    """Every object of docs/gitops.md's YAML blocks, in the page's order."""
    blocks = re.findall(r"```yaml\n(.*?)```", GITOPS_DOC.read_text(), flags=re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc is not None]


def gitops_doc_object(kind: str, name: str) -> dict[str, Any]:
    """A fresh copy of the one ``kind`` named ``name`` that docs/gitops.md shows: the GitOps tests
    apply the page's objects, changing only what they must (URLs, namespaces, intervals), so that
    what the page shows is what ran."""
    found = [o for o in gitops_doc_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"docs/gitops.md shows {len(found)} {kind} named {name}"
    return copy.deepcopy(found[0])


DOC = REPO / "docs" / "security.md"


def doc_table(heading: str) -> list[dict[str, str]]:
    """The first Markdown table after ``## heading`` in docs/security.md, as dicts by column."""
    text = DOC.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=False)) for row in rows[2:]]


def request_as(control_plane, token: str, method: str, path: str, body: dict, content_type: str = "application/json") -> tuple[int, str]:
    """One API request authenticated by ``token`` (a tenant's or a job's): (HTTP code, the API
    server's message, empty on success)."""
    import json
    import ssl

    req = urllib.request.Request(
        f"{control_plane.server}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read().decode() or "{}").get("message", "")


def lorarl_cli(*args: str, stdin: str | None = None):
    """The `lorarl` command line run in this process (click's runner: the real option parsing and
    exit codes, without a new interpreter's start-up); .exit_code, .stdout, .stderr."""
    from click.testing import CliRunner
    from lorarl.cli import main

    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2: stderr apart only when asked
    except TypeError:
        runner = CliRunner()  # click >= 8.2: always apart
    return runner.invoke(main, list(args), input=stdin, catch_exceptions=False)


def rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def api_node(kube, name: str) -> str:
    """A Node object with no kubelet behind it, so that pods bound to it are not orphans (the
    pod garbage collector deletes pods of nodes that do not exist). Cluster-scoped: the caller deletes it."""
    core = k8s.CoreV1Api(kube.client)
    try:
        core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"lorarl.dev/test": "true"})))
    except k8s.ApiException as err:
        if err.status != 409:
            raise
    return name


def gpu_pod(
    kube, namespace: str, job: str, name: str, node: str, scheduled: float, gpus: int = 8, uid_out: dict | None = None, finished: float | None = None
) -> dict:
    """A Ray pod of ``job`` as the API server holds it once the scheduler bound it and the kubelet
    reported it running: created through the API with ``nodeName`` (no scheduler), then its status
    patched as the kubelet would (PodScheduled at ``scheduled``, the container running; with
    ``finished``, already ended then: a watcher first sees it ended, as a pod whose end is in the
    past must be seen, never running after it). No kubelet runs it."""
    core = k8s.CoreV1Api(kube.client)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {render.JOB_LABEL: job}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "ray-head", "image": "job", "resources": {"requests": {"amd.com/gpu": str(gpus)}, "limits": {"amd.com/gpu": str(gpus)}}}],
        },
    }
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), timeout=30, what="the namespace's default ServiceAccount")
    core.create_namespaced_pod(namespace, body)
    state = {"running": {"startedAt": rfc3339(scheduled)}}
    if finished is not None:
        state = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": rfc3339(scheduled), "finishedAt": rfc3339(finished)}}
    status = {
        "phase": "Running" if finished is None else "Failed",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(scheduled)}],
        "containerStatuses": [{"name": "ray-head", "image": "job", "imageID": "", "ready": finished is None, "restartCount": 0, "state": state}],
    }
    return core.patch_namespaced_pod_status(name, namespace, {"status": status}).to_dict()


def end_gpu_pod(kube, namespace: str, name: str, started: float, finished: float, phase: str = "Failed") -> None:
    """The kubelet's report that the pod's container ended (its GPUs are released at ``finished``)."""
    terminated = {
        "exitCode": 1 if phase == "Failed" else 0,
        "reason": "Error" if phase == "Failed" else "Completed",
        "startedAt": rfc3339(started),
        "finishedAt": rfc3339(finished),
    }
    status = {
        "phase": phase,
        "containerStatuses": [{"name": "ray-head", "image": "job", "imageID": "", "ready": False, "restartCount": 0, "state": {"terminated": terminated}}],
    }
    k8s.CoreV1Api(kube.client).patch_namespaced_pod_status(name, namespace, {"status": status})


def ray_head_pod(kube, namespace: str, job: str, cluster: str, node: str, started: float) -> str:
    """The head pod of RayCluster ``cluster`` as KubeRay labels it (common/pod.go: ray.io/cluster,
    ray.io/node-type; render's lorarl.dev/job), created through the API bound to ``node`` (no
    scheduler or kubelet), its Ray container reported running since ``started``."""
    name = f"{cluster}-head-x7k2p"
    labels = {render.JOB_LABEL: job, "ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}
    core = k8s.CoreV1Api(kube.client)
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), timeout=30, what="the namespace's default ServiceAccount")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "automountServiceAccountToken": False, "containers": [{"name": "ray-head", "image": "job"}]},
    }
    core.create_namespaced_pod(namespace, body)
    restart_ray_head(kube, namespace, name, started, restarts=0)
    return name


def restart_ray_head(kube, namespace: str, name: str, started: float, restarts: int, ended: float | None = None, exit_code: int = 1) -> None:
    """The kubelet's report of the head's Ray container: running since ``started``; with ``ended``,
    restarted in place (restartPolicy Always) after it exited ``exit_code`` then."""
    container: dict = {
        "name": "ray-head",
        "image": "job",
        "imageID": "",
        "ready": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": rfc3339(started)}},
    }
    if ended is not None:
        container["lastState"] = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": rfc3339(ended - 60), "finishedAt": rfc3339(ended)}}
    status = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(started)}],
        "containerStatuses": [container],
    }
    k8s.CoreV1Api(kube.client).patch_namespaced_pod_status(name, namespace, {"status": status})


# ------------------------------------------------------------------ the adapter's export Job


def export_pod(kube, namespace: str, job_name: str = NAME, child: str = "export"):
    """The newest pod the real Job controller made for a job's export Job (or its load Job: child="serve")."""

    def newest():
        pods = k8s.CoreV1Api(kube.client).list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}-{child}").items
        return max(pods, key=lambda p: p.metadata.creation_timestamp) if pods else None

    return wait_for(newest, what="the export Job's pod")


def exporter_report(directory: pathlib.Path, rollout: int = 99, at_save: bool = False, **write: Any) -> str:
    """The termination message of the real exporter (lorarl.adapter.export) on a tiny save of
    ``rollout`` in miles' layout (tests/adapter/saves.py; ``write``: its write_save options, e.g.
    states=False); ``at_save``: as an export at that save (the plan names the rollout)."""
    import datetime

    from lorarl.adapter import export
    from lorarl.job import export_plan

    from tests.adapter import saves

    saves.write_save(str(directory / "ckpt"), rollout, **write)
    tiny = api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "served"}}]}))
    now = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
    the_plan = {**export_plan.export_plan(tiny), **({"rollout": rollout} if at_save else {})}
    report = export.termination_message(export.run(the_plan, saves.STATUS, str(directory / "ckpt"), now, claim_root=str(directory / "mnt")))
    return report.replace(str(directory / "ckpt"), "/root/shared_data/checkpoints")  # the save's path as the pod sees it: the same in every run


def end_export_pod(kube, namespace: str, pod, message: str, ok: bool, container_name: str | None = None, exit_code: int | None = None) -> None:
    """What the kubelet writes when the export (or load: ``container_name``) container ends: the
    pod's phase and the container's terminated state with its termination message (no kubelet
    runs it here)."""
    from lorarl.job import export_job

    terminated = {
        "exitCode": exit_code if exit_code is not None else 0 if ok else 1,
        "reason": "Completed" if ok else "Error",
        "message": message,
        "startedAt": "2026-12-04T09:00:00Z",
        "finishedAt": "2026-12-04T09:00:05Z",
    }
    container = {
        "name": container_name or export_job.CONTAINER,
        "image": "job",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }
    body = {"status": {"phase": "Succeeded" if ok else "Failed", "containerStatuses": [container]}}
    k8s.CoreV1Api(kube.client).patch_namespaced_pod_status(pod.metadata.name, namespace, body)


class ServiceNetns:
    """A network namespace of the harness with an address off loopback (``ADDRESS`` on its own
    loopback): where the tests run the servers that the export and load pods must reach, since
    those pods refuse loopback (lorarl.adapter.egress), and nothing may listen on the machine's
    own interfaces. Programs run in it with ``prefix``; the test's own sockets with ``call``."""

    ADDRESS = "10.213.0.2"

    def __init__(self, tag: str) -> None:
        from lorarl_dev.node import netns

        self.name = netns.create_owned(tag, self.ADDRESS)
        self.prefix = netns.nsenter_prefix(self.name)
        self._thread = netns.NetnsThread(self.name)

    def call(self, fn, *args, **kwargs):
        """``fn`` run in the namespace: the sockets it opens (a client's, a server's) are there."""
        return self._thread.call(fn, *args, **kwargs)

    def close(self) -> None:
        from lorarl_dev.node import netns

        self._thread.close()
        netns.delete(self.name)


def start_sglang_standin(directory: pathlib.Path, *args: str, host: str = "127.0.0.1", prefix: Sequence[str] = ()) -> tuple[subprocess.Popen, str]:
    """The SGLang stand-in (lorarl_dev/sglangstub.py) as a process on ``host``, on a free port,
    started with ``prefix`` (e.g. a :class:`ServiceNetns`'s): (process, base URL). The caller
    terminates it."""
    port_file = directory / f"sglang-port-{time.monotonic_ns()}"
    argv = [
        *prefix,
        sys.executable,
        "-m",
        "lorarl_dev.sglangstub",
        "--model-path",
        "Qwen/Qwen3-4B",
        "--host",
        host,
        "--port",
        "0",
        "--port-file",
        str(port_file),
        *args,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if port_file.exists():
            return proc, f"http://{host}:{port_file.read_text()}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    out, err = proc.communicate(timeout=10)
    raise AssertionError(f"the SGLang stand-in did not start: {out}{err}")


WRITE_VERBS = ("create", "update", "patch", "delete")


def object_writes(audit_log, resource: str, namespace: str, name: str) -> list[tuple[str, str, bool]]:
    """The write requests to one object (and its subresources) the API server recorded in its
    audit log, in order: ``(field manager, subresource, dry run)``. The field manager is the
    request's ``fieldManager`` query parameter (server-side apply and the operator's patches name
    it), else its user agent's first word (kube-controller-manager's garbage collector names none)."""
    return [(w["manager"], w["subresource"], w["dry_run"]) for w in object_writers(audit_log, resource, namespace, name)]


def object_writers(audit_log, resource: str, namespace: str, name: str) -> list[dict[str, Any]]:
    """:func:`object_writes` with who wrote: ``manager``, ``subresource``, ``dry_run``, the
    authenticated ``user`` and, for a ServiceAccount token bound to a Pod, that ``pod``'s name
    (the API server's ``authentication.kubernetes.io/pod-name`` user extra), in order."""
    from urllib.parse import parse_qs, urlsplit

    from lorarl_dev import audit

    writes = []
    for event in audit.events(audit_log):
        ref = event.get("objectRef") or {}
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
            continue
        if (ref.get("resource"), ref.get("namespace"), ref.get("name")) != (resource, namespace, name):
            continue
        query = parse_qs(urlsplit(event.get("requestURI", "")).query)
        user = event.get("user") or {}
        writes.append(
            {
                "manager": query.get("fieldManager", [""])[0] or event.get("userAgent", "").split("/")[0],
                "subresource": ref.get("subresource", ""),
                "dry_run": "dryRun" in query,
                "user": user.get("username", ""),
                "pod": ((user.get("extra") or {}).get("authentication.kubernetes.io/pod-name") or [""])[0],
            }
        )
    return writes


@contextlib.contextmanager
def operator_process(cluster, namespace: str, tmp_path, node, tail: int = 5000):
    """The operator as a real process (`lorarl run -n NAMESPACE`) for one test: its log's tail
    printed when the test failed, and a traceback in its log fails the test (as in tests/chaos)."""
    from lorarl_dev.operatorproc import OperatorProcess
    from lorarl_dev.pytest_plugin import call_failed

    op = OperatorProcess(cluster, namespace, tmp_path).start()
    yield op
    op.stop()
    if call_failed(node):
        print(op.output()[-tail:])
    op.assert_no_tracebacks()


@contextlib.contextmanager
def operator_api(cluster):
    """The operator's own API client, as admin, on ``cluster``; closed afterwards."""
    from lorarl.runtime.kube import Api

    client = cluster.api_client()
    api = Api(client)
    yield api
    api.close()


def metrics_reader_token(control_plane, namespace: str, reader: dict | None = None) -> str:
    """A token of ServiceAccount ``prometheus`` in ``namespace``, bound (ClusterRoleBinding
    ``prometheus-<namespace>``) to a metrics reader ClusterRole: ``reader`` (the chart's, where the
    test renders it) or one of the same shape (get on the nonResourceURL /metrics)."""
    reader = reader or {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"metrics-reader-{namespace}"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"prometheus-{namespace}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
    }
    control_plane.ensure_service_account(namespace, "prometheus")
    control_plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [reader, binding]}))
    return control_plane.service_account_token(namespace, "prometheus", expiration_seconds=3600)
