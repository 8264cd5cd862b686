"""JSON merge patches to ``/apis/lorarl.dev/v1alpha1/namespaces/NS/lorarljobs/JOB/status``.

urllib only. In-cluster by default (``KUBERNETES_SERVICE_HOST``/``_PORT``, the service-account
token re-read before every patch because it rotates, and its ``ca.crt``); ``LORARL_API_SERVER``
(``https://`` or, for tests, ``http://``), ``LORARL_TOKEN_FILE`` and ``LORARL_CA_FILE`` override
them. Proxies from the environment are not used. The token is never printed. Never raises.
"""

from __future__ import annotations

import copy
import json
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import NamedTuple

from . import statuskeys as K
from .notes import warn

GROUP, VERSION, PLURAL = "lorarl.dev", "v1alpha1", "lorarljobs"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT = 5.0  # seconds per HTTP request
OWNED_FIELDS = K.OWNED_FIELDS
# leaves that are sent as null when unknown, so a value left by an earlier attempt is deleted
NULLABLE = {
    K.PROGRESS: (K.ETA_SECONDS,),
    K.METRICS: (K.STEP, K.RAW_REWARD, K.LOGPROB_DIFF, K.LOGPROB_DIFF_MEAN, K.KL, K.LOSS, K.RESPONSE_LENGTH_MEAN, K.TRUNCATED_RATIO, K.NON_FINITE),
    K.CHECKPOINTS: (K.SAVING,),
}


def patch_body(status: dict) -> dict:
    """Merge-patch body: only the owned fields; unknown resettable leaves become null."""
    body = {key: copy.deepcopy(status[key]) for key in OWNED_FIELDS if key in status}
    for field, leaves in NULLABLE.items():
        part = body.setdefault(field, {})
        for leaf in leaves:
            part.setdefault(leaf, None)
    return {"status": body}


class ApiConfig(NamedTuple):
    server: str
    token_file: str
    ca_file: str


def api_config(env=None) -> ApiConfig | None:
    env = os.environ if env is None else env
    server = env.get("LORARL_API_SERVER", "").strip()
    if not server:
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        if not host:
            return None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        server = f"https://{host}:{env.get('KUBERNETES_SERVICE_PORT', '443').strip() or '443'}"
    if not server.startswith(("https://", "http://")):
        return None
    return ApiConfig(server.rstrip("/"), env.get("LORARL_TOKEN_FILE") or f"{SA_DIR}/token", env.get("LORARL_CA_FILE") or f"{SA_DIR}/ca.crt")


def status_url(server: str, namespace: str, name: str) -> str:
    q = urllib.parse.quote
    return f"{server}/apis/{GROUP}/{VERSION}/namespaces/{q(namespace, safe='')}/{PLURAL}/{q(name, safe='')}/status"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        detail = ""
        try:
            detail = str(json.loads(exc.read(4096).decode("utf-8", "replace")).get("message", ""))
        except Exception:
            pass
        text = f"HTTP {exc.code} {exc.reason}"
        return f"{text}: {detail[:200]}" if detail else text
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        return f"{type(reason).__name__}: {reason}"[:200] if isinstance(reason, BaseException) else str(reason)[:200]
    return f"{type(exc).__name__}: {exc}"[:200]


class Patcher:
    """Sends merge patches to the LoraRLJob status subresource. Never raises."""

    def __init__(self, api: ApiConfig, namespace: str, name: str, timeout: float = REQUEST_TIMEOUT):
        self.api = api
        self.target = f"{namespace}/{name}"
        self.url = status_url(api.server, namespace, name)
        self.timeout = timeout
        self.sent = 0
        self.failures = 0  # consecutive failed attempts
        self._lock = threading.Lock()
        self._opener: urllib.request.OpenerDirector | None = None

    def _token(self) -> str | None:
        try:
            with open(self.api.token_file, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def _build_opener(self):
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if self.url.startswith("https://"):
            ctx = ssl.create_default_context()
            if os.path.exists(self.api.ca_file):
                ctx.load_verify_locations(cafile=self.api.ca_file)
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        return urllib.request.build_opener(*handlers)

    def send(self, status: dict, timeout: float | None = None) -> bool:
        try:
            data = json.dumps(patch_body(status), allow_nan=False, separators=(",", ":")).encode()
            request = urllib.request.Request(
                self.url,
                data=data,
                method="PATCH",
                headers={
                    "Content-Type": "application/merge-patch+json",
                    "Accept": "application/json",
                    "User-Agent": "lorarl-reporter",
                },
            )
            token = self._token()
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            if self._opener is None:
                self._opener = self._build_opener()
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                response.read()
        except Exception as exc:  # reporting must never take the run down
            self._opener = None  # rebuild (CA may have rotated)
            self._record(False, _describe(exc))
            return False
        self._record(True, "")
        return True

    def _record(self, ok: bool, reason: str) -> None:
        with self._lock:
            if ok:
                if self.failures:
                    warn(f"status patch to {self.target} recovered after {self.failures} failed attempt(s)")
                self.failures = 0
                self.sent += 1
            else:
                if self.failures == 0:
                    warn(f"status patch to {self.target} failed ({reason}); retrying quietly")
                self.failures += 1
