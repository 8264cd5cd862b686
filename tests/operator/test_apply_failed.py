"""A child the API server refuses reaches the status (Stalled=True, ApplyFailed, the server's
message naming the child), posts one Warning Event, and the job recovers by itself once the
cause is fixed, without restarting the operator. The refusals are the real API server's: a
ValidatingAdmissionPolicy (admission refused, as a webhook or a missing CRD would) and RBAC."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.chart.helm import operator_rbac
from tests.helpers import DENIAL, NAME, apply_job, conditions, events, job, rayjob, refuse_rayjobs, seed_doc, wait_for
from tests.operator.conftest import OperatorProcess

pytestmark = pytest.mark.controlplane


def stalled(kube, namespace, reason):
    def check():
        st = (job(kube, namespace) or {}).get("status") or {}
        cond = next((c for c in st.get("conditions", []) if c["type"] == "Stalled"), None)
        return cond if cond and cond["status"] == "True" and cond["reason"] == reason else None

    return check


def recovered(kube, namespace):
    def check():
        st = (job(kube, namespace) or {}).get("status") or {}
        c = conditions(st)
        return st if rayjob(kube, namespace) and c.get("Stalled") == ("False", "NoError") else None

    return check


def test_refused_rayjob_stalls_warns_once_and_recovers(control_plane, namespace, kube, operator, request):
    binding = refuse_rayjobs(control_plane, namespace, request)
    apply_job(control_plane, namespace, seed_doc())
    cond = wait_for(stalled(kube, namespace, "ApplyFailed"), timeout=60, what="Stalled=True ApplyFailed")
    assert cond["message"].startswith(f"applying RayJob {namespace}/{NAME}: ")
    # the policy's words are the operator's log's, not the job's status (issue 35, point 6)
    assert DENIAL not in cond["message"] and binding not in cond["message"], cond["message"]
    wait_for(lambda: DENIAL in operator.output() and binding in operator.output(), what="the server's words in the operator's log")
    st = job(kube, namespace)["status"]
    c = conditions(st)
    assert st["phase"] == "Pending" and c["Ready"] == ("False", "ApplyFailed") and c["Reconciling"][0] == "False"
    assert st["observedGeneration"] == job(kube, namespace)["metadata"]["generation"]
    assert rayjob(kube, namespace) is None
    # the ConfigMap before the RayJob went through: only the refused child is missing
    assert kube.get("v1", "ConfigMap", namespace, f"{NAME}-lorarl") is not None
    wait_for(lambda: ("Warning", "ApplyFailed") in events(kube, namespace), what="the ApplyFailed Event")
    # the work queue retries with a per-key backoff (and is refused again) while the policy stands
    wait_for(lambda: operator.output().count(f"(retry): applying RayJob {namespace}/{NAME}") >= 2, timeout=60, what="two refused retries")

    control_plane.kubectl("delete", "validatingadmissionpolicybinding", binding)
    st = wait_for(recovered(kube, namespace), timeout=120, what="the job to recover by itself")
    c = conditions(st)
    assert c["Ready"][1] != "ApplyFailed" and c["Reconciling"] == ("True", "RayJobCreated")
    assert events(kube, namespace).count(("Warning", "ApplyFailed")) == 1  # retries post no Event
    assert operator.proc.poll() is None  # the same operator process, never restarted


def test_a_refusal_names_the_field_never_the_value(kube, namespace):
    """Issue 35, point 6: the real API server's 422 quotes the refused value in its message; the
    ApplyFailed message keeps only the object, the field (the Status's causes) and the reason."""
    from lorarl.control import status
    from lorarl.runtime.kube import ApiError

    secret = "SECRET value of another team"
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim", "namespace": namespace, "labels": {"k": secret}}}
    with pytest.raises(ApiError) as caught:
        kube.apply(child, field_manager="lorarl-test")
    err = caught.value
    assert err.status == 422 and secret in str(err) and err.fields == ("metadata.labels",), (str(err), err.fields)
    text = status.apply_failure("ConfigMap", namespace, "victim", err)
    assert text.startswith(f"applying ConfigMap {namespace}/victim: 422 ") and "(Invalid); fields: metadata.labels;" in text, text
    assert "SECRET" not in text and "Invalid value" not in text


def test_forbidden_configmap_stalls_and_recovers_when_granted(control_plane, namespace, kube, tmp_path, helm):
    # release name = namespace: the ClusterRole/Binding names are unique to this test
    docs = operator_rbac(helm, namespace, release=namespace, watch_namespaces=[namespace])
    cluster_scoped = [d for d in docs if d["kind"].startswith("Cluster")]
    sa_name = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    restricted = copy.deepcopy(docs)
    role = next(d for d in restricted if d["kind"] == "Role" and any("configmaps" in r["resources"] for r in d["rules"]))
    for rule in role["rules"]:
        if "configmaps" in rule["resources"]:
            rule["resources"].remove("configmaps")
    role["rules"] = [r for r in role["rules"] if r["resources"]]  # a rule left with no resource is invalid
    role["rules"].append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]})  # no create
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(restricted))
    kubeconfig = control_plane.restricted_kubeconfig(namespace, sa_name)
    assert control_plane.kubectl("auth", "can-i", "create", "configmaps", "-n", namespace, kubeconfig=kubeconfig, check=False).stdout.strip() == "no"
    op = OperatorProcess(control_plane, namespace, tmp_path, kubeconfig=kubeconfig).start()
    try:
        apply_job(control_plane, namespace, seed_doc())
        cond = wait_for(stalled(kube, namespace, "ApplyFailed"), timeout=60, what="Stalled=True ApplyFailed")
        assert cond["message"].startswith(f"applying ConfigMap {namespace}/{NAME}-lorarl: 403 ")
        assert "the operator may not write it" in cond["message"] and "cannot create resource" not in cond["message"], cond["message"]
        assert rayjob(kube, namespace) is None  # nothing after the refused child is applied
        wait_for(lambda: ("Warning", "ApplyFailed") in events(kube, namespace), what="the ApplyFailed Event")

        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))  # grant the chart's rules
        wait_for(recovered(kube, namespace), timeout=120, what="the job to recover by itself")
        assert kube.get("v1", "ConfigMap", namespace, f"{NAME}-lorarl") is not None
        assert events(kube, namespace).count(("Warning", "ApplyFailed")) == 1
        assert op.proc.poll() is None
    finally:
        op.stop()
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(cluster_scoped), check=False)
