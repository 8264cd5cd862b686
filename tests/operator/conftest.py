"""Fixtures for operator tests on the real control plane: the operator as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lorarl.kube import Api


class OperatorProcess:
    """`lorarl run` against the test control plane, watching one namespace."""

    def __init__(self, control_plane, namespace: str, tmp_path, kubeconfig=None, extra=()):
        self.control_plane, self.namespace, self.kubeconfig, self.extra = control_plane, namespace, kubeconfig, list(extra)
        self.log_path = tmp_path / "operator.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "OperatorProcess":
        env = {**os.environ, **self.control_plane.env()}
        if self.kubeconfig:  # authenticate as someone else (e.g. the chart's ServiceAccount)
            env["KUBECONFIG"] = str(self.kubeconfig)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lorarl.cli", "run", "-n", self.namespace, "--liveness", "",
             "--metrics-port", "0", "--resync-seconds", "1", "--log-format", "plain", *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def kube(control_plane) -> Api:
    client = control_plane.api_client()
    yield Api(client)
    client.close()


@pytest.fixture
def operator(control_plane, namespace, tmp_path, request):
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    yield op
    op.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(op.output()[-5000:])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
