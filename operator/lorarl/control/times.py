"""RFC 3339 times as the API server, KubeRay and the kubelet write them (pure)."""

from __future__ import annotations

import datetime
from typing import Any


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime.datetime | None:
    """An RFC 3339 time as the API server and KubeRay write it (``Z`` or an offset, with or
    without fractional seconds), in UTC; None for anything else (never raises)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().upper())
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None  # RFC 3339 requires an offset: a local time is ambiguous
    return moment.astimezone(datetime.UTC)


def unix_seconds(text: Any) -> float | None:
    """:func:`parse_time` as Unix seconds (what metrics and GPU-hours count in); None as it."""
    moment = parse_time(text)
    return moment.timestamp() if moment is not None else None
