"""The security scanners run clean, and every suppression is explained in docs/security.md.

bandit on the Python code, checkov on the chart and on the install manifests, pip-audit on the
locked runtime dependencies. The suppressions table of docs/security.md ("Scanners") must list
exactly what the scanner configurations skip: a skip without a reason, or a reason for nothing,
fails here.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request

import pytest
import yaml
from lorarl_dev.binaries import ensure_binaries
from lorarl_dev.venvs import cached_venv

from tests.helpers import REPO, doc_table

# starts checkov in a venv of its own, pip-audit against PyPI: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

CHECKOV_VERSION = "3.3.30"
CHECKOV_CONFIGS = {
    "chart": (REPO / "hack" / "security" / "checkov-chart.yaml", REPO / "charts" / "lorarl-operator"),
    "manifests": (REPO / "hack" / "security" / "checkov-manifests.yaml", REPO / "manifests" / "install"),
}
LOCK = REPO / "requirements.lock"


def suppressions(scanner: str, scope: str | None = None) -> set[str]:
    rows = [r for r in doc_table("Scanners") if r["Scanner"] == scanner]
    for row in rows:
        assert len(row["Why"]) > 20, f"{scanner} {row['Check']}: say why"
    return {r["Check"] for r in rows if scope is None or scope in [s.strip() for s in r["Scope"].split(",")]}


# ---------------------------------------------------------------------------------- bandit


def test_bandit_finds_nothing_unexplained():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["bandit"]
    assert set(config["skips"]) == suppressions("bandit")
    assert not re.search(r"#\s*nosec", "\n".join(p.read_text() for d in ("operator", "hack/devtools") for p in (REPO / d).rglob("*.py"))), (
        "no inline suppressions"
    )
    out = subprocess.run(
        [sys.executable, "-m", "bandit", "-c", "pyproject.toml", "-r", "operator", "hack/devtools", "-f", "json", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.stdout)
    assert report["errors"] == []
    assert [(r["test_id"], r["filename"], r["line_number"]) for r in report["results"]] == []
    assert out.returncode == 0, out.stderr


def test_bandit_would_catch_a_finding(tmp_path):
    """The oracle can fail: the same invocation reports a shell=True call."""
    (tmp_path / "bad.py").write_text("import subprocess\nsubprocess.call('ls ' + input(), shell=True)\n")
    out = subprocess.run(
        [sys.executable, "-m", "bandit", "-c", str(REPO / "pyproject.toml"), "-r", str(tmp_path), "-f", "json", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert {r["test_id"] for r in json.loads(out.stdout)["results"]} == {"B602"}


# --------------------------------------------------------------------------------- checkov


@pytest.fixture(scope="session")
def checkov(tmp_path_factory) -> pathlib.Path:
    """checkov, pinned, in a virtualenv of its own (its pins would downgrade the test venv's
    packaging and cyclonedx); built once under ~/.cache/lorarl/venvs."""
    return cached_venv(f"checkov-{CHECKOV_VERSION}", f"checkov=={CHECKOV_VERSION}") / "bin" / "checkov"


def run_checkov(checkov: pathlib.Path, config: pathlib.Path, target: pathlib.Path) -> dict:
    helm_dir = ensure_binaries(("helm",))  # the helm framework renders the chart with the real helm
    env = {**os.environ, "PATH": f"{helm_dir}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        [str(checkov), "--config-file", str(config), "-d", str(target), "-o", "json"], cwd=REPO, capture_output=True, text=True, env=env, timeout=600
    )
    report = json.loads(out.stdout)
    assert isinstance(report, dict), "one framework per run"
    return report


@pytest.mark.parametrize("scope", sorted(CHECKOV_CONFIGS))
def test_checkov_finds_nothing_unexplained(checkov, scope):
    config, target = CHECKOV_CONFIGS[scope]
    assert set(yaml.safe_load(config.read_text())["skip-check"]) == suppressions("checkov", scope)
    report = run_checkov(checkov, config, target)
    failed = [(f["check_id"], f["resource"]) for f in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["parsing_errors"] == 0
    # it did look at the operator's objects: the Deployment, its RBAC, the policies
    resources = {r["resource"].split(".")[0] for r in report["results"]["passed_checks"]}
    assert {"Deployment", "ClusterRole"} <= resources, resources


def test_checkov_would_catch_a_privileged_pod(checkov, tmp_path):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "x"},
        "spec": {"containers": [{"name": "c", "image": "i@sha256:" + "0" * 64, "securityContext": {"privileged": True}}]},
    }
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    report = run_checkov(checkov, CHECKOV_CONFIGS["manifests"][0], tmp_path)
    assert "CKV_K8S_16" in {f["check_id"] for f in report["results"]["failed_checks"]}  # "Container should not be privileged"


# ------------------------------------------------------------------------------- pip-audit


def pypi_vulnerability_service_reachable(name: str, version: str) -> str | None:
    """None when PyPI's per-version JSON (what pip-audit asks) answers; else why not."""
    url = f"https://pypi.org/pypi/{name}/{version}/json"
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:  # noqa: S310 (a fixed https URL)
            return None if "vulnerabilities" in json.load(resp) else f"{url} has no 'vulnerabilities' key"
    except (urllib.error.URLError, OSError, ValueError) as err:
        return f"{url}: {err}"


def locked() -> dict[str, str]:
    pins = [line.split("==") for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    return {name.lower().replace("_", "-"): version for name, version in pins}


def test_the_lock_pins_every_runtime_dependency_within_its_range():
    from packaging.requirements import Requirement

    pins = locked()
    for spec in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements.lock: run hack/security/gen-requirements-lock.sh"
        assert req.specifier.contains(pins[name]), f"requirements.lock pins {name}=={pins[name]} outside {req.specifier}"


def test_pip_audit_finds_no_known_vulnerability(tmp_path):
    ignored = suppressions("pip-audit")
    name, version = next(iter(locked().items()))
    unreachable = pypi_vulnerability_service_reachable(name, version)
    if unreachable:
        pytest.skip(f"PyPI's vulnerability data is not reachable here, pip-audit cannot audit: {unreachable}")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip_audit",
            "-r",
            str(LOCK),
            "--no-deps",
            "--disable-pip",
            "--progress-spinner",
            "off",
            "-f",
            "json",
            *[a for v in sorted(ignored) for a in ("--ignore-vuln", v)],
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(out.stdout)
    skipped = [d["name"] for d in report["dependencies"] if "skip_reason" in d]
    assert skipped == [], f"pip-audit could not audit {skipped}"
    found = [(d["name"], d["version"], v["id"]) for d in report["dependencies"] for v in d.get("vulns", [])]
    assert found == [], "known vulnerabilities: update requirements.lock (and pyproject ranges) or explain them in docs/security.md"
