"""Clients of a running control plane: kubectl, the Python client, kubeconfigs and tokens."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time
from collections.abc import Iterable, Sequence

from lorarl_dev.binaries import find_kubectl
from lorarl_dev.controlplane.kubeconfig import kubeconfig_of, write_json
from lorarl_dev.errors import KubectlError


class Clients:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that talks to it as a client."""

    @property
    def kubectl_path(self) -> str:
        return find_kubectl(self.bin_dir)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: str | os.PathLike[str] | None = None, timeout: float | None = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (text mode, output captured)."""
        cmd = [self.kubectl_path, f"--kubeconfig={kubeconfig or self.kubeconfig}", *map(str, args)]
        proc = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def install_crds(self, paths: Iterable[str | os.PathLike[str]], timeout: float = 60) -> None:
        """Server-side apply CRD files, then wait until every CRD is Established."""
        files: list[str] = []
        for p in paths:
            files += ["-f", str(p)]
        if not files:
            return
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=lorarl-testing", *files)
        # `kubectl wait` fails at once (instead of waiting) while a new CRD has no
        # status.conditions yet, so retry until the deadline
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(1, int(deadline - time.monotonic()))
            proc = self.kubectl("wait", "--for=condition=Established", f"--timeout={remaining}s", *files, timeout=remaining + 30, check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() >= deadline or "accessor error" not in proc.stderr:
                raise KubectlError(proc.returncode, proc.args, proc.stdout, proc.stderr)
            time.sleep(0.5)

    def api_client(self):
        """A fresh ``kubernetes.client.ApiClient`` with admin credentials."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def _shared_client(self):
        if self._api_client is None:
            self._api_client = self.api_client()
        return self._api_client

    def service_account_token(self, namespace: str, name: str, audiences: Sequence[str] | None = None, expiration_seconds: int = 3600) -> str:
        """A bound token for ServiceAccount ``namespace/name`` via the TokenRequest API."""
        from kubernetes import client

        api = client.CoreV1Api(self._shared_client())
        # a plain body: the typed V1TokenRequestSpec of the kubernetes 30 client insists on audiences,
        # which the API server defaults (to its own) when they are left out
        spec: dict = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        resp = api.create_namespaced_service_account_token(name, namespace, body)
        return resp.status.token

    def ensure_service_account(self, namespace: str, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        api = client.CoreV1Api(self._shared_client())
        try:
            api.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as e:
            if e.status != 409:
                raise

    def restricted_kubeconfig(self, namespace: str, sa_name: str, *, expiration_seconds: int = 24 * 3600) -> pathlib.Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/sa_name``.

        The ServiceAccount is created if it does not exist; it has only the
        permissions that RBAC grants it.
        """
        self.ensure_service_account(namespace, sa_name)
        token = self.service_account_token(namespace, sa_name, expiration_seconds=expiration_seconds)
        user = f"system:serviceaccount:{namespace}:{sa_name}"
        path = self.workdir / f"kubeconfig-{namespace}-{sa_name}"
        write_json(path, kubeconfig_of(self.server, self._ca_pem, user, token=token, namespace=namespace))
        return path

    def component_kubeconfig(self, name: str, pair, *, inner: bool = True, context: str | None = None) -> pathlib.Path:
        """A kubeconfig for child ``name``; ``inner``: the API server's address as seen from
        inside the cluster's namespace (the same as ``server`` without a real node)."""
        path = self.workdir / f"{name}.kubeconfig"
        config = kubeconfig_of(self._inner_server if inner else self.server, self._ca_pem, name, pair.cert_pem, pair.key_pem)
        if context:
            config["contexts"][0]["name"] = config["current-context"] = context
        write_json(path, config)
        return path

    @property
    def child_kubeconfig(self) -> pathlib.Path:
        """The admin kubeconfig for children this harness starts (inside the namespace if any)."""
        return self.workdir / "kubeconfig-inner" if self.netns is not None else self.kubeconfig

    def env(self) -> dict[str, str]:
        """Environment variables that point tools at this control plane."""
        kubectl_dir = str(pathlib.Path(self.kubectl_path).parent)
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "LORARL_CONTROLPLANE_SERVER": str(self.server),
            "LORARL_CONTROLPLANE_BIN_DIR": str(self.bin_dir),
            "PATH": os.pathsep.join([kubectl_dir, str(self.bin_dir), os.environ.get("PATH", "")]),
        }
