"""Every spec field that names an object of the job's namespace the job's pods would use: a
Secret, a ConfigMap, a PersistentVolumeClaim or a ServiceAccount (an identity).

The one list: the chart's ``<release>-job-authority`` admission policy is generated from it
(lorarl.admission.policy, ``make generate``), so a job is admitted only when the user who creates
or changes it may use each object it newly names. A test walks the CRD schema and fails on a
field that looks like such a reference (tests/api/test_references.py, the rule is in
``looks_like_reference``) but is not here, and on an entry the schema does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    """``path`` is the string field holding the object's name, ``[]`` marking each element of a
    list; the requester must be allowed ``verb`` on ``resource`` (core group, ``subresource`` if
    any) for that name, in the job's namespace."""

    path: str
    kind: str  # Secret, ConfigMap, PersistentVolumeClaim or ServiceAccount
    verb: str
    resource: str
    subresource: str = ""
    use: str = "read"  # what a job would do with it, for the refusal's message

    @property
    def permission(self) -> str:
        """What the requester must be allowed, as RBAC says it: ``get secrets``."""
        return f"{self.verb} {self.resource}" + (f"/{self.subresource}" if self.subresource else "")


def _secret(path: str) -> Reference:
    return Reference(path, "Secret", "get", "secrets")


def _claim(path: str, use: str) -> Reference:
    return Reference(path, "PersistentVolumeClaim", "get", "persistentvolumeclaims", use=use)


REFERENCES: tuple[Reference, ...] = (
    # a job's pods would run as it: minting its tokens is the same power
    Reference("spec.scheduling.serviceAccountName", "ServiceAccount", "create", "serviceaccounts", "token", use="run as"),
    _secret("spec.tracking.wandb.apiKeySecretRef.name"),
    _secret("spec.dataPrep.hfTokenSecretRef.name"),
    _secret("spec.dataPrep.httpTokenSecretRef.name"),
    _secret("spec.dataPrep.s3.credentialsSecretName"),
    _claim("spec.checkpoint.storage.existingClaim", "mount"),
    _secret("spec.export.destinations[].s3.credentialsSecretName"),
    _secret("spec.export.destinations[].oci.credentialsSecretName"),
    _secret("spec.export.destinations[].hub.tokenSecretRef.name"),
    _claim("spec.export.destinations[].claim.claimName", "mount and write"),
    _secret("spec.serve.apiKeySecretRef.name"),
)

# The rule for "looks like a reference", applied to every string field of the spec:
# - its own name, or the name of the object or list holding it, contains one of these words
#   (case-insensitively), e.g. credentialsSecretName, existingClaim, serviceAccountName,
#   hfTokenSecretRef.name, imagePullSecrets[].name, configMapRef.name; or
# - it is the `name` of an object holding exactly `name` and `key` (a key selector of a Secret or
#   ConfigMap, whatever the object is called).
# A match is on REFERENCES or on NOT_REFERENCES with the reason it names nothing.
REFERENCE_WORDS = re.compile(r"(?i)secret|configmap|claim|pvc|volume|account|credential|token|password|kubeconfig|identity")

NOT_REFERENCES: dict[str, str] = {
    "spec.serve.claimMountPath": "a directory in the SGLang server's own filesystem, where that server mounts the export's claim",
}


def looks_like_reference(path: str, name: str, holder: str, holder_keys: frozenset[str]) -> bool:
    """Whether the string field ``name`` at ``path``, held by the property ``holder`` (an object or
    a list, "" at the top) whose keys are ``holder_keys``, looks like it names an object."""
    if REFERENCE_WORDS.search(name):
        return True
    return name == "name" and (bool(REFERENCE_WORDS.search(holder)) or holder_keys == {"name", "key"})
