"""manifests/kueue/ (a ResourceFlavor, ClusterQueue, LocalQueue and priority classes for
amd.com/gpu) applied to the real Kueue, and manifests/kueue.yaml admitted through them: Kueue
marks the ClusterQueue active and admits the job's Workload on the flavor (its own conditions are
the oracle)."""

from __future__ import annotations

import json

import pytest
from lorarl.control.queueing import JOB_UID_LABEL, WORKLOAD_API_VERSION
from lorarl.runtime.kube import Api

from tests.helpers import MANIFESTS, load, wait_for
from tests.operator.conftest import OperatorProcess

pytestmark = pytest.mark.controlplane


def _condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def test_the_example_queue_admits_the_example_job(kueue_cluster, tmp_path, request):
    cp = kueue_cluster
    ns = "kueue-manifests"
    cp.kubectl("create", "namespace", ns)
    client = cp.api_client()
    kube = Api(client)
    op = None
    try:
        cp.kubectl("apply", "--server-side", "-n", ns, "-f", str(MANIFESTS / "kueue"))

        def active():
            queue = json.loads(cp.kubectl("get", "clusterqueue", "amd-gpus", "-o", "json").stdout)
            return _condition(queue, "Active").get("status") == "True"

        wait_for(active, 60, what="the ClusterQueue to be active")
        op = OperatorProcess(cp, ns, tmp_path).start()
        job = load(MANIFESTS / "kueue.yaml")
        job["metadata"]["namespace"] = ns
        cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(job))

        def admitted():
            rayjob = kube.get("ray.io/v1", "RayJob", ns, job["metadata"]["name"])
            if not rayjob:
                return None
            workloads = kube.list(WORKLOAD_API_VERSION, "Workload", ns, label_selector=f"{JOB_UID_LABEL}={rayjob['metadata']['uid']}")
            return next((w for w in workloads if _condition(w, "Admitted").get("status") == "True"), None)

        workload = wait_for(admitted, 120, what="Kueue to admit the job's Workload")
        assert workload["status"]["admission"]["clusterQueue"] == "amd-gpus"
        flavors = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
        assert flavors["amd.com/gpu"] == "amd-mi355x"
    finally:
        if op is not None:
            op.stop()
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cp.kubectl("delete", "-f", str(MANIFESTS / "kueue"), "-n", ns, "--wait=false", check=False)
        client.close()
