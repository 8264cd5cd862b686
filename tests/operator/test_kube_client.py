"""The operator's API client on the real API server: as many connections as workers in flight."""

from __future__ import annotations

import logging
import threading

import kubernetes
from lorarl.runtime.kube import Api


def test_the_client_keeps_a_connection_per_worker_in_flight(control_plane, caplog):
    # 40 requests held open at once (a watch that the API server ends after 1 s), more than the
    # client's default pool (5 per CPU: 10 on 2 CPUs); urllib3 warns when it has to drop a
    # connection because its pool is full, and the next request pays for a new TLS session
    workers = 40
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=config)
    config.connection_pool_maxsize = 10  # the client's default on 2 CPUs, whatever this machine has
    api = Api.from_configuration(config, connections=workers)
    core = kubernetes.client.CoreV1Api(api.client)
    start = threading.Barrier(workers)
    answered: list[int] = []

    def watch() -> None:
        start.wait()
        response = core.list_namespace(watch=True, timeout_seconds=1, _preload_content=False)
        response.read()
        answered.append(response.status)
        response.release_conn()

    with caplog.at_level(logging.WARNING, logger="urllib3"):
        threads = [threading.Thread(target=watch) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert answered == [200] * workers
    assert not [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]
    api.client.close()
