"""Bad input: every invalid spec gets a message naming the field and what would be valid."""

from __future__ import annotations

import pytest
from lorarl.admission.validation import validate

from tests.api.validation_cases import CASES
from tests.helpers import seed_doc, with_spec


def problems_of(doc):
    job, problems = validate(doc)
    assert job is None and problems, "expected the document to be rejected"
    return [(p.field, p.message) for p in problems]


@pytest.mark.parametrize("overrides,field,words", CASES, ids=[c[1] + ":" + c[2][:20] for c in CASES])
def test_rejected_with_field_named_message(overrides, field, words):
    found = problems_of(with_spec(**overrides))
    assert any(f == field and words in m for f, m in found), found


def test_long_name_is_rejected_for_kuberay():
    doc = seed_doc()
    doc["metadata"]["name"] = "x" * 48
    found = problems_of(doc)
    assert any(f == "metadata.name" and "47" in m for f, m in found), found


def test_name_must_be_dns1035():
    doc = seed_doc()
    doc["metadata"]["name"] = "9lives"
    assert any(f == "metadata.name" for f, _ in problems_of(doc))


def test_wrong_kind():
    doc = seed_doc()
    doc["kind"] = "RayJob"
    assert problems_of(doc)[0][0] == "kind"


def test_all_examples_valid():
    from tests.helpers import MANIFESTS, load

    for path in MANIFESTS.glob("*.yaml"):
        job, problems = validate(load(path))
        assert problems == [], (path.name, problems)
