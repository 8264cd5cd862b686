"""What `lorarl run` configures of the controller, with the one copy of each default (stdlib only:
the offline commands of the CLI show these defaults without importing the controller)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..job.settings import RenderSettings

DEFAULT_WORKERS = 32  # reconcile threads = API requests in flight (docs/architecture.md: 8 to 64 measured)
DEFAULT_RESYNC_SECONDS = 30.0
# every child of an unfinished job applied again at most this often, at the resync: children deleted
# or edited by hand come back (nothing watches them: the operator may only create and patch them)
DEFAULT_REPAIR_SECONDS = 600.0
DEFAULT_FINISHED_METRICS_SECONDS = 3600.0  # a finished job's per-job series stay this long after completionTime


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...] = ()  # watched namespaces, globs allowed; () = the whole cluster
    workers: int = DEFAULT_WORKERS
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    repair_seconds: float = DEFAULT_REPAIR_SECONDS
    finished_metrics_seconds: float = DEFAULT_FINISHED_METRICS_SECONDS
    render: RenderSettings = field(default_factory=RenderSettings)  # what the children's render takes besides the job
