"""Issue 35, point 3: a spec too large to render fails visibly.

The CRD's bounds keep the largest spec it admits small enough that every child it renders fits
in etcd (its default --max-request-bytes is 1.5 MiB) with margin: the RayJob, which copies the
placement (affinity, tolerations, node selector) into each pod template, is rendered from the
largest placement the CRD admits. And an object the API server will not store (413, or etcd's
"request is too large" 500) is a refusal to fix, not a transient error: the reconcile reports it
as ApplyFailed (Stalled=True, an Event) at once instead of retrying it in silence."""

from __future__ import annotations

import json

import pytest
from lorarl.admission import crdgen
from lorarl.api import types as api
from lorarl.job import render
from lorarl.runtime.kube import ApiError

from tests.helpers import MANIFESTS, load

ETCD_LIMIT = 1536 * 1024  # etcd's default --max-request-bytes, as the API server's storage meets it
BOUND = ETCD_LIMIT * 3 // 4  # the largest a child may be, by the bound below: a quarter of etcd's limit to spare


def maximal(schema: dict, key_length: int = 317):
    """The largest instance of a schema's shape (JSON size): every list at maxItems, every map at
    maxProperties (keys of ``key_length``), every string at maxLength, the longest enum value."""
    if "enum" in schema:
        return max(schema["enum"], key=lambda e: len(json.dumps(e)))
    kind = schema.get("type")
    if kind == "string":
        return "a" * schema.get("maxLength", 0)
    if kind in ("integer", "number"):
        return schema.get("maximum", 2**63 - 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return [maximal(schema.get("items", {})) for _ in range(schema.get("maxItems", 0))]
    out = {k: maximal(v) for k, v in (schema.get("properties") or {}).items()}
    if isinstance(schema.get("additionalProperties"), dict):
        for i in range(schema.get("maxProperties", 0)):
            out[f"{i:04d}".rjust(key_length, "a")] = maximal(schema["additionalProperties"])
    return out


def spec_schema() -> dict:
    return crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


QUALIFIED = ".".join(["a" * 63] * 3 + ["a" * 61]) + "/" + "a" * 60  # 253 + "/" + 63, less 3 for an index


def largest_placement() -> dict:
    """The largest affinity, tolerations and node selector the CRD admits (the affinity is passed
    through unchecked by the model, the typed lists are given valid values of maximal length)."""
    hw = spec_schema()["properties"]["hardware"]["properties"]
    return {
        "affinity": maximal(hw["affinity"]),
        "tolerations": [
            {"key": f"{QUALIFIED}{i:03d}", "operator": "Equal", "value": "a" * 63, "effect": "NoSchedule", "tolerationSeconds": 2**62}
            for i in range(hw["tolerations"]["maxItems"])
        ],
        "nodeSelector": {f"{QUALIFIED}{i:03d}": "a" * 63 for i in range(hw["nodeSelector"]["maxProperties"])},
    }


def test_the_largest_spec_the_crd_admits_renders_children_that_fit_with_margin():
    doc = load(MANIFESTS / "mi300x-2node.yaml")  # a worker group too: the placement is in every pod template
    doc["spec"]["hardware"].update(largest_placement())
    children = render.children(api.LoraRLJob.model_validate(doc)).in_apply_order()
    sizes = {c["kind"]: len(json.dumps(c)) for c in children}
    # the rest of the spec (names, paths, arguments: every other field at its largest), were it
    # copied into the RayJob as often as the placement is
    placement = len(json.dumps(largest_placement()))
    rest = len(json.dumps(maximal(spec_schema()))) - len(json.dumps(maximal(spec_schema()["properties"]["hardware"]["properties"]["affinity"])))
    copies = -(-sizes["RayJob"] // placement)
    assert sizes["RayJob"] + copies * rest < BOUND, (sizes, placement, rest, copies)
    assert max(sizes.values()) < BOUND


def test_the_affinity_is_bounded_where_its_lists_multiply():
    """The bounds that keep it small (crdgen.AFFINITY_MAX_ITEMS): the issue's 32 terms x 32
    requirements x 19 values is refused by the schema, as is a value no label can hold."""
    affinity = spec_schema()["properties"]["hardware"]["properties"]["affinity"]
    terms = affinity["properties"]["nodeAffinity"]["properties"]["requiredDuringSchedulingIgnoredDuringExecution"]["properties"]["nodeSelectorTerms"]
    requirement = terms["items"]["properties"]["matchExpressions"]
    values = requirement["items"]["properties"]["values"]
    assert (terms["maxItems"], requirement["maxItems"], values["maxItems"], values["items"]["maxLength"]) == (4, 4, 8, 63)
    assert len(json.dumps(maximal(affinity))) < 400_000


@pytest.mark.parametrize(
    "status,message,fix",
    [
        (413, "Request entity too large: limit is 3145728", True),
        (500, "etcdserver: request is too large", True),
        (500, "rpc error: code = ResourceExhausted desc = trying to send message larger than max (1638910 vs. 1572864)", True),
        (500, "Internal error occurred: resource quota evaluation timed out", False),
        (422, 'RayJob.ray.io "j" is invalid: spec.entrypoint: Too long', True),
    ],
)
def test_an_object_too_large_to_store_is_a_refusal_to_fix_not_a_transient_error(status, message, fix):
    err = ApiError(status, "Reason", message)
    assert (err.needs_fix, err.transient) == (fix, not fix and status >= 500)


@pytest.mark.controlplane
@pytest.mark.parametrize("size", [1_700_000, 3_300_000])  # above etcd's 1.5 MiB; above the API server's 3 MiB body limit
def test_the_real_api_servers_refusal_of_an_object_too_large_is_one_to_fix(kube, namespace, size):
    """As the reconcile meets it: a server-side apply of a RayJob (its CRD bounds no entrypoint) too large to store."""
    rayjob = {
        "apiVersion": render.RAYJOB_API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": "too-large", "namespace": namespace},
        "spec": {"entrypoint": "a" * size},
    }
    with pytest.raises(ApiError) as err:
        kube.apply(rayjob, field_manager="lorarl-test")
    assert err.value.too_large and err.value.needs_fix and not err.value.transient, str(err.value)[:300]


def test_the_apply_failed_message_says_what_to_do_about_a_size():
    from lorarl.control import status

    too_large = status.apply_failure("RayJob", "ns", "j", ApiError(500, "InternalError", "etcdserver: request is too large"))
    assert too_large.startswith("applying RayJob ns/j: 500 InternalError; the object is too large to store")
    assert status.refusal_text(ApiError(422, "Invalid", "spec.x: Invalid value")) == "422 Invalid: spec.x: Invalid value"


@pytest.mark.controlplane
def test_a_rayjob_too_large_to_store_stalls_the_job_with_an_event_in_one_reconcile(control_plane, namespace, kube):
    """The issue's case end to end on the real API server (a spec can no longer make it, so the
    operator's own setting does: a tools image reference of 1.7 MB, in the head pod's template):
    the first reconcile writes Stalled=True, ApplyFailed, and returns its Warning Event."""
    import time

    from lorarl.control.reconcile import Reconciler
    from lorarl.job.settings import RenderSettings

    from tests.helpers import conditions, make_job

    make_job(control_plane, namespace, kube, "huge")
    started = time.monotonic()
    outcome = Reconciler(kube, render_settings=RenderSettings(tools_image="registry.example/" + "a" * 1_700_000)).reconcile(namespace, "huge")
    seconds = time.monotonic() - started
    stored = kube.get("lorarl.dev/v1alpha1", "LoraRLJob", namespace, "huge")["status"]
    assert conditions(stored)["Stalled"] == ("True", "ApplyFailed"), stored
    message = next(c["message"] for c in stored["conditions"] if c["type"] == "Stalled")
    assert message.startswith(f"applying RayJob {namespace}/huge") and "too large to store" in message
    # the Warning Event the controller posts for it (the reconcile returns it; runtime/events.py posts)
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "ApplyFailed")] and "too large to store" in outcome.events[0].message
    assert outcome.apply_failed and seconds < 10, seconds
