"""Kubeconfig files for the control plane's clients (JSON, which is YAML)."""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any


def kubeconfig_of(
    server: str, ca_pem: bytes, user: str, cert_pem: bytes | None = None, key_pem: bytes | None = None, token: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    creds: dict[str, Any] = {}
    if cert_pem is not None:
        creds["client-certificate-data"] = b64(cert_pem)
        creds["client-key-data"] = b64(key_pem or b"")
    if token is not None:
        creds["token"] = token
    ctx: dict[str, Any] = {"cluster": "lorarl", "user": user}
    if namespace:
        ctx["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lorarl", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": user, "context": ctx}],
        "current-context": user,
        "preferences": {},
    }


def write_json(path: pathlib.Path, data: Any, mode: int = 0o600) -> None:
    # kubeconfig is YAML, and JSON is YAML; kubectl and the python client read it.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.chmod(mode)
    tmp.replace(path)
