"""What the chaos tests create, drive and check: many LoraRLJobs, their RayJobs driven through
KubeRay's states by the stand-in, and one convergence check against the API server."""

from __future__ import annotations

import time
from collections.abc import Callable

import yaml
from lorarl.runtime.kube import Api
from lorarl_dev import audit
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.helpers import seed_doc, wait_for

JOB = ("lorarl.dev/v1alpha1", "LoraRLJob")
CHILD_KINDS = [
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "ConfigMap"),
    ("v1", "PersistentVolumeClaim"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("ray.io/v1", "RayJob"),
]

#: KubeRay v1.5.0 sequences (see lorarl_dev.kuberay_sim) and the phase each one ends in
DRIVES: dict[str, tuple[tuple[str, ...], str]] = {
    "pending": ((), "Pending"),
    "preparing": (("initializing",), "Preparing"),
    "running": (("initializing", "submitted", "running"), "Running"),
    "succeeded": (("initializing", "submitted", "running", "succeeded"), "Succeeded"),
    "failed": (("initializing", "submitted", "running", "app_failed"), "Failed"),
}


def job_doc(namespace: str, name: str) -> dict:
    doc = seed_doc()
    doc["metadata"] = {**doc["metadata"], "name": name, "namespace": namespace}
    return doc


def apply_jobs(control_plane, namespace: str, names: list[str]) -> None:
    """One `kubectl apply` of several LoraRLJobs (a burst, as a GitOps sync would send it)."""
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([job_doc(namespace, n) for n in names]))


def delete_jobs(control_plane, namespace: str, names: list[str]) -> None:
    control_plane.kubectl("delete", "lorarljob", "-n", namespace, "--wait=false", *names)


def drive(kube: Api, namespace: str, name: str, to: str) -> FakeKubeRay:
    """Move the job's RayJob through KubeRay's status writes up to state ``to`` (see DRIVES)."""
    ray = FakeKubeRay(kube, namespace, name)
    for step in DRIVES[to][0]:
        getattr(ray, step)()
    return ray


def _owner_uid(obj: dict) -> str | None:
    refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("kind") == "LoraRLJob"]
    return refs[0]["uid"] if refs else None


def problems(kube: Api, namespace: str, expected: dict[str, str]) -> list[str]:
    """Everything that differs from a converged namespace, as read from the API server:
    exactly the expected jobs, each with its phase and observedGeneration, no finalizer, exactly
    one RayJob owned by it (and each other child), and no child whose owner is gone."""
    found: list[str] = []
    jobs = {j["metadata"]["name"]: j for j in kube.list(*JOB, namespace)}
    if set(jobs) != set(expected):
        found.append(f"jobs {sorted(set(jobs) ^ set(expected))} unexpected or missing")
    uids = {j["metadata"]["uid"]: n for n, j in jobs.items()}
    for name, job in jobs.items():
        st, meta = job.get("status") or {}, job["metadata"]
        if name in expected and st.get("phase") != expected[name]:
            found.append(f"{name}: phase {st.get('phase')} != {expected[name]}")
        if st.get("observedGeneration") != meta.get("generation"):
            found.append(f"{name}: observedGeneration {st.get('observedGeneration')} != {meta.get('generation')}")
        if meta.get("finalizers"):
            found.append(f"{name}: finalizers {meta['finalizers']}")
    for api_version, kind in CHILD_KINDS:
        owned: dict[str, list[str]] = {}
        for obj in kube.list(api_version, kind, namespace):
            uid = _owner_uid(obj)
            if uid is None:
                continue  # not ours (the namespace's default ServiceAccount)
            if uid not in uids:
                found.append(f"orphan {kind} {obj['metadata']['name']} (owner {uid} is gone)")
                continue
            owned.setdefault(uids[uid], []).append(obj["metadata"]["name"])
        for name in jobs:
            if len(owned.get(name, [])) != 1:
                found.append(f"{name}: {len(owned.get(name, []))} {kind}s {owned.get(name)}")
    return found


def converge(kube: Api, namespace: str, expected: dict[str, str], since: float, timeout: float = 120) -> float:
    """Wait until the namespace has converged; return the seconds since ``since`` (monotonic)."""
    last: list[list[str]] = [[]]

    def done() -> bool:
        last[0] = problems(kube, namespace, expected)
        return not last[0]

    try:
        wait_for(done, timeout=timeout, interval=0.25, what="convergence")
    except AssertionError:
        raise AssertionError(f"not converged after {timeout}s: {last[0][:20]}") from None
    return time.monotonic() - since


def gone(kube: Api, namespace: str, names: list[str]) -> Callable[[], bool]:
    """Nothing is left of these jobs: neither the job nor any child carrying its name."""

    def check() -> bool:
        if any(kube.get(*JOB, namespace, n) for n in names):
            return False
        for api_version, kind in CHILD_KINDS:
            for obj in kube.list(api_version, kind, namespace):
                if any(obj["metadata"]["name"] == n or obj["metadata"]["name"].startswith(f"{n}-") for n in names):
                    return False
        return True

    return check


def operator_identity(plane, namespace: str, tmp_path):
    """A kubeconfig for ServiceAccount ``<namespace>/operator`` with cluster-admin (this test is
    about faults, not RBAC: tests/operator/test_operator_rbac.py covers that), and its user name."""
    plane.ensure_service_account(namespace, "operator")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"chaos-operator-{namespace}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    return plane.restricted_kubeconfig(namespace, "operator"), f"system:serviceaccount:{namespace}:operator"


def requests_of(plane, user: str) -> int:
    return sum(1 for _ in audit.requests(plane.audit_log_path, user))
