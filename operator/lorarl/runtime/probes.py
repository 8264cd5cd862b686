"""The liveness and readiness endpoints (`--liveness URL`): one small stdlib HTTP server thread.

It answers whatever the process is doing (a standby waiting for the lease, or the leader running
kopf), so the kubelet's probes never see a closed port on a healthy standby. kopf serves its own
liveness endpoint only while it runs; the leader's answer here forwards to it.
"""

from __future__ import annotations

import http.server
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

log = logging.getLogger("lorarl.probes")
Check = Callable[[], "tuple[bool, str]"]
READINESS_PATH = "/readyz"


def forward(url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """GET another probe endpoint (kopf's own liveness): healthy when it answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200, response.read(2048).decode(errors="replace") or "ok"
    except urllib.error.HTTPError as err:
        return False, f"{url} answered {err.code}"
    except OSError as err:
        return False, f"{url} did not answer: {err}"


def parse(url: str) -> tuple[str, int, str]:
    """(host, port, liveness path) of ``--liveness``; ValueError names the flag."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not port:
        raise ValueError(f"--liveness {url!r}: expected http://HOST:PORT/PATH")
    return parts.hostname or "0.0.0.0", port, parts.path or "/healthz"


class ProbeServer:
    """GET <the --liveness path> -> ``alive()``, GET /readyz -> ``ready()``; 200 or 503."""

    def __init__(self, url: str, alive: Check, ready: Check) -> None:
        host, port, self.liveness_path = parse(url)
        routes = {self.liveness_path: alive, READINESS_PATH: ready}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                check = routes.get(urllib.parse.urlsplit(self.path).path)
                if check is None:
                    self.send_error(404)
                    return
                try:
                    ok, text = check()
                except Exception as err:  # noqa: BLE001 - a failing check is an unhealthy answer
                    ok, text = False, f"check failed: {err}"
                body = (text.rstrip("\n") + "\n").encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: not worth a line
                pass

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="lorarl-probes", daemon=True)

    def start(self) -> ProbeServer:
        self._thread.start()
        log.info("probes: GET %s and %s on %s:%d", self.liveness_path, READINESS_PATH, *self._server.server_address[:2])
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
