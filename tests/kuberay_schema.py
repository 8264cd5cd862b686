"""KubeRay's own RayJob CRD schema as a strict JSON Schema validator (for tests)."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import yaml
from lorarl_dev.kuberay import kuberay_crd_path


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The API server prunes unknown fields silently; a test should fail on them instead."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        for key in ("properties",):
            for sub in schema.get(key, {}).values():
                _strict(sub)
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                _strict(schema[key])
    return schema


@functools.cache
def rayjob_validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(kuberay_crd_path("RayJob").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def rayjob_errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in rayjob_validator().iter_errors(obj)]
