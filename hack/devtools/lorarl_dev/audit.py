"""Read the embedded API server's audit log (``ControlPlane.audit_log_path``): which requests an
identity made, as the API server saw them.

The log is JSON lines of ``audit.k8s.io/v1`` Events at level Metadata (see
``controlplane.AUDIT_POLICY``); field names follow k8s.io/apiserver/pkg/apis/audit/v1/types.go.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Request", "events", "open_watches", "requests"]


@dataclass(frozen=True)
class Request:
    """One API request. ``resource`` is empty for a non-resource URL (``/api``, ``/apis/...``)."""

    verb: str
    api_group: str  # "" is the core group
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    uri: str
    user: str
    message: str = ""  # the server's reason for a failure (responseStatus.message)
    api_version: str = ""  # objectRef.apiVersion (the version requested)

    @property
    def resource_path(self) -> str:
        """``resource`` or ``resource/subresource``, as RBAC rules spell it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every audit event in the file (a line the server is still writing is skipped)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def requests(path: str | os.PathLike[str], username: str | None = None, stage: str = "ResponseComplete") -> Iterator[Request]:
    """The requests at ``stage`` (by default: finished ones), optionally of one ``user.username``."""
    for event in events(path):
        user = (event.get("user") or {}).get("username", "")
        if event.get("stage") != stage or (username is not None and user != username):
            continue
        ref = event.get("objectRef") or {}
        status = event.get("responseStatus") or {}
        yield Request(
            verb=event.get("verb", ""),
            api_group=ref.get("apiGroup", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int(status.get("code", 0)),
            uri=event.get("requestURI", ""),
            user=user,
            message=status.get("message", ""),
            api_version=ref.get("apiVersion", ""),
        )


def open_watches(path: str | os.PathLike[str], username: str) -> list[str]:
    """Request URIs of long-running requests of ``username`` that started and have not completed
    (a closed client connection completes them)."""
    started: dict[str, str] = {}
    for event in events(path):
        if (event.get("user") or {}).get("username") != username:
            continue
        if event.get("stage") == "ResponseStarted":
            started[event["auditID"]] = event.get("requestURI", "")
        elif event.get("stage") == "ResponseComplete":
            started.pop(event["auditID"], None)
    return sorted(started.values())
