"""The real API server's answer for a LoraRLJob: a server-side dry-run create with strict field
validation (what `kubectl apply` does), reduced to accepted / the fields it names."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from lorarl import api

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
            api.GROUP, api.VERSION, namespace, api.PLURAL, body, dry_run="All", field_validation="Strict",
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
