"""The one list of spec fields that name a Secret, a ConfigMap, a claim or an identity
(lorarl.api.references) is complete and true to the CRD schema: the job-authority policy checks
exactly those (tests/security/test_tenants.py, on the real API server)."""

from __future__ import annotations

from typing import Any

import pytest
from lorarl.admission import crdgen, policy
from lorarl.api.references import NOT_REFERENCES, REFERENCES, looks_like_reference

from tests.helpers import REPO, doc_table

KINDS = {"Secret": "secrets", "ConfigMap": "configmaps", "PersistentVolumeClaim": "persistentvolumeclaims", "ServiceAccount": "serviceaccounts"}


def string_fields(schema: dict[str, Any], path: str = "spec", holder: str = "", holder_keys: frozenset[str] = frozenset()):
    """(path, name, holder, holder's keys) of every string field under ``schema``, lists as ``[]``."""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from string_fields(schema["items"], path + "[]", holder, holder_keys)
        return
    props = schema.get("properties") or {}
    keys = frozenset(props)
    for name, sub in props.items():
        leaf, lists = sub, ""
        while leaf.get("type") == "array" and isinstance(leaf.get("items"), dict):
            leaf, lists = leaf["items"], lists + "[]"
        if leaf.get("type") == "string":  # a string, or a list of strings
            yield f"{path}.{name}{lists}", name, holder, keys
        else:
            yield from string_fields(sub, f"{path}.{name}", name, keys)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from string_fields(schema["additionalProperties"], path + "[*]", holder, holder_keys)


def spec_schema() -> dict[str, Any]:
    return crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


FIELDS = {path: (name, holder, keys) for path, name, holder, keys in string_fields(spec_schema())}
LISTED = {r.path for r in REFERENCES}


def test_every_field_that_looks_like_a_reference_is_listed():
    unlisted = [p for p, args in FIELDS.items() if looks_like_reference(p, *args) and p not in LISTED and p not in NOT_REFERENCES]
    assert not unlisted, (
        f"{unlisted} look like they name a Secret, ConfigMap, claim or identity (lorarl.api.references.looks_like_reference): "
        "add each to REFERENCES (the job-authority policy then checks it; `make generate`) or, naming nothing, to NOT_REFERENCES with the reason"
    )


def test_every_listed_field_is_a_string_field_of_the_schema():
    assert sorted(LISTED - set(FIELDS)) == []
    assert sorted(set(NOT_REFERENCES) - set(FIELDS)) == []
    assert not LISTED & set(NOT_REFERENCES)
    assert len(LISTED) == len(REFERENCES)


@pytest.mark.parametrize("path", sorted(LISTED))
def test_the_rule_finds_every_listed_field(path):
    """The rule is not weaker than the list: were a field dropped from the list, the first test fails."""
    assert looks_like_reference(path, *FIELDS[path])


def test_the_rule_matches_the_shapes_it_promises():
    # a Secret or ConfigMap key selector, whatever it is called; an envFrom-style configMapRef; a list of Secrets
    assert looks_like_reference("spec.x.source.name", "name", "source", frozenset({"name", "key"}))
    assert looks_like_reference("spec.x.configMapRef.name", "name", "configMapRef", frozenset({"name", "optional"}))
    assert looks_like_reference("spec.x.imagePullSecrets[].name", "name", "imagePullSecrets", frozenset({"name"}))
    assert looks_like_reference("spec.x.pvcName", "pvcName", "x", frozenset({"pvcName"}))
    assert not looks_like_reference("spec.model.name", "name", "model", frozenset({"name", "revision"}))


def test_each_entry_says_a_kind_and_its_resource():
    for ref in REFERENCES:
        assert KINDS.get(ref.kind) == ref.resource, ref
        assert ref.verb in ("get", "create"), ref


def test_the_policy_checks_each_entry():
    """Every entry has a validation (one per element of a list, up to the CRD's maxItems) whose
    message begins with its field."""
    messages = [v["messageExpression"] for v in policy.rules()["validations"]]
    for ref in REFERENCES:
        prefix, _, suffix = ref.path.partition("[]")
        if not suffix:
            assert sum(m.startswith(f"'{ref.path}' + ': '") for m in messages) == 1, ref.path
            continue
        node = spec_schema()
        for key in prefix.split(".")[1:]:
            node = node["properties"][key]
        for i in range(node["maxItems"]):
            assert sum(m.startswith(f"'{prefix}[{i}]{suffix}' + ': '") for m in messages) == 1, (ref.path, i)


def test_the_chart_holds_the_generated_checks():
    path = REPO / policy.OUTPUT
    assert path.read_text() == policy.rules_yaml(), f"{path} is stale: run `make generate`"


def test_the_threat_model_names_every_field():
    """docs/security.md's table of what the job-authority policy checks names each entry."""
    named = " ".join(row["the spec names"] for row in doc_table("Threat model"))
    assert [r.path for r in REFERENCES if f"`{r.path}`" not in named] == []
