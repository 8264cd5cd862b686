"""miles' log lines: ``[<time>.<ms> <name>] <file>:<line> - <message>`` on stderr.

The format is miles' logging.basicConfig (miles/utils/logging_utils.py:33-37 at 31f1ca9:
``[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - %(message)s``, datefmt
``%Y-%m-%d %H:%M:%S``). ``where`` is the miles file:line that prints the message (cited by the
callers), not ours, so the log reads as miles' does.
"""

from __future__ import annotations

import sys
import time


def header(name: str, where: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return f"[{stamp}.{int(now * 1000) % 1000:03d} {name}] {where} - "


class Log:
    """Writes miles-format lines; ``prefix`` imitates Ray's ``(ActorClass pid=N) `` when the
    process is not really a Ray worker (the inline executor: Ray adds it itself otherwise)."""

    def __init__(self, name: str, prefix: str = "", stream=None):
        self.name = name
        self.prefix = prefix
        self.stream = stream

    def info(self, where: str, message: str) -> None:
        out = self.stream or sys.stderr
        out.write(f"{self.prefix}{header(self.name, where)}{message}\n")
        out.flush()

    warning = info  # miles' format has no level name
