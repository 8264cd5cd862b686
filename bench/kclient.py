"""A small asyncio Kubernetes client (aiohttp, already a dependency of kopf) for the bench's own
traffic and for the ceiling: create, server-side apply, merge-patch, list and watch, built from
a kubeconfig with either a client certificate or a bearer token. Nothing else: the bench must
spend as little CPU as it can next to what it measures."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import yaml

PLURALS = {
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Event"): "events",
    ("v1", "Namespace"): "namespaces",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("ray.io/v1", "RayJob"): "rayjobs",
    ("ray.io/v1", "RayCluster"): "rayclusters",
    ("lorarl.dev/v1alpha1", "LoraRLJob"): "lorarljobs",
}


class KubeError(Exception):
    def __init__(self, status: int, text: str):
        self.status = status
        super().__init__(f"{status}: {text[:500]}")


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    out = f"{prefix}{scope}/{PLURALS[(api_version, kind)]}"
    return out + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    if "client-certificate-data" in user:
        # load_cert_chain reads files only
        with tempfile.NamedTemporaryFile("wb") as crt, tempfile.NamedTemporaryFile("wb") as key:
            crt.write(base64.b64decode(user["client-certificate-data"]))
            key.write(base64.b64decode(user["client-key-data"]))
            crt.flush()
            key.flush()
            ctx.load_cert_chain(crt.name, key.name)
    return ctx


class Client:
    """One aiohttp session against the server of a kubeconfig (its current context)."""

    def __init__(self, kubeconfig: str, concurrency: int = 64, user_agent: str = "lorarl-bench"):
        config = yaml.safe_load(open(kubeconfig))
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = cluster["server"]
        self._ssl = _ssl_context(cluster, user)
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if "token" in user:
            self._headers["Authorization"] = f"Bearer {user['token']}"
        self._concurrency = concurrency
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(ssl=self._ssl, limit=self._concurrency + 8)
        self.session = aiohttp.ClientSession(
            self.server, connector=connector, headers=self._headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.session is not None:
            await self.session.close()

    async def request(
        self, method: str, url: str, body: Any = None, content_type: str = "application/json", params: dict[str, str] | None = None, retries: int = 5
    ) -> dict[str, Any]:
        """One request; 429/5xx and dropped connections are retried a few times (a benchmark
        at the API server's limit meets them), anything else raises KubeError."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        for attempt in range(retries + 1):
            try:
                async with self.session.request(
                    method, url, data=data, params=params, headers={"Content-Type": content_type}, timeout=aiohttp.ClientTimeout(total=120)
                ) as resp:
                    text = await resp.text()
                    if resp.status < 400:
                        return json.loads(text) if text else {}
                    if resp.status not in (429, 500, 502, 503, 504) or attempt == retries:
                        raise KubeError(resp.status, text)
            except (TimeoutError, aiohttp.ClientConnectionError):
                if attempt == retries:
                    raise
            await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return await self.request("POST", path(obj["apiVersion"], obj["kind"], meta.get("namespace")), obj)

    async def apply(self, obj: dict[str, Any], manager: str) -> dict[str, Any]:
        meta = obj["metadata"]
        return await self.request(
            "PATCH",
            path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            obj,
            "application/apply-patch+yaml",
            {"fieldManager": manager, "force": "true"},
        )

    async def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path(api_version, kind, namespace, name, "status"), {"status": status}, "application/merge-patch+json")

    async def list(self, api_version: str, kind: str, namespace: str | None, limit: int | None = None) -> dict[str, Any]:
        return await self.request("GET", path(api_version, kind, namespace), params={"limit": str(limit)} if limit else None)

    async def watch(self, api_version: str, kind: str, namespace: str, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(type, object) of every change after ``resource_version``, until cancelled."""
        url = path(api_version, kind, namespace)
        while True:
            params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true", "timeoutSeconds": "600"}
            async with self.session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=None, sock_read=700)) as resp:
                if resp.status >= 400:
                    raise KubeError(resp.status, await resp.text())
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        raise KubeError(event["object"].get("code", 0), event["object"].get("message", ""))
                    resource_version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        yield event["type"], event["object"]
