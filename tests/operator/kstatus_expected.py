"""Helpers moved out of tests/operator/test_kstatus_live.py (test modules hold tests only)."""

from __future__ import annotations

# What kstatus (sigs.k8s.io/cli-utils v0.37.2, pkg/kstatus/status) must say in each state,
# from its rules: observedGeneration != generation -> InProgress (generic.go:73-98); then the
# first condition of Reconciling=True (InProgress) or Stalled=True (Failed) (generic.go:50-67);
# then Ready=True -> Current, Ready=False -> InProgress (status.go:154-183); no conditions at
# all -> Current (status.go:130-138). And whether `kubectl wait --for=condition=Ready` passes.
EXPECTED = {
    # state: (kstatus status, kubectl wait Ready)
    "new": ("InProgress", False),  # before the operator wrote anything: the CRD defaults observedGeneration to 0
    "stale-generation": ("InProgress", False),
    "pending": ("InProgress", False),
    "queued": ("InProgress", False),
    "preparing": ("InProgress", False),
    "running": ("Current", True),
    "running-unhealthy": ("Failed", False),
    "suspended": ("Current", True),
    "succeeded": ("Current", True),
    # spec.export: the run is Ready once it succeeded; in progress while its adapter is exported
    # (Reconciling=True, Exporting), Failed when the export failed for good (Stalled=True)
    "exporting": ("InProgress", True),
    "exported": ("Current", True),
    "export-failed": ("Failed", True),
    "failed": ("Failed", False),
    "invalid-spec": ("Failed", False),
    "apply-failed": ("Failed", False),
}
