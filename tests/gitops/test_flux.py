"""The real Flux on the embedded control plane (no node): source-controller clones a repository
that Debian's git serves on 127.0.0.1 (lorarl_dev.gitserver: git http-backend), and
kustomize-controller applies the commit's kustomization with server-side apply.

The oracles are git (the commit SHAs it printed) and the API server (the objects and their field
managers), not Flux: a GitRepository's artifact names the commit, the Kustomization's last applied
revision names it, the ConfigMap holds the data of that commit and kustomize-controller owns it.
Skipped with the reason when the Flux binaries are not built (lorarl_dev.pytest_plugin.flux_cluster).

With the operator as a process and the KubeRay stand-in, a LoraRLJob committed to Git goes through
the states of docs/status.md's table "What GitOps tools and kubectl show", each judged by
kustomize-controller's own health check (`healthChecks` naming the job, as docs/gitops.md shows
it) in a reconcile asked for after the job reached the state (GitOpsRun.verdict), or seen sitting
in that health check (GitOpsRun.waiting): queued in the real Kueue, Pending, Preparing, training,
suspending, suspended, resuming, unhealthy, suspended for its health, succeeded, exporting,
exported, export failed, failed. Each prints a `flux:` line with the job's conditions and the
Kustomization's Ready (and Healthy) condition.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
import uuid

import pytest
import yaml
from lorarl_dev.flux import KUSTOMIZE_API_VERSION, SOURCE_API_VERSION
from lorarl_dev.gitserver import GitServer, commit_tree
from lorarl_dev.kuberay_sim import FakeKubeRay
from lorarl_dev.pytest_plugin import cluster_queue, kueue_queue_in

from tests.helpers import (
    NAME,
    SEED,
    conditions,
    end_export_pod,
    export_pod,
    exporter_report,
    gitops_doc_object,
    job,
    miles_lines,
    object_writes,
    operator_api,
    operator_process,
    rayjob,
    run_reporter,
    seed_doc,
    wait_for,
)

#: first sync of a fresh controller pair on a loaded 2-core machine: a bound, not a measurement
WAIT = 180


def config_tree(**configmaps: str) -> dict[str, str]:
    """A configuration repository with one kustomization: a ConfigMap per keyword (its name) whose
    data says the keyword's value."""
    files = {}
    for name, greeting in configmaps.items():
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"greeting": greeting}}
        files[f"apps/demo/{name}.yaml"] = yaml.safe_dump(configmap)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{name}.yaml" for name in configmaps]}
    return {**files, "apps/demo/kustomization.yaml": yaml.safe_dump(kustomization)}


def flux_objects(namespace: str, url: str) -> list[dict]:
    git_repository = {
        "apiVersion": SOURCE_API_VERSION,
        "kind": "GitRepository",
        "metadata": {"name": "config", "namespace": namespace},
        "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1m", "timeout": "60s"},
    }
    kustomization = {
        "apiVersion": KUSTOMIZE_API_VERSION,
        "kind": "Kustomization",
        "metadata": {"name": "demo", "namespace": namespace},
        "spec": {
            "sourceRef": {"kind": "GitRepository", "name": "config"},
            "path": "./apps/demo",
            "targetNamespace": namespace,
            "prune": True,
            "interval": "1m",
            "timeout": "60s",
        },
    }
    return [git_repository, kustomization]


def get(cp, kind: str, namespace: str, name: str) -> dict | None:
    proc = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--show-managed-fields", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def ready(obj: dict | None) -> dict | None:
    """The object when its Ready condition is True for its latest generation, else None."""
    status = (obj or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True" and status.get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
    return None


@pytest.fixture
def flux_namespace(flux_cluster):
    name = f"flux-{uuid.uuid4().hex[:6]}"
    flux_cluster.kubectl("create", "namespace", name)
    yield name
    flux_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_a_commit_becomes_ready_and_applied(flux_cluster, flux_namespace, tmp_path):
    cp, ns = flux_cluster, flux_namespace
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = commit_tree(bare, config_tree(greeting="one"), "demo: greeting one")
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in flux_objects(ns, server.url("config"))))

        repo = wait_for(lambda: ready(get(cp, "gitrepository", ns, "config")), WAIT, 1, "the GitRepository Ready")
        assert repo["status"]["artifact"]["revision"] == f"main@sha1:{first}"
        applied = wait_for(lambda: ready(get(cp, "kustomization", ns, "demo")), WAIT, 1, "the Kustomization Ready")
        assert applied["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
        configmap = get(cp, "configmap", ns, "greeting")
        assert configmap["data"] == {"greeting": "one"}
        assert "kustomize-controller" in {m["manager"] for m in configmap["metadata"]["managedFields"] if m["operation"] == "Apply"}
        # the source-controller really cloned from this server (smart HTTP, git-upload-pack)
        assert any("/config.git/git-upload-pack" in line for line in server.requests)

        # a change committed to Git: asked to reconcile now (as `flux reconcile source git`
        # does), source-controller fetches the new commit and kustomize-controller applies it
        second = commit_tree(bare, config_tree(greeting="two"), "demo: greeting two")
        cp.kubectl("annotate", "--overwrite", "-n", ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        wait_for(
            lambda: (get(cp, "kustomization", ns, "demo") or {}).get("status", {}).get("lastAppliedRevision") == f"main@sha1:{second}",
            WAIT,
            1,
            "the second commit applied",
        )
        assert get(cp, "configmap", ns, "greeting")["data"] == {"greeting": "two"}

        # an object removed from Git is pruned (spec.prune), one added is created
        third = commit_tree(bare, config_tree(farewell="three"), "demo: greeting gone, farewell added")
        cp.kubectl("annotate", "--overwrite", "-n", ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        wait_for(
            lambda: (get(cp, "kustomization", ns, "demo") or {}).get("status", {}).get("lastAppliedRevision") == f"main@sha1:{third}",
            WAIT,
            1,
            "the third commit applied",
        )
        assert get(cp, "configmap", ns, "farewell")["data"] == {"greeting": "three"}
        wait_for(lambda: get(cp, "configmap", ns, "greeting") is None, WAIT, 1, "the pruned ConfigMap gone")


def test_the_seed_job_from_git_is_applied(flux_cluster, flux_namespace, tmp_path):
    """The seed LoraRLJob, committed to Git as the file ships, goes through kustomize-controller's
    server-side apply and the LoraRLJob CRD (no operator runs here: nothing reconciles it)."""
    cp, ns = flux_cluster, flux_namespace
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [SEED.name]}
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        commit = commit_tree(bare, {f"apps/demo/{SEED.name}": SEED.read_text(), "apps/demo/kustomization.yaml": yaml.safe_dump(kustomization)}, "the seed job")
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in flux_objects(ns, server.url("config"))))
        applied = wait_for(lambda: ready(get(cp, "kustomization", ns, "demo")), WAIT, 1, "the Kustomization Ready")
    assert applied["status"]["lastAppliedRevision"] == f"main@sha1:{commit}"
    seed = yaml.safe_load(SEED.read_text())
    job = get(cp, "lorarljob", ns, seed["metadata"]["name"])
    assert job["spec"]["model"]["name"] == seed["spec"]["model"]["name"]
    assert job["spec"]["hardware"]["accelerator"] == seed["spec"]["hardware"]["accelerator"]
    assert "kustomize-controller" in {m["manager"] for m in job["metadata"]["managedFields"] if m["operation"] == "Apply"}


# --- a LoraRLJob from Git, reconciled by the operator --------------------------------------------


@pytest.fixture
def flux_kube(flux_cluster):
    with operator_api(flux_cluster) as api:
        yield api


@pytest.fixture
def flux_operator(flux_cluster, flux_namespace, tmp_path, request):
    """The operator as a real process (`lorarl run -n <namespace>`), as tests/operator runs it."""
    with operator_process(flux_cluster, flux_namespace, tmp_path, request.node) as op:
        yield op


def job_tree(namespace: str, names: tuple[str, ...] = (NAME,), **spec_changes) -> dict[str, str]:
    """`jobs/ml-team` of docs/gitops.md: the seed job (in ``namespace``; one per name of
    ``names``, the seed's own first) and its kustomization."""
    files = {}
    for name in names:
        doc = seed_doc()
        doc["metadata"].update(name=name, namespace=namespace)
        doc["spec"].update(copy.deepcopy(spec_changes))
        files[f"jobs/ml-team/{name}.yaml"] = yaml.safe_dump(doc)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{name}.yaml" for name in names]}
    return {**files, "jobs/ml-team/kustomization.yaml": yaml.safe_dump(kustomization)}


def empty_tree(namespace: str) -> dict[str, str]:
    """The job removed from Git (a kustomization needs one resource: a ConfigMap stays)."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "placeholder", "namespace": namespace}, "data": {}}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["placeholder.yaml"]}
    return {"jobs/ml-team/placeholder.yaml": yaml.safe_dump(configmap), "jobs/ml-team/kustomization.yaml": yaml.safe_dump(kustomization)}


def training_kustomization(namespace: str, url: str, *, health: str, jobs: tuple[str, ...] = (NAME,), timeout: str = "3m") -> list[dict]:
    """docs/gitops.md's GitRepository `config` and Kustomization `ml-team-training`, changed only
    where this cluster differs: both in ``namespace`` (for flux-system and the job's ml-team), the
    repository at ``url``, no `dependsOn` (the operator runs as a process here, not from the
    `lorarl-operator` Kustomization: tests/e2e/test_flux_install.py runs that chain on the real
    node), a 10 s interval so that Flux re-applies often while the test counts writes, a
    ``timeout`` of 3 min (the page's 90 min scaled down), and prune on (the docs keep it off;
    pruning is what is tested). ``health``: "healthChecks" as the page shows it (one entry per
    job of ``jobs``, as the page's), or "wait" (its alternative)."""
    git_repository = gitops_doc_object("GitRepository", "config")
    kustomization = gitops_doc_object("Kustomization", "ml-team-training")
    for obj in (git_repository, kustomization):
        obj["metadata"]["namespace"] = namespace
    git_repository["spec"].update(url=url, timeout="60s")
    spec = kustomization["spec"]
    del spec["dependsOn"]
    spec.update(interval="10s", timeout=timeout, prune=True)
    (check,) = spec["healthChecks"]
    spec["healthChecks"] = [{**check, "name": name, "namespace": namespace} for name in jobs]
    if health == "wait":
        del spec["healthChecks"]
        spec["wait"] = True
    return [git_repository, kustomization]


def ready_condition(obj: dict | None) -> dict:
    return condition(obj, "Ready")


def condition(obj: dict | None, type_: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def job_has(kube, namespace, type_, status, reason=None, name=NAME):
    def check():
        st = (job(kube, namespace, name) or {}).get("status") or {}
        got = conditions(st).get(type_)
        return st if got and got[0] == status and (reason is None or got[1] == reason) else None

    return check


def flux_writes(cp, namespace) -> list[tuple[str, str, bool]]:
    return object_writes(cp.audit_log_path, "lorarljobs", namespace, NAME)


def said(cond: dict) -> str:
    return f"{cond.get('status')} {cond.get('reason')}: {cond.get('message')}"


class GitOpsRun:
    """A configuration repository served on loopback, with docs/gitops.md's GitRepository and
    `ml-team-training` Kustomization (training_kustomization) applied to it: commits to it, and
    Flux's word on the jobs it health-checks, taken from reconciles that kustomize-controller ran
    after the job reached the state asked about."""

    def __init__(self, cp, namespace: str, kube, bare):
        self.cp, self.ns, self.kube, self.bare = cp, namespace, kube, bare
        self.ready_seen: list[str] = []  # every Ready status read since the last `waiting`

    def commit(self, tree: dict[str, str], message: str) -> str:
        """A commit, and the GitRepository asked to fetch it now (as `flux reconcile source git`)."""
        sha = commit_tree(self.bare, tree, message)
        self.cp.kubectl("annotate", "--overwrite", "-n", self.ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        return sha

    def kustomization(self) -> dict:
        found = get(self.cp, "kustomization", self.ns, "ml-team-training") or {}
        self.ready_seen.append(ready_condition(found).get("status", ""))
        return found

    def attempted(self, sha: str) -> dict:
        revision = f"main@sha1:{sha}"
        return wait_for(lambda: (k := self.kustomization()).get("status", {}).get("lastAttemptedRevision") == revision and k, WAIT, 0.5, f"Flux applied {sha}")

    def verdict(self, state: str, name: str = NAME) -> dict:
        """Flux's Ready condition on the job in ``state`` (the job must stay there until this
        returns): a reconcile asked for now (`flux reconcile kustomization`), read once
        kustomize-controller has handled it (`status.lastHandledReconcileAt`). A reconcile that
        sits in a health check (an InProgress job) ends before the asked one begins."""
        token = f"{time.time():.6f}"
        self.cp.kubectl("annotate", "--overwrite", "-n", self.ns, "kustomization/ml-team-training", f"reconcile.fluxcd.io/requestedAt={token}")
        handled = wait_for(
            lambda: (k := self.kustomization()).get("status", {}).get("lastHandledReconcileAt") == token and k, WAIT, 0.5, f"Flux's reconcile ({state})"
        )
        self.report(state, handled, name)
        return ready_condition(handled)

    def waiting(self, state: str, name: str = NAME) -> dict:
        """Flux's word on an InProgress job: a reconcile sits in its health check (Healthy and
        Ready Unknown, Progressing) while the job is in ``state``; the caller moves the job on and
        asks for the verdict, which tells whether that wait ended Ready (``ready_seen``: each
        Ready status read from then on)."""
        found = wait_for(
            lambda: (k := self.kustomization()) and condition(k, "Healthy").get("status") == "Unknown" and ready_condition(k).get("status") == "Unknown" and k,
            WAIT,
            0.5,
            f"Flux waiting on the job ({state})",
        )
        self.ready_seen = []  # from the moment Flux is seen waiting
        self.report(state, found, name)
        return ready_condition(found)

    def report(self, state: str, kustomization: dict, name: str) -> None:
        st = (job(self.kube, self.ns, name) or {}).get("status") or {}
        shown = " ".join(f"{t}={s}({r})" for t, (s, r) in conditions(st).items() if s != "False" or t in ("TrainingHealthy", "AdapterExported"))
        healthy = condition(kustomization, "Healthy")
        print(
            f"flux: {state}: job {name} phase {st.get('phase')} [{shown}] -> Kustomization Ready={said(ready_condition(kustomization))}"
            + (f"; Healthy={said(healthy)}" if healthy and healthy.get("status") != "True" else "")
        )


@contextlib.contextmanager
def gitops_run(cp, namespace: str, kube, tmp_path, tree: dict[str, str], *, health: str = "healthChecks", jobs: tuple[str, ...] = (NAME,), timeout: str = "3m"):
    """``tree`` committed to a new repository and Flux pointed at it (training_kustomization):
    a GitOpsRun, whose first commit is ``first``."""
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        run = GitOpsRun(cp, namespace, kube, bare)
        run.first = commit_tree(bare, tree, "ml-team: the jobs")
        objects = training_kustomization(namespace, server.url("config"), health=health, jobs=jobs, timeout=timeout)
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in objects))
        yield run


def training(kube, namespace: str, name: str = NAME) -> FakeKubeRay:
    """The job's RayJob brought to training as KubeRay goes (Initializing, submitted, RUNNING)."""
    wait_for(lambda: rayjob(kube, namespace, name), WAIT, 0.5, f"the RayJob of {name}")
    ray = FakeKubeRay(kube, namespace, name)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(job_has(kube, namespace, "Ready", "True", "Training", name), 60, 0.5, f"{name} training")
    return ray


def test_a_job_from_git_trains_changes_and_is_pruned(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """The job's life through Flux (`wait: true`): applied from Git, reconciled by the operator, the
    Kustomization's health check (kstatus) not Ready while the job is brought up and Ready once it
    trains and when it has succeeded; a spec change in Git reaches the operator; Flux and the
    operator do not fight; pruning the job from Git deletes its children."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    with gitops_run(cp, ns, kube, tmp_path, job_tree(ns), health="wait") as run:
        kustomization, commit_and_request, first = run.kustomization, run.commit, run.first
        # applied by Flux, reconciled by the operator: Pending; Flux waits on the job's health
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayJobCreated"), WAIT, 0.5, "the job Pending")
        pending = run.attempted(first)
        assert ready_condition(pending)["status"] != "True", pending["status"]
        ray = FakeKubeRay(kube, ns, NAME)
        ray.initializing()
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayClusterInitializing"), 60, 0.5, "the job Preparing")
        assert ready_condition(kustomization())["status"] != "True", kustomization()["status"]

        # training: kstatus Current, the Kustomization Ready on the commit
        ray.submitted()
        ray.running()
        wait_for(job_has(kube, ns, "Ready", "True", "Training"), 60, 0.5, "the job training")
        trained = wait_for(lambda: ready(kustomization()), WAIT, 0.5, "the Kustomization Ready")
        assert trained["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
        assert "kustomize-controller" in {m["manager"] for m in get(cp, "lorarljob", ns, NAME)["metadata"]["managedFields"] if m["operation"] == "Apply"}

        # a spec change committed to Git (a mutable field): applied, the operator observes it
        started = time.monotonic()
        second = commit_and_request(job_tree(ns, health={"maxLogprobAbsDiff": 0.05}), "ml-team: a tighter logprob bound")
        changed = wait_for(lambda: (st := (job(kube, ns) or {}).get("status") or {}).get("observedGeneration") == 2 and st, WAIT, 0.2, "generation 2 observed")
        commit_to_reconcile = time.monotonic() - started
        assert job(kube, ns)["spec"]["health"]["maxLogprobAbsDiff"] == 0.05
        assert conditions(changed)["Ready"] == ("True", "Training")
        wait_for(lambda: ready(k := kustomization()) and k["status"]["lastAppliedRevision"] == f"main@sha1:{second}", WAIT, 0.5, "the second commit Ready")

        # no fight: while the job trains and Flux re-applies every 10 s, count writes to the job
        before = len(flux_writes(cp, ns))
        dry_runs = lambda: [w for w in flux_writes(cp, ns)[before:] if w[0] == "kustomize-controller" and w[2]]  # noqa: E731
        wait_for(lambda: len(dry_runs()) >= 3, 90, 1, "three re-applies by Flux")  # Flux diffs by a server-side dry run
        window = flux_writes(cp, ns)[before:]
        real = [w for w in window if not w[2]]
        print(f"flux: commit to the operator's reconcile of generation 2: {commit_to_reconcile:.1f} s; window: {len(dry_runs())} Flux dry runs, writes {real}")
        assert real == [], window

        # succeeded: still Current, still Ready after Flux has checked it again
        ray.succeeded()
        wait_for(job_has(kube, ns, "Succeeded", "True"), 60, 0.5, "the job Succeeded")
        seen = len(dry_runs())
        wait_for(lambda: len(dry_runs()) > seen, 60, 1, "a re-apply after success")
        wait_for(lambda: ready(kustomization()), 60, 0.5, "the Kustomization Ready after success")

        # pruned from Git: Flux deletes the job, the garbage collector its children
        uid = job(kube, ns)["metadata"]["uid"]
        children = [
            (o["kind"], o["metadata"]["name"])
            for o in json.loads(cp.kubectl("get", "rayjobs,persistentvolumeclaims,configmaps,secrets,jobs", "-n", ns, "-o", "json").stdout)["items"]
            if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])
        ]
        assert ("RayJob", NAME) in children, children
        third = commit_and_request(empty_tree(ns), "ml-team: the job removed")
        wait_for(lambda: job(kube, ns) is None, WAIT, 0.5, f"the job pruned (Kustomization: {ready_condition(kustomization())})")
        assert ("kustomize-controller", "", False) in [(m, s, d) for m, s, d in flux_writes(cp, ns) if m == "kustomize-controller" and not d]
        for kind, name in children:
            wait_for(lambda kind=kind, name=name: get(cp, kind.lower(), ns, name) is None, 60, 0.5, f"{kind} {name} collected")
        assert rayjob(kube, ns) is None
        wait_for(lambda: ready(k := kustomization()) and k["status"]["lastAppliedRevision"] == f"main@sha1:{third}", WAIT, 0.5, "the third commit Ready")
        assert get(cp, "configmap", ns, "placeholder") is not None
        by_manager = tally(flux_writes(cp, ns))
        print(f"flux: writes to the job over its life, by field manager: {by_manager}")
        # Flux wrote the job three times: the first commit, the spec change, the prune (a delete)
        assert by_manager["kustomize-controller object"] == 3, by_manager
        assert {manager for manager, subresource, _ in flux_writes(cp, ns) if subresource == "status"} == {"lorarl-operator"}, by_manager


def test_a_failed_job_turns_the_kustomization_not_ready(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """`healthChecks` naming the job: the job fails; kustomize-controller's health check sees
    kstatus Failed and the Kustomization turns not Ready at once (fail fast), naming the job."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    with gitops_run(cp, ns, kube, tmp_path, job_tree(ns)):
        ray = training(kube, ns)
        wait_for(lambda: ready(get(cp, "kustomization", ns, "ml-team-training")), WAIT, 0.5, "the Kustomization Ready while training")
        ray.app_failed()
        failed = wait_for(job_has(kube, ns, "Failed", "True", "AppFailed"), 60, 0.5, "the job Failed")
        not_ready = wait_for(
            lambda: (c := ready_condition(get(cp, "kustomization", ns, "ml-team-training"))).get("status") == "False" and c,
            60,
            0.5,
            "the Kustomization not Ready",
        )
    print(f"flux: failed job: Kustomization Ready=False {not_ready['reason']}: {not_ready['message']}; job conditions {conditions(failed)}")
    assert NAME in not_ready["message"] and "Failed" in not_ready["message"], not_ready


# --- the other states of a job's life, each judged by the real kustomize-controller --------------


def test_a_job_queued_in_kueue_keeps_flux_waiting_until_admitted(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """The real Kueue decides admission: a ClusterQueue with no GPUs keeps the job queued. Flux
    waits on it (InProgress) until the Kustomization's `timeout` ends the health check as not
    Ready (a timeout, not a fail-fast; here 30 s, the least kustomize-controller v1.9.6 keeps:
    15 s ran as 30 s; the page's is 90 min), then checks again at its interval; GPUs added to
    the queue, Kueue admits and unsuspends the RayJob, the run trains and the Kustomization
    turns Ready."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    with (
        kueue_queue_in(cp, ns, gpus=0) as queue,
        gitops_run(cp, ns, kube, tmp_path, job_tree(ns, scheduling={"queueName": queue.local_queue}), timeout="30s") as run,
    ):
        created = wait_for(lambda: rayjob(kube, ns), WAIT, 0.5, "the RayJob")
        assert created["spec"]["suspend"] is True and created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue.local_queue
        # KubeRay with a RayJob created suspended: Initializing, then Suspending and Suspended
        # without a cluster (rayjob_controller.go:166-180, 964-981 in v1.5.0; lorarl.control.status)
        ray = FakeKubeRay(kube, ns, NAME)
        ray.initializing()
        ray.suspending()
        ray.suspended()
        queued = wait_for(job_has(kube, ns, "Reconciling", "True", "Queued"), 60, 0.5, "the job queued")
        assert conditions(queued)["Suspended"] == ("True", "Queued")
        # Kueue's own reason (no GPU quota), passed on once Kueue has tried to admit the Workload
        wait_for(lambda: "amd.com/gpu" in condition(job(kube, ns), "Reconciling")["message"], 60, 0.5, "Kueue's reason in the job's status")
        run.waiting("queued in Kueue")
        timed_out = wait_for(lambda: (c := ready_condition(run.kustomization())).get("status") == "False" and c, WAIT, 0.5, "the health check's timeout")
        run.report("queued in Kueue past the Kustomization's timeout", run.kustomization(), NAME)
        assert timed_out["reason"] == "HealthCheckFailed" and "timeout waiting for" in timed_out["message"], timed_out
        assert f"LoraRLJob/{ns}/{NAME} status: 'InProgress'" in timed_out["message"], timed_out
        run.waiting("queued in Kueue, checked again")

        # GPUs for the queue: Kueue admits the Workload and unsuspends the RayJob itself
        cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(cluster_queue(queue.cluster_queue, ns, gpus=8)))
        wait_for(lambda: not rayjob(kube, ns)["spec"].get("suspend"), 60, 0.5, "Kueue unsuspends the RayJob")
        ray.resumed()
        ray.initializing()
        ray.submitted()
        ray.running()
        admitted = wait_for(job_has(kube, ns, "Ready", "True", "Training"), 60, 0.5, "the job training")
        assert conditions(admitted)["Admitted"] == ("True", "Admitted")
        trained = run.verdict("admitted by Kueue, training")
    assert trained["status"] == "True", trained


def test_suspend_and_resume_from_git_then_unhealthy_training(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """One job's life through commits: `spec.suspend: true` committed while it trains (Flux waits
    while KubeRay suspends it, Ready once suspended), `false` committed (waits while it
    resumes, Ready once it trains), then its own reporter reports a NaN loss (not Ready at once,
    naming the job) and `spec.health.stopOnUnhealthy: Suspend` committed (suspended for it: still
    not Ready). Flux writes the job once per commit that changes it."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    with gitops_run(cp, ns, kube, tmp_path, job_tree(ns)) as run:
        ray = training(kube, ns)
        assert run.verdict("training")["status"] == "True"

        # suspended from Git: the operator suspends the RayJob, KubeRay deletes the cluster
        run.attempted(run.commit(job_tree(ns, suspend=True), "ml-team: suspend the run"))
        wait_for(lambda: rayjob(kube, ns)["spec"].get("suspend") is True, 60, 0.5, "the operator suspends the RayJob")
        ray.suspending()
        wait_for(job_has(kube, ns, "Reconciling", "True", "Suspending"), 60, 0.5, "the job suspending")
        assert run.waiting("suspending")["status"] == "Unknown"
        ray.suspended()
        suspended = wait_for(job_has(kube, ns, "Ready", "True", "Suspended"), 60, 0.5, "the job suspended")
        assert conditions(suspended)["Suspended"] == ("True", "Suspended")
        assert run.verdict("suspended (spec.suspend: true)")["status"] == "True"
        assert "False" not in run.ready_seen, run.ready_seen  # Flux waited through suspending

        # resumed from Git: the operator unsuspends the RayJob, KubeRay starts a new cluster
        run.attempted(run.commit(job_tree(ns, suspend=False), "ml-team: resume the run"))
        wait_for(lambda: not rayjob(kube, ns)["spec"].get("suspend"), 60, 0.5, "the operator resumes the RayJob")
        wait_for(job_has(kube, ns, "Reconciling", "True", "Resuming"), 60, 0.5, "the job resuming")
        assert run.waiting("resuming")["status"] == "Unknown"
        ray.resumed()
        ray.initializing()
        ray.submitted()
        ray.running()
        wait_for(job_has(kube, ns, "Ready", "True", "Training"), 60, 0.5, "the job training again")
        assert run.verdict("training again after resume")["status"] == "True"
        assert "False" not in run.ready_seen, run.ready_seen

        # unhealthy: the shipped reporter, as the job's ServiceAccount, over miles' lines of a NaN loss
        log = "\n".join(miles_lines(0, 4, "nan")).encode() + b"\n"
        reported = run_reporter(cp, ns, NAME, tmp_path, log, total_rollouts=100)
        assert reported.returncode == 0, reported.stderr.decode()[-2000:]
        unhealthy = wait_for(job_has(kube, ns, "TrainingHealthy", "False", "NonFiniteMetric"), 60, 0.5, "TrainingHealthy False")
        assert conditions(unhealthy)["Stalled"] == ("True", "NonFiniteMetric") and unhealthy["phase"] == "Running"
        failed = run.verdict("training, unhealthy (stopOnUnhealthy: Never)")
        assert failed["status"] == "False" and failed["reason"] == "HealthCheckFailed", failed
        assert f"LoraRLJob/{ns}/{NAME}" in failed["message"] and "Failed" in failed["message"], failed

        # stopOnUnhealthy: Suspend committed: the operator suspends the run for it
        run.attempted(run.commit(job_tree(ns, suspend=False, health={"stopOnUnhealthy": "Suspend"}), "ml-team: suspend unhealthy runs"))
        wait_for(lambda: rayjob(kube, ns)["spec"].get("suspend") is True, 60, 0.5, "the operator suspends the unhealthy run")
        ray.suspending()
        ray.suspended()
        held = wait_for(job_has(kube, ns, "Suspended", "True", "HealthSuspended"), 60, 0.5, "the job suspended for its health")
        assert held["phase"] == "Suspended" and conditions(held)["Stalled"] == ("True", "NonFiniteMetric")
        failed = run.verdict("suspended for unhealthy training (stopOnUnhealthy: Suspend)")
        assert failed["status"] == "False" and failed["reason"] == "HealthCheckFailed" and f"LoraRLJob/{ns}/{NAME}" in failed["message"], failed

    writes = [w for w in flux_writes(cp, ns) if w[0] == "kustomize-controller" and not w[2]]
    print(f"flux: writes to the job by kustomize-controller over 4 commits that change it: {len(writes)}; all writes: {tally(flux_writes(cp, ns))}")
    assert len(writes) == 4, writes


def tally(writes: list[tuple[str, str, bool]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for manager, subresource, dry_run in writes:
        key = f"{manager} {subresource or 'object'}{' (dry run)' if dry_run else ''}"
        counts[key] = counts.get(key, 0) + 1
    return counts


EXPORT = {"destinations": [{"claim": {"claimName": "served-adapters", "path": "team/"}}], "backoffLimit": 0}


def test_exporting_keeps_flux_waiting_and_a_failed_export_fails_it(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """Two jobs with `spec.export`, both health-checked: the first succeeds and its adapter is
    exported (Flux waits on the export, then Ready), the second's export fails (not Ready at
    once, naming it). The export Job's pod is ended as the kubelet would end it, with the real
    exporter's report (tests.helpers.exporter_report), as tests/operator/test_export_live.py."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    jobs = (NAME, "second")
    with gitops_run(cp, ns, kube, tmp_path, job_tree(ns, jobs, export=EXPORT), jobs=jobs) as run:
        rays = {name: training(kube, ns, name) for name in jobs}
        assert run.verdict("both training")["status"] == "True"

        rays[NAME].succeeded()
        exporting = wait_for(job_has(kube, ns, "AdapterExported", "Unknown"), 60, 0.5, "the adapter being exported")
        assert conditions(exporting)["Succeeded"][0] == "True" and conditions(exporting)["Reconciling"] == ("True", "Exporting")
        assert run.waiting("succeeded, adapter being exported")["status"] == "Unknown"
        (tmp_path / "ok").mkdir()
        end_export_pod(kube, ns, export_pod(kube, ns, NAME), exporter_report(tmp_path / "ok"), ok=True)
        wait_for(job_has(kube, ns, "AdapterExported", "True", "Exported"), 60, 0.5, "the adapter exported")
        assert run.verdict("succeeded, adapter exported")["status"] == "True"
        assert "False" not in run.ready_seen, run.ready_seen

        rays["second"].succeeded()
        wait_for(job_has(kube, ns, "AdapterExported", "Unknown", name="second"), 60, 0.5, "the second adapter being exported")
        (tmp_path / "bad").mkdir()
        end_export_pod(
            kube, ns, export_pod(kube, ns, "second"), exporter_report(tmp_path / "bad", states=False), ok=False
        )  # a save without its training states
        refused = wait_for(job_has(kube, ns, "AdapterExported", "False", name="second"), 60, 0.5, "the second export failed")
        assert conditions(refused)["Stalled"] == ("True", "AdapterExportFailed") and conditions(refused)["Ready"][0] == "True"
        failed = run.verdict("succeeded, export failed", "second")
    assert failed["status"] == "False" and failed["reason"] == "HealthCheckFailed", failed
    assert f"LoraRLJob/{ns}/second" in failed["message"] and f"LoraRLJob/{ns}/{NAME} " not in failed["message"], failed
