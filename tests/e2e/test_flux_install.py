"""Flux installs the operator, then a job that depends on it, on the real node.

docs/gitops.md's Flux objects, as the page shows them (tests.helpers.gitops_doc_object), run by
the real source-controller and kustomize-controller (lorarl_dev.flux: processes in the root
network namespace, beside the Git server of lorarl_dev.gitserver, reaching the API server through
the harness's relay): `lorarl-infra` applies `./infra` of a configuration repository (the
namespace ml-team and the GitRepository `lorarl` of an "operator repository" holding this
working tree's manifests/install); `lorarl-operator` (dependsOn lorarl-infra, wait) applies the
bundle, whose operator runs in its Pod on the real kubelet; `ml-team-training` (dependsOn
lorarl-operator, healthChecks naming the job) applies the seed job, which trains with real Ray.

The oracles are the API server (the objects, their conditions and transition times, creation
times, field managers), its audit log (who wrote the job, down to the operator's Pod by its bound
token) and KubeRay's own RayJob status (from the real Ray dashboard).

What this test changes in the page's objects, and why:

- GitRepository `config`: `spec.url`, the Git server on 127.0.0.1.
- GitRepository `lorarl` (in `./infra`): `spec.url` likewise; its `ref.tag: v0.1.0` is kept (the
  commit of manifests/install is tagged v0.1.0 in the operator repository).
- `./infra` has no HelmRepository `kuberay` and no HelmRelease `kuberay-operator`: Flux's
  helm-controller cannot be built here (the Go module proxy does not serve it). KubeRay's
  operator v1.5.1 runs as a process beside the node, its CRDs installed, as in every real-node
  test, so `lorarl-infra` is Ready without it.
- Kustomization `lorarl-operator`: `spec.images` names the operator image built here instead of
  ghcr.io/lorarl/lorarl-operator:0.1.0 (no registry), and `spec.patches` (a JSON 6902 patch that
  first tests the old value) does the same for the Deployment's `--tools-image` argument, which
  `images` does not touch.
- Kustomization `ml-team-training`: `spec.interval` 10s instead of 10m, so that Flux re-applies
  (and its writes are counted) while the job trains.
- The job in `./jobs/ml-team`: the seed manifest with the node's overrides of every e2e test
  (lorarl_dev.seedrun.seed_job: the job image, 500m CPU, 3Gi, a 1Gi volume, the Hub stand-in
  as the endpoint) in ml-team, and no kustomization.yaml in either directory (Flux generates one,
  as for the page's `./infra`).
"""

from __future__ import annotations

import datetime
import json
import time

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from lorarl_dev import seedrun
from lorarl_dev.flux import KUSTOMIZE_API_VERSION
from lorarl_dev.gitserver import GitServer, commit_tree, git
from lorarl_dev.node.realnode import NODE_NAME

from tests.e2e.conftest import MEASURED
from tests.helpers import REPO, gitops_doc_object, object_writers

pytestmark = pytest.mark.node

NAME = "qwen3-4b-lora-amd"  # the job ml-team-training's healthChecks names
JOB_NS = "ml-team"
BUNDLE = REPO / "manifests" / "install"
SHIPPED_IMAGE = "ghcr.io/lorarl/lorarl-operator:0.1.0"
OPERATOR_DEPLOYMENT = "lorarl-lorarl-operator"
OPERATOR_USER = f"system:serviceaccount:{seedrun.OPERATOR_NAMESPACE}:lorarl-lorarl-operator"
RUN_TIMEOUT = 900  # as test_seed: image unpack, Ray start and the trainer stand-in on 2 shared cores
FLUX_TIMEOUT = 300  # a bound for Flux's steps (dependsOn is re-checked every 30 s), not a measurement


def test_flux_installs_the_operator_then_the_job_that_depends_on_it(real_node_cluster, hub, node_images, flux_owns_the_operator, tmp_path):
    cp, flux_ns = real_node_cluster, flux_owns_the_operator
    revision = hub.revision({"seconds_per_rollout": 0.5})  # a run long enough (~50 s) to commit a change during it
    job = lambda **spec: seedrun.seed_job(image=node_images["job"], endpoint=hub.endpoint, name=NAME, namespace=JOB_NS, model_revision=revision, spec=spec)  # noqa: E731
    api = cp.api_client()
    watch = Watch(api, flux_ns)
    with GitServer(tmp_path / "git").running() as server:
        lorarl = server.create("lorarl")
        bundle = commit_tree(lorarl, {f"manifests/install/{p.name}": p.read_text() for p in sorted(BUNDLE.iterdir())}, "the install bundle")
        git("tag", "v0.1.0", bundle, cwd=lorarl)
        config = server.create("config")
        first = commit_tree(config, config_tree(server.url("lorarl"), job()), "infra and the ml-team job")

        flux_objects = page_flux_objects(server.url("config"), node_images["operator"])
        watch.start()
        cp.kubectl("apply", "--server-side", "-f", "-", input="\n".join(json.dumps(o) for o in flux_objects))

        # the operator installed by Flux: lorarl-operator Ready once its Deployment is Available
        watch.until("lorarl-infra Ready", lambda s: s["ready"].get("lorarl-infra"), FLUX_TIMEOUT)
        operator_ready = watch.until("lorarl-operator Ready", lambda s: s["ready"].get("lorarl-operator"), FLUX_TIMEOUT)
        deployment = watch.snapshot()["deployment"]
        assert deployment["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == "lorarl-operator", deployment["metadata"]["labels"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == node_images["operator"]
        assert container["args"][container["args"].index("--tools-image") + 1] == node_images["operator"]
        # the CRD, applied by Flux from the bundle, is marked to outlive it (kept when Flux prunes)
        crd = json.loads(cp.kubectl("get", "crd", "lorarljobs.lorarl.dev", "-o", "json", "--show-managed-fields").stdout)
        assert crd["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/prune"] == "disabled"
        assert "kustomize-controller" in {m["manager"] for m in crd["metadata"]["managedFields"] if m["operation"] == "Apply"}
        available = condition(deployment, "Available")
        assert available["status"] == "True"
        pods = watch.snapshot()["pods"]
        assert [p["spec"]["nodeName"] for p in pods] == [NODE_NAME], pods  # one replica, on the real kubelet
        pod_ready = condition(pods[0], "Ready")
        assert timestamp(available["lastTransitionTime"]) <= timestamp(operator_ready["lastTransitionTime"])
        assert timestamp(pod_ready["lastTransitionTime"]) <= timestamp(operator_ready["lastTransitionTime"])

        # ml-team-training waited on it: Flux said so while the job did not exist
        assert watch.dependency_not_ready_without_job, watch.first
        created = watch.until("the job applied", lambda s: s["job"], FLUX_TIMEOUT)
        assert timestamp(created["metadata"]["creationTimestamp"]) >= timestamp(operator_ready["lastTransitionTime"]), (created["metadata"], operator_ready)

        # reconciled by the Flux-installed operator; ml-team-training not Ready until it trains
        explain = lambda: seedrun.describe(cp, JOB_NS)  # noqa: E731
        training = watch.until("ml-team-training Ready", lambda s: s["ready"].get("ml-team-training"), RUN_TIMEOUT, explain=explain)
        assert watch.not_ready_while_bringing_up, watch.first  # seen Pending or Preparing, and not Ready then
        kustomization = watch.snapshot()["kustomizations"]["ml-team-training"]
        assert kustomization["status"]["lastAppliedRevision"] == f"main@sha1:{first}", training
        rayjob = seedrun.get(cp, "rayjob", NAME, JOB_NS)
        assert rayjob["status"]["jobStatus"] in ("RUNNING", "SUCCEEDED"), rayjob["status"]  # KubeRay's, from Ray's dashboard
        managed = json.loads(cp.kubectl("get", "lorarljob", NAME, "-n", JOB_NS, "-o", "json", "--show-managed-fields").stdout)
        assert spec_managers(managed) == {"kustomize-controller"}, managed["metadata"]["managedFields"]
        assert "lorarl-operator" in status_managers(managed), managed["metadata"]["managedFields"]

        # a spec change committed to Git, the source asked to reconcile at the commit
        assert watch.snapshot()["job"]["status"]["phase"] == "Running", "the run ended before the change could be committed"
        second = commit_tree(config, config_tree(server.url("lorarl"), job(health={"maxLogprobAbsDiff": 0.05})), "ml-team: a looser logprob bound")
        committed = time.monotonic()
        cp.kubectl("annotate", "--overwrite", "-n", flux_ns, "gitrepository/config", f"reconcile.fluxcd.io/requestedAt={time.time()}")
        seedrun.wait_for("generation 2 observed by the operator", lambda: watch.job_observed(2), FLUX_TIMEOUT, interval=0.2)
        commit_to_reconcile = time.monotonic() - committed
        watch.mark("generation 2 observed")
        assert seedrun.get(cp, "lorarljob", NAME, JOB_NS)["spec"]["health"]["maxLogprobAbsDiff"] == 0.05
        watch.until(
            "ml-team-training Ready on the second commit",
            lambda s: s["ready"].get("ml-team-training") and s["kustomizations"]["ml-team-training"]["status"]["lastAppliedRevision"] == f"main@sha1:{second}",
            FLUX_TIMEOUT,
        )

        # succeeded, and still Ready once Flux has checked it again
        status = watch.until("the job finished", lambda s: s["phase"] in ("Succeeded", "Failed") and s["job"]["status"], RUN_TIMEOUT, explain=explain)
        assert status["phase"] == "Succeeded", explain()
        assert seedrun.get(cp, "rayjob", NAME, JOB_NS)["status"]["jobStatus"] == "SUCCEEDED"
        checked = len(flux_dry_runs(cp))
        watch.until("Flux re-applied after success", lambda s: len(flux_dry_runs(cp)) > checked, FLUX_TIMEOUT, interval=2)
        watch.until("ml-team-training Ready after success", lambda s: s["ready"].get("ml-team-training"), FLUX_TIMEOUT)
        watch.mark("ml-team-training Ready after success")

    # who wrote the job: Flux the spec (once per commit), the Flux-installed operator Pod its status
    writes = object_writers(cp.audit_log_path, "lorarljobs", JOB_NS, NAME)
    tally: dict[str, int] = {}
    for w in writes:
        key = f"{w['manager']} {w['subresource'] or 'object'}{' (dry run)' if w['dry_run'] else ''}"
        tally[key] = tally.get(key, 0) + 1
    by_operator = [w for w in writes if w["user"] == OPERATOR_USER]
    assert by_operator and {w["pod"] for w in by_operator} <= watch.operator_pods, (by_operator, watch.operator_pods)
    assert {w["manager"] for w in by_operator} == {"lorarl-operator"}, by_operator
    flux_real = [w for w in writes if w["manager"] == "kustomize-controller" and not w["dry_run"]]
    assert len(flux_real) == 2, tally  # the first commit and the spec change: no re-apply fights the operator

    MEASURED.append(f"test_flux_install: seconds from applying the Flux objects to each step first seen: {json.dumps(watch.first)}")
    MEASURED.append(f"test_flux_install: from the commit of a spec.health change to the operator's reconcile of generation 2: {commit_to_reconcile:.1f} s")
    MEASURED.append(f"test_flux_install: writes to the job by field manager: {json.dumps(tally, sort_keys=True)}")
    MEASURED.append(f"test_flux_install: the operator's writes came from its Pod(s) {sorted({w['pod'] for w in by_operator})}")


# ------------------------------------------------------------------------------ the repositories


def config_tree(lorarl_url: str, job: dict) -> dict[str, str]:
    """The configuration repository: `./infra` as docs/gitops.md shows it but for the HelmRepository
    and HelmRelease of KubeRay (see the module's docstring), the GitRepository `lorarl` at
    ``lorarl_url``; `./jobs/ml-team` the job."""
    lorarl = gitops_doc_object("GitRepository", "lorarl")
    lorarl["spec"]["url"] = lorarl_url
    return {
        "infra/infra.yaml": yaml.safe_dump_all([gitops_doc_object("Namespace", JOB_NS), lorarl]),
        f"jobs/ml-team/{NAME}.yaml": yaml.safe_dump(job),
    }


def page_flux_objects(config_url: str, operator_image: str) -> list[dict]:
    """docs/gitops.md's GitRepository `config` and its three Kustomizations, changed only as the
    module's docstring lists."""
    config = gitops_doc_object("GitRepository", "config")
    config["spec"]["url"] = config_url
    infra = gitops_doc_object("Kustomization", "lorarl-infra")
    operator = gitops_doc_object("Kustomization", "lorarl-operator")
    repository, tag = operator_image.rsplit(":", 1)
    shipped_name, _ = SHIPPED_IMAGE.rsplit(":", 1)
    operator["spec"]["images"] = [{"name": shipped_name, "newName": repository, "newTag": tag}]
    operator["spec"]["patches"] = [tools_image_patch(operator_image)]
    training = gitops_doc_object("Kustomization", "ml-team-training")
    training["spec"]["interval"] = "10s"
    assert {o["apiVersion"] for o in (infra, operator, training)} == {KUSTOMIZE_API_VERSION}
    return [config, infra, operator, training]


def tools_image_patch(image: str) -> dict:
    """A JSON 6902 patch of the bundle's Deployment: its `--tools-image` argument set to
    ``image``, after a test that the argument is the shipped image (a moved argument fails the
    Kustomization instead of patching another one)."""
    objects = [o for o in yaml.safe_load_all((BUNDLE / "operator.yaml").read_text()) if o]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    path = f"/spec/template/spec/containers/0/args/{args.index('--tools-image') + 1}"
    patch = [{"op": "test", "path": path, "value": SHIPPED_IMAGE}, {"op": "replace", "path": path, "value": image}]
    return {"target": {"kind": "Deployment", "name": deployment["metadata"]["name"]}, "patch": yaml.safe_dump(patch)}


# ------------------------------------------------------------------------------ observing


class Watch:
    """Snapshots of the Kustomizations, the operator's Deployment and Pods and the job, read in
    that order (so a Kustomization seen Ready was Ready before what is read after it), with the
    checks that must hold in every snapshot and the seconds to the first sight of each step."""

    def __init__(self, api, flux_ns: str) -> None:
        self.api, self.flux_ns = api, flux_ns
        self.objects = k8s.CustomObjectsApi(api)
        self.first: dict[str, float] = {}
        self.operator_pods: set[str] = set()
        self.dependency_not_ready_without_job = False
        self.not_ready_while_bringing_up = False
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()

    def mark(self, step: str) -> None:
        self.first.setdefault(step, round(time.monotonic() - self._t0, 1))

    def snapshot(self) -> dict:
        kustomizations = {
            k["metadata"]["name"]: k
            for k in self.objects.list_namespaced_custom_object("kustomize.toolkit.fluxcd.io", "v1", self.flux_ns, "kustomizations")["items"]
        }
        ready = {name: ready_condition(k) for name, k in kustomizations.items()}
        deployment = self._read(lambda: k8s.AppsV1Api(self.api).read_namespaced_deployment(OPERATOR_DEPLOYMENT, seedrun.OPERATOR_NAMESPACE))
        pods = self.api.sanitize_for_serialization(
            k8s.CoreV1Api(self.api).list_namespaced_pod(seedrun.OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=lorarl-operator").items
        )
        job = self._read(lambda: self.objects.get_namespaced_custom_object("lorarl.dev", "v1alpha1", JOB_NS, "lorarljobs", NAME), raw=True)
        phase = ((job or {}).get("status") or {}).get("phase") or ""

        # lorarl-operator is Ready only with its Deployment Available (read after it)
        if ready.get("lorarl-operator"):
            assert deployment and condition(deployment, "Available").get("status") == "True", deployment
        # ml-team-training is Ready only while the job trains or has succeeded (read after it)
        if ready.get("ml-team-training"):
            assert phase in ("Running", "Succeeded"), (phase, job and job.get("status"))
        training_reason = condition(kustomizations.get("ml-team-training") or {}, "Ready").get("reason")
        if training_reason == "DependencyNotReady" and not job:
            self.dependency_not_ready_without_job = True
        if phase in ("Pending", "Preparing") and not ready.get("ml-team-training"):
            self.not_ready_while_bringing_up = True

        self.operator_pods |= {p["metadata"]["name"] for p in pods}
        for name, is_ready in ready.items():
            if is_ready:
                self.mark(f"{name} Ready")
        if training_reason == "DependencyNotReady":
            self.mark("ml-team-training DependencyNotReady")
        if deployment and condition(deployment, "Available").get("status") == "True":
            self.mark("operator Deployment Available")
        if any(condition(p, "Ready").get("status") == "True" for p in pods):
            self.mark("operator Pod Ready")
        if job:
            self.mark("job applied")
        if phase:
            self.mark(f"job {phase}")
        return {"kustomizations": kustomizations, "ready": ready, "deployment": deployment, "pods": pods, "job": job, "phase": phase}

    def until(self, what: str, done, timeout: float, interval: float = 1.0, explain=None):
        """Snapshots until ``done(snapshot)`` is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.snapshot()
            value = done(snap)
            if value:
                return value
            if time.monotonic() > deadline:
                detail = explain() if explain else ""
                summary = {n: condition(k, "Ready") for n, k in snap["kustomizations"].items()}
                raise AssertionError(f"{what}: not after {timeout:.0f}s; seen {self.first}; Kustomizations {summary}; job {snap['phase']!r}\n{detail}")
            time.sleep(interval)

    def job_observed(self, generation: int) -> bool:
        job = self._read(lambda: self.objects.get_namespaced_custom_object("lorarl.dev", "v1alpha1", JOB_NS, "lorarljobs", NAME), raw=True)
        return bool(job) and (job.get("status") or {}).get("observedGeneration") == generation

    def _read(self, call, raw: bool = False):
        try:
            obj = call()
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj if raw else self.api.sanitize_for_serialization(obj)


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def ready_condition(obj: dict) -> dict | None:
    """The Ready condition when it is True for the object's latest generation, else None."""
    status = obj.get("status") or {}
    found = condition(obj, "Ready")
    return found if found.get("status") == "True" and status.get("observedGeneration") == obj["metadata"]["generation"] else None


def timestamp(text) -> datetime.datetime:
    """An API server time (RFC 3339, whole seconds) as the client returns it (a str or a datetime)."""
    if isinstance(text, datetime.datetime):
        return text
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def spec_managers(obj: dict) -> set[str]:
    return {m["manager"] for m in obj["metadata"]["managedFields"] if not m.get("subresource") and "f:spec" in (m.get("fieldsV1") or {})}


def status_managers(obj: dict) -> set[str]:
    return {m["manager"] for m in obj["metadata"]["managedFields"] if m.get("subresource") == "status"}


def flux_dry_runs(cp) -> list[dict]:
    return [w for w in object_writers(cp.audit_log_path, "lorarljobs", JOB_NS, NAME) if w["manager"] == "kustomize-controller" and w["dry_run"]]
