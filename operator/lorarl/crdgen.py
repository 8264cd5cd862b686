"""Generate the LoraRLJob CRD from the pydantic models (the one source of truth).

pydantic's JSON Schema is turned into a Kubernetes structural schema: ``$ref``s inlined,
``Optional`` unwrapped, titles dropped, object defaults added so nested defaults apply, our
``flag`` documentation metadata removed, and ``x-kubernetes-*`` extensions kept.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from . import api

CRD_NAME = f"{api.PLURAL}.{api.GROUP}"
CRD_FILE = f"{api.GROUP}_{api.PLURAL}.yaml"
_DOC_ONLY_KEYS = {"title", "flag"}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline $refs, unwrap Optional, and merge our extension keys. Returns a new dict."""
    schema = dict(schema)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        # pydantic < 2.9 wraps a $ref that has sibling keys (description, default) in allOf
        schema["$ref"] = schema.pop("allOf")[0]["$ref"]
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema.pop("$ref").rsplit("/", 1)[-1]])
        # field-level description/default/extensions win over the referenced model's
        target.update(schema)
        schema = target
    any_of = schema.pop("anyOf", None)
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"unsupported union in schema: {any_of}")
        inner = dict(non_null[0])
        if "$ref" in inner:
            inner = _resolve(inner, defs)
        for k, v in schema.items():
            if k == "default" and v is None:
                continue
            if k == "items" and "items" in inner:
                inner["items"] = {**inner["items"], **v}
                continue
            inner[k] = v
        schema = inner
    if schema.get("default", "x") is None:
        del schema["default"]
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DOC_ONLY_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    return _structural(out)


def _structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Fix what pydantic emits but a structural schema does not accept."""
    if isinstance(schema.get("description"), str):
        schema["description"] = " ".join(schema["description"].split())
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(schema.get(exclusive), (int, float)) and not isinstance(schema[exclusive], bool):
            # JSON Schema 2020 (pydantic) -> OpenAPI v3.0 (Kubernetes): a bound plus a boolean
            schema[bound] = schema.pop(exclusive)
            schema[exclusive] = True
    if schema.get("type") == "number":
        # a number's bounds as numbers: pydantic writes gt=0 as 0 or 0.0 depending on its version
        for bound in ("minimum", "maximum"):
            if isinstance(schema.get(bound), int) and not isinstance(schema[bound], bool):
                schema[bound] = float(schema[bound])
    if "const" in schema:  # Literal with one value
        schema["enum"] = [schema.pop("const")]
    if "enum" in schema and "type" not in schema:
        schema["type"] = "string"
    if schema.get("type") == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties")
        if extra is True or extra == {} or extra is None:
            # free-form object (e.g. a core/v1 Affinity): keep it, do not prune it
            schema.pop("additionalProperties", None)
            schema["x-kubernetes-preserve-unknown-fields"] = True
    if schema.get("type") == "object" and "properties" in schema:
        schema.pop("additionalProperties", None)
    return schema


def spec_schema() -> dict[str, Any]:
    raw = api.LoraRLJobSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    _default_nested_objects(schema, api.LoraRLJobSpec)
    return schema


def _default_nested_objects(schema: dict[str, Any], model: type) -> None:
    """pydantic omits defaults made by default_factory; give those fields their factory value,
    fully spelled out (the API server validates a default against the CEL rules as it stands,
    before nested defaulting, and `kubectl explain` shows it)."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        prop = schema.get("properties", {}).get(alias)
        if prop is None:
            continue
        if field.default_factory is not None:
            value = field.default_factory()
            if hasattr(value, "model_dump"):
                dumped = value.model_dump(by_alias=True, exclude_none=True, mode="json")
                prop["default"] = dumped
            elif isinstance(value, list):
                prop["default"] = [
                    v.model_dump(by_alias=True, exclude_none=True, mode="json") if hasattr(v, "model_dump") else v
                    for v in value
                ]
            elif isinstance(value, dict):
                prop["default"] = value
        annotation = field.annotation
        sub_model = model_in(annotation)
        if sub_model is not None and prop.get("type") == "object":
            _default_nested_objects(prop, sub_model)


def model_in(annotation: Any) -> type | None:
    """The pydantic model inside an annotation (Optional[X], list[X], X), if any."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = model_in(arg)
        if found is not None:
            return found
    return None


def status_schema() -> dict[str, Any]:
    raw = api.LoraRLJobStatus.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    schema.pop("additionalProperties", None)
    _drop_defaults(schema)  # status defaults would be written by the API server: keep it honest
    return schema


def _drop_defaults(schema: dict[str, Any]) -> None:
    schema.pop("default", None)
    for sub in schema.get("properties", {}).values():
        _drop_defaults(sub)
    if isinstance(schema.get("items"), dict):
        _drop_defaults(schema["items"])


def name_rules() -> list[dict[str, Any]]:
    return [
        api.cel(
            f"self.metadata.name.size() <= {api.MAX_NAME_LENGTH}",
            f"metadata.name must be at most {api.MAX_NAME_LENGTH} characters: the child RayJob carries "
            "the same name and KubeRay rejects longer RayJob names",
        ),
        api.cel(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "metadata.name must be a DNS-1035 label (start with a letter; lowercase letters, digits and '-'): "
            "KubeRay requires it of the child RayJob",
        ),
    ]


# `kubectl get lorarljobs` fits 80 columns with a realistic name: what runs, how far, the reward.
# `-o wide` (priority 1) adds training health, placement and the child RayJob.
TRAINING_HEALTHY = '.status.conditions[?(@.type=="TrainingHealthy")].status'
PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Lifecycle phase."},
    {"name": "Rollout", "type": "integer", "jsonPath": ".status.progress.rollout", "description": "Rollouts completed."},
    {"name": "Total", "type": "integer", "jsonPath": ".status.progress.total", "description": "Rollouts planned."},
    {"name": "Reward", "type": "number", "jsonPath": ".status.metrics.rawReward", "description": "Latest raw reward."},
    {"name": "Healthy", "type": "string", "jsonPath": TRAINING_HEALTHY, "priority": 1, "description": "TrainingHealthy condition."},
    {"name": "Logprob-Diff", "type": "number", "jsonPath": ".status.metrics.trainRolloutLogprobAbsDiffMean", "priority": 1, "description": "Mean train/rollout logprob abs diff."},
    {"name": "Hardware", "type": "string", "jsonPath": ".spec.hardware.accelerator", "priority": 1, "description": "Accelerator profile."},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.hardware.nodes", "priority": 1, "description": "Nodes."},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1, "description": "Base model."},
    {"name": "Checkpoint", "type": "integer", "jsonPath": ".status.checkpoints.latestIteration", "priority": 1, "description": "Latest checkpoint iteration."},
    {"name": "RayJob", "type": "string", "jsonPath": ".status.rayJob.name", "priority": 1, "description": "Child RayJob."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    root = {
        "type": "object",
        "description": " ".join(api.LoraRLJob.__doc__.split()),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion: lorarl.dev/v1alpha1."},
            "kind": {"type": "string", "description": "Kind: LoraRLJob."},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": name_rules(),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "lorarl", "app.kubernetes.io/part-of": "lorarl"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": list(api.CATEGORIES),
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `lorarl crd` from lorarl.api: do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=1 << 16)
