"""Which children a reconcile applies (pure): per child, by the digests the RayJob records."""

from __future__ import annotations

import pytest
from lorarl.control.cache import CHILDREN_DIGEST, child_digests, decode_digests, encode_digests, stale_children
from lorarl.control.reconcile import children_to_apply
from lorarl.job import render
from lorarl.job.settings import NetworkPolicySettings, RenderSettings

from tests.helpers import job_from, with_spec

ALL = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "RayJob"}


def digests(doc):
    return child_digests(render.render(job_from(doc)))


def live_rayjob(recorded):
    """The RayJob as the cache holds it, recording ``recorded``."""
    return {"metadata": {"name": "x", "annotations": {CHILDREN_DIGEST: encode_digests(recorded)}}, "spec": {}, "status": {}}


def to_apply(now, recorded, everything=False, suspend_differs=False):
    return children_to_apply(now, live_rayjob(recorded), everything=everything, suspend_differs=suspend_differs)


def test_the_record_is_one_digest_per_child_in_apply_order_and_reads_back():
    seed = digests(with_spec())
    assert list(seed) == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "RayJob"]
    text = encode_digests(seed)
    assert text.count(",") == 6 and text.startswith("ServiceAccount=")
    assert decode_digests(text) == seed
    # an older operator's one digest of all children, an edit by hand, nothing: not a record
    for other in ("0123456789abcdef0123456789abcdef", "RayJob=", "=abc", "", None, 7):
        assert decode_digests(other) == {}


def test_an_edit_that_changes_no_render_applies_nothing():
    seed = digests(with_spec())
    edited = digests(with_spec(runPolicy={"startupTimeoutSeconds": 1234}))
    assert edited == seed
    assert to_apply(edited, seed) == set()


def test_an_edit_applies_only_the_children_whose_render_changed():
    seed = digests(with_spec())
    assert to_apply(digests(with_spec(runPolicy={"backoffLimit": 3})), seed) == {"RayJob"}
    # a claim rendered otherwise (spec.checkpoint is immutable: an operator upgrade, say): the
    # PVC, and the RayJob that carries the record
    bigger = digests(with_spec(checkpoint={"storage": {"size": "999Gi"}}))
    assert to_apply(bigger, seed) == {"PersistentVolumeClaim", "RayJob"}


def test_a_child_no_longer_rendered_updates_the_record():
    seed = digests(with_spec())
    own_account = digests(with_spec(scheduling={"serviceAccountName": "trainer"}))
    assert "ServiceAccount" not in own_account
    assert "RayJob" in to_apply(own_account, seed)
    assert stale_children({"RayJob": "a"}, {"RayJob": "a", "ServiceAccount": "b"}) == {"RayJob"}


def test_the_network_policy_turned_off_or_given_another_peer_applies_it_and_the_record():
    """`lorarl run --no-network-policy`: the policy is no longer rendered (the one applied stays
    until its job goes) and the RayJob carries the new record; another KubeRay peer: the policy."""
    job = job_from(with_spec())
    seed = child_digests(render.render(job))
    off = child_digests(render.render(job, RenderSettings(NetworkPolicySettings(enabled=False))))
    assert set(seed) - set(off) == {"NetworkPolicy"}
    assert to_apply(off, seed) == {"RayJob"}
    elsewhere = child_digests(render.render(job, RenderSettings(NetworkPolicySettings(kuberay_namespace_labels=(("team", "ray"),)))))
    assert to_apply(elsewhere, seed) == {"NetworkPolicy", "RayJob"}


@pytest.mark.parametrize(
    "rayjob, everything",
    [
        (None, False),  # deleted: re-created with everything it mounts
        ({"metadata": {"name": "x"}}, False),  # its record removed by hand
        ({"metadata": {"name": "x", "annotations": {CHILDREN_DIGEST: "0123abcd"}}}, False),  # an older operator's digest
        ("seed", True),  # the repair, a retried refusal, a one-off tool
    ],
)
def test_every_child_is_applied_when_the_record_cannot_be_trusted_or_when_asked(rayjob, everything):
    seed = digests(with_spec())
    live = live_rayjob(seed) if rayjob == "seed" else rayjob
    assert children_to_apply(seed, live, everything=everything, suspend_differs=False) == ALL


def test_a_suspend_that_differs_applies_the_rayjob_alone():
    seed = digests(with_spec())
    assert to_apply(seed, seed, suspend_differs=True) == {"RayJob"}
