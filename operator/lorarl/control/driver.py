"""Pure: is the Ray driver that KubeRay reports RUNNING still there? (reason DriverLost)

Where the driver runs: KubeRay submits the entrypoint with ``ray job submit`` (K8sJobMode,
ray-operator v1.5.0 controllers/ray/common/job.go:85-199) and the render asks for no entrypoint
resources, so Ray runs the job's supervisor actor, and the entrypoint as its subprocess, on the
head node (Ray 2.55.1 dashboard/modules/job/job_manager.py:424-470: NodeAffinity to the head
unless resources are given): in the head pod's Ray container (KubeRay's container 0).

Why KubeRay may not see it gone: it learns the Ray job's status from the dashboard on that same
head (rayjob_controller.go:283-310); a head that restarted has a new GCS that does not know the
job (no GCS fault tolerance in the render), and a head that is gone does not answer: KubeRay then
keeps the last status it read, Running/RUNNING (its most-reported RayJob bug: kuberay#1489,
#2154, #3860, #3903, #4217). v1.5.0 resolves it itself only through the submitter: a submitter
Job that failed its backoffLimit fails the RayJob (rayjob_controller.go:1035-1061), one that
finished while the job is not terminal fails it 30 s later (39, 270-272, 1126-1148). Until
then it stays RUNNING: the submitter's ``ray job logs --follow`` exits 1 on an abnormal close
(Ray 2.55.1 dashboard/modules/job/sdk.py:517-537) and the Job retries it with back-off, each
retry re-submitting the job to a restarted head that does not know it (common/job.go:114-125:
the entrypoint starts again from its beginning); and a head whose node is gone sends no FIN, so
the submitter may wait on its stream for good.

So, without log access, from the pods the operator already watches: the driver is gone when the
RayJob says Running/RUNNING and the head pod of its current RayCluster
* is gone (deleted: KubeRay v1.5.0 deletes an ended head, raycluster_controller.go:605-612, 1034-1045,
  and does not re-create the head of a RayJob's provisioned cluster: 621-631), or
* is being deleted, or has ended (phase Failed/Succeeded), or
* its Ray container (restartPolicy Always: restarted in place) ended at or after the Ray job's
  start (``status.rayJobInfo.startTime``, the dashboard's: rayjob_controller.go:338-341). A
  restart before the job started (a raylet that missed its registration on a loaded node) does
  not count, nor one before a re-submitted job's new start; without that start time only a
  gone or ended head counts.
Each counts ``GRACE_SECONDS`` after it happened (so KubeRay's own verdict, which names the
submitter, comes first when it comes). A head is known gone only when the operator saw it go
(cache.Caches.gone_heads, kept in memory: after an operator restart a head deleted before it is
not judged).
"""

from __future__ import annotations

import datetime
from typing import Any

from .times import parse_time

DRIVER_LOST = "DriverLost"
GRACE_SECONDS = 60  # twice KubeRay's 30 s after a finished submitter (rayjob_controller.go:39)
CLUSTER_LABEL, NODE_TYPE_LABEL = "ray.io/cluster", "ray.io/node-type"  # KubeRay's (utils/constant.go:19-20)


def _ray_container(pod: dict[str, Any]) -> dict[str, Any]:
    """The status of KubeRay's Ray container (the pod's first container: utils.RayContainerIndex)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    name = containers[0].get("name")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((cs for cs in statuses if cs.get("name") == name), {})


def _head_ended(pod: dict[str, Any], job_start: datetime.datetime | None) -> tuple[datetime.datetime, str] | None:
    """(since when, what happened) when this head pod can no longer hold the driver."""
    name = pod["metadata"].get("name", "?")
    deleting = parse_time(pod["metadata"].get("deletionTimestamp"))
    if deleting is not None:
        return deleting, f"the Ray head pod {name} is being deleted (deletionTimestamp {pod['metadata']['deletionTimestamp']})"
    cs = _ray_container(pod)
    state, last = (cs.get("state") or {}).get("terminated"), (cs.get("lastState") or {}).get("terminated")
    ended = state or last or {}
    finished = parse_time(ended.get("finishedAt"))
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded") and finished is not None:
        return finished, f"the Ray head pod {name} has ended (phase {phase}, exit code {ended.get('exitCode')})"
    # finishedAt has whole seconds: compare with the job's start truncated the same way
    if finished is not None and job_start is not None and finished >= job_start.replace(microsecond=0):
        restarts = cs.get("restartCount", 0) or 0
        return finished, (
            f"the Ray container {cs.get('name')} of head pod {name} ended at {ended.get('finishedAt')} "
            f"(exit code {ended.get('exitCode')}, {ended.get('reason') or 'no reason'}; {restarts} restart{'' if restarts == 1 else 's'}) "
            "after the Ray job started: the driver ran in it, and a restarted head does not know the job"
        )
    return None


def lost(
    rayjob: dict[str, Any] | None,
    pods: list[dict[str, Any]] | None,
    now: datetime.datetime,
    gone_heads: dict[str, dict[str, Any]] | None = None,
    grace: int = GRACE_SECONDS,
) -> tuple[str | None, datetime.datetime | None]:
    """(the DriverLost message, or None; when to judge again). ``pods``: the job's pods from a
    complete listing (None: not known, nothing is judged); ``gone_heads``: RayCluster name ->
    {name, at} of head pods seen deleted (cache.Caches.gone_heads)."""
    if rayjob is None or pods is None:
        return None, None
    st = rayjob.get("status") or {}
    cluster = st.get("rayClusterName")
    if not cluster or (st.get("jobDeploymentStatus"), st.get("jobStatus")) != ("Running", "RUNNING"):
        return None, None
    job_start = parse_time((st.get("rayJobInfo") or {}).get("startTime"))
    heads = sorted(
        (
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(CLUSTER_LABEL) == cluster and (p["metadata"].get("labels") or {}).get(NODE_TYPE_LABEL) == "head"
        ),
        key=lambda p: p["metadata"].get("name", ""),
    )
    rayjob_name = rayjob["metadata"]["name"]
    after = f"while RayJob {rayjob_name} still says RUNNING (KubeRay reads the job's status from that head)"
    remedy = "; suspend and resume the job (spec.suspend) for a new Ray cluster that resumes from the newest checkpoint"
    if heads:
        ended = [_head_ended(p, job_start) for p in heads]
        if any(e is None for e in ended):
            return None, None
        since, what = min(e for e in ended if e is not None)
    else:
        gone = (gone_heads or {}).get(cluster) or {}
        deleted = parse_time(gone.get("at"))
        if deleted is None:  # never seen, so not seen go (a head not listed yet, a stand-in without pods)
            return None, None
        since, what = deleted, f"the Ray head pod {gone.get('name')} of RayCluster {cluster} was deleted ({gone.get('at')}) and KubeRay does not re-create it"
    due = since + datetime.timedelta(seconds=grace)
    if now < due:
        return None, due
    return f"the driver is gone: {what}, {after}{remedy}; kubectl describe pod says why it ended", None
