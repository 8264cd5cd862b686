"""What `lorarl-dev images` builds from, without building (no root, no buildah needed).

The content hash must cover every input of an image and nothing else; the job Dockerfile must
pass the same lint as the operator's; the base comes from this machine's apt sources.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest
from lorarl_dev import images

from tests.helpers import REPO
from tests.image.dockerfiles import hadolint, stages

JOB = REPO / "hack" / "images" / "job"
BASE = "0" * 64


@pytest.fixture
def repo_copy(tmp_path) -> pathlib.Path:
    """The files the two images are built from, copied (so a test can change them)."""
    for rel in (
        "Dockerfile",
        "pyproject.toml",
        "README.md",
        "hack/image/install.sh",
        "hack/image/exporter-requirements.txt",
        "hack/images/job/Dockerfile",
        "hack/images/job/requirements.txt",
        "hack/images/job/constraints.txt",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    shutil.copytree(REPO / "operator", tmp_path / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    miles = tmp_path / "hack/images/job/miles"
    miles.mkdir()
    (miles / "train.py").write_text("print('stand-in')\n")
    return tmp_path


def keys(repo: pathlib.Path) -> dict[str, str]:
    return {name: images.image_key(spec, BASE, repo) for name, spec in images.IMAGES.items()}


def test_key_is_stable_and_ignores_what_the_context_never_sends(repo_copy):
    before = keys(repo_copy)
    assert keys(repo_copy) == before
    cache = repo_copy / "operator" / "lorarl" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "api.cpython-311.pyc").write_bytes(b"\0")
    (repo_copy / "hack/images/job/miles/__pycache__").mkdir()
    (repo_copy / "hack/images/job/miles/__pycache__/train.cpython-311.pyc").write_bytes(b"\0")
    (repo_copy / "docs").mkdir()
    (repo_copy / "docs" / "notes.md").write_text("not in any build context\n")
    assert keys(repo_copy) == before


@pytest.mark.parametrize(
    "change, changed",
    [
        (lambda r: (r / "operator/lorarl/render.py").write_text("# edited\n", "utf-8"), {"operator"}),
        (lambda r: (r / "hack/image/install.sh").chmod(0o644), {"operator"}),
        (lambda r: (r / "README.md").write_text("other\n"), {"operator"}),
        (lambda r: (r / "hack/image/exporter-requirements.txt").write_text("botocore==1.0.0\n"), {"operator"}),
        (lambda r: (r / "hack/images/job/miles/train.py").write_text("print(2)\n"), {"job"}),
        (lambda r: (r / "hack/images/job/miles/rollout.py").write_text("x = 1\n"), {"job"}),
        (lambda r: (r / "hack/images/job/constraints.txt").write_text("ray==2.55.0\n"), {"job"}),
        (lambda r: (r / "hack/images/job/Dockerfile").write_text((r / "hack/images/job/Dockerfile").read_text() + "\n# x\n"), {"job"}),
    ],
)
def test_every_input_changes_its_image_and_only_its_image(repo_copy, change, changed):
    before = keys(repo_copy)
    change(repo_copy)
    after = keys(repo_copy)
    assert {name for name in before if before[name] != after[name]} == changed


def test_the_base_changes_every_image():
    spec = images.IMAGES["operator"]
    assert images.image_key(spec, BASE) != images.image_key(spec, "1" * 64)
    mirrors = ("deb http://deb.debian.org/debian bookworm main",)
    key = images.base_key(mirrors=mirrors)
    assert key == images.base_key(packages=tuple(reversed(images.BASE_PACKAGES)), mirrors=mirrors)
    assert key != images.base_key(mirrors=("deb http://ftp.de.debian.org/debian bookworm main",))
    assert key != images.base_key(packages=(*images.BASE_PACKAGES, "curl"), mirrors=mirrors)


def test_a_missing_context_part_is_named(repo_copy):
    shutil.rmtree(repo_copy / "hack/images/job/miles")
    with pytest.raises(images.ImageBuildError, match=r"COPY source 'miles/' is missing .*trainer stand-in"):
        images.image_key(images.IMAGES["job"], BASE, repo_copy)


def test_refs_and_archives_are_named_by_the_hash():
    artifact = images._artifact(images.IMAGES["job"], "ab" * 32)
    assert artifact.ref == "localhost/lorarl/job:abababababab"
    assert artifact.archive == images.images_dir() / "job-abababababab.oci.tar"
    with pytest.raises(images.ImageBuildError, match="unknown image 'pause'"):
        images.planned("pause")


def test_mirrors_come_from_the_machines_apt_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# a comment\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
        "deb-src http://mirror.example/debian bookworm main\n"
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n"
        "# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.debian.org/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://deb.debian.org/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: contrib\n"
        "\n"
        "Types: deb\n"
        "URIs: https://deb.nodesource.com/node_20.x\n"
        "Suites: nodistro\n"
        "Components: main\n"
    )
    assert images.debian_mirrors("bookworm", tmp_path) == (
        "deb [signed-by=/k.gpg] http://mirror.example/debian bookworm main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main",
    )
    with pytest.raises(images.ImageBuildError, match="no apt source for Debian trixie"):
        images.debian_mirrors("trixie", tmp_path)


def test_job_dockerfile_passes_hadolint():
    dockerfile = JOB / "Dockerfile"
    result = subprocess.run([hadolint(), str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_job_dockerfile_shape():
    builder, final = stages((JOB / "Dockerfile").read_text())
    assert builder[0] == "FROM ${BASE_IMAGE} AS builder" and final[0] == "FROM ${BASE_IMAGE}"
    assert [i for i in final if i.startswith("COPY")] == ["COPY --from=builder /opt/venv /opt/venv", "COPY miles/ /root/miles/"]
    runs = " ".join(i for i in final if i.startswith("RUN"))
    assert not re.search(r"\b(pip|apt-get|apt|curl|wget)\b", runs), runs
    install = " ".join(i for i in builder if i.startswith("RUN"))
    assert "--requirement /tmp/pins/requirements.txt --constraint /tmp/pins/constraints.txt" in install
    assert "pip uninstall --yes pip setuptools" in install
    env = " ".join(i for i in final if i.startswith("ENV"))
    assert "PATH=/opt/venv/bin:" in env


def test_every_requirement_is_pinned_in_the_constraints():
    def pins(path: pathlib.Path) -> dict[str, str]:
        out = {}
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line).groups()
                out[re.sub(r"[-_.]+", "-", name).lower()] = version
        return out

    wanted, constraints = pins(JOB / "requirements.txt"), pins(JOB / "constraints.txt")
    assert wanted == {"ray": "2.55.1", "huggingface-hub": "1.33.0"}
    for name, version in wanted.items():
        assert constraints[name] == version
    # ray[default]'s dashboard needs these; a constraints file without them would leave them free
    assert {"aiohttp", "grpcio", "pydantic", "prometheus-client", "click"} <= set(constraints)
