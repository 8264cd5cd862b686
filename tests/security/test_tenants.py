"""Two tenants on the real API server, with the chart's admission policies rendered by the real
helm: a LoraRLJob may name a ServiceAccount, Secrets or a claim only when its creator may use
them (the `<release>-job-authority` policy asks the API server's authorizer about the
requester), never `default` or another job's `*-reporter` account, and priority classes and
tolerations only from the chart's allow-lists.

Tenants are ServiceAccounts with real TokenRequest tokens; the oracle is the API server's answer
to each create (dry run: the policy runs, nothing is stored)."""

from __future__ import annotations

import contextlib

import pytest
import yaml
from kubernetes import client

from tests.helpers import request_as, seed_doc, wait_for

pytestmark = pytest.mark.controlplane

POLICY = "job-authority"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
# what tenant-a may use and tenant-b may not
ACCOUNT, WANDB_SECRET, HF_SECRET, CLAIM = "trainer-a", "wandb-a", "hf-a", "data-a"


def rbac(namespace: str) -> list[dict]:
    """Both tenants may work with LoraRLJobs; tenant-a alone may use its account, Secrets and claim."""
    jobs = {"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs"], "verbs": ["create", "get", "list"]}
    own = [
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": [ACCOUNT], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [WANDB_SECRET, HF_SECRET], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "resourceNames": [CLAIM], "verbs": ["get"]},
    ]
    docs = []
    for tenant, rules in ((TENANT_A, [jobs, *own]), (TENANT_B, [jobs])):
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": tenant, "namespace": namespace}})
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": tenant, "namespace": namespace}, "rules": rules})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": tenant, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": tenant},
                "subjects": [{"kind": "ServiceAccount", "name": tenant, "namespace": namespace}],
            }
        )
    return docs


@contextlib.contextmanager
def chart_policies(helm, control_plane, namespace, *values):
    """The chart's policies of a release named after the namespace, bound to this namespace only
    (the control plane is shared by the session)."""
    docs = [d for d in helm.render(*values, namespace=namespace, release=namespace) if "ValidatingAdmissionPolicy" in d["kind"]]
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    text = yaml.safe_dump_all(docs)
    control_plane.kubectl("apply", "-f", "-", input=text)
    try:
        yield
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=text)


def create_as(control_plane, token, namespace, doc) -> tuple[int, str]:
    """A dry-run create of ``doc`` as ``token``: (HTTP code, the API server's message)."""
    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    return request_as(control_plane, token, "POST", f"/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs?dryRun=All", body)


def job_with(**spec) -> dict:
    doc = seed_doc()
    for path, value in spec.items():
        node = doc["spec"]
        *parents, leaf = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return doc


@pytest.fixture
def tenants(helm, control_plane, namespace):
    """{tenant: token}, once the API server enforces the chart's policy (observed on a probe)."""
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac(namespace)))
    tokens = {t: control_plane.service_account_token(namespace, t) for t in (TENANT_A, TENANT_B)}
    with chart_policies(helm, control_plane, namespace):
        probe = job_with(scheduling__serviceAccountName="default")
        wait_for(lambda: create_as(control_plane, tokens[TENANT_A], namespace, probe)[0] == 403, timeout=60, what="the job-authority policy")
        yield tokens


USED = [
    ("spec.scheduling.serviceAccountName", {"scheduling__serviceAccountName": ACCOUNT}),
    ("spec.tracking.wandb.apiKeySecretRef.name", {"tracking__wandb": {"apiKeySecretRef": {"name": WANDB_SECRET, "key": "k"}}}),
    ("spec.dataPrep.hfTokenSecretRef.name", {"dataPrep__hfTokenSecretRef": {"name": HF_SECRET, "key": "token"}}),
    ("spec.checkpoint.storage.existingClaim", {"checkpoint__storage": {"existingClaim": CLAIM}}),
]


@pytest.mark.parametrize(("field", "spec"), USED, ids=[f for f, _ in USED])
def test_a_job_may_use_only_what_its_creator_may_use(tenants, control_plane, namespace, field, spec):
    doc = job_with(**spec)
    code, message = create_as(control_plane, tenants[TENANT_B], namespace, doc)
    assert code == 403 and field in message and f"system:serviceaccount:{namespace}:{TENANT_B}" in message, message
    assert create_as(control_plane, tenants[TENANT_A], namespace, doc) == (201, "")


@pytest.mark.parametrize("account", ["default", "victim-reporter"])
def test_default_and_the_per_job_accounts_are_never_named(tenants, control_plane, namespace, account):
    """Not even by a tenant who may mint tokens for them (a namespace admin)."""
    core = client.RbacAuthorizationV1Api(control_plane.api_client())
    rule = client.V1PolicyRule(api_groups=[""], resources=["serviceaccounts/token"], resource_names=[account], verbs=["create"])
    core.patch_namespaced_role(TENANT_A, namespace, {"rules": [*core.read_namespaced_role(TENANT_A, namespace).rules, rule]})
    code, message = create_as(control_plane, tenants[TENANT_A], namespace, job_with(scheduling__serviceAccountName=account))
    assert code == 403 and "spec.scheduling.serviceAccountName" in message and "may not be named" in message, message


def test_priority_classes_and_tolerations_come_from_the_allow_lists(tenants, control_plane, namespace):
    token = tenants[TENANT_A]
    for spec, field in (
        ({"scheduling__priorityClassName": "system-node-critical"}, "spec.scheduling.priorityClassName"),
        ({"hardware__tolerations": [{"operator": "Exists"}]}, "spec.hardware.tolerations"),
        ({"hardware__tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}, "spec.hardware.tolerations"),
    ):
        code, message = create_as(control_plane, token, namespace, job_with(**spec))
        assert code == 403 and field in message, (spec, message)
    # the accelerator's own taint is on the default allow-list
    gpu = {"hardware__tolerations": [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert create_as(control_plane, token, namespace, job_with(**gpu)) == (201, "")
    assert create_as(control_plane, token, namespace, job_with()) == (201, "")


def test_the_allow_lists_are_the_charts_values(helm, control_plane, namespace):
    """A release that allows a priority class admits it (values rendered by the real helm)."""
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac(namespace)))
    token = control_plane.service_account_token(namespace, TENANT_B)
    with chart_policies(helm, control_plane, namespace, "--set", "admissionPolicy.allowedPriorityClasses={training}"):
        wait_for(lambda: create_as(control_plane, token, namespace, job_with(scheduling__priorityClassName="other"))[0] == 403, timeout=60, what="the policy")
        assert create_as(control_plane, token, namespace, job_with(scheduling__priorityClassName="training")) == (201, "")
