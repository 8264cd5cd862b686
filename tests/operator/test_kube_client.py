"""The operator's API client on the real API server: as many connections as workers in flight."""

from __future__ import annotations

import json
import logging
import threading

import kubernetes
import pytest
from lorarl.runtime.kube import Api, ApiError, raw_requests


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
    api.close()


def test_the_token_refresh_hook_runs_at_most_once_a_period():
    from types import SimpleNamespace

    from lorarl.runtime.kube import ThrottledRefresh

    now = [100.0]
    calls: list[object] = []
    config = SimpleNamespace(refresh_api_key_hook=None)

    def loader_hook(configuration):  # as the client's loaders do: it installs itself again
        calls.append(configuration)
        configuration.refresh_api_key_hook = loader_hook

    hook = ThrottledRefresh(loader_hook, period=10.0, clock=lambda: now[0])
    config.refresh_api_key_hook = hook
    for _ in range(50):
        config.refresh_api_key_hook(config)
    assert calls == [config]  # the first request refreshes; the next 49 within the period do not
    assert config.refresh_api_key_hook is hook  # still in front of the loader's hook
    now[0] += 9.9
    config.refresh_api_key_hook(config)
    assert len(calls) == 1
    now[0] += 0.2
    config.refresh_api_key_hook(config)
    assert len(calls) == 2  # due again after the period


def test_requests_stay_authenticated_with_the_refresh_throttled(control_plane, namespace, monkeypatch):
    # a ServiceAccount's bearer token: the kubeconfig loader's hook re-sets it (and the host, and
    # itself as the hook) before each request. Counted where the loader does its work, not in a
    # wrapper of ours: the first version of the throttle was replaced by the loader's hook on its
    # first run and every request after paid again, which a wrapper around the hook did not see.
    loads: list[object] = []
    loader_set_config = kubernetes.config.kube_config.KubeConfigLoader._set_config

    def counting(self, client_configuration):
        loads.append(client_configuration)
        return loader_set_config(self, client_configuration)

    monkeypatch.setattr(kubernetes.config.kube_config.KubeConfigLoader, "_set_config", counting)
    kubeconfig = control_plane.restricted_kubeconfig(namespace, "token-user")
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
    loaded = len(loads)  # the loading itself
    api = Api.from_configuration(config)
    raw = raw_requests(api.client)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    for _ in range(20):  # any authenticated user may ask who it is: the server names the token's owner
        answer = raw.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review, serialize=False)
        assert json.loads(answer.data)["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:token-user"
    # the reconcile workers' calls (Api) authenticate with the same token: the real
    # server names the token's owner in its refusal (the ServiceAccount may not read Secrets)
    for _ in range(20):
        with pytest.raises(ApiError) as refused:
            api.get("v1", "Secret", namespace, "anything")
        assert refused.value.status == 403
        assert f"system:serviceaccount:{namespace}:token-user" in str(refused.value)
    assert len(loads) - loaded == 1  # refreshed once for 40 requests within the period
    api.close()


def test_tls_is_checked_against_the_configured_server_name(control_plane, namespace):
    # the real API server's certificate names kubernetes.default.svc (and 127.0.0.1), not
    # elsewhere.example: kubeconfig's tls-server-name decides what the certificate must name
    def api_with(server_name):
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=config)
        config.tls_server_name = server_name
        return Api.from_configuration(config)

    # an object of the test's own: the namespace's default ServiceAccount comes later, from the
    # controller manager, and may not be there yet
    control_plane.kubectl("create", "configmap", "probe", "-n", namespace)
    good = api_with("kubernetes.default.svc")
    assert good.get("v1", "ConfigMap", namespace, "probe")["metadata"]["name"] == "probe"
    good.close()
    bad = api_with("elsewhere.example")
    with pytest.raises(ApiError) as refused:
        bad.get("v1", "ConfigMap", namespace, "probe")
    assert refused.value.status == 0 and "elsewhere.example" in str(refused.value)  # no answer: the TLS check failed
    bad.close()
