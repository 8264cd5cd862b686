"""A KubeRay stand-in for tests and the demo (the real controller needs a kubelet and a Ray
dashboard, which these machines do not have).

Each method is one status write of KubeRay v1.5.0's RayJob controller,
``ray-operator/controllers/ray/rayjob_controller.go`` (lines cited below, "rjc:N"), with the
same fields set and cleared. KubeRay replaces the whole status (``r.Status().Update``,
rjc:868) and writes only when ``jobStatus`` or ``jobDeploymentStatus`` changes (rjc:859-860);
the stand-in keeps KubeRay's view of the status and sends the difference as a merge patch
(cleared fields are omitempty in ``apis/ray/v1/rayjob_types.go``, so they are removed).
Every write passes ``checkBackoffLimitAndUpdateStatusIfNeeded`` first (rjc:420, 486-524):
``failed``/``succeeded`` are always written, ``failed`` grows by one on a write that fails the
job, and such a failure becomes ``Retrying`` while ``failed < backoffLimit + 1`` unless its
reason is ``DeadlineExceeded`` (rjc:510-522). ``endTime`` is set by a write to ``Complete`` or
``Failed`` (rjc:862-864), never by ``Retrying``.

The sequences (jobDeploymentStatus; "" is KubeRay's ``New``):

- first run: "" -> Initializing -> Running (jobStatus "") -> Running (RUNNING) -> Complete | Failed
- retry: ... Running -> Retrying -> "" -> Initializing -> ... (new cluster, job id, startTime)
- suspend/resume: Initializing | Running -> Suspending -> Suspended -> "" -> Initializing -> ...
- deadline: Initializing | Running -> Failed (DeadlineExceeded, never retried)

``tests/operator/test_real_kuberay.py`` checks the suspend/resume, retry and deadline
sequences against the real kuberay-operator on kwok nodes.
"""

from __future__ import annotations

import copy
import datetime
import random
import string
from typing import Any

from lorarl.runtime.kube import Api

NEW = ""  # JobDeploymentStatusNew and JobStatusNew (apis/ray/v1/rayjob_types.go:18,48)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rand5() -> str:
    # utils.GenerateRayJobId / GenerateRayClusterName: "<rayjob>-<5 random chars>"
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


#: what the Retrying -> New and Suspending -> Suspended writes reset (rjc:368-377)
RESET_FIELDS = ("rayClusterStatus", "rayClusterName", "dashboardURL", "jobId", "message", "reason", "rayJobInfo", "jobStatus")


class FakeKubeRay:
    def __init__(self, kube: Api, namespace: str, name: str):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.status: dict[str, Any] = {}  # the status as KubeRay last wrote it
        self.writes: list[dict[str, Any]] = []  # every status written, in order
        self._names: dict[str, str] = {}  # names for the next initializing (stable recordings)

    @property
    def cluster(self) -> str | None:
        return self.status.get("rayClusterName") or self._names.get("rayClusterName")

    @cluster.setter
    def cluster(self, name: str) -> None:
        self._names["rayClusterName"] = name

    @property
    def job_id(self) -> str | None:
        return self.status.get("jobId") or self._names.get("jobId")

    @job_id.setter
    def job_id(self, name: str) -> None:
        self._names["jobId"] = name

    @property
    def failed(self) -> int:
        return self.status.get("failed", 0)

    def _spec(self) -> dict[str, Any]:
        return self.kube.get("ray.io/v1", "RayJob", self.namespace, self.name)["spec"]

    def _write(self, new: dict[str, Any], fails: bool = False) -> dict[str, Any]:
        """checkBackoffLimitAndUpdateStatusIfNeeded (rjc:486-524), then updateRayJobStatus
        (rjc:852-873)."""
        new = {k: v for k, v in new.items() if v not in (None, "", {})}
        failed = self.status.get("failed", 0) + (1 if fails else 0)
        succeeded = self.status.get("succeeded", 0)
        if new.get("jobDeploymentStatus") == "Complete" and new.get("jobStatus") == "SUCCEEDED":
            succeeded += 1  # rjc:503-505
        new["failed"], new["succeeded"] = failed, succeeded  # rjc:507-508
        backoff = self._spec().get("backoffLimit")
        if fails and backoff is not None and failed < backoff + 1 and new.get("reason") != "DeadlineExceeded":
            new["jobDeploymentStatus"] = "Retrying"  # rjc:510-522
        if new.get("jobDeploymentStatus") in ("Complete", "Failed"):
            new["endTime"] = _now()  # rjc:862-864
        patch: dict[str, Any] = {k: v for k, v in new.items() if self.status.get(k) != v}
        patch.update({k: None for k in self.status if k not in new})
        self.kube.patch_status("ray.io/v1", "RayJob", self.namespace, self.name, patch)
        self.status = new
        self.writes.append(copy.deepcopy(new))
        return new

    def _with(self, **changes) -> dict[str, Any]:
        return {**self.status, **changes}

    # -- first run -------------------------------------------------------------------------
    def initializing(self) -> dict[str, Any]:
        """New -> Initializing (rjc:166-178, initRayJobStatusIfNeed rjc:820-850): a job id and a
        cluster name when empty, jobStatus New, startTime now."""
        return self._write(
            self._with(
                jobId=self.status.get("jobId") or self._names.pop("jobId", None) or f"{self.name}-{_rand5()}",
                rayClusterName=self.status.get("rayClusterName") or self._names.pop("rayClusterName", None) or f"{self.name}-{_rand5()}",
                jobDeploymentStatus="Initializing",
                startTime=_now(),
            )
        )

    def submitted(self) -> dict[str, Any]:
        """Initializing -> Running once the RayCluster is Ready: the dashboard URL is set and the
        submitter Job created (rjc:204-228); jobStatus is still New."""
        return self._write(self._with(jobDeploymentStatus="Running", dashboardURL=f"{self.cluster}-head-svc.{self.namespace}.svc.cluster.local:8265"))

    def running(self, message: str = "Job is currently running.", started: str | None = None) -> dict[str, Any]:
        """Running, with the Ray job's status from the dashboard (rjc:313-344); ``started``: the
        Ray job's start time the dashboard reported (rayJobInfo.startTime, rjc:338-341), else now."""
        return self._write(
            self._with(jobDeploymentStatus="Running", jobStatus="RUNNING", reason=None, message=message, rayJobInfo={"startTime": started or _now()})
        )

    def succeeded(self, message: str = "Job finished successfully.") -> dict[str, Any]:
        """Running -> Complete, Ray job SUCCEEDED (rjc:322-335); succeeded + 1 (rjc:503-505)."""
        return self._write(self._with(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", reason=None, message=message))

    # -- failures (each becomes Retrying while backoffLimit allows) -------------------------
    def app_failed(self, message: str = "Job entrypoint command failed with exit code 1") -> dict[str, Any]:
        """Running -> Failed, Ray job FAILED, reason AppFailed (rjc:322-335)."""
        return self._write(self._with(jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed", message=message), fails=True)

    def submission_failed(self) -> dict[str, Any]:
        """Running -> Failed when the submitter Job hit its backoff limit (rjc:1048-1061)."""
        return self._write(
            self._with(
                jobDeploymentStatus="Failed",
                reason="SubmissionFailed",
                message="Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit",
            ),
            fails=True,
        )

    def submitter_finished_timeout(self, finished_at: str = "2026-11-30 08:00:00") -> dict[str, Any]:
        """Running -> Failed 30 s after the submitter finished while the Ray job is not terminal
        (rjc:39, 270-272, 1126-1148): what the real operator does here, where the submitter pod
        "succeeds" on kwok and no dashboard answers."""
        return self._write(
            self._with(
                jobDeploymentStatus="Failed",
                jobStatus="FAILED",
                reason="JobDeploymentStatusTransitionGracePeriodExceeded",
                message=f"The RayJob submitter finished at {finished_at} but the ray job did not reach terminal state within 30s",
            ),
            fails=True,
        )

    def deadline_exceeded(self) -> dict[str, Any]:
        """Initializing | Running -> Failed past spec.activeDeadlineSeconds (rjc:184, 242,
        1113-1124); never retried (rjc:511-518)."""
        deadline = self._spec().get("activeDeadlineSeconds", 172800)
        return self._write(
            self._with(
                jobDeploymentStatus="Failed",
                reason="DeadlineExceeded",
                message=f"The RayJob has passed the activeDeadlineSeconds. StartTime: {self.status.get('startTime')}. ActiveDeadlineSeconds: {deadline}",
            ),
            fails=True,
        )

    def new_attempt(self) -> dict[str, Any]:
        """Retrying -> New once the old cluster and submitter are deleted (rjc:345-384): the
        cluster, job id, URL, reason, message and Ray job info are reset; failed, succeeded and
        startTime stay (a new startTime comes with the next Initializing)."""
        assert self.status.get("jobDeploymentStatus") == "Retrying", self.status
        return self._write({**{k: v for k, v in self.status.items() if k not in RESET_FIELDS}, "jobDeploymentStatus": NEW})

    def retrying(self, message: str = "Job entrypoint command failed with exit code 1") -> dict[str, Any]:
        """A failed attempt with backoffLimit left: Running -> Retrying -> New (rjc:510-522, 345-384)."""
        written = self.app_failed(message)
        assert written["jobDeploymentStatus"] == "Retrying", "spec.backoffLimit allows no retry"
        return self.new_attempt()

    # -- suspend and resume -------------------------------------------------------------------
    def suspending(self) -> dict[str, Any]:
        """Initializing | Running with spec.suspend -> Suspending (rjc:180, 238, 964-981)."""
        assert self.status.get("jobDeploymentStatus") in ("Initializing", "Running"), self.status
        return self._write(self._with(jobDeploymentStatus="Suspending"))

    def suspended(self) -> dict[str, Any]:
        """Suspending -> Suspended once the cluster is deleted (rjc:345-381): the run's fields are
        reset; failed, succeeded and startTime stay."""
        return self._write({**{k: v for k, v in self.status.items() if k not in RESET_FIELDS}, "jobDeploymentStatus": "Suspended"})

    def resumed(self) -> dict[str, Any]:
        """Suspended with spec.suspend false -> New (rjc:385-391); Initializing follows."""
        return self._write(self._with(jobDeploymentStatus=NEW, jobStatus=NEW))

    def validation_failed(self, message="The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"):
        """Any state -> ValidationFailed (rjc:144-161); this write skips the counters."""
        new = self._with(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=message)
        patch = {k: v for k, v in new.items() if self.status.get(k) != v}
        self.kube.patch_status("ray.io/v1", "RayJob", self.namespace, self.name, patch)
        self.status = new
        self.writes.append(copy.deepcopy(new))
        return new

    def deployment_statuses(self) -> list[str]:
        return [w.get("jobDeploymentStatus", NEW) for w in self.writes]
