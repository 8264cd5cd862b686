"""The real Flux on the embedded control plane (no node): source-controller clones a repository
that Debian's git serves on 127.0.0.1 (lorarl_dev.gitserver: git http-backend), and
kustomize-controller applies the commit's kustomization with server-side apply.

The oracles are git (the commit SHAs it printed) and the API server (the objects and their field
managers), not Flux: a GitRepository's artifact names the commit, the Kustomization's last applied
revision names it, the ConfigMap holds the data of that commit and kustomize-controller owns it.
Skipped with the reason when the Flux binaries are not built (lorarl_dev.pytest_plugin.flux_cluster).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml
from lorarl_dev.flux import KUSTOMIZE_API_VERSION, SOURCE_API_VERSION
from lorarl_dev.gitserver import GitServer, commit_tree
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.helpers import NAME, SEED, conditions, gitops_doc_object, job, object_writes, operator_api, operator_process, rayjob, seed_doc, wait_for

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


def job_tree(namespace: str, **spec_changes) -> dict[str, str]:
    """`jobs/ml-team` of docs/gitops.md: the seed job (in ``namespace``) and its kustomization."""
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    doc["spec"].update(spec_changes)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{NAME}.yaml"]}
    return {f"jobs/ml-team/{NAME}.yaml": yaml.safe_dump(doc), "jobs/ml-team/kustomization.yaml": yaml.safe_dump(kustomization)}


def empty_tree(namespace: str) -> dict[str, str]:
    """The job removed from Git (a kustomization needs one resource: a ConfigMap stays)."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "placeholder", "namespace": namespace}, "data": {}}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["placeholder.yaml"]}
    return {"jobs/ml-team/placeholder.yaml": yaml.safe_dump(configmap), "jobs/ml-team/kustomization.yaml": yaml.safe_dump(kustomization)}


def training_kustomization(namespace: str, url: str, *, health: str) -> list[dict]:
    """docs/gitops.md's GitRepository `config` and Kustomization `ml-team-training`, changed only
    where this cluster differs: both in ``namespace`` (for flux-system and the job's ml-team), the
    repository at ``url``, no `dependsOn` (the operator runs as a process here, not from the
    `lorarl-operator` Kustomization: tests/e2e/test_flux_install.py runs that chain on the real
    node), a 10 s interval so that Flux re-applies often while the test counts writes, a 3 min
    timeout, and prune on (the docs keep it off; pruning is what is tested). ``health``:
    "healthChecks" as the page shows it, or "wait" (its alternative)."""
    git_repository = gitops_doc_object("GitRepository", "config")
    kustomization = gitops_doc_object("Kustomization", "ml-team-training")
    for obj in (git_repository, kustomization):
        obj["metadata"]["namespace"] = namespace
    git_repository["spec"].update(url=url, timeout="60s")
    spec = kustomization["spec"]
    del spec["dependsOn"]
    spec.update(interval="10s", timeout="3m", prune=True)
    for check in spec["healthChecks"]:
        check["namespace"] = namespace
    if health == "wait":
        del spec["healthChecks"]
        spec["wait"] = True
    return [git_repository, kustomization]


def ready_condition(obj: dict | None) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def job_has(kube, namespace, type_, status, reason=None):
    def check():
        st = (job(kube, namespace) or {}).get("status") or {}
        got = conditions(st).get(type_)
        return st if got and got[0] == status and (reason is None or got[1] == reason) else None

    return check


def flux_writes(cp, namespace) -> list[tuple[str, str, bool]]:
    return object_writes(cp.audit_log_path, "lorarljobs", namespace, NAME)


def test_a_job_from_git_trains_changes_and_is_pruned(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """The job's life through Flux (`wait: true`): applied from Git, reconciled by the operator, the
    Kustomization's health check (kstatus) not Ready while the job is brought up and Ready once it
    trains and when it has succeeded; a spec change in Git reaches the operator; Flux and the
    operator do not fight; pruning the job from Git deletes its children."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube

    def kustomization():
        return get(cp, "kustomization", ns, "ml-team-training")

    def commit_and_request(tree, message):
        sha = commit_tree(bare, tree, message)
        cp.kubectl("annotate", "--overwrite", "-n", ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        return sha

    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        first = commit_tree(bare, job_tree(ns), "ml-team: the seed job")
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in training_kustomization(ns, server.url("config"), health="wait")))

        # applied by Flux, reconciled by the operator: Pending; Flux waits on the job's health
        wait_for(job_has(kube, ns, "Reconciling", "True", "RayJobCreated"), WAIT, 0.5, "the job Pending")
        pending = wait_for(
            lambda: kustomization() if kustomization().get("status", {}).get("lastAttemptedRevision") == f"main@sha1:{first}" else None,
            WAIT,
            0.5,
            "Flux attempted the commit",
        )
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
        tally = {}
        for manager, subresource, dry_run in flux_writes(cp, ns):
            key = f"{manager} {subresource or 'object'}{' (dry run)' if dry_run else ''}"
            tally[key] = tally.get(key, 0) + 1
        print(f"flux: writes to the job over its life, by field manager: {tally}")
        # Flux wrote the job three times: the first commit, the spec change, the prune (a delete)
        assert tally["kustomize-controller object"] == 3, tally
        assert {manager for manager, subresource, _ in flux_writes(cp, ns) if subresource == "status"} == {"lorarl-operator"}, tally


def test_a_failed_job_turns_the_kustomization_not_ready(flux_cluster, flux_namespace, flux_kube, flux_operator, tmp_path):
    """`healthChecks` naming the job: the job fails; kustomize-controller's health check sees
    kstatus Failed and the Kustomization turns not Ready at once (fail fast), naming the job."""
    cp, ns, kube = flux_cluster, flux_namespace, flux_kube
    with GitServer(tmp_path / "git").running() as server:
        bare = server.create("config")
        commit_tree(bare, job_tree(ns), "ml-team: the seed job")
        cp.kubectl(
            "apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in training_kustomization(ns, server.url("config"), health="healthChecks"))
        )
        wait_for(lambda: rayjob(kube, ns), WAIT, 0.5, "the RayJob")
        ray = FakeKubeRay(kube, ns, NAME)
        ray.initializing()
        ray.submitted()
        ray.running()
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
