"""The real API server's answer for a LoraRLJob: a server-side dry-run create with strict field
validation (what `kubectl apply` does), reduced to accepted / the fields it names."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException
from lorarl.api import types as api

_UNKNOWN = re.compile(r'unknown field "([^"]+)"')
_DUPLICATE = re.compile(r'duplicate field "([^"]+)"')


@dataclass
class Answer:
    accepted: bool
    fields: list[str]
    message: str


def dry_run_create(kube_api, namespace: str, doc: dict) -> Answer:
    body = {**doc, "metadata": doc["metadata"] if not isinstance(doc.get("metadata"), dict) else {**doc["metadata"], "namespace": namespace}}
    try:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            api.GROUP,
            api.VERSION,
            namespace,
            api.PLURAL,
            body,
            dry_run="All",
            field_validation="Strict",
        )
    except ApiException as err:
        if err.status not in (400, 422):
            raise
        status = json.loads(err.body)
        message = status.get("message", "")
        fields = [c.get("field", "") for c in (status.get("details") or {}).get("causes") or []]
        fields += _UNKNOWN.findall(message) + _DUPLICATE.findall(message)
        if "v1.ObjectMeta" in message:  # metadata that does not decode (e.g. a string)
            fields.append("metadata")
        return Answer(False, [f for f in fields if f], message)
    return Answer(True, [], "")


def _answer(err: ApiException) -> Answer:
    status = json.loads(err.body)
    message = status.get("message", "")
    fields = [c.get("field", "") for c in (status.get("details") or {}).get("causes") or []]
    return Answer(False, [f for f in fields if f], message)


def create(kube_api, namespace: str, doc: dict) -> dict:
    """Really create a LoraRLJob (for transition rules, which compare with the stored object)."""
    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    return client.CustomObjectsApi(kube_api).create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, body)


def dry_run_patch_spec(kube_api, namespace: str, name: str, spec_patch: dict) -> Answer:
    """A JSON merge patch of the spec, as `kubectl patch --type=merge` sends it (dry run)."""
    try:
        _dynamic(kube_api).request(
            "PATCH",
            f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/{api.PLURAL}/{name}",
            body={"spec": spec_patch},
            content_type="application/merge-patch+json",
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Accept": "application/json"},
        )
    except ApiException as err:
        if err.status not in (400, 422):
            raise
        return _answer(err)
    return Answer(True, [], "")


_DYNAMIC: dict[int, object] = {}


def _dynamic(kube_api):
    from kubernetes.dynamic import DynamicClient

    if id(kube_api) not in _DYNAMIC:
        _DYNAMIC[id(kube_api)] = DynamicClient(kube_api)
    return _DYNAMIC[id(kube_api)]


_PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "NetworkPolicy": "networkpolicies",
    "RayJob": "rayjobs",
    "Pod": "pods",
    "Job": "jobs",
}


def dry_run_apply(kube_api, obj: dict) -> Answer:
    """Server-side apply with dryRun=All and strict field validation: the API server's full
    admission (schema, CEL, built-in validation such as a Pod's) without storing anything."""
    meta = obj["metadata"]
    group_version = obj["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    url = f"{prefix}/namespaces/{meta['namespace']}/{_PLURALS[obj['kind']]}/{meta['name']}"
    try:
        _dynamic(kube_api).request(
            "PATCH",
            url,
            body=json.dumps(obj),
            content_type="application/apply-patch+yaml",
            query_params=[("dryRun", "All"), ("fieldManager", "lorarl-test"), ("force", "true"), ("fieldValidation", "Strict")],
            header_params={"Accept": "application/json"},
        )
    except ApiException as err:
        if err.status not in (400, 403, 404, 422):
            raise
        return _answer(err)
    return Answer(True, [], "")


def dry_run_applied(kube_api, obj: dict) -> dict:
    """What the API server would store for ``obj`` (server-side apply, dryRun=All): the object
    after its schema's pruning and defaults."""
    meta = obj["metadata"]
    group_version = obj["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    answer = _dynamic(kube_api).request(
        "PATCH",
        f"{prefix}/namespaces/{meta['namespace']}/{_PLURALS[obj['kind']]}/{meta['name']}",
        body=json.dumps(obj),
        content_type="application/apply-patch+yaml",
        query_params=[("dryRun", "All"), ("fieldManager", "lorarl-test"), ("force", "true")],
        header_params={"Accept": "application/json"},
    )
    return answer.to_dict()


def pods_of(rayjob: dict) -> list[dict]:
    """The Ray pod templates of a RayJob as Pods, for the API server's Pod validation (what
    KubeRay's pods must pass). Their ServiceAccount is only dry-run applied, never created: the
    test control plane runs without the ServiceAccount admission plugin (a cluster has the
    account, which the operator applies before the RayJob)."""
    cluster = rayjob["spec"]["rayClusterSpec"]
    templates = [("head", cluster["headGroupSpec"]["template"])]
    templates += [(g["groupName"], g["template"]) for g in cluster.get("workerGroupSpecs", [])]
    pods = []
    for role, template in templates:
        spec = template["spec"]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "spec": spec,
                "metadata": {
                    "name": f"{rayjob['metadata']['name']}-{role}"[:63].rstrip("-"),
                    "namespace": rayjob["metadata"]["namespace"],
                    "labels": template["metadata"].get("labels", {}),
                },
            }
        )
    return pods
