"""The embedded API server enforces OwnerReferencesPermissionEnforcement and PodSecurity, and
writes an audit log that lorarl_dev.audit reads. Each check has a control that the same request
passes where the plugin has nothing to object to, so a refusal is the plugin's and nothing else's."""

from __future__ import annotations

import json

import pytest
import yaml
from lorarl_dev import audit

from tests.helpers import seed_doc

pytestmark = pytest.mark.controlplane

FINALIZERS_REFUSAL = "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"


def _apply(cp, docs, **kw):
    return cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), **kw)


def _owned_configmap(namespace, name, owner, block):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "lorarl.dev/v1alpha1",
                    "kind": "LoraRLJob",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": block,
                }
            ],
        },
    }


def test_block_owner_deletion_needs_update_on_the_owners_finalizers(control_plane, namespace):
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    _apply(control_plane, [doc])
    owner = json.loads(control_plane.kubectl("get", "lorarljob", doc["metadata"]["name"], "-n", namespace, "-o", "json").stdout)
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "writer", "namespace": namespace}, "rules": [rule]}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "writer", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": namespace}],
    }
    _apply(control_plane, [role, binding])
    as_writer = control_plane.restricted_kubeconfig(namespace, "writer")

    def create(name, block):
        return control_plane.kubectl("create", "-f", "-", input=json.dumps(_owned_configmap(namespace, name, owner, block)), kubeconfig=as_writer, check=False)

    refused = create("blocking", True)
    assert refused.returncode != 0
    assert "is forbidden" in refused.stderr and FINALIZERS_REFUSAL in refused.stderr, refused.stderr
    # control: the same identity may create the same object without blockOwnerDeletion ...
    assert create("not-blocking", False).returncode == 0
    # ... and with it, once it may update the owner's finalizers
    role["rules"].append({"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs/finalizers"], "verbs": ["update"]})
    _apply(control_plane, [role])
    allowed = create("blocking", True)
    assert allowed.returncode == 0, allowed.stderr


def _privileged_pod(namespace):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none", "securityContext": {"privileged": True}}]},
    }


def test_pod_security_restricted_namespace_refuses_a_privileged_pod(control_plane, namespace):
    # control: the unlabelled namespace is "privileged" (the default level), so the pod is admitted
    admitted = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(_privileged_pod(namespace)), check=False)
    assert admitted.returncode == 0, admitted.stderr
    control_plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    refused = control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(_privileged_pod(namespace)), check=False)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr and "privileged" in refused.stderr, refused.stderr


def test_audit_log_records_who_did_what(control_plane, namespace):
    kubeconfig = control_plane.restricted_kubeconfig(namespace, "nobody")
    denied = control_plane.kubectl("get", "configmaps", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr
    control_plane.kubectl("get", "serviceaccount", "nobody", "-n", namespace)
    user = f"system:serviceaccount:{namespace}:nobody"
    # blocking audit mode: the lines are written before the responses reached kubectl
    lists = [r for r in audit.requests(control_plane.audit_log_path, user) if r.resource == "configmaps"]
    assert [(r.verb, r.api_group, r.resource_path, r.namespace, r.code) for r in lists] == [("list", "", "configmaps", namespace, 403)]
    assert lists[0].message.startswith(f'configmaps is forbidden: User "{user}" cannot list resource "configmaps"')
    admin_gets = [
        r
        for r in audit.requests(control_plane.audit_log_path, "lorarl-admin")
        if (r.verb, r.resource, r.namespace, r.name) == ("get", "serviceaccounts", namespace, "nobody")
    ]
    assert admin_gets and admin_gets[-1].code == 200
