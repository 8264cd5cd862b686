"""The reporter's own lines in the job log: one concise ``[lorarl-reporter]`` line each."""

from __future__ import annotations

import os

PREFIX = "[lorarl-reporter]"


def warn(message: str) -> None:
    """Write one line to stderr; never raises."""
    try:
        os.write(2, f"{PREFIX} {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass
