"""etcd: the cluster's store, on two free ports of 127.0.0.1."""

from __future__ import annotations

import json
import signal

from lorarl_dev.processes import free_port


class Etcd:
    """The part of :class:`~lorarl_dev.controlplane.ControlPlane` that starts and stops etcd."""

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self._ports.update(etcd=client, etcd_peer=peer)
        data = self.workdir / "etcd"
        data.mkdir(exist_ok=True)
        data.chmod(0o700)
        self.spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                # the default backend quota is 2 GiB; `make bench` keeps thousands of jobs of three
                # systems (each job's ConfigMap ~88 KB) in one etcd: 8 GiB, etcd's suggested maximum
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        self._wait_etcd()

    def stop_etcd(self) -> None:
        """Kill etcd outright (SIGKILL); :meth:`start_etcd` brings it back on the same data dir."""
        self._halt("etcd", signal.SIGKILL)

    def start_etcd(self) -> None:
        self._respawn("etcd")
        self._wait_etcd()
        self._wait_ready()

    def _wait_etcd(self) -> None:
        self.wait_http("etcd", f"http://127.0.0.1:{self._ports['etcd']}/health", 30, lambda body: json.loads(body).get("health") == "true")
