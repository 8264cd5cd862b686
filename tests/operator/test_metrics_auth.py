"""Authenticated /metrics (issue 35, point 6; lorarl.runtime.metrics_auth): a scrape needs a bearer
token that a TokenReview authenticates and a SubjectAccessReview allows to `get /metrics`; 401
without one or with a bad one, 403 when the user is not allowed; the decision is cached per token
(its hash) for a short time, so a Prometheus scraping every 15 s does not cost two API calls each
time. The pure tests use a counting reviewer; the live ones the real API server's reviews, with
the operator's `lorarl run` as a process."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from lorarl.runtime import metrics_auth
from lorarl_dev.processes import free_port

from tests.helpers import metrics_reader_token, wait_for


class Reviewer:
    """A TokenReview/SubjectAccessReview stand-in: tokens -> users, allowed users; counts calls."""

    def __init__(self, users, allowed, fail=False):
        self.users, self.allowed, self.fail = users, allowed, fail
        self.calls: list[str] = []

    def authenticate(self, token):
        self.calls.append("TokenReview")
        if self.fail:
            raise metrics_auth.ReviewError("503 Service Unavailable")
        return self.users.get(token)

    def authorize(self, user):
        self.calls.append("SubjectAccessReview")
        return user["username"] in self.allowed


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def scrape(port, token=None, scheme="Bearer"):
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_gate_answers_401_403_and_200_and_caches_per_token():
    clock = Clock()
    reviewer = Reviewer(
        {"prom": {"username": "system:serviceaccount:monitoring:prometheus"}, "tenant": {"username": "alice"}}, {"system:serviceaccount:monitoring:prometheus"}
    )
    gate = metrics_auth.Gate(reviewer, metrics_auth.DecisionCache(clock))
    assert gate.decide(None) == 401 and gate.decide("Basic abc") == 401 and gate.decide("Bearer ") == 401
    assert reviewer.calls == []  # no token: no review at all
    assert gate.decide("Bearer bad") == 401 and reviewer.calls == ["TokenReview"]
    assert gate.decide("Bearer tenant") == 403
    assert gate.decide("Bearer prom") == 200
    reviewer.calls.clear()
    # a scrape every 15 s for the allow TTL: no review
    for _ in range(4):
        clock.now += 14.9
        assert gate.decide("Bearer prom") == 200
    assert reviewer.calls == []
    clock.now += 1.0  # 60.6 s after the review: asked again
    assert gate.decide("Bearer prom") == 200 and reviewer.calls == ["TokenReview", "SubjectAccessReview"]
    # refusals are cached for a shorter time: a new binding is seen soon
    assert gate.decide("Bearer tenant") == 403
    reviewer.allowed.add("alice")
    reviewer.calls.clear()
    clock.now += metrics_auth.DENY_TTL - 0.1
    assert gate.decide("Bearer tenant") == 403 and reviewer.calls == []  # still the cached refusal
    clock.now += 0.2
    assert gate.decide("Bearer tenant") == 200 and reviewer.calls == ["TokenReview", "SubjectAccessReview"]


def test_the_cache_keeps_no_token_and_is_bounded():
    cache = metrics_auth.DecisionCache(Clock(), max_entries=3)
    for i in range(5):
        cache.put(f"token-{i}", 200)
    assert cache.get("token-0") is None and cache.get("token-4") == 200
    assert all("token" not in key for key in cache._entries)  # SHA-256 hex digests only
    assert len(cache._entries) == 3


def test_a_review_that_cannot_be_made_is_a_500_not_cached():
    reviewer = Reviewer({}, set(), fail=True)
    gate = metrics_auth.Gate(reviewer)
    assert gate.decide("Bearer x") == 500 and gate.decide("Bearer x") == 500
    assert reviewer.calls == ["TokenReview", "TokenReview"]


def test_the_endpoint_behind_the_gate():
    reviewer = Reviewer({"prom": {"username": "prom"}, "tenant": {"username": "tenant"}}, {"prom"})
    port = free_port()
    server = metrics_auth.serve(port, "127.0.0.1", metrics_auth.Gate(reviewer))
    try:
        code, body = scrape(port)
        assert code == 401 and "lorarl_" not in body
        assert scrape(port, "bad")[0] == 401
        code, body = scrape(port, "tenant")
        assert code == 403 and "lorarl_" not in body and "tenant" not in body
        code, body = scrape(port, "prom")
        assert code == 200 and "lorarl_reconcile_total" in body
    finally:
        server.shutdown()
    plain_port = free_port()
    plain = metrics_auth.serve(plain_port, "127.0.0.1", None)  # --metrics-auth none
    try:
        code, body = scrape(plain_port)
        assert code == 200 and "lorarl_reconcile_total" in body
    finally:
        plain.shutdown()


def test_run_takes_the_metrics_auth_flag():
    from lorarl.cli import main

    from tests.helpers import lorarl_cli

    [option] = [p for p in main.commands["run"].params if p.name == "metrics_auth"]
    assert option.default == "kubernetes" and list(option.type.choices) == ["kubernetes", "none"]
    bad = lorarl_cli("run", "-A", "--metrics-auth", "tls")
    assert bad.exit_code == 2


# ----------------------------------------------------------------------- the real API server


@pytest.mark.controlplane
def test_the_operator_serves_metrics_only_to_a_token_allowed_to_get_them(control_plane, namespace, tmp_path, helm):
    """`lorarl run` as a process with the default --metrics-auth: the real TokenReview and
    SubjectAccessReview. A ServiceAccount bound to the chart's metrics-reader ClusterRole reads them; one
    without that binding gets 403, a made-up token and no token 401."""
    from lorarl_dev.operatorproc import OperatorProcess

    from tests.chart.helm import cluster_role

    reader = cluster_role(helm.render(namespace=namespace, release=namespace), "metrics-reader")
    try:
        prometheus = metrics_reader_token(control_plane, namespace, reader)
        control_plane.ensure_service_account(namespace, "tenant")
        tenant = control_plane.service_account_token(namespace, "tenant")
        port = free_port()
        operator = OperatorProcess(control_plane, namespace, tmp_path, extra_args=("--metrics-port", str(port), "--metrics-address", "127.0.0.1")).start()
        try:
            wait_for(lambda: _answers(port), timeout=60, what="the metrics endpoint")
            assert scrape(port)[0] == 401
            assert scrape(port, "not-a-token")[0] == 401
            code, body = scrape(port, tenant)
            assert code == 403 and "lorarl_" not in body, body
            code, body = scrape(port, prometheus)
            assert code == 200 and "lorarl_reconcile_total" in body, body
        finally:
            operator.stop()
    finally:
        control_plane.kubectl("delete", "clusterrolebinding", f"prometheus-{namespace}", "--ignore-not-found", check=False)


def _answers(port):
    try:
        return scrape(port)[0] == 401
    except OSError:
        return False
