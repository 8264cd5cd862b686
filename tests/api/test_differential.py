"""Differential test: `lorarl validate` and the real API server give the same answer.

Over the fuzz strategy's valid specs, each optionally hit by one hostile edit (wrong types,
nulls, unknown fields, bad names, quantities, tolerations, affinity shapes, credential and
spec-owned flags, model-parallel sizes, paths, duplicates, out-of-range numbers): a spec is
accepted by both or refused by both, and when refused, both name the same field (one path is a
prefix of the other: the server names e.g. the unknown field inside a mistyped object)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from lorarl.admission.validation import validate

from tests.api.apiserver import dry_run_create
from tests.api.strategies import valid_specs

pytestmark = pytest.mark.controlplane

DIFFERENTIAL = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# (path inside spec, hostile or borderline value); None as a value means "null"
EDITS = [
    (("hardware", "cpu"), "lots"),
    (("hardware", "cpu"), "1.5.5"),
    (("hardware", "cpu"), ""),
    (("hardware", "cpu"), "500m"),
    (("hardware", "memory"), "512 Gi"),
    (("hardware", "memory"), "1e3"),
    (("hardware", "shmSize"), "-1Gi"),
    (("hardware", "affinity"), {"nodeAffinity": []}),
    (("hardware", "affinity"), {"podAffinity": {"x": 1}}),
    (("hardware", "affinity"), {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}),
    (("hardware", "affinity"), {}),
    (("hardware", "affinity"), "zone-a"),
    (
        ("hardware", "affinity"),
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
                }
            }
        },
    ),
    (
        ("hardware", "affinity"),
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "spec.x", "operator": "In", "values": ["n1"]}]}]
                }
            }
        },
    ),
    (
        ("hardware", "affinity"),
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8", "9"]}]}]
                }
            }
        },
    ),
    (
        ("hardware", "affinity"),
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}}
                ]
            }
        },
    ),
    (
        ("hardware", "affinity"),
        {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"a b": "c"}}}]}},
    ),
    (
        ("hardware", "affinity"),
        {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "c d"}}}]}},
    ),
    (("hardware", "nodeSelector"), {"a b": "c"}),
    (("hardware", "nodeSelector"), {"k": "v v"}),
    (("hardware", "nodeSelector"), {"k": "x" * 64}),
    (("hardware", "nodeSelector"), {"-k": "v"}),
    (("hardware", "nodeSelector"), {"a/b/c": "v"}),
    (("hardware", "nodeSelector"), {"a" * 254 + "/b": "v"}),
    (("hardware", "nodeSelector"), {"example.com/zone": ""}),
    (("hardware", "nodeSelector"), {"k": 1}),
    (("hardware", "tolerations"), [{"key": "k", "operator": "Exists", "value": "v"}]),
    (("hardware", "tolerations"), [{"key": "k", "tolerationSeconds": 5}]),
    (("hardware", "tolerations"), [{"value": "v"}]),
    (("hardware", "tolerations"), [{"key": "a b"}]),
    (("hardware", "tolerations"), [{"key": "k", "operator": "Exists", "value": ""}]),
    (("hardware", "tolerations"), [{"key": "k", "effect": "NoExecute", "tolerationSeconds": -5}]),
    (("hardware", "resourceName"), "gpu"),
    (("hardware", "resourceName"), "amd.com/"),
    (("hardware", "resourceName"), "AMD.com/gpu"),
    (("hardware", "gpusPerNode"), 3),
    (("hardware", "gpusPerNode"), 6),
    (("hardware", "nodes"), "2"),
    (("hardware", "nodes"), True),
    (("hardware", "nodes"), 2.0),
    (("hardware", "nodes"), 2.5),
    (("lora", "rank"), "64"),
    (("lora", "rank"), 2**63),
    (("lora", "rank"), -1),
    (("lora", "rank"), None),
    (("lora",), None),
    (("lora", "dropout"), 1),
    (("lora", "foo"), 1),
    (("lora", "targetModules"), []),
    (("lora", "targetModules"), ["a"] * 33),
    (("extraArgs",), ["--wandb-api-key", "x"]),
    (("extraArgs",), ["--hub-token=x"]),
    (("extraArgs",), ["--metadata-key", "m"]),
    (("extraArgs",), ["--max-tokens-per-gpu", "9000"]),
    (("extraArgs",), ["--lora-rank=4"]),
    (("extraArgs",), ["--SECRET"]),
    (("extraArgs",), ["--tensor-model-parallel-size", "2"]),
    (("extraArgs",), ["--tensor-model-parallel-size", "x"]),
    (("extraArgs",), ["--pipeline-model-parallel-size=2"]),
    (("extraArgs",), ["--context-parallel-size"]),
    (("extraArgs",), ["--tensor-model-parallel-size", "8", "--context-parallel-size", "2"]),
    (("extraArgs",), None),
    (("extraArgs",), ["a b"]),
    (("extraArgs",), ["--max-tokens-per-gpu", "9000", "--lora-rank", "8"]),
    (("extraArgs",), ["--max-tokens-per-gpu", "9000", "--hub-token=x"]),
    (("model", "revision"), "--help"),
    (("model", "revision"), "v1.0-rc"),
    (("rollout", "promptData", "revision"), "-rc"),
    (("extraArgs",), [1]),
    (("eval", "datasets"), [{"name": "a", "repo": "x/y"}, {"name": "a", "repo": "x/z"}]),
    (("eval", "interval"), 10**6),
    (("eval", "enabled"), "false"),
    (("rollout", "promptData", "file"), "../x.jsonl"),
    (("rollout", "promptData", "file"), "a/.."),
    (("rollout", "promptData", "file"), "/abs"),
    (("rollout", "promptData", "file"), "a/b.jsonl"),
    (("rollout", "promptData", "file"), "..a"),
    (("rollout", "promptData", "file"), "."),
    (("rollout", "promptData", "file"), "a/./b.jsonl"),
    (("rollout", "promptData", "file"), "a//b.jsonl"),
    (("rollout", "inputKey"), "prompt\n"),
    (("runPolicy", "image"), "a b"),
    (("runPolicy", "image"), "rocm/miles:1.0"),
    (("runPolicy", "image"), "x" * 513),
    (("dataPrep", "image"), "busybox\n"),
    (("dataPrep", "endpoint"), "ftp://x"),
    (("checkpoint", "storage"), {"existingClaim": "a.b"}),
    (("checkpoint", "storage"), {"storageClassName": "Fast"}),
    (("checkpoint", "storage"), {"storageClassName": ""}),
    (("checkpoint", "storage"), {"size": "1e3"}),
    (("checkpoint", "storage"), {"existingClaim": "c", "size": "1Gi"}),
    # quantities, judged by the API server's own parser (CEL isQuantity/quantity) and lorarl validate's copy of it
    *[
        (("hardware", "cpu"), q)
        for q in (
            "+1",
            ".5",
            "1.",
            ".",
            "+",
            "-",
            "Mi",
            "1e3",
            "1E-3",
            "1e",
            "1e+",
            "5E",
            "5E2",
            "0",
            "0.0",
            "-1",
            "1K",
            "1Ki2",
            "0.1mi",
            "1 Gi",
            " 1",
            "1m3",
            "1.G",
            "1i",
            "-3.01e-",
            "1+1.0M",
            "9223372036854775808e1",
            "1e9223372036854775808",
            "12345678901234567890",
            "1n",
            "0.000000001",
        )
    ],
    (("hardware", "memory"), "1e-30"),
    (("hardware", "shmSize"), "0"),
    (("checkpoint", "storage"), {"size": "+2Ti"}),
    (("suspend",), "yes"),
    (("health", "minEvalScore"), 2),
    (("sglang", "gpusPerEngine"), 16),
]


def apply_edit(doc, edit):
    path, value = edit
    node = doc["spec"]
    for name in path[:-1]:
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
    node[path[-1]] = copy.deepcopy(value)
    return doc


def related(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


@DIFFERENTIAL
@given(valid_specs(), st.one_of(st.none(), st.sampled_from(EDITS)))
def test_validate_and_the_api_server_agree(kube_api, namespace, doc, edit):
    if edit is not None:
        doc = apply_edit(doc, edit)
    _, problems = validate(copy.deepcopy(doc))
    answer = dry_run_create(kube_api, namespace, doc)
    event("accepted by both" if answer.accepted and not problems else "refused by both" if problems and not answer.accepted else "disagree")
    assert answer.accepted == (not problems), (edit, problems, answer.message)
    if problems:
        assert any(related(p.field, f) for p in problems for f in answer.fields) or any(p.field in answer.message for p in problems), (edit, problems, answer)


def assert_same_verdict(kube_api, namespace, doc):
    """`lorarl validate` and the API server (a dry-run create) give the same verdict, and a
    refusal names a related field on both sides."""
    _, problems = validate(copy.deepcopy(doc))
    answer = dry_run_create(kube_api, namespace, doc)
    assert answer.accepted == (not problems), (problems, answer.message)
    if problems:
        assert any(related(p.field, f) for p in problems for f in answer.fields) or any(p.field in answer.message for p in problems), (problems, answer)


@pytest.mark.parametrize("edit", EDITS, ids=[".".join(p) + "=" + repr(v)[:30] for p, v in EDITS])
def test_every_edit_of_the_seed_agrees(kube_api, namespace, edit):
    from tests.helpers import seed_doc

    doc = apply_edit(seed_doc(), edit)
    assert_same_verdict(kube_api, namespace, doc)


def _corpus():
    from tests.api.hostile_cases import CASES, update_of

    return [p for p in CASES if update_of(p) is None]


@pytest.mark.parametrize("path", _corpus(), ids=[p.stem for p in _corpus()])
def test_validate_and_the_api_server_agree_on_the_hostile_corpus(kube_api, namespace, path):
    """The hostile corpus (tests/api/hostile), judged by both without its expectations: the same
    verdict, and a refusal names a related field on both sides."""
    from tests.api.hostile_cases import load_case

    doc, _ = load_case(path)
    assert_same_verdict(kube_api, namespace, doc)
