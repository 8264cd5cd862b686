"""Property test on the real API server: every spec the CRD accepts is reconciled without an
operator error, and every child is accepted by the API server with KubeRay's CRD.

Over the fuzz strategy (tests/api/test_fuzz.py: every field, including the pass-through ones:
affinity, nodeSelector, tolerations, resourceName, cpu/memory/shmSize, existingClaim, dataPrep,
eval intervals), ``LORARL_FUZZ_EXAMPLES`` (default 500) specs are drawn, then judged in one batch:
the API server's answer (dry-run create, strict field validation) must equal `lorarl validate`'s;
what the server stored (defaulted) is read as the operator reads it (``parse_stored``), rendered,
and every child is server-side dry-run applied, plus the Ray pod templates as Pods (the Pods
KubeRay creates must pass Pod validation); the RayJob's entrypoint runs through the real quoting
chain (each spec one joiner/shell pairing, in turn) and the trainer must get exactly the
rendered argv, with the values the spec says."""

from __future__ import annotations

import collections
import concurrent.futures
import copy

import pytest
from hypothesis import HealthCheck, given, settings
from lorarl.admission.validation import validate
from lorarl.control.stored import parse_stored
from lorarl.job import command, render

from tests.api.apiserver import dry_run_apply, pods_of
from tests.api.quoting_chain import Chain, every_variant
from tests.api.strategies import FUZZ_EXAMPLES, expected_words, flag_value, valid_specs

pytestmark = pytest.mark.controlplane


def dry_run_create_stored(kube_api, namespace: str, doc: dict):
    """(the object as the API server would store it, None) or (None, the refusal message)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from lorarl.api import types as api

    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    try:
        return client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, body, dry_run="All", field_validation="Strict"
        ), None
    except ApiException as err:
        if err.status not in (400, 422):
            raise
        return None, err.body


def test_every_accepted_spec_reconciles_into_children_the_api_server_accepts(kube_api, namespace):
    drawn: list[dict] = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(valid_specs())
    def collect(doc):
        drawn.append(copy.deepcopy(doc))

    collect()
    assert len(drawn) >= FUZZ_EXAMPLES * 0.9

    chain = Chain()
    variants = every_variant()

    def judge(numbered):
        at, doc = numbered
        """What happened to one spec: ('refused by both'|'accepted, N children'), or a failure."""
        _, problems = validate(copy.deepcopy(doc))
        stored, refusal = dry_run_create_stored(kube_api, namespace, doc)
        if (stored is None) != bool(problems):
            return "FAIL", f"lorarl validate {problems} but the API server {'refused: ' + refusal if refusal else 'accepted'}"
        if stored is None:
            return "refused by both", ""
        job, unknown = parse_stored(stored)  # the operator's read: never an operator error
        children = render.render(job)
        objects = children + pods_of(children[-1])
        for obj in objects:
            answer = dry_run_apply(kube_api, obj)
            if not answer.accepted:
                return "FAIL", f"{obj['kind']} {obj['metadata']['name']} refused: {answer.message}"
        joiner, shell = variants[at % len(variants)]
        received = chain.run(children[-1]["spec"]["entrypoint"], joiner=joiner, head_shell=shell).argv
        if received != command.entrypoint_argv(job)[1:]:
            return "FAIL", f"the trainer got {received} through {joiner} and {shell}"
        train = received[received.index("--") + 1 :]
        wrong = {f: v for f, v in expected_words(doc["spec"]).items() if flag_value(train, f) != v}
        if wrong:
            return "FAIL", f"the trainer's flags differ from the spec: {wrong}"
        return f"accepted, {len(objects)} objects applied (dry run), argv exact", ""

    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(judge, enumerate(drawn)))
    finally:
        chain.close()
    failures = [(doc["spec"], why) for doc, (verdict, why) in zip(drawn, results, strict=False) if verdict == "FAIL"]
    counts = collections.Counter(verdict for verdict, _ in results)
    print(f"\nfuzzed specs on the API server: {len(drawn)}: {dict(counts)}")
    assert not failures, failures[:3]
    assert sum(n for v, n in counts.items() if v.startswith("accepted")) >= len(drawn) * 0.8
