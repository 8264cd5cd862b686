"""The operator's API client on the real API server: as many connections as workers in flight."""

from __future__ import annotations

import json
import logging
import threading

import kubernetes
from lorarl.runtime.kube import Api, raw_requests


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


def test_the_token_refresh_hook_runs_at_most_once_a_period():
    from lorarl.runtime.kube import ThrottledRefresh

    now = [100.0]
    calls: list[object] = []
    hook = ThrottledRefresh(calls.append, period=10.0, clock=lambda: now[0])
    for _ in range(50):
        hook("config")
    assert calls == ["config"]  # the first request refreshes; the next 49 within the period do not
    now[0] += 9.9
    hook("config")
    assert len(calls) == 1
    now[0] += 0.2
    hook("config")
    assert len(calls) == 2  # due again after the period


def test_requests_stay_authenticated_with_the_refresh_throttled(control_plane, namespace):
    # a ServiceAccount's bearer token: the kubeconfig loader's hook re-sets it before each request;
    # wrapped, the real API server still authenticates every request (a 401/403 would raise), and
    # the loader's hook ran once, not once per request
    kubeconfig = control_plane.restricted_kubeconfig(namespace, "token-user")
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
    loader_hook = config.refresh_api_key_hook
    assert loader_hook is not None
    runs: list[object] = []

    def counting(configuration: object) -> None:
        runs.append(configuration)
        loader_hook(configuration)

    config.refresh_api_key_hook = counting
    api = Api.from_configuration(config)
    raw = raw_requests(api.client)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    for _ in range(20):  # any authenticated user may ask who it is: the server names the token's owner
        answer = raw.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review, serialize=False)
        assert json.loads(answer.data)["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:token-user"
    assert len(runs) == 1
    api.client.close()
