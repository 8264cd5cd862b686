"""Two tenants on the real API server, with the chart's admission policies rendered by the real
helm: a LoraRLJob may name a ServiceAccount, a Secret or a claim only when the user who creates
or changes it may use them (the `<release>-job-authority` policy asks the API server's authorizer
about the requester, for every field of lorarl.api.references.REFERENCES), never `default` or
another job's `*-reporter` account, and priority classes and tolerations only from the chart's
allow-lists.

Tenants are ServiceAccounts with real TokenRequest tokens; the oracle is the API server's answer
to each create or patch (dry run: the policy runs, nothing is stored).

The reference checks run against a namespaced install as the chart renders it (its bindings
select the watched namespace); the other tests against the cluster-wide render, its bindings
confined to the test's namespace (the control plane is shared). The two renders' policies are the
same (tests/chart/test_chart.py)."""

from __future__ import annotations

import contextlib
import copy
import uuid

import pytest
import yaml
from kubernetes import client
from lorarl.api.references import REFERENCES, Reference
from lorarl.api.types import IMMUTABLE_FIELDS

from tests.chart.helm import cluster_role
from tests.helpers import request_as, seed_doc, wait_for

pytestmark = pytest.mark.controlplane

POLICY = "job-authority"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
# what tenant-a may use and tenant-b may not
ACCOUNT, WANDB_SECRET, HF_SECRET, CLAIM = "trainer-a", "wandb-a", "hf-a", "data-a"
SECRET = "secret-a"  # the name every other Secret reference uses
# what neither may use: a changed reference names it
OTHER_SECRET, OTHER_CLAIM, OTHER_ACCOUNT = "secret-c", "data-c", "trainer-c"


def rbac(namespace: str) -> list[dict]:
    """Both tenants may work with LoraRLJobs; tenant-a alone may use its account, Secrets and claim."""
    jobs = {"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs"], "verbs": ["create", "get", "list", "patch"]}
    own = [
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": [ACCOUNT], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [WANDB_SECRET, HF_SECRET, SECRET], "verbs": ["get"]},
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


# ------------------------------------------------- every reference, on create and on update

#: what a destination or section needs besides the reference (the CRD requires it)
REQUIRED = {
    "spec.export.destinations[].s3": {"bucket": "adapters"},
    "spec.export.destinations[].oci": {"repository": "registry.example/adapters"},
    "spec.export.destinations[].hub": {"repo": "org/adapter"},
    "spec.serve": {"url": "http://sglang.serving:30000", "adapterPath": "/adapters/job"},
}
PUBLIC = {"s3": {"bucket": "public"}}  # a destination that names nothing (the pod's own identity)


def usable(ref: Reference) -> str:
    """The name tenant-a may use for ``ref`` (tenant-b may not)."""
    return {"ServiceAccount": ACCOUNT, "PersistentVolumeClaim": CLAIM}.get(ref.kind, SECRET)


def unusable(ref: Reference) -> str:
    return {"ServiceAccount": OTHER_ACCOUNT, "PersistentVolumeClaim": OTHER_CLAIM}.get(ref.kind, OTHER_SECRET)


def nested(path: str, keys: list[str], name: str) -> dict:
    """{keys[0]: {...: name}} with what the CRD requires on the way (a SecretKeyRef's key too)."""
    node: dict = {}
    top = node
    for key in keys[:-1]:
        path += f".{key}"
        node[key] = copy.deepcopy(REQUIRED.get(path, {}))
        node = node[key]
    node[keys[-1]] = name
    if keys[-1] == "name":
        node["key"] = "k"
    return top


def merge(into: dict, new: dict) -> dict:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value
    return into


def spec_naming(ref: Reference, name: str, padded: bool = True) -> tuple[dict, str]:
    """(a spec fragment in which ``ref`` names ``name``, the field as the policy names it). A list's
    element comes second, after one that names nothing, so that the refusal must name index 1."""
    prefix, _, suffix = ref.path.partition("[]")
    outer = prefix.split(".")[1:]
    if suffix:
        element = nested(prefix + "[]", suffix.split(".")[1:], name)
        fragment = nested("spec", outer, "")
        node = fragment
        for key in outer[:-1]:
            node = node[key]
        node[outer[-1]] = [PUBLIC, element] if padded else [element]
        field = f"{prefix}[1]{suffix}" if padded else ref.path
    else:
        fragment, field = nested("spec", outer, name), ref.path
    if outer[0] == "serve":  # spec.serve needs spec.export
        fragment["export"] = {"destinations": [PUBLIC]}
    return fragment, field


def immutable(ref: Reference) -> bool:
    """The CRD refuses a change of these sections (only spec.checkpoint.retain may change)."""
    return ref.path.split(".")[1] in [*IMMUTABLE_FIELDS, "checkpoint"]


def patch_as(control_plane, token, namespace, name, spec) -> tuple[int, str]:
    path = f"/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/{name}?dryRun=All"
    return request_as(control_plane, token, "PATCH", path, {"spec": spec}, "application/merge-patch+json")


def full_spec() -> dict:
    """Every reference at once, each naming what tenant-a may use (one element per list field)."""
    spec: dict = {}
    for ref in REFERENCES:
        merge(spec, spec_naming(ref, usable(ref), padded=False)[0])
    spec["export"]["destinations"] = [d for d in spec["export"]["destinations"] if d != PUBLIC]
    return spec


def changed_in_full(ref: Reference, name: str) -> tuple[dict, str]:
    """(a patch of the `full` job's section holding ``ref``, which names ``name`` there instead,
    the field as the policy names it)."""
    spec = full_spec()
    prefix, _, suffix = ref.path.partition("[]")
    outer, inner = prefix.split(".")[1:], suffix.split(".")[1:]
    node = spec
    for key in outer:
        node = node[key]
    field = ref.path
    if suffix:
        index = [r.path for r in REFERENCES if r.path.startswith(prefix + "[]")].index(ref.path)
        node, field = node[index], f"{prefix}[{index}]{suffix}"
        for key in inner[:-1]:
            node = node[key]
        node[inner[-1]] = name
    else:
        parent = spec
        for key in outer[:-1]:
            parent = parent[key]
        parent[outer[-1]] = name
    return {outer[0]: spec[outer[0]]}, field


@pytest.fixture(scope="module")
def install(helm, control_plane):
    """A namespaced release watching a namespace of this module, with the chart's policies as
    rendered (bound to that namespace by the chart); the tenants' tokens; two stored jobs, created
    by the admin: `plain` names nothing, `full` names every reference (what tenant-a may use), and
    `legacy`, stored before the policies, what they refuse (account `default`, a priority class and
    a toleration off the allow-lists)."""
    namespace = f"tenant-refs-{uuid.uuid4().hex[:5]}"
    control_plane.kubectl("create", "namespace", namespace)
    control_plane.kubectl("label", "namespace", namespace, "lorarl.dev/test=true")
    values = ["--set", "watch.allNamespaces=false", "--set", f"watch.namespaces={{{namespace}}}"]
    docs = [d for d in helm.render(*values, namespace=namespace, release=namespace) if "ValidatingAdmissionPolicy" in d["kind"]]
    assert {d["spec"].get("matchResources", {}).get("namespaceSelector") is not None for d in docs if "Binding" in d["kind"]} == {True}
    try:
        # stored before the policies: what they would refuse today (an install that upgrades)
        legacy = job_with_spec(
            {"scheduling": {"serviceAccountName": "default", "priorityClassName": "legacy"}, "hardware": {"tolerations": [{"operator": "Exists"}]}}
        )
        legacy["metadata"] = {"name": "legacy", "namespace": namespace}
        control_plane.kubectl("create", "-f", "-", input=yaml.safe_dump(legacy))
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([*rbac(namespace), *docs]))
        tokens = {t: control_plane.service_account_token(namespace, t) for t in (TENANT_A, TENANT_B)}
        probe = job_with(scheduling__serviceAccountName="default")  # a rule of the same policy object
        wait_for(lambda: create_as(control_plane, tokens[TENANT_B], namespace, probe)[0] == 403, timeout=60, what="the job-authority policy")
        for name, spec in (("plain", {}), ("full", full_spec())):
            doc = job_with_spec(spec)
            doc["metadata"] = {"name": name, "namespace": namespace}
            control_plane.kubectl("create", "-f", "-", input=yaml.safe_dump(doc))
        yield namespace, tokens
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def job_with_spec(fragment: dict) -> dict:
    doc = seed_doc()
    merge(doc["spec"], copy.deepcopy(fragment))
    return doc


def refusal(namespace: str, tenant: str, field: str) -> str:
    """How the policy's refusal begins: the field, then the requester."""
    return f"denied request: {field}: system:serviceaccount:{namespace}:{tenant} may not "


@pytest.mark.parametrize("ref", REFERENCES, ids=[r.path for r in REFERENCES])
def test_a_new_job_may_name_only_what_its_creator_may_use(install, control_plane, ref):
    namespace, tokens = install
    fragment, field = spec_naming(ref, usable(ref))
    code, message = create_as(control_plane, tokens[TENANT_B], namespace, job_with_spec(fragment))
    assert (code, refusal(namespace, TENANT_B, field) in message) == (403, True), message
    assert f"{ref.kind} {usable(ref)}" in message, message
    assert create_as(control_plane, tokens[TENANT_A], namespace, job_with_spec(fragment)) == (201, "")


@pytest.mark.parametrize("ref", REFERENCES, ids=[r.path for r in REFERENCES])
def test_a_change_may_name_only_what_its_author_may_use(install, control_plane, ref):
    """A reference added to a stored job, or changed on one, is checked for the user who patches."""
    namespace, tokens = install
    added, field = spec_naming(ref, usable(ref))
    if immutable(ref):
        # the CRD refuses the change whoever asks (spec.<section> is immutable)
        code, message = patch_as(control_plane, tokens[TENANT_A], namespace, "plain", added)
        assert code == 422 and "immutable" in message, message
        return
    code, message = patch_as(control_plane, tokens[TENANT_B], namespace, "plain", added)
    assert (code, refusal(namespace, TENANT_B, field) in message) == (403, True), message
    assert patch_as(control_plane, tokens[TENANT_A], namespace, "plain", added) == (200, "")
    changed, field = changed_in_full(ref, unusable(ref))
    code, message = patch_as(control_plane, tokens[TENANT_A], namespace, "full", changed)
    assert (code, refusal(namespace, TENANT_A, field) in message) == (403, True), message


def test_an_unchanged_reference_needs_no_right(install, control_plane):
    """Tenant-b may use none of what the stored job names, yet may suspend it, label it (as the
    operator's own updates change no reference) or reorder its destinations."""
    namespace, tokens = install
    token = tokens[TENANT_B]
    assert patch_as(control_plane, token, namespace, "full", {"suspend": True}) == (200, "")
    path = f"/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/full?dryRun=All"
    assert request_as(control_plane, token, "PATCH", path, {"metadata": {"labels": {"team": "b"}}}, "application/merge-patch+json") == (200, "")
    reordered = {**full_spec()["export"], "destinations": full_spec()["export"]["destinations"][::-1]}
    assert patch_as(control_plane, token, namespace, "full", {"export": reordered}) == (200, "")
    # the account, class and toleration rules, too, judge a change only (they are immutable)
    assert patch_as(control_plane, token, namespace, "legacy", {"suspend": True}) == (200, "")


# ------------------------------------------------- the data volume (issue 35, point 6)


def test_the_data_volume_is_bounded_by_the_charts_values(helm, control_plane, namespace):
    """spec.checkpoint.storage: the size of the claim a job owns at most admissionPolicy.maxStorageSize
    (default 1Ti; unset, the job's default 200Gi counts), its class from
    admissionPolicy.allowedStorageClasses (the cluster default always); an existingClaim makes no
    claim, so no size counts. The message names the field."""
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac(namespace)))
    token = control_plane.service_account_token(namespace, TENANT_B)
    values = ("--set", "admissionPolicy.maxStorageSize=500Gi", "--set", "admissionPolicy.allowedStorageClasses={fast-ssd}")
    with chart_policies(helm, control_plane, namespace, *values):
        wait_for(lambda: create_as(control_plane, token, namespace, job_with(checkpoint__storage={"size": "1Ti"}))[0] == 403, timeout=60, what="the policy")
        code, message = create_as(control_plane, token, namespace, job_with(checkpoint__storage={"size": "501Gi"}))
        assert code == 403 and message.endswith(
            "spec.checkpoint.storage.size: 501Gi is more than this install allows (admissionPolicy.maxStorageSize: 500Gi)"
        ), message
        for fits in ({"size": "500Gi"}, {"size": "100Gi", "storageClassName": "fast-ssd"}, {}, {"storageClassName": ""}):
            assert create_as(control_plane, token, namespace, job_with(checkpoint__storage=fits)) == (201, ""), fits
        code, message = create_as(control_plane, token, namespace, job_with(checkpoint__storage={"storageClassName": "premium-rwx"}))
        assert code == 403 and "spec.checkpoint.storage.storageClassName: premium-rwx is not in the allow-list of this install" in message, message
    # the chart's defaults: at most 1Ti, any class
    with chart_policies(helm, control_plane, namespace):
        # the same policy's names with new values: the API server's policy cache answers with the
        # 500Gi ones until it has seen the new version, so wait for the new limit in the refusal
        refusal = "spec.checkpoint.storage.size: 2Ti is more than this install allows (admissionPolicy.maxStorageSize: 1Ti)"
        wait_for(lambda: refusal in create_as(control_plane, token, namespace, job_with(checkpoint__storage={"size": "2Ti"}))[1], timeout=60, what="the policy")
        assert create_as(control_plane, token, namespace, job_with(checkpoint__storage={"size": "1Ti", "storageClassName": "premium-rwx"})) == (201, "")
    # below the default size: a job that names no size asks for the default 200Gi
    with chart_policies(helm, control_plane, namespace, "--set", "admissionPolicy.maxStorageSize=100Gi"):
        wait_for(lambda: create_as(control_plane, token, namespace, job_with())[0] == 403, timeout=60, what="the policy")
        code, message = create_as(control_plane, token, namespace, job_with())
        assert "spec.checkpoint.storage.size: 200Gi (the default) is more than" in message, message


def test_an_existing_claim_is_not_sized(helm, control_plane, namespace):
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac(namespace)))
    token = control_plane.service_account_token(namespace, TENANT_A)  # may get the claim
    with chart_policies(helm, control_plane, namespace, "--set", "admissionPolicy.maxStorageSize=100Gi"):
        wait_for(lambda: create_as(control_plane, token, namespace, job_with())[0] == 403, timeout=60, what="the policy")
        assert create_as(control_plane, token, namespace, job_with(checkpoint__storage={"existingClaim": CLAIM})) == (201, "")


# ------------------------------------------------------------- the tenants' roles (point 6)


def test_the_built_in_edit_and_view_roles_carry_lorarljobs(helm, control_plane, namespace):
    """The chart's view and edit roles aggregate into the built-in view, edit and admin
    ClusterRoles (the controller manager's clusterrole-aggregation controller): a user bound to
    `edit` in a namespace creates a LoraRLJob there, one bound to `view` only reads them, and
    neither may write a job's status."""
    docs = helm.render(namespace=namespace, release=namespace)
    roles = [cluster_role(docs, "view"), cluster_role(docs, "edit")]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(roles))
    docs = []
    for user, role in (("editor", "edit"), ("viewer", "view"), ("admin-user", "admin")):
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": user, "namespace": namespace}})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": user, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": namespace}],
            }
        )
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def can(user, verb, ns=namespace, subresource=""):
        extra = [f"--subresource={subresource}"] if subresource else []
        out = control_plane.kubectl(
            "auth", "can-i", verb, "lorarljobs.lorarl.dev", "-n", ns, *extra, f"--as=system:serviceaccount:{namespace}:{user}", check=False
        )
        return out.stdout.strip() == "yes"

    wait_for(lambda: can("editor", "create") and can("viewer", "list"), timeout=60, what="the aggregation into edit and view")
    tokens = {u: control_plane.service_account_token(namespace, u) for u in ("editor", "viewer", "admin-user")}
    assert create_as(control_plane, tokens["editor"], namespace, job_with()) == (201, "")
    assert create_as(control_plane, tokens["admin-user"], namespace, job_with()) == (201, "")
    code, message = create_as(control_plane, tokens["viewer"], namespace, job_with())
    assert code == 403 and "cannot create resource" in message, message
    for verb in ("get", "list", "watch"):
        assert can("viewer", verb) and can("editor", verb), verb
    for verb in ("update", "patch", "delete", "deletecollection"):
        assert can("editor", verb) and can("admin-user", verb) and not can("viewer", verb), verb
    assert can("viewer", "get", subresource="status")
    for user in ("editor", "viewer", "admin-user"):
        assert not can(user, "patch", subresource="status"), user  # the status is the operator's and the job's own
        assert not can(user, "list", ns="kube-system"), user  # a RoleBinding: this namespace only
