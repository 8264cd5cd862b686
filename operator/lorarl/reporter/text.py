"""Text from outside as the operator writes it: printable, on one line.

The operator copies text it did not write into the job's status, its Events and its log: KubeRay's
message (the tail of the driver's log on a failed run), the kubelet's and the scheduler's pod
messages, the export and load pods' termination messages, Kueue's Workload messages, the API
server's refusals, and (the reporter) the W&B run URL from the trainer's log. Such text can hold
terminal escapes (ESC, BEL: a ``kubectl describe`` that recolours or retitles the reader's
terminal), bidirectional overrides and invisible characters (U+202E, U+200B: a message that reads
differently from what it says) and line breaks (a fake second line in a log or in
``kubectl get -o wide``). ``printable`` is the one path all of it takes (issue 35, finding 4):

* ANSI escape sequences (``ESC [ ... m``, ``ESC ] ... BEL``) are dropped whole, so no ``[31m``
  is left behind;
* line breaks and tabs (``\\n``, ``\\r``, ``\\t``, ``\\v``, ``\\f``, U+0085, U+2028, U+2029) become
  one space each: a condition, an Event and a log line are one line, and words stay apart;
* every other control or format character (Unicode categories Cc, Cf, and the lone surrogates
  of Cs, which no UTF-8 encoder takes) is dropped.

Where it is applied: at the entry points (``control/status.py ray_message`` and the RayJob
mirror, ``control/pods.py diagnose``, ``control/adapter_status.py`` and ``serve_status.py``,
``control/queueing.py admission``, ``reporter/summary.py``'s W&B URL) and again at the sinks
(``status.setcondition``, ``status.Event``, ``runtime/events.py EventRecorder.record``, the
operator's log handlers through ``LogFilter``), so that a new entry point is covered too.

It lives among the reporter's modules because the reporter is shipped alone (a zipapp of
``lorarl.reporter``, ``lorarl/job/artifact.py``) and uses it too; the standard library only.
"""

from __future__ import annotations

import logging
import re
import unicodedata

# CSI (ESC [ params intermediates final), OSC (ESC ] ... BEL or ST), and the two-character escapes
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# what separates lines or words: a space in one-line text
_BREAKS = frozenset("\t\n\v\f\r\x85\u2028\u2029")
_DROPPED = frozenset(("Cc", "Cf", "Cs"))


def _keep(ch: str) -> str:
    if ch in _BREAKS:
        return " "
    return "" if unicodedata.category(ch) in _DROPPED else ch


def printable(text: object, limit: int | None = None) -> str:
    """``text`` as one printable line: escape sequences and Cc/Cf/Cs characters dropped, line
    breaks and tabs made spaces; at most ``limit`` characters."""
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    if not s.isprintable():  # the common case (plain text) costs one C-level scan
        s = "".join(_keep(ch) for ch in _ANSI.sub("", s))
    return s if limit is None else s[:limit]


def is_printable(text: str) -> bool:
    """What ``printable`` leaves: no character of Cc, Cf or Cs, no line break."""
    return not any(ch in _BREAKS or unicodedata.category(ch) in _DROPPED for ch in text)


class LogFilter(logging.Filter):
    """Makes each record's message printable before a handler formats it (a job's text in a log
    line cannot start a fake line or send escapes to the terminal that reads the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = printable(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Add ``LogFilter`` to every handler of ``logger`` (the root logger: kopf's handlers)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, LogFilter) for f in handler.filters):
            handler.addFilter(LogFilter())
