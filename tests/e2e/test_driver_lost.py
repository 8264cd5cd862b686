"""The Ray head's container dies mid-run on the real node (``ray stop --force`` in it: every Ray
process of the head, the job's driver among them, ends; ``ray start --block`` exits and the
kubelet restarts the container in place). KubeRay v1.5.0 reads the job's status from that head,
whose new GCS does not know the job: the job must not stay ``Training`` with a dead driver.

What may truthfully follow (which one is recorded and printed): the operator's ``DriverLost``
(naming the head pod's Ray container); KubeRay's own failure (the submitter's retries used up:
``SubmissionFailed``, or its 30 s after a finished submitter); or the submitter re-submitting the
job to the restarted head (a new Ray job start in the RayJob's ``rayJobInfo.startTime``). The
oracles: the kubelet's container state, KubeRay's RayJob status, the LoraRLJob status.
First run (2026-12-04, alone on the node): re-submitted, the job still Training throughout
(the submitter retried before DriverLost's 60 s grace ran out). The whole suite's run after the
reporter sidecar came: this test read the first container status, the sidecar's (the kubelet sorts
them by name), never saw the restart and waited out its 900 s while the job re-submitted and
Succeeded; it reads the Ray container by name now.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import MEASURED

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
KUBERAY_FAILURES = ("SubmissionFailed", "JobDeploymentStatusTransitionGracePeriodExceeded", "AppFailed")


def test_a_head_restarted_mid_run_does_not_leave_the_job_training(real_node_cluster, hub, node_images, job_ns):
    cp, ns, name = real_node_cluster, job_ns, "f-driver"
    revision = hub.revision({"seconds_per_rollout": 2.0})
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision)
    seedrun.wait_for("rollout >= 3", lambda: seedrun.rollout_at_least(cp, ns, name, 3), RUN_TIMEOUT, explain=explain)
    started = (seedrun.get(cp, "rayjob", name, ns)["status"].get("rayJobInfo") or {}).get("startTime")
    (head,) = seedrun.pods(cp, ns, "ray.io/node-type=head")
    head_name = head["metadata"]["name"]
    cp.kubectl("exec", "-n", ns, head_name, "-c", "ray-head", "--", "ray", "stop", "--force", check=False, timeout=120)
    killed = time.monotonic()
    seen: dict[str, float] = {}

    def outcome():
        st = seedrun.job_status(cp, ns, name)
        ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        seen.setdefault(ready.get("reason", "?"), round(time.monotonic() - killed, 1))
        rayjob = (seedrun.get(cp, "rayjob", name, ns) or {}).get("status") or {}
        head_pod = (seedrun.pods(cp, ns, "ray.io/node-type=head") or [{}])[0]
        # the Ray container's status by name: the kubelet sorts the statuses by name, and the
        # reporter sidecar's comes first
        ray_head = next((cs for cs in (head_pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == "ray-head"), {})
        restarted = ray_head.get("restartCount", 0)
        if ready.get("reason") == "DriverLost" or ready.get("reason") in KUBERAY_FAILURES or st.get("phase") == "Failed":
            return ready.get("reason"), ready.get("message", ""), st
        if restarted and (rayjob.get("rayJobInfo") or {}).get("startTime") not in (None, started):
            return "Resubmitted", json.dumps(rayjob.get("rayJobInfo")), st
        if restarted and st.get("phase") == "Succeeded":  # re-submitted and finished between two polls
            return "Succeeded", json.dumps(rayjob.get("rayJobInfo")), st
        return None

    reason, message, st = seedrun.wait_for("the job to say the driver is gone (or KubeRay to act)", outcome, RUN_TIMEOUT, explain=explain)
    MEASURED.append(f"test_driver_lost: after the head's ray stop: {reason} (first seen, seconds after: {json.dumps(seen, sort_keys=True)})")
    print(f"\n{name}: {st.get('phase')} {reason}: {message}", file=sys.stderr)
    if reason == "DriverLost":
        assert st["phase"] == "Running" and st["rayJob"]["jobStatus"] == "RUNNING", st
        assert f"head pod {head_name}" in message and "after the Ray job started" in message, message
