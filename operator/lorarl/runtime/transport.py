"""The reconcile workers' HTTP transport: libcurl (pycurl), one easy handle per thread.

Why not the official client's ApiClient over urllib3, which the informers and the leader election
still use: measured with ``bench/core_async_vs_threads.py`` (server-side applies of ConfigMaps to
the real API server, 8 threads in flight), the official client costs 0.58-0.68 ms of client CPU
per request, libcurl 0.21-0.25 ms, aiohttp in an asyncio program 0.36-0.49 ms. http.client parses
every answer's status line and headers in Python (``email.parser``) and urllib3 and the ApiClient
add their layers per request; libcurl does all of it in C with the GIL released. A burst of 1,000
jobs makes 9 requests per job; the operator's CPU for one (``python -m bench --phases burst --jobs
1000``, back to back on the same machine) fell from 14.3 and 12.1 s to 8.4 and 7.6 s.

The server, TLS and credentials are the official client's ``Configuration``'s (its loaders:
in-cluster, kubeconfig, exec plugins): its CA, client certificate, ``verify_ssl``,
``assert_hostname``, ``tls_server_name``, proxy, and the headers of its ``auth_settings()`` (which
runs the token refresh hook). Each thread keeps its own handle and so its own kept-alive
connection, as a pool with a connection per worker did (a libcurl easy handle is not to be used by
two threads at once; ``curl_easy_reset`` keeps its live connection). HTTP/1.1, as before.
"""

from __future__ import annotations

import io
import threading
import urllib.parse
from typing import Any, cast

import certifi
import kubernetes
import pycurl

import lorarl

USER_AGENT = f"lorarl-operator/{lorarl.__version__}"
#: a request that could not connect (nothing was sent) is tried this many more times at once,
#: as urllib3's connect retries did (kube.CLIENT_RETRIES)
CONNECT_RETRIES = 3
_CONNECT_ERRORS = (pycurl.E_COULDNT_CONNECT, pycurl.E_COULDNT_RESOLVE_HOST, pycurl.E_COULDNT_RESOLVE_PROXY)


class Answer:
    """An HTTP answer: status, reason, headers (only read for an error: Retry-After) and body."""

    def __init__(self, status: int, header_lines: list[bytes], body: bytes) -> None:
        self.status, self.body, self._lines = status, body, header_lines

    @property
    def reason(self) -> str:
        status_line = next((line for line in self._lines if line.startswith(b"HTTP/")), b"")
        return status_line.decode("latin-1").strip().partition(" ")[2].partition(" ")[2]

    @property
    def headers(self) -> dict[str, str]:
        """The last answer's headers (libcurl reports those of an interim 100 Continue too)."""
        out: dict[str, str] = {}
        for line in self._lines:
            text = line.decode("latin-1").strip()
            if text.startswith("HTTP/"):
                out = {}
            elif ":" in text:
                name, _, value = text.partition(":")
                out[name.strip().title()] = value.strip()
        return out


class TransportError(Exception):
    """No answer: connection refused or reset, TLS, a timeout (``timed_out``)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.timed_out = code == pycurl.E_OPERATION_TIMEDOUT
        super().__init__(message)


class CurlTransport:
    """Requests by path to the configuration's server; thread-safe (a handle per thread)."""

    def __init__(self, config: kubernetes.client.Configuration) -> None:
        self.config = config
        self.host = config.host.rstrip("/")
        self._local = threading.local()
        self._generation = 0  # bumped by drop_connections: each thread's handle older than it is replaced
        self._handles: list[pycurl.Curl] = []  # every thread's, for close()
        self._lock = threading.Lock()
        parsed = urllib.parse.urlsplit(self.host)
        self._connect_to: list[str] | None = None
        if config.tls_server_name and parsed.hostname:
            # TLS checks the certificate against tls_server_name while the connection goes to the
            # configured host (client-go's TLSClientConfig.ServerName)
            port = parsed.port or 443
            self._connect_to = [f"{config.tls_server_name}:{port}:{parsed.hostname}:{port}"]
            self.host = urllib.parse.urlunsplit(parsed._replace(netloc=f"{config.tls_server_name}:{port}"))

    def _handle(self) -> pycurl.Curl:
        handle = getattr(self._local, "handle", None)
        if handle is not None and self._local.generation == self._generation:
            return handle
        old, handle = handle, pycurl.Curl()
        self._local.handle, self._local.generation = handle, self._generation
        with self._lock:
            if old is not None and old in self._handles:  # a request timed out since its last use: its connection may be dead too
                self._handles.remove(old)
                old.close()
            self._handles.append(handle)
        return handle

    def drop_connections(self) -> None:
        """Every thread connects afresh at its next request (requests in flight keep theirs)."""
        self._generation += 1

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()

    def request(self, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float) -> Answer:
        # runs the (throttled) refresh hook; each setting is one of the client's *AuthSetting TypedDicts
        for auth in cast("dict[str, dict[str, Any]]", self.config.auth_settings()).values():  # (a string: nothing built per request)
            if auth.get("in") == "header" and auth.get("value"):
                headers = {**headers, auth["key"]: auth["value"]}
        for attempt in range(CONNECT_RETRIES + 1):
            try:
                return self._perform(method, url, body, headers, timeout)
            except TransportError as err:
                if err.code not in _CONNECT_ERRORS or attempt == CONNECT_RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _perform(self, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float) -> Answer:
        handle = self._handle()
        handle.reset()  # options only: the live connection stays
        config = self.config
        answer = io.BytesIO()
        lines: list[bytes] = []
        handle.setopt(pycurl.NOSIGNAL, 1)  # threads: no SIGALRM for timeouts
        handle.setopt(pycurl.URL, self.host + url)
        handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        handle.setopt(pycurl.TIMEOUT_MS, int(timeout * 1000))
        handle.setopt(pycurl.CONNECTTIMEOUT_MS, int(min(timeout, 10.0) * 1000))
        handle.setopt(pycurl.WRITEDATA, answer)
        handle.setopt(pycurl.HEADERFUNCTION, lines.append)
        handle.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items()] + ["Expect:"])  # no 100-continue round trip
        # what the audit log and (without a fieldManager) managedFields name the writer by
        handle.setopt(pycurl.USERAGENT, USER_AGENT)
        if self._connect_to:
            handle.setopt(pycurl.CONNECT_TO, self._connect_to)
        # no CA configured: certifi's bundle, as the official client (kubernetes/client/rest.py)
        handle.setopt(pycurl.CAINFO, config.ssl_ca_cert or certifi.where())
        if config.cert_file:
            handle.setopt(pycurl.SSLCERT, config.cert_file)
            handle.setopt(pycurl.SSLKEY, config.key_file)
        if not config.verify_ssl:
            handle.setopt(pycurl.SSL_VERIFYPEER, 0)
            handle.setopt(pycurl.SSL_VERIFYHOST, 0)
        elif config.assert_hostname is False:
            handle.setopt(pycurl.SSL_VERIFYHOST, 0)
        if config.proxy:
            handle.setopt(pycurl.PROXY, config.proxy)
            if config.no_proxy:
                handle.setopt(pycurl.NOPROXY, config.no_proxy)
        else:
            handle.setopt(pycurl.PROXY, "")  # the configuration's proxy only, as the official client (not $https_proxy)
        if body is not None:
            handle.setopt(pycurl.POSTFIELDS, body)
        if method != "GET" or body is not None:
            handle.setopt(pycurl.CUSTOMREQUEST, method)
        try:
            handle.perform()
        except pycurl.error as err:
            code, message = err.args[0], err.args[1] if len(err.args) > 1 else ""
            raise TransportError(int(code), message or pycurl.version) from None
        return Answer(handle.getinfo(pycurl.RESPONSE_CODE), lines, answer.getvalue())
