"""A KubeRay stand-in for tests and the demo (the real controller needs a kubelet and a Ray
dashboard, which these machines do not have):
writes RayJob status exactly as KubeRay v1.5 does at each step of rayjob_controller.go:
initRayJobStatusIfNeed, the Running/Complete/Failed updates, checkActiveDeadlineAndUpdateStatus,
the retry path and the suspend path. Fields KubeRay clears ("" with omitempty) are removed."""

from __future__ import annotations

import datetime
import random
import string

from lorarl.kube import Api


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rand5() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


class FakeKubeRay:
    def __init__(self, kube: Api, namespace: str, name: str):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.cluster = f"{name}-{_rand5()}"
        self.job_id = f"{name}-{_rand5()}"
        self.failed = 0

    def _write(self, **status):
        self.kube.patch_status("ray.io/v1", "RayJob", self.namespace, self.name, status)

    def initializing(self):
        """initRayJobStatusIfNeed: job id, cluster name, Initializing, startTime."""
        rj = self.kube.get("ray.io/v1", "RayJob", self.namespace, self.name)
        self._write(
            jobId=self.job_id, rayClusterName=self.cluster, jobDeploymentStatus="Initializing",
            startTime=_now(), observedGeneration=rj["metadata"]["generation"], failed=self.failed, succeeded=0,
        )

    def submitted(self):
        """The head is ready and the submitter Job created: Running, Ray job PENDING."""
        self._write(jobDeploymentStatus="Running", jobStatus="PENDING",
                    dashboardURL=f"{self.cluster}-head-svc.{self.namespace}.svc.cluster.local:8265")

    def running(self):
        self._write(jobDeploymentStatus="Running", jobStatus="RUNNING", message="Job is currently running.")

    def succeeded(self):
        self._write(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", message="Job finished successfully.",
                    endTime=_now(), succeeded=1, failed=self.failed)

    def app_failed(self, message="Job entrypoint command failed with exit code 1"):
        self.failed += 1
        self._write(jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed", message=message,
                    endTime=_now(), failed=self.failed, succeeded=0)

    def submission_failed(self):
        self.failed += 1
        self._write(jobDeploymentStatus="Failed", reason="SubmissionFailed",
                    message="Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit",
                    endTime=_now(), failed=self.failed, succeeded=0)

    def deadline_exceeded(self):
        self.failed += 1
        self._write(jobDeploymentStatus="Failed", reason="DeadlineExceeded",
                    message="The RayJob has passed the activeDeadlineSeconds. StartTime: 2026-11-30 08:00:00 +0000 UTC. ActiveDeadlineSeconds: 172800",
                    endTime=_now(), failed=self.failed, succeeded=0)

    def retrying(self):
        """A failed attempt with backoffLimit left: Retrying, then a new cluster initialises."""
        self.failed += 1
        self._write(jobDeploymentStatus="Retrying", failed=self.failed, succeeded=0)
        self.cluster = f"{self.name}-{_rand5()}"
        self.job_id = f"{self.name}-{_rand5()}"

    def suspending(self):
        self._write(jobDeploymentStatus="Suspending")

    def suspended(self):
        """Suspended: the cluster is gone and KubeRay clears the run's fields."""
        self._write(jobDeploymentStatus="Suspended", jobStatus=None, rayClusterName=None, dashboardURL=None,
                    jobId=None, message=None, reason=None, startTime=None, endTime=None)

    def validation_failed(self, message="The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"):
        self._write(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=message)
