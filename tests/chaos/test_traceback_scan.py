"""The traceback scan that every chaos test runs on the operator's log can fail (no control plane)."""

from __future__ import annotations

import pytest
from lorarl_dev.operatorproc import OperatorProcess, tracebacks

LOG = """\
[2026-11-30 10:00:00,000] kopf.objects [INFO] [ns/a] reconcile 1a2b3c4d (change): phase Pending, 6 applied
[2026-11-30 10:00:01,000] kopf.objects [ERROR] [ns/a] Handler 'reconcile-create' failed with an exception.
Traceback (most recent call last):
  File "/x/kopf/_core/actions/execution.py", line 1, in execute
    raise KeyError("status")
KeyError: 'status'
[2026-11-30 10:00:02,000] asyncio [ERROR] Task exception was never retrieved
Traceback (most recent call last):
  File "/x/aiohttp/client.py", line 2, in _request
    conn = await self._connector.connect(req)
ConnectionRefusedError: [Errno 111] Connection refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/aiohttp/connector.py", line 3, in connect
    raise ClientConnectorError()
aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:1
[2026-11-30 10:00:03,000] kopf.objects [INFO] [ns/a] reconcile 5e6f7a8b (resync): phase Pending, 0 applied
"""


def test_tracebacks_are_found_whole():
    found = tracebacks(LOG)
    assert len(found) == 2
    assert found[0].endswith("KeyError: 'status'")
    assert found[1].endswith("ClientConnectorError: Cannot connect to host 127.0.0.1:1")
    assert "During handling" in found[1]
    assert tracebacks("no traceback here\n") == []


def test_the_scan_fails_on_an_unexpected_traceback_and_honours_the_allow_list(tmp_path):
    op = OperatorProcess(control_plane=None, namespace="ns", tmp_path=tmp_path)
    op.log_path.write_text(LOG)
    with pytest.raises(AssertionError, match="2 unexpected traceback"):
        op.assert_no_tracebacks()
    with pytest.raises(AssertionError, match="1 unexpected traceback"):
        op.assert_no_tracebacks({r"ClientConnectorError": "the API server is down on purpose"})
    op.assert_no_tracebacks({r"ClientConnectorError": "down on purpose", r"KeyError: 'status'": "a known case"})
