"""Whether the kernel's OOM killer killed the trainer: the container's memory cgroup counts its
kills. On cgroup v2 that is ``oom_kill`` in ``memory.events``; on v1 ``oom_kill`` in
``memory.oom_control`` (Linux >= 4.13, Documentation/admin-guide/cgroup-v1/memory.rst 10.).

Why the reporter looks: on cgroup v1, and on v2 without ``memory.oom.group`` (kubelet's
``singleProcessOOMKill``), the kernel kills the largest process of the container (the trainer)
and the container lives on, so the kubelet never reports ``OOMKilled``; only a SIGKILLed trainer
and a risen counter say so. The reporter prints :data:`MARKER` as its last line, which reaches
KubeRay's message through Ray's log tail; the operator maps it (control/status.py)."""

from __future__ import annotations

MARKER = "OOMKilled: the trainer was killed by the kernel's OOM killer (the container's memory limit)"
SIGKILL_EXIT = 137  # 128 + SIGKILL, as supervise.exit_code reports it
_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def kills(files: tuple[str, ...] = _FILES) -> int | None:
    """The container's OOM kill count, or None where no cgroup file says it."""
    for path in files:
        try:
            with open(path, encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        except OSError:
            continue
    return None


def killed(code: int, before: int | None, after: int | None) -> bool:
    """The trainer died of SIGKILL while the counter rose."""
    return code == SIGKILL_EXIT and before is not None and after is not None and after > before
