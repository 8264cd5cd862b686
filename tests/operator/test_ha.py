"""High availability on the real API server: two `lorarl run --leader-elect` replicas.

The oracle for "only the holder writes" is the API server itself: a validating admission webhook
(allow-all, failurePolicy Fail, this namespace only) records every write the API server admits
with the *authenticated user* the server attaches to it (AdmissionReview request.userInfo). Each
replica runs with its own ServiceAccount token, so a write's author is known without trusting
anything the operator says about itself (field managers, event sources and logs are all set by
the operator, and are the same for both replicas).
"""

from __future__ import annotations

import collections
import copy
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from kubernetes import client as k8s
from lorarl.runtime import leader
from lorarl_dev.certs import TinyCA
from lorarl_dev.kuberay_sim import FakeKubeRay
from lorarl_dev.processes import free_port
from lorarl_dev.pytest_plugin import call_failed

from tests.chart.helm import operator_rbac
from tests.helpers import NAME, apply_job, http_get, phase_is, rayjob, seed_doc, wait_for
from tests.operator.conftest import OperatorProcess

pytestmark = pytest.mark.controlplane

LEASE = "lorarl-operator"
TIMINGS = ["--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1"]


# -- the oracle: who wrote what, as the API server saw it ----------------------------------------


class AdmissionRecorder:
    """An allow-all validating webhook for one namespace that records each admitted write."""

    def __init__(self, control_plane, namespace, workdir):
        self.control_plane, self.namespace = control_plane, namespace
        self.records: list[dict] = []
        self._lock = threading.Lock()
        ca = TinyCA()
        pair = ca.serving_cert("admission-recorder", ["127.0.0.1"])
        crt, key = pair.write(workdir, "admission-recorder")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder._record(review["request"])
                body = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": review["request"]["uid"], "allowed": True}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.config_name = f"lorarl-recorder-{namespace}"
        self.control_plane.kubectl(
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump(
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": self.config_name},
                    "webhooks": [
                        {
                            "name": "recorder.lorarl.dev",
                            "clientConfig": {
                                "url": f"https://127.0.0.1:{self._server.server_address[1]}/",
                                "caBundle": __import__("base64").b64encode(ca.cert_pem).decode(),
                            },
                            "rules": [
                                {
                                    "operations": ["CREATE", "UPDATE", "DELETE"],
                                    "apiGroups": ["*"],
                                    "apiVersions": ["*"],
                                    "resources": ["*/*"],
                                    "scope": "Namespaced",
                                }
                            ],
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                            "failurePolicy": "Fail",  # a write the recorder did not see is a write refused
                            "sideEffects": "None",
                            "admissionReviewVersions": ["v1"],
                            "timeoutSeconds": 10,
                        }
                    ],
                }
            ),
        )
        # the API server picks the configuration up asynchronously: wait until a write is seen
        core = k8s.CoreV1Api(control_plane.api_client())
        for i in range(300):
            core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=f"recorder-probe-{i}")))
            if any(r["name"] == f"recorder-probe-{i}" for r in self.snapshot()):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the admission recorder never saw a write")

    def _record(self, request: dict) -> None:
        obj = request.get("object") or request.get("oldObject") or {}
        meta = obj.get("metadata") or {}
        with self._lock:
            self.records.append(
                {
                    "at": time.monotonic(),
                    "user": request["userInfo"]["username"],
                    "operation": request["operation"],
                    "resource": request["resource"]["resource"] + (f"/{request['subResource']}" if request.get("subResource") else ""),
                    "name": request.get("name") or meta.get("name") or meta.get("generateName", ""),
                    "about": (obj.get("involvedObject") or {}).get("name"),  # an Event's object
                    "holder": (obj.get("spec") or {}).get("holderIdentity") if request["resource"]["resource"] == "leases" else None,
                }
            )

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.records)

    def writes_by(self, user: str, leases: bool = False) -> list[dict]:
        return [r for r in self.snapshot() if r["user"] == user and (leases or r["resource"] != "leases")]

    def close(self) -> None:
        self.control_plane.kubectl("delete", "validatingwebhookconfiguration", self.config_name, "--ignore-not-found")
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def recorder(control_plane, namespace, tmp_path):
    rec = AdmissionRecorder(control_plane, namespace, tmp_path)
    yield rec
    rec.close()  # before the namespace goes: its deletions must not meet a dead webhook


# -- two replicas, each with its own ServiceAccount ---------------------------------------------


LEASE_BINDING = "ha-lorarl-operator-leader-election"  # the chart's Lease RoleBinding for release "ha"


def grant(control_plane, helm, namespace, accounts):
    """The chart's RBAC (namespaced watch of ``namespace``, its Lease Role there) bound to each
    account, so every replica has exactly what a chart-installed operator has."""
    docs = operator_rbac(helm, namespace, release="ha", watch_namespaces=[namespace])
    subjects = [{"kind": "ServiceAccount", "name": a, "namespace": namespace} for a in accounts]
    bound = []
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            continue
        doc = copy.deepcopy(doc)
        if doc["kind"].startswith("Cluster"):  # cluster-scoped names must not collide between tests
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
            if "roleRef" in doc:
                doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        if "subjects" in doc:
            doc["subjects"] = subjects
        bound.append(doc)
    assert any(d["kind"] == "RoleBinding" and d["metadata"]["name"] == LEASE_BINDING for d in bound), [d["metadata"]["name"] for d in bound]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(bound))
    return {a: control_plane.restricted_kubeconfig(namespace, a) for a in accounts}


class Replica(OperatorProcess):
    """`lorarl run` as one replica: its own ServiceAccount, POD_NAME, probe port and log."""

    def __init__(self, control_plane, namespace, tmp_path, pod, kubeconfig=None, extra=(), log_format="plain"):
        super().__init__(control_plane, namespace, tmp_path)
        self.pod, self.kubeconfig, self.extra, self.log_format = pod, kubeconfig, list(extra), log_format
        self.log_path = tmp_path / f"{pod}.log"
        self.port, self.metrics_port = free_port(), free_port()
        self.user = f"system:serviceaccount:{namespace}:{pod}"

    def start(self):
        env = {**os.environ, **self.control_plane.env(), "POD_NAME": self.pod}
        if self.kubeconfig:
            env["KUBECONFIG"] = str(self.kubeconfig)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lorarl.cli",
                "run",
                "-n",
                self.namespace,
                "--liveness",
                f"http://127.0.0.1:{self.port}/healthz",
                "--metrics-port",
                str(self.metrics_port),
                "--metrics-auth",
                "none",  # the leader gauge, not the auth (test_metrics_auth.py)
                "--resync-seconds",
                "1",
                "--log-format",
                self.log_format,
                *self.extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        return self

    def leading(self):
        """The lorarl_leader gauge this replica exports (None before it serves metrics)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        return next(float(line.split()[1]) for line in text.splitlines() if line.startswith("lorarl_leader "))

    def probe(self, path):
        return http_get(self.port, path)


@pytest.fixture
def replicas(control_plane, helm, namespace, tmp_path, request):
    kubeconfigs = grant(control_plane, helm, namespace, ["op-a", "op-b"])
    election = ["--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", LEASE, *TIMINGS]
    pair = {pod: Replica(control_plane, namespace, tmp_path, pod, kubeconfigs[pod], election).start() for pod in ("op-a", "op-b")}
    yield pair
    for r in pair.values():
        r.stop()
    if call_failed(request.node):
        for r in pair.values():
            print(f"--- {r.pod} ---\n{r.output()[-4000:]}")


def lease(kube, namespace):
    try:
        return k8s.CoordinationV1Api(kube.client).read_namespaced_lease(LEASE, namespace).spec
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise


def holder_pod(kube, namespace):
    spec = lease(kube, namespace)
    return (spec.holder_identity or "").split("_")[0] if spec else ""


def leader_and_standby(kube, namespace, replicas):
    pod = wait_for(lambda: holder_pod(kube, namespace), timeout=60, what="a lease holder")
    other = next(p for p in replicas if p != pod)
    return replicas[pod], replicas[other]


def apply_named(control_plane, namespace, name):
    doc = seed_doc()
    doc["metadata"]["name"] = name
    apply_job(control_plane, namespace, doc)


def event_counts(kube, namespace):
    """(job, reason) -> how many Events the API server holds; kopf's own "Logging" events
    (handler successes) are not the operator's phase events and are left out."""
    items = k8s.CoreV1Api(kube.client).list_namespaced_event(namespace, field_selector="involvedObject.kind=LoraRLJob").items
    return collections.Counter((e.involved_object.name, e.reason) for e in items if e.reason != "Logging")


# -- the tests -----------------------------------------------------------------------------------


def test_one_leader_writes_and_a_killed_leader_is_replaced(control_plane, namespace, kube, recorder, replicas):
    first, standby = leader_and_standby(kube, namespace, replicas)
    wait_for(lambda: f"is held by {lease(kube, namespace).holder_identity}" in standby.output(), what="the standby saw the holder")
    assert lease(kube, namespace).lease_transitions == 0
    jobs = ["job-0", "job-1", "job-2"]
    for name in jobs:
        apply_named(control_plane, namespace, name)
    for name in jobs:
        wait_for(phase_is(kube, namespace, "Pending", name=name), timeout=60, what=f"{name} reconciled")
    # the Event follows the status write (best effort: a crash between the two loses it)
    wait_for(lambda: all(event_counts(kube, namespace)[(n, "Pending")] for n in jobs), what="a Pending event of each job")
    # the API server saw the leader's account write the children, statuses and events, and not
    # one write from the standby's account (at most a create of the Lease that lost the race at
    # start-up)
    written = {(r["resource"], r["name"]) for r in recorder.writes_by(first.user)}
    for name in jobs:
        assert ("rayjobs", name) in written and ("lorarljobs/status", name) in written
    assert recorder.writes_by(standby.user) == []
    assert {r["operation"] for r in recorder.writes_by(standby.user, leases=True)} <= {"CREATE"}

    first.kill(signal.SIGKILL)
    killed = time.monotonic()
    apply_named(control_plane, namespace, "job-3")  # a job created while nobody leads
    jobs.append("job-3")
    wait_for(lambda: holder_pod(kube, namespace) == standby.pod, timeout=60, interval=0.05, what="the standby took over")
    takeover = time.monotonic() - killed
    print(f"\nSIGKILL takeover: {takeover:.2f}s (lease duration 6s, retry period 1s)")
    assert lease(kube, namespace).lease_transitions == 1

    for name in jobs:
        wait_for(phase_is(kube, namespace, "Pending", name=name), timeout=60, what=f"{name} converged")
    assert sorted(r["metadata"]["name"] for r in kube.list("ray.io/v1", "RayJob", namespace)) == jobs
    # every phase event once, although two replicas handled the jobs: first see the new leader
    # reconcile every job (it would post a duplicate then), then count
    wait_for(lambda: all(f"[{namespace}/{name}] reconcile " in standby.output() for name in jobs), timeout=60, what="the new leader reconciled every job")
    wait_for(lambda: event_counts(kube, namespace)[("job-3", "Pending")], what="job-3's Pending event")
    counts = event_counts(kube, namespace)
    assert set(counts.values()) == {1}, counts
    # job-3 was written by the new leader only
    job3 = {r["user"] for r in recorder.snapshot() if "job-3" in (r["name"], r["about"]) and r["user"].startswith("system:serviceaccount:")}
    assert job3 == {standby.user}


def test_sigterm_releases_the_lease_and_both_replicas_answer_probes(control_plane, namespace, kube, recorder, replicas):
    first, standby = leader_and_standby(kube, namespace, replicas)
    # readiness: the standby at once, the leader once kopf runs; liveness on both
    wait_for(lambda: first.probe("/readyz")[0] == 200, timeout=60, what="leader ready")
    wait_for(lambda: standby.probe("/readyz")[0] == 200, what="standby ready")
    status, text = first.probe("/healthz")
    assert status == 200 and text.startswith("leader: kopf alive"), text
    assert standby.probe("/healthz") == (200, "standby: alive\n")
    assert "standby" in standby.probe("/readyz")[1] and "leader: watching" in first.probe("/readyz")[1]
    assert first.probe("/nope")[0] == 404
    # both serve metrics (the metrics server starts just after the probes: wait for it)
    wait_for(lambda: (first.leading(), standby.leading()) == (1.0, 0.0), what="lorarl_leader on both replicas")

    apply_named(control_plane, namespace, "job-a")
    wait_for(phase_is(kube, namespace, "Pending", name="job-a"), timeout=60, what="job-a reconciled by the leader")

    first.proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    wait_for(lambda: holder_pod(kube, namespace) == standby.pod, timeout=60, interval=0.05, what="the standby took over")
    takeover = time.monotonic() - stopped
    print(f"\nSIGTERM takeover: {takeover:.2f}s (lease duration 6s, retry period 1s)")
    assert first.proc.wait(timeout=30) == 0
    # the API server saw the old leader clear holderIdentity (the release) before the new holder
    lease_writes = [r for r in recorder.snapshot() if r["resource"] == "leases" and r["operation"] == "UPDATE"]
    release = next(i for i, r in enumerate(lease_writes) if r["user"] == first.user and r["holder"] == "")
    taken = next(i for i, r in enumerate(lease_writes) if r["user"] == standby.user and (r["holder"] or "").startswith(standby.pod))
    assert release < taken
    assert "released the lease" in first.output()

    wait_for(lambda: standby.probe("/readyz") == (200, "leader: watching\n"), timeout=60, what="the new leader ready")
    assert standby.leading() == 1.0
    apply_named(control_plane, namespace, "job-b")
    wait_for(phase_is(kube, namespace, "Pending", name="job-b"), timeout=60, what="job-b reconciled by the new leader")
    assert {r["user"] for r in recorder.snapshot() if r["name"] == "job-b" and r["resource"] == "rayjobs"} == {standby.user}


def test_a_conflicting_write_loses_and_a_leader_that_sees_another_holder_stops(control_plane, namespace, kube):
    """Two electors in this process, on the real Lease, with fake clocks: the API server's
    resourceVersion check decides a race, expiry follows our own clock, and the old leader
    notices the new holder."""
    clocks = {"a": 1000.0, "b": 1000.0}
    timings = leader.Timings(15, 10, 2)
    a = leader.LeaseElector(kube.client, namespace, LEASE, "a_1", timings, clock=lambda: clocks["a"])
    b = leader.LeaseElector(kube.client, namespace, LEASE, "b_1", timings, clock=lambda: clocks["b"])
    assert a.try_acquire_or_renew() and lease(kube, namespace).holder_identity == "a_1"
    assert not b.try_acquire_or_renew()  # held and, by b's clock, not expired
    clocks["b"] += 14.9
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # a renews: b's clock restarts at the change it sees
    clocks["b"] += 14.9
    assert not b.try_acquire_or_renew()
    clocks["b"] += 15  # a's lease ran out on b's clock: b takes over
    assert b.try_acquire_or_renew() and lease(kube, namespace).holder_identity == "b_1"
    assert lease(kube, namespace).lease_transitions == 1
    # a still believes it leads: its renewal PUTs the resourceVersion it last wrote, the API
    # server answers 409, a re-reads and sees b
    with pytest.raises(leader.LeadershipLost, match="held by b_1"):
        a.try_acquire_or_renew()
    assert lease(kube, namespace).holder_identity == "b_1"
    assert b.release() and lease(kube, namespace).holder_identity in ("", None)
    assert a.try_acquire_or_renew()  # a released lease is free at once, whatever the clock says
    assert lease(kube, namespace).lease_transitions == 2


@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_log_lines_name_their_object(control_plane, namespace, kube, tmp_path, log_format):
    op = Replica(control_plane, namespace, tmp_path, "op", log_format=log_format).start()
    try:
        apply_job(control_plane, namespace, seed_doc())
        wait_for(lambda: rayjob(kube, namespace), timeout=60, what="the RayJob")
        FakeKubeRay(kube, namespace, NAME).initializing()
        wait_for(phase_is(kube, namespace, "Preparing"), timeout=60, what="Preparing")
        wait_for(lambda: "(rayjob-event)" in op.output() or '"trigger": "rayjob-event"' in op.output(), what="a RayJob-triggered reconcile logged")
        wait_for(lambda: "(resync)" in op.output() or '"trigger": "resync"' in op.output(), what="a resync reconcile logged")
    finally:
        op.stop()
    lines = [line for line in op.output().splitlines() if line.strip()]
    about_the_job = [line for line in lines if NAME in line or "Handler '" in line or "reconcile" in line.lower()]
    assert len(about_the_job) >= 3, lines  # change, rayjob-event, resync
    if log_format == "plain":
        for line in about_the_job:
            assert line.startswith(f"[{namespace}/{NAME}] "), line
        reconciles = [line for line in about_the_job if "] reconcile " in line]
    else:
        records = [json.loads(line) for line in about_the_job]
        for rec in records:
            assert rec.get("object", {}).get("namespace") == namespace and rec["object"]["name"] == NAME, rec
        reconciles = [rec for rec in records if "reconcile_id" in rec]
        for rec in reconciles:
            assert isinstance(rec["duration"], float) and len(rec["reconcile_id"]) == 8
            assert rec["trigger"] in ("change", "job-event", "rayjob-event", "resync", "timer", "retry")
            assert {"phase", "applied", "status_written"} <= rec.keys()
        assert any(r["trigger"] == "change" and r["applied"] == 7 for r in reconciles)
        assert len({r["reconcile_id"] for r in reconciles}) == len(reconciles)
    assert reconciles


@pytest.mark.parametrize("how", ["another-holder", "renew-deadline"])
def test_a_leader_that_loses_the_lease_exits(control_plane, helm, namespace, kube, tmp_path, how):
    kubeconfigs = grant(control_plane, helm, namespace, ["op-a"])
    election = ["--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", LEASE, *TIMINGS]
    op = Replica(control_plane, namespace, tmp_path, "op-a", kubeconfigs["op-a"], election).start()
    try:
        wait_for(lambda: op.probe("/readyz") == (200, "leader: watching\n"), timeout=60, what="op-a leading")
        leases = k8s.CoordinationV1Api(kube.client)
        if how == "another-holder":  # someone else wrote the Lease (e.g. it was taken while we were stalled)
            leases.patch_namespaced_lease(LEASE, namespace, {"spec": {"holderIdentity": "intruder_1"}})
            expected = "lost leadership: the lease .* is now held by intruder_1"
        else:  # the Lease cannot be renewed any more: its RBAC is revoked, every renewal is a 403
            control_plane.kubectl("delete", "rolebinding", LEASE_BINDING, "-n", namespace)
            expected = "lost leadership: could not renew the lease .* for 4s: 403 .*forbidden"
        assert op.proc.wait(timeout=60) == 1
    finally:
        op.stop()
    assert re.search(expected, op.output()), op.output()[-2000:]
