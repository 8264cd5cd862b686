"""The real Argo CD on the embedded control plane (no node): its application controller and repo
server (lorarl_dev.argocd) sync docs/gitops.md's `ml-team-training` Application from a repository
that Debian's git serves on 127.0.0.1 (lorarl_dev.gitserver), with our health check
(hack/argocd/lorarl.dev/LoraRLJob/health.lua) in argocd-cm; the operator runs as a process and
the KubeRay stand-in moves the RayJob.

The oracles are the API server (the job's conditions as the operator wrote them, the audit log's
writes per field manager) and git (the commit SHAs it printed), not Argo CD: the Application's
synced revision is the commit, each health Argo CD shows is read beside the job's own conditions.
Skipped with the reason when the Argo CD binaries are not built (lorarl_dev.pytest_plugin.argocd_cluster).

The states of a job's life, each printed as an `argocd:` line (the job's health and message on the
Application's status.resources[], the app's health): pending, preparing, training, succeeded;
unhealthy, failed; suspending, suspended; queued in the real Kueue and admitted; exporting,
exported, export failed (the real exporter's report).
"""

from __future__ import annotations

import copy
import json
import time
import uuid

import pytest
import yaml
from kubernetes import client as k8s
from lorarl_dev.argocd import API_VERSION, NAMESPACE, REFRESH_ANNOTATION
from lorarl_dev.gitserver import GitServer, commit_tree
from lorarl_dev.kuberay_sim import FakeKubeRay
from lorarl_dev.pytest_plugin import cluster_queue, kueue_queue_in

from tests.helpers import (
    NAME,
    conditions,
    end_export_pod,
    export_pod,
    exporter_report,
    gitops_doc_object,
    job,
    object_writes,
    operator_api,
    operator_process,
    rayjob,
    seed_doc,
    wait_for,
)

#: first sync of a fresh controller pair on a loaded 2-core machine: a bound, not a measurement
WAIT = 180
APP = "ml-team-training"
GROUP, VERSION = API_VERSION.split("/")


def application(namespace: str, url: str) -> dict:
    """docs/gitops.md's Application `ml-team-training`, changed only where this cluster differs:
    the repository at ``url`` and the destination namespace ``namespace`` (for ml-team)."""
    app = gitops_doc_object("Application", APP)
    app["spec"]["source"]["repoURL"] = url
    app["spec"]["destination"]["namespace"] = namespace
    return app


def job_tree(namespace: str, names: tuple[str, ...] = (NAME,), **spec_changes) -> dict[str, str]:
    """`jobs/ml-team` of docs/gitops.md: the seed job (in ``namespace``; one per name of
    ``names``, the seed's own first) as a plain directory (a kustomization.yaml there would make
    the repo server run the kustomize binary, which Argo CD's image ships and this machine has
    not)."""
    files = {}
    for name in names:
        doc = seed_doc()
        doc["metadata"].update(name=name, namespace=namespace)
        doc["spec"].update(copy.deepcopy(spec_changes))
        files[f"jobs/ml-team/{name}.yaml"] = yaml.safe_dump(doc)
    return files


class Argo:
    """The Application as the API server holds it, and the requests the tests make of it."""

    def __init__(self, cp):
        self.cp = cp
        self.client = cp.api_client()
        self.api = k8s.CustomObjectsApi(self.client)

    def get(self) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "applications", APP)
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise

    def status(self) -> dict:
        return (self.get() or {}).get("status") or {}

    def job_resource(self, name: str = NAME) -> dict:
        """The job's entry in status.resources[] (sync status and, with --persist-resource-health,
        the health our Lua gave it)."""
        return next((r for r in self.status().get("resources") or [] if r.get("kind") == "LoraRLJob" and r.get("name") == name), {})

    def refresh(self) -> None:
        """Ask for a refresh now, as `argocd app get --refresh` does (the controller removes the
        annotation when it has refreshed)."""
        self.cp.kubectl("annotate", "--overwrite", "-n", NAMESPACE, f"application/{APP}", f"{REFRESH_ANNOTATION}=normal")

    def refreshed(self) -> bool:
        return REFRESH_ANNOTATION not in ((self.get() or {}).get("metadata", {}).get("annotations") or {})

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def argocd_namespace(argocd_cluster):
    name = f"argo-{uuid.uuid4().hex[:6]}"
    argocd_cluster.kubectl("create", "namespace", name)
    yield name
    # the Application has no resources finalizer (as in docs/gitops.md): deleting it leaves the job
    argocd_cluster.kubectl("delete", "application", APP, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    argocd_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def argo(argocd_cluster, request):
    from lorarl_dev.pytest_plugin import call_failed

    argo = Argo(argocd_cluster)
    yield argo
    if call_failed(request.node):  # what Argo CD thought, and said
        print(f"Application status: {json.dumps(argo.status())}")
        for name in ("argocd-application-controller", "argocd-repo-server"):
            log = (argocd_cluster.workdir / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
            print(f"--- {name}:\n" + "\n".join(log[-40:]))
    argo.close()


@pytest.fixture
def argo_kube(argocd_cluster):
    with operator_api(argocd_cluster) as api:
        yield api


@pytest.fixture
def argo_operator(argocd_cluster, argocd_namespace, tmp_path, request):
    """The operator as a real process (`lorarl run -n <namespace>`), as tests/operator runs it."""
    with operator_process(argocd_cluster, argocd_namespace, tmp_path, request.node) as op:
        yield op


def job_has(kube, namespace, type_, status, reason=None, name=NAME):
    def check():
        st = (job(kube, namespace, name) or {}).get("status") or {}
        got = conditions(st).get(type_)
        return st if got and got[0] == status and (reason is None or got[1] == reason) else None

    return check


def observe(argo, kube, namespace, state: str, health: str, reason: str, seen: list, name: str = NAME, saying: str = "") -> dict:
    """Wait until Argo CD shows ``health`` for the job ``name`` with a message naming ``reason``
    (the operator's condition reason our Lua quotes) and holding ``saying``, and the app's own
    health; record the row."""

    def shown():
        resource = argo.job_resource(name).get("health") or {}
        message = resource.get("message") or ""
        return resource if resource.get("status") == health and message.startswith(reason) and saying in message else None

    resource = wait_for(shown, WAIT, 0.5, f"Argo CD showing the job {name} {health} ({reason}); it shows {argo.job_resource(name)}")
    app_health = argo.status().get("health") or {}
    st = (job(kube, namespace, name) or {}).get("status") or {}
    row = {"state": state, "job": conditions(st), "argocd": resource["status"], "message": resource.get("message"), "app": app_health.get("status")}
    if name != NAME:
        row["name"] = name
    seen.append(row)
    print(f"argocd: {state}: job {name} health {resource['status']} ({resource.get('message')}); app health {app_health.get('status')}")
    return row


def writes_by_manager(cp, namespace) -> dict[str, int]:
    tally: dict[str, int] = {}
    for manager, subresource, dry_run in object_writes(cp.audit_log_path, "lorarljobs", namespace, NAME):
        key = f"{manager} {subresource or 'object'}{' (dry run)' if dry_run else ''}"
        tally[key] = tally.get(key, 0) + 1
    return tally


def argocd_writes(cp, namespace) -> list[tuple[str, str, bool]]:
    """Writes to the job by the application controller: its server-side apply's field manager
    (argocd-controller) or its user agent."""
    return [w for w in object_writes(cp.audit_log_path, "lorarljobs", namespace, NAME) if w[0].startswith("argocd")]


def automated_syncs(cp, argo) -> list[str]:
    """The revisions of the automated syncs the application controller started for this
    Application, from the Events it records for each ("Initiated automated sync to 'SHA'",
    reason OperationStarted: util/argo/audit_logger.go, one Event each)."""
    uid = argo.get()["metadata"]["uid"]
    selector = f"involvedObject.uid={uid},reason=OperationStarted"
    events = json.loads(cp.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", selector, "-o", "json").stdout)["items"]
    return [e["message"].split("'")[1] for e in sorted(events, key=lambda e: e["metadata"]["name"]) for _ in range(e.get("count") or 1)]


def assert_writes_are_syncs(cp, argo, namespace, commits: list[str]) -> list[str]:
    """Every write Argo CD made to the job belongs to an automated sync it announced (one apply
    each), every sync was to one of ``commits``, each commit was synced, and the writes changed
    the job only as the commits did (its generation: one per commit). A commit may be synced
    twice: right after its own sync, Argo CD may start a self-heal of the same revision (the
    first self-heal attempt waits for no backoff, controller/appcontroller.go:2698-2731,
    2816-2846) and re-apply the same object; it does so with no operator running too (no other
    writer of the job): Argo CD's own, not a fight."""
    syncs = automated_syncs(cp, argo)
    writes = [w for w in argocd_writes(cp, namespace) if not w[2]]
    assert writes == [("argocd-controller", "", False)] * len(syncs), (writes, syncs)
    assert set(syncs) == set(commits), (syncs, commits)
    assert job_generation(cp, namespace) == len(commits)
    return syncs


def job_generation(cp, namespace) -> int:
    return json.loads(cp.kubectl("get", "lorarljob", NAME, "-n", namespace, "-o", "json").stdout)["metadata"]["generation"]


def start(cp, bare, namespace: str, server, tree: dict[str, str] | None = None) -> str:
    first = commit_tree(bare, tree or job_tree(namespace), "ml-team: the seed job")
    cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(application(namespace, server.url("config"))))
    return first


def to_training(kube, namespace, name: str = NAME, ray: FakeKubeRay | None = None) -> FakeKubeRay:
    """The job's RayJob brought to training as KubeRay goes (Initializing, submitted, RUNNING);
    ``ray``: a RayJob suspended by Kueue and since admitted (resumed first)."""
    if ray is not None:
        ray.resumed()
    ray = ray or FakeKubeRay(kube, namespace, name)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(job_has(kube, namespace, "Ready", "True", "Training", name), 60, 0.5, f"{name} training")
    return ray


def test_a_job_from_git_progresses_to_healthy_without_a_fight(argocd_cluster, argocd_namespace, argo, argo_kube, argo_operator, tmp_path):
    """The job's life through Argo CD: synced from Git with server-side apply, Progressing while it
    is brought up and trains, Healthy once it has succeeded; a spec change committed to Git reaches
    the operator; while it trains and Argo CD refreshes, nobody writes the job."""
    cp, ns, kube = argocd_cluster, argocd_namespace, argo_kube
    seen: list[dict] = []
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = start(cp, bare, ns, server)

        # synced at the commit git made; reconciled by the operator: Pending
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayJobCreated"), WAIT, 0.5, "the job Pending")
        synced = wait_for(lambda: (st := argo.status()).get("sync", {}).get("revision") == first and st, WAIT, 0.5, "the Application synced at the commit")
        operation = wait_for(lambda: (op := argo.status().get("operationState") or {}).get("phase") == "Succeeded" and op, WAIT, 0.5, "the sync operation done")
        assert operation["syncResult"]["revision"] == first, (synced, operation)
        assert any("/config.git/git-upload-pack" in line for line in server.requests)  # the repo server cloned from here
        managers = {m["manager"] for m in job(kube, ns)["metadata"]["managedFields"] if m["operation"] == "Apply"}
        assert "argocd-controller" in managers, managers  # ServerSideApply=true
        observe(argo, kube, ns, "pending", "Progressing", "RayJobCreated", seen)

        ray = FakeKubeRay(kube, ns, NAME)
        ray.initializing()
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayClusterInitializing"), 60, 0.5, "the job Preparing")
        observe(argo, kube, ns, "preparing", "Progressing", "RayClusterInitializing", seen)

        ray.submitted()
        ray.running()
        wait_for(job_has(kube, ns, "Ready", "True", "Training"), 60, 0.5, "the job training")
        observe(argo, kube, ns, "training", "Progressing", "Training", seen)

        # a spec change committed to Git (a mutable field), a refresh asked for at once: synced,
        # the operator observes generation 2
        started = time.monotonic()
        second = commit_tree(bare, job_tree(ns, health={"maxLogprobAbsDiff": 0.05}), "ml-team: a tighter logprob bound")
        argo.refresh()
        changed = wait_for(lambda: (st := (job(kube, ns) or {}).get("status") or {}).get("observedGeneration") == 2 and st, WAIT, 0.2, "generation 2 observed")
        commit_to_reconcile = time.monotonic() - started
        assert job(kube, ns)["spec"]["health"]["maxLogprobAbsDiff"] == 0.05
        assert conditions(changed)["Ready"] == ("True", "Training")
        wait_for(lambda: argo.status().get("sync", {}).get("revision") == second, WAIT, 0.5, "the Application synced at the second commit")
        wait_for(lambda: argo.status().get("sync", {}).get("status") == "Synced", WAIT, 0.5, "the Application Synced")
        observe(argo, kube, ns, "training (generation 2)", "Progressing", "Training", seen)
        # self-heal and the second apply left the operator's fields its own: its status stands
        owners = {(m["manager"], m.get("subresource", "")) for m in job(kube, ns)["metadata"]["managedFields"]}
        assert {("argocd-controller", ""), ("lorarl-operator", "status")} <= owners, owners

        # no fight: while the job trains, Argo CD refreshes (compares Git with the live job) three
        # times; neither Argo CD nor the operator writes the job (Argo CD diffs a server-side
        # applied object by a server-side apply dry run, which the API server does not persist),
        # the Application stays Synced
        before = object_writes(cp.audit_log_path, "lorarljobs", ns, NAME)
        syncs = argo.status()["operationState"]["startedAt"]
        for _ in range(3):
            reconciled = argo.status().get("reconciledAt")
            time.sleep(1.1)  # reconciledAt has a one-second resolution
            argo.refresh()
            wait_for(lambda reconciled=reconciled: argo.refreshed() and argo.status().get("reconciledAt") != reconciled, WAIT, 0.5, "a refresh")
            assert argo.status()["sync"]["status"] == "Synced", argo.status()["sync"]
        window = object_writes(cp.audit_log_path, "lorarljobs", ns, NAME)[len(before) :]
        assert argo.status()["operationState"]["startedAt"] == syncs  # no sync (self-heal) started
        real = [w for w in window if not w[2]]
        dry_runs = [w for w in window if w[2]]
        print(
            f"argocd: commit to the operator's reconcile of generation 2: {commit_to_reconcile:.1f} s; during 3 refreshes: {len(dry_runs)} dry runs {set(dry_runs)}, writes {real}"
        )
        assert real == [], window

        # succeeded: Healthy, and so is the app
        ray.succeeded()
        wait_for(job_has(kube, ns, "Succeeded", "True"), 60, 0.5, "the job Succeeded")
        observe(argo, kube, ns, "succeeded", "Healthy", "Succeeded", seen)
        wait_for(lambda: (argo.status().get("health") or {}).get("status") == "Healthy", WAIT, 0.5, "the Application Healthy")

    tally = writes_by_manager(cp, ns)
    syncs = assert_writes_are_syncs(cp, argo, ns, [first, second])
    print(f"argocd: writes to the job over its life, by field manager: {tally}; automated syncs: {syncs}")
    print(f"argocd: states observed: {json.dumps(seen)}")
    # Argo CD never wrote the job's status
    assert {manager for manager, subresource, _ in object_writes(cp.audit_log_path, "lorarljobs", ns, NAME) if subresource == "status"} == {
        "lorarl-operator"
    }, tally


def test_unhealthy_and_failed_jobs_are_degraded(argocd_cluster, argocd_namespace, argo, argo_kube, argo_operator, tmp_path):
    """Training turns unhealthy (the logprob mismatch over spec.health's bound, as the in-job
    reporter would write it), then the job fails (the Ray job's entrypoint exits 1): our health
    check makes it Degraded each time, with the operator's reason, and the app Degraded."""
    cp, ns, kube = argocd_cluster, argocd_namespace, argo_kube
    seen: list[dict] = []
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = start(cp, bare, ns, server)
        wait_for(lambda: argo.status().get("sync", {}).get("revision") == first, WAIT, 0.5, "the Application synced at the commit")
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayJobCreated"), WAIT, 0.5, "the job Pending")
        ray = to_training(kube, ns)
        observe(argo, kube, ns, "training", "Progressing", "Training", seen)
        kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", ns, NAME, {"metrics": {"step": 9, "trainRolloutLogprobAbsDiffMean": 0.051}})
        wait_for(job_has(kube, ns, "Stalled", "True", "LogprobDiffTooHigh"), 60, 0.5, "the job unhealthy")
        observe(argo, kube, ns, "unhealthy", "Degraded", "LogprobDiffTooHigh", seen)
        ray.app_failed()
        wait_for(job_has(kube, ns, "Failed", "True", "AppFailed"), 60, 0.5, "the job Failed")
        observe(argo, kube, ns, "failed", "Degraded", "AppFailed", seen)
        wait_for(lambda: (argo.status().get("health") or {}).get("status") == "Degraded", WAIT, 0.5, "the Application Degraded")
    syncs = assert_writes_are_syncs(cp, argo, ns, [first])
    print(f"argocd: states observed: {json.dumps(seen)}; writes by field manager: {writes_by_manager(cp, ns)}; automated syncs: {syncs}")


def test_a_suspend_committed_to_git_is_suspended(argocd_cluster, argocd_namespace, argo, argo_kube, argo_operator, tmp_path):
    """`spec.suspend: true` committed to Git: Argo CD applies it, the operator suspends the RayJob
    (Progressing while KubeRay deletes the cluster), then Suspended, and so is the app; Argo CD
    does not undo what the operator wrote (self-heal finds nothing to heal)."""
    cp, ns, kube = argocd_cluster, argocd_namespace, argo_kube
    seen: list[dict] = []
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = start(cp, bare, ns, server)
        wait_for(lambda: argo.status().get("sync", {}).get("revision") == first, WAIT, 0.5, "the Application synced at the commit")
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayJobCreated"), WAIT, 0.5, "the job Pending")
        ray = to_training(kube, ns)
        second = commit_tree(bare, job_tree(ns, suspend=True), "ml-team: suspend the run")
        argo.refresh()
        wait_for(lambda: rayjob(kube, ns)["spec"].get("suspend") is True, WAIT, 0.5, "the RayJob suspended by the operator")
        ray.suspending()
        wait_for(job_has(kube, ns, "Reconciling", "True", "Suspending"), 60, 0.5, "the job Suspending")
        observe(argo, kube, ns, "suspending", "Progressing", "Suspending", seen)
        ray.suspended()
        wait_for(job_has(kube, ns, "Suspended", "True"), 60, 0.5, "the job Suspended")
        observe(argo, kube, ns, "suspended", "Suspended", "Suspended", seen)
        wait_for(lambda: (argo.status().get("health") or {}).get("status") == "Suspended", WAIT, 0.5, "the Application Suspended")
        assert argo.status()["sync"]["revision"] == second
        assert argo.status()["sync"]["status"] == "Synced"
    syncs = assert_writes_are_syncs(cp, argo, ns, [first, second])
    print(f"argocd: states observed: {json.dumps(seen)}; writes by field manager: {writes_by_manager(cp, ns)}; automated syncs: {syncs}")


EXPORT = {"destinations": [{"claim": {"claimName": "served-adapters", "path": "team/"}}], "backoffLimit": 0}


def test_queued_in_kueue_then_exported_or_not(argocd_cluster, argocd_namespace, argo, argo_kube, argo_operator, tmp_path):
    """Two jobs with `spec.scheduling.queueName` and `spec.export` committed to Git, the real Kueue
    deciding admission: both queued behind a ClusterQueue with no GPUs (Progressing with Kueue's
    reason, not Suspended, not Degraded; the app Progressing); GPUs granted, Kueue admits both and
    they train (Progressing); the first succeeds and its adapter is exported (Progressing while
    AdapterExported is Unknown, then Healthy), the second's export fails (Degraded with the real
    exporter's reason, and the app Degraded). The export pods are ended with the real exporter's
    report (tests.helpers.exporter_report), as tests/operator/test_export_live.py does."""
    cp, ns, kube = argocd_cluster, argocd_namespace, argo_kube
    seen: list[dict] = []
    jobs = (NAME, "second")
    with kueue_queue_in(cp, ns, gpus=0) as queue, GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = start(cp, bare, ns, server, job_tree(ns, jobs, scheduling={"queueName": queue.local_queue}, export=EXPORT))
        wait_for(lambda: argo.status().get("sync", {}).get("revision") == first, WAIT, 0.5, "the Application synced at the commit")

        # KubeRay with a RayJob created suspended: Initializing, then Suspending and Suspended
        # without a cluster (rayjob_controller.go:166-180, 964-981 in v1.5.0; lorarl.control.status)
        rays = {}
        for name in jobs:
            created = wait_for(lambda name=name: rayjob(kube, ns, name), WAIT, 0.5, f"the RayJob of {name}")
            assert created["spec"]["suspend"] is True and created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue.local_queue
            rays[name] = ray = FakeKubeRay(kube, ns, name)
            ray.initializing()
            ray.suspending()
            ray.suspended()
            queued = wait_for(job_has(kube, ns, "Reconciling", "True", "Queued", name), 60, 0.5, f"{name} queued")
            assert conditions(queued)["Suspended"] == ("True", "Queued")
        # Kueue's own reason (no GPU quota), passed on once Kueue has tried to admit the Workload
        for name in jobs:
            observe(argo, kube, ns, "queued in Kueue", "Progressing", "Queued", seen, name=name, saying="amd.com/gpu")
        assert seen[-1]["app"] == "Progressing", seen[-1]

        # GPUs for both: Kueue admits the Workloads and unsuspends the RayJobs itself
        cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(cluster_queue(queue.cluster_queue, ns, gpus=16)))
        for name in jobs:
            wait_for(lambda name=name: not rayjob(kube, ns, name)["spec"].get("suspend"), 60, 0.5, f"Kueue unsuspends the RayJob of {name}")
            to_training(kube, ns, name, rays[name])
            assert conditions(job(kube, ns, name)["status"])["Admitted"] == ("True", "Admitted")
        observe(argo, kube, ns, "admitted by Kueue, training", "Progressing", "Training", seen)

        # succeeded, the adapter being exported, then exported
        rays[NAME].succeeded()
        exporting = wait_for(job_has(kube, ns, "AdapterExported", "Unknown"), 60, 0.5, "the adapter being exported")
        assert conditions(exporting)["Succeeded"][0] == "True"
        observe(argo, kube, ns, "succeeded, adapter being exported", "Progressing", conditions(exporting)["AdapterExported"][1], seen)
        (tmp_path / "ok").mkdir()
        end_export_pod(kube, ns, export_pod(kube, ns, NAME), exporter_report(tmp_path / "ok"), ok=True)
        wait_for(job_has(kube, ns, "AdapterExported", "True", "Exported"), 60, 0.5, "the adapter exported")
        observe(argo, kube, ns, "succeeded, adapter exported", "Healthy", "Succeeded", seen)

        # the second: succeeded, its export refused by the real exporter (a save without its
        # training states)
        rays["second"].succeeded()
        wait_for(job_has(kube, ns, "AdapterExported", "Unknown", name="second"), 60, 0.5, "the second adapter being exported")
        (tmp_path / "bad").mkdir()
        end_export_pod(kube, ns, export_pod(kube, ns, "second"), exporter_report(tmp_path / "bad", states=False), ok=False)
        refused = wait_for(job_has(kube, ns, "AdapterExported", "False", name="second"), 60, 0.5, "the second export failed")
        reason = conditions(refused)["AdapterExported"][1]
        observe(argo, kube, ns, "succeeded, export failed", "Degraded", reason, seen, name="second")
        wait_for(lambda: (argo.status().get("health") or {}).get("status") == "Degraded", WAIT, 0.5, "the Application Degraded")
        assert argo.job_resource().get("health", {}).get("status") == "Healthy"  # the first stays Healthy
    syncs = assert_writes_are_syncs(cp, argo, ns, [first])
    print(f"argocd: states observed: {json.dumps(seen)}; writes by field manager: {writes_by_manager(cp, ns)}; automated syncs: {syncs}")


def test_the_application_controller_listens_only_in_its_own_namespace(argocd_cluster):
    """Its metrics server binds 0.0.0.0 (no flag for the address): the harness runs it in a
    network namespace of its own. The oracle is the kernel's socket tables (`ss`), in the root
    namespace and in the controller's (/proc/PID/ns/net)."""
    import subprocess

    pid = argocd_cluster.pids["argocd-application-controller"]

    def listeners(*prefix: str) -> list[str]:
        out = subprocess.run([*prefix, "ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if f"pid={pid}," in line]

    inside = listeners("nsenter", f"--net=/proc/{pid}/ns/net", "--")
    assert inside, "the application controller listens on nothing in its namespace: not the process meant"
    assert any(line.split()[3].startswith(("*:", "0.0.0.0:")) for line in inside), inside  # it does bind everything in there
    assert listeners() == []  # and nothing in the machine's own namespace
