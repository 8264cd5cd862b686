"""The per-job NetworkPolicy (docs/security.md, threat model): which peers its selectors admit.

No CNI here enforces NetworkPolicy, so the pure tests evaluate the rendered policy's selectors as
the NetworkPolicy API defines them (networking.k8s.io/v1) against the label sets the pods really
carry (the pod templates' labels over KubeRay's own, as KubeRay's common/pod.go labelPod merges
them): a shape check. The real API server then admits the rendered policy for every example, and
a reconcile against it creates the policy owned by its LoraRLJob.
"""

from __future__ import annotations

import copy
import json
import pathlib
from dataclasses import dataclass, field

import pytest
from lorarl.control.reconcile import Reconciler
from lorarl.job import render
from lorarl.job.settings import DEFAULT_KUBERAY_POD_LABELS, NetworkPolicySettings, RenderSettings, parse_labels

from tests.api.apiserver import dry_run_apply
from tests.helpers import MANIFESTS, job_from, load, lorarl_cli, make_job, seed_doc

NS = "team-a"
KUBERAY_NS = "ray-system"
TWO_NODES = MANIFESTS / "mi300x-2node.yaml"  # a head and a worker group
# Ray's ports on the head: GCS, client server, dashboard, runtime-env agent, and a dynamic worker port
RAY_PORTS = (6379, 10001, 8265, 8266, 23456)


# ------------------------------------------------------------------- NetworkPolicy semantics


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector (metav1): every matchLabels pair and every matchExpression hold; {} selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:  # the API server labels every namespace with its name
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def peer_matches(peer: dict, source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod traffic is judged by the selectors here
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], source.ns_labels())
    else:
        in_namespace = source.namespace == policy_namespace  # a podSelector alone: the policy's namespace
    return in_namespace and selects(peer.get("podSelector") or {}, source.labels)


def admits(policy: dict, target: Pod, source: Pod, port: int) -> bool:
    """Whether ``policy`` lets ``source`` connect to ``target`` on TCP ``port`` (the policy alone)."""
    spec, namespace = policy["spec"], policy["metadata"]["namespace"]
    if target.namespace != namespace or not selects(spec["podSelector"], target.labels) or "Ingress" not in spec["policyTypes"]:
        return True  # not isolated by this policy
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and p.get("port") in (None, port) for p in ports):
            continue
        peers = rule.get("from")
        if not peers or any(peer_matches(p, source, namespace) for p in peers):
            return True
    return False


# ------------------------------------------------------------------------ the pods of a job


def job_in(namespace: str, name: str, path=TWO_NODES):
    doc = load(path)
    doc["metadata"].update(namespace=namespace, name=name, uid=f"uid-of-{name}")
    return job_from(doc)


def pods_of(job) -> dict[str, Pod]:
    """The head, a worker and the submitter as KubeRay makes them: its labels, then the template's."""
    spec = render.rayjob(job)["spec"]
    cluster = f"{job.metadata.name}-abcde"  # KubeRay generates the RayCluster's name from the RayJob's
    kuberay = {"ray.io/cluster": cluster, "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    [workers] = spec["rayClusterSpec"]["workerGroupSpecs"]
    submitter = spec["submitterPodTemplate"]["metadata"]["labels"]
    ns = job.metadata.namespace
    return {
        "head": Pod(ns, {**kuberay, "ray.io/node-type": "head", **head}),
        "worker": Pod(ns, {**kuberay, "ray.io/node-type": "worker", **workers["template"]["metadata"]["labels"]}),
        "submitter": Pod(ns, {"batch.kubernetes.io/job-name": job.metadata.name, **submitter}),
    }


KUBERAY = Pod(KUBERAY_NS, {"app.kubernetes.io/name": "kuberay-operator", "app.kubernetes.io/instance": "kuberay-operator"})


def policy_of(job, settings: NetworkPolicySettings | None = None) -> dict:
    [policy] = [c for c in render.render(job, RenderSettings(settings or NetworkPolicySettings())) if c["kind"] == "NetworkPolicy"]
    return policy


# -------------------------------------------------------------------------------- pure tests


def test_the_policy_isolates_the_jobs_ray_pods_for_ingress_only():
    job = job_in(NS, "mine")
    policy = policy_of(job)
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: downloads, W&B
    assert policy["metadata"]["ownerReferences"] == render.owner_references(job) != []  # garbage-collected with its job
    mine, theirs = pods_of(job), pods_of(job_in(NS, "theirs"))
    spec = policy["spec"]
    assert selects(spec["podSelector"], mine["head"].labels) and selects(spec["podSelector"], mine["worker"].labels)
    assert not selects(spec["podSelector"], mine["submitter"].labels)  # it listens on nothing
    assert not any(selects(spec["podSelector"], p.labels) for p in theirs.values())


@pytest.mark.parametrize("target", ["head", "worker"])
def test_the_jobs_own_pods_reach_its_ray_pods_on_every_port(target):
    job = job_in(NS, "mine")
    policy, pods = policy_of(job), pods_of(job)
    for source in ("head", "worker", "submitter"):
        for port in RAY_PORTS:
            assert admits(policy, pods[target], pods[source], port), (source, target, port)


@pytest.mark.parametrize("target", ["head", "worker"])
def test_other_pods_are_refused_on_every_port(target):
    job = job_in(NS, "mine")
    policy, pods = policy_of(job), pods_of(job)
    other_job = pods_of(job_in(NS, "theirs"))
    elsewhere = pods_of(job_in("team-b", "mine"))  # the same labels, another namespace
    export = Pod(NS, render.labels(job, "export"))  # the job's export Job: it reads the volume, not Ray
    strangers = [*other_job.values(), *elsewhere.values(), export, Pod(NS), Pod(NS, {"app.kubernetes.io/name": "kuberay-operator"})]
    for source in strangers:
        for port in RAY_PORTS:
            if source.labels.get("app.kubernetes.io/name") == "kuberay-operator" and port == render.DASHBOARD_PORT:
                continue  # KubeRay's labels in any namespace, by default (below)
            assert not admits(policy, pods[target], source, port), (source, target, port)


def test_kuberays_operator_reaches_the_dashboard_port_only():
    job = job_in(NS, "mine")
    policy, head = policy_of(job), pods_of(job)["head"]
    assert admits(policy, head, KUBERAY, 8265)
    for port in RAY_PORTS:
        if port != 8265:
            assert not admits(policy, head, KUBERAY, port), port
    # by default in any namespace: KubeRay's helm chart labels its pods, not its namespace
    assert admits(policy, head, Pod("anywhere", KUBERAY.labels), 8265)
    assert not admits(policy, head, Pod(KUBERAY_NS, {"app.kubernetes.io/name": "kuberay"}), 8265)


def test_kuberays_peer_is_configurable():
    job = job_in(NS, "mine")
    head = pods_of(job)["head"]
    settings = NetworkPolicySettings(kuberay_namespace_labels=parse_labels(f"kubernetes.io/metadata.name={KUBERAY_NS}"))
    policy = policy_of(job, settings)
    assert admits(policy, head, KUBERAY, 8265)
    assert not admits(policy, head, Pod("elsewhere", KUBERAY.labels), 8265)  # the namespace now counts
    kustomize = Pod(KUBERAY_NS, {"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/component": "kuberay-operator"})
    policy = policy_of(
        job, NetworkPolicySettings(kuberay_pod_labels=parse_labels("app.kubernetes.io/name=kuberay,app.kubernetes.io/component=kuberay-operator"))
    )
    assert admits(policy, head, kustomize, 8265) and not admits(policy, head, KUBERAY, 8265)
    # no pod labels and no namespace labels: every pod anywhere, on 8265 only (the setting's documented meaning)
    anyone = policy_of(job, NetworkPolicySettings(kuberay_pod_labels=()))
    assert admits(anyone, head, Pod("x"), 8265) and not admits(anyone, head, Pod("x"), 6379)


def test_kuberays_peer_is_its_namespace_only_when_named():
    """Issue 35, point 6: the chart names KubeRay's namespace (networkPolicy.kuberayOperator.namespace,
    the operator's --kuberay-operator-namespace): a pod of another namespace labelled as KubeRay's
    operator (any tenant can label its own pods so) no longer reaches another job's dashboard."""
    job = job_in(NS, "mine")
    head = pods_of(job)["head"]
    policy = policy_of(job, NetworkPolicySettings(kuberay_namespace=KUBERAY_NS))
    peer = policy["spec"]["ingress"][1]["from"][0]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NS}}, peer
    assert peer["podSelector"] == {"matchLabels": dict(DEFAULT_KUBERAY_POD_LABELS)}
    assert admits(policy, head, KUBERAY, 8265)
    for tenant in ("team-b", NS):  # another tenant's namespace, and the job's own: KubeRay's labels copied
        assert not admits(policy, head, Pod(tenant, KUBERAY.labels), 8265), tenant
    # with extra namespace labels: both hold
    both = policy_of(job, NetworkPolicySettings(kuberay_namespace=KUBERAY_NS, kuberay_namespace_labels=(("team", "ml"),)))
    assert not admits(both, head, KUBERAY, 8265) and admits(both, head, Pod(KUBERAY_NS, KUBERAY.labels, {"team": "ml"}), 8265)


def test_run_refuses_a_kuberay_namespace_that_is_no_name():
    out = lorarl_cli("run", "-A", "--kuberay-operator-namespace", "Ray_System")
    assert out.exit_code == 2 and "--kuberay-operator-namespace" in out.stderr, out.stderr


def test_turned_off_no_policy_is_rendered():
    job = job_from(seed_doc())
    kinds = [c["kind"] for c in render.render(job, RenderSettings(NetworkPolicySettings(enabled=False)))]
    assert "NetworkPolicy" not in kinds and kinds[-1] == "RayJob"
    assert [c["kind"] for c in render.render(job)][-2:] == ["NetworkPolicy", "RayJob"]  # in place before the pods


def test_label_flags_parse():
    assert parse_labels("") == () and parse_labels(" b=2, a=1 ,") == (("a", "1"), ("b", "2"))
    assert parse_labels("app.kubernetes.io/name=kuberay-operator") == DEFAULT_KUBERAY_POD_LABELS
    for bad in ("novalue", "=x"):
        with pytest.raises(ValueError):
            parse_labels(bad)


def test_run_refuses_a_label_flag_without_a_value():
    """Refused before anything connects: a wrong peer would leave KubeRay unable to poll its jobs."""
    out = lorarl_cli("run", "-A", "--kuberay-operator-pod-labels", "app.kubernetes.io/name")
    assert out.exit_code == 2 and "expected key=value" in out.stderr, out.stderr


# ----------------------------------------------------------------------- the real API server


@pytest.mark.controlplane
@pytest.mark.parametrize("example", sorted(p.name for p in MANIFESTS.glob("*.yaml")))
def test_the_api_server_admits_the_rendered_policy(kube_api, namespace, example):
    doc = load(MANIFESTS / example)
    doc["metadata"]["namespace"] = namespace
    for settings in (
        NetworkPolicySettings(),
        NetworkPolicySettings(kuberay_namespace_labels=(("kubernetes.io/metadata.name", KUBERAY_NS),), kuberay_pod_labels=()),
    ):
        policy = policy_of(job_from(copy.deepcopy(doc)), settings)
        answer = dry_run_apply(kube_api, policy)
        assert answer.accepted, answer


@pytest.mark.controlplane
def test_a_reconcile_creates_the_policy_owned_by_its_job(control_plane, namespace, kube):
    make_job(control_plane, namespace, kube, "netpol")
    live_job = kube.get("lorarl.dev/v1alpha1", "LoraRLJob", namespace, "netpol")
    policy = kube.get("networking.k8s.io/v1", "NetworkPolicy", namespace, "netpol-ray")
    [ref] = policy["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("LoraRLJob", "netpol", live_job["metadata"]["uid"], True)
    rendered = policy_of(job_from(live_job))
    assert policy["spec"] == rendered["spec"]  # stored as rendered: nothing defaulted away
    # another setting of the reconciler reaches the live policy
    Reconciler(kube, render_settings=RenderSettings(NetworkPolicySettings(kuberay_namespace_labels=(("team", "ray"),)))).reconcile(namespace, "netpol")
    policy = kube.get("networking.k8s.io/v1", "NetworkPolicy", namespace, "netpol-ray")
    assert policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"] == {"matchLabels": {"team": "ray"}}


def test_the_head_pods_the_real_kubelet_ran_are_isolated_and_admitted_as_their_jobs_own():
    """The oracle is the pods the real node ran (KubeRay's labels merged into the template's by
    KubeRay itself, recorded from the kubelet: tests/operator/recorded_pods), not the render's own
    label function: each head is protected by its job's policy and may reach its own job's pods."""
    recorded = sorted((pathlib.Path(__file__).parents[1] / "operator" / "recorded_pods").glob("*.json"))
    assert recorded
    for path in recorded:
        pod = json.loads(path.read_text())
        meta = pod["metadata"]
        if meta["labels"].get("ray.io/node-type") != "head":
            continue
        job = job_in(meta["namespace"], meta["labels"][render.JOB_LABEL])
        policy, real = policy_of(job), Pod(meta["namespace"], meta["labels"])
        assert selects(policy["spec"]["podSelector"], real.labels), path.name
        assert admits(policy, pods_of(job)["worker"], real, 6379), path.name  # the real head reaches its worker
        assert not admits(policy, real, Pod("elsewhere", {}), 8265), path.name
