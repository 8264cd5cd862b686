"""The probe server and what it reports for each role (no cluster needed)."""

from __future__ import annotations

import http.server
import threading

import pytest
from lorarl.runtime import probes, runner
from lorarl_dev.processes import free_port

from tests.helpers import http_get as get


@pytest.fixture
def kopf_liveness():
    """A stand-in for kopf's own liveness endpoint that answers what the test sets."""
    answer = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(answer["status"])
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield answer, f"http://127.0.0.1:{server.server_address[1]}/healthz"
    server.shutdown()
    server.server_close()


def test_standby_is_alive_and_ready(kopf_liveness):
    state = runner.State(role="standby", kopf_liveness=kopf_liveness[1])
    port = free_port()
    server = probes.ProbeServer(f"http://127.0.0.1:{port}/healthz", state.alive, state.ready).start()
    try:
        assert get(port, "/healthz") == (200, "standby: alive\n")
        assert get(port, "/readyz") == (200, "standby: ready to take over\n")
        assert get(port, "/other")[0] == 404
    finally:
        server.stop()


def test_leader_is_ready_once_kopf_started_and_alive_as_kopf_says(kopf_liveness):
    answer, url = kopf_liveness
    state = runner.State(role="leader", kopf_liveness=url)
    port = free_port()
    server = probes.ProbeServer(f"http://127.0.0.1:{port}/livez", state.alive, state.ready).start()
    try:
        assert get(port, "/readyz") == (503, "leader: starting the operator\n")
        assert get(port, "/livez") == (200, "leader: alive\n")  # kopf not started yet: the process is
        state.kopf_started.set()
        assert get(port, "/readyz") == (200, "leader: watching\n")
        assert get(port, "/livez") == (200, "leader: kopf alive: {}\n")
        answer["status"] = 500
        status, text = get(port, "/livez")
        assert status == 503 and "kopf not alive" in text
    finally:
        server.stop()


def test_a_bad_liveness_url_is_named():
    with pytest.raises(ValueError, match="--liveness 'tcp://x'"):
        probes.ProbeServer("tcp://x", lambda: (True, ""), lambda: (True, ""))
