"""The operator and job images, really built (buildah on a base made from Debian packages).

Each archive is checked the way the node will use it: unpacked by umoci (an independent OCI
implementation) and its own entrypoint, user and environment run in a chroot, in mount and PID
namespaces of the test's own (a read-only root and a tmpfs /tmp for the operator, as in its
Deployment); the job image also runs `ray start` in a network namespace of its own (loopback
only) and answers KubeRay v1.5.0's own probe commands. Slow on a cold cache (minutes): marker
`images`; skipped only without root or the Debian packages (buildah, mmdebstrap, umoci).
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import tarfile

import pytest
from lorarl import __version__
from lorarl.job import artifact, paths, render
from lorarl_dev import images

from tests.helpers import job_from, seed_doc

MISSING = [tool for tool in ("buildah", "mmdebstrap", "umoci", "unshare", "chroot") if not shutil.which(tool)]
pytestmark = [
    pytest.mark.images,
    pytest.mark.skipif(os.geteuid() != 0, reason="building and running images needs root"),
    pytest.mark.skipif(bool(MISSING), reason=f"missing (Debian packages): {' '.join(MISSING)}"),
]

# KubeRay v1.5.0's probe command (ray-operator/controllers/ray/utils/constant.go:235) with its
# defaults (constant.go:98,100,210,215), as initLivenessAndReadinessProbe fills it in
# (common/pod.go:364-376) and runs it: `bash -c` (pod.go:401,416)
PROBE = "wget --tries 1 -T %d -q -O- http://localhost:%d/%s | grep success"
HEAD_PROBES = [PROBE % (2, 52365, "api/local_raylet_healthz"), PROBE % (10, 8265, "api/gcs_healthz")]


class Bundle:
    """An image archive unpacked by umoci: rootfs/ and the runtime config of its image config."""

    def __init__(self, artifact: images.ImageArtifact, root: pathlib.Path) -> None:
        layout, self.path = root / "layout", root / "bundle"
        with tarfile.open(artifact.archive) as tar:
            tar.extractall(layout, filter="data")
        self.index = json.loads((layout / "index.json").read_text())
        tag = self.index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(self.path)], check=True, capture_output=True)
        self.rootfs = self.path / "rootfs"
        self.config = json.loads((self.path / "config.json").read_text())
        [manifest] = self.index["manifests"]
        blob = layout / "blobs" / "sha256" / manifest["digest"].split(":", 1)[1]
        config_digest = json.loads(blob.read_text())["config"]["digest"].split(":", 1)[1]
        self.image_config = json.loads((layout / "blobs" / "sha256" / config_digest).read_text())

    def run(self, *argv: str, read_only: bool = False, user: str | None = None, network: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run argv (default: the image's entrypoint + cmd) as the image's user with its env and
        working directory, in a chroot in fresh mount and PID namespaces (and a fresh network
        namespace, loopback only, when ``network``). /proc, /dev and /sys come from the host, /tmp
        is a tmpfs, and /etc/hosts says what a kubelet's says for localhost."""
        process = self.config["process"]
        userspec = user or f"{process['user']['uid']}:{process['user']['gid']}"
        args = list(argv) or process["args"]
        r = shlex.quote(str(self.rootfs))
        (self.rootfs / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n")
        mounts = [
            f"mount --bind {r} {r}",
            f"mount -o remount,bind,ro {r}" if read_only else "true",
            f"mount -t proc proc {r}/proc",
            f"mount --rbind /dev {r}/dev",
            f"mount --rbind /sys {r}/sys",
            f"mount -t tmpfs -o mode=1777 tmpfs {r}/tmp",
            "ip link set lo up" if network else "true",
        ]
        command = shlex.join(
            ["chroot", f"--userspec={userspec}", str(self.rootfs), "/usr/bin/env", "-i", f"--chdir={process.get('cwd', '/')}", *process["env"], *args]
        )
        unshare = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", *(["--net"] if network else [])]
        return subprocess.run([*unshare, "sh", "-ec", " && ".join(mounts) + " && " + command], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def operator_image() -> images.ImageArtifact:
    return images.build("operator")


@pytest.fixture(scope="module")
def job_image() -> images.ImageArtifact:
    if not (images.REPO / "hack/images/job/miles/train.py").exists():
        pytest.skip("hack/images/job/miles/ (the trainer stand-in) is not there yet")
    return images.build("job")


@pytest.fixture(scope="module")
def operator_bundle(operator_image, tmp_path_factory) -> Bundle:
    return Bundle(operator_image, tmp_path_factory.mktemp("operator"))


@pytest.fixture(scope="module")
def job_bundle(job_image, tmp_path_factory) -> Bundle:
    return Bundle(job_image, tmp_path_factory.mktemp("job"))


@pytest.mark.parametrize("name", ["operator", "job"])
def test_archive_names_the_ref_that_containerd_imports(name, request):
    """ctr import keeps a full reference in ref.name as the image's name (containerd v1.6.20
    import.go:221-232, images/archive/reference.go:36-54), the name the pod spec uses."""
    artifact = request.getfixturevalue(f"{name}_image")
    assert artifact.ref == images.planned(name).ref
    with tarfile.open(artifact.archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        assert tar.extractfile("oci-layout") is not None
    [manifest] = index["manifests"]
    annotations = manifest.get("annotations", {})
    assert annotations.get("io.containerd.image.name", annotations["org.opencontainers.image.ref.name"]) == artifact.ref
    assert artifact.ref.startswith(f"localhost/lorarl/{name}:") and len(artifact.ref.rsplit(":", 1)[1]) == 12


def test_operator_runs_as_65532_on_a_read_only_root(operator_bundle):
    process = operator_bundle.config["process"]
    assert (process["user"]["uid"], process["user"]["gid"]) == (65532, 65532)
    assert process["args"] == ["lorarl", "run", "--all-namespaces"]
    version = operator_bundle.run("lorarl", "--version", read_only=True)
    assert version.returncode == 0 and __version__ in version.stdout, version.stderr
    crd = operator_bundle.run("lorarl", "crd", read_only=True)
    assert crd.returncode == 0, crd.stderr
    assert "kind: CustomResourceDefinition" in crd.stdout and "lorarljobs.lorarl.dev" in crd.stdout
    whoami = operator_bundle.run("python3", "-c", "import getpass, os; print(os.getuid(), getpass.getuser())", read_only=True)
    assert whoami.stdout.split() == ["65532", "lorarl"], whoami.stderr  # kopf's peering identity needs the name
    # `python3` is the export pod's (the exporter venv: botocore, oras and huggingface_hub, no lorarl); `lorarl` runs
    # /opt/venv's by its shebang; both the base's interpreter, reached through the venvs' symlinks
    python = operator_bundle.run("python3", "-c", "import sys, botocore, oras, huggingface_hub; print(sys.prefix, sys.base_prefix)", read_only=True)
    assert python.stdout.split() == ["/opt/exporter", "/usr"], python.stdout + python.stderr
    shebang = (operator_bundle.rootfs / "opt/venv/bin/lorarl").read_text().splitlines()[0]
    assert shebang == "#!/opt/venv/bin/python", shebang


def test_operator_image_is_the_jobs_tools_image(operator_bundle, tmp_path):
    """The zipapp the head's init container copies (`cp`, the image's own) is the one built from
    this source, readable by any user; the reporter sidecar's command runs as 65532 on a
    read-only root."""
    pyz = operator_bundle.rootfs / paths.TOOLS_REPORTER_PATH.lstrip("/")
    assert pyz.read_bytes() == artifact.reporter_zipapp()
    assert pyz.stat().st_mode & 0o777 == 0o644
    copied = operator_bundle.run("sh", "-c", f"cp {paths.TOOLS_REPORTER_PATH} /tmp/r.pyz && python3 /tmp/r.pyz --help", read_only=True)
    assert copied.returncode == 0 and "--total-rollouts" in copied.stdout, copied.stderr
    sidecar = operator_bundle.run(*render.reporter_sidecar(job_from(seed_doc()), "unused")["command"], "--help", read_only=True)
    assert sidecar.returncode == 0 and "--spool" in sidecar.stdout, sidecar.stderr


def test_operator_final_stage_has_no_installer(operator_bundle):
    """No pip (the base has none, the venv was made without) and no apt (dpkg is Essential in
    Debian, as in the published python image)."""
    assert operator_bundle.run("python3", "-m", "pip", "--version").returncode != 0
    found = [
        p.relative_to(operator_bundle.rootfs).as_posix()
        for p in operator_bundle.rootfs.rglob("*")
        if p.is_file()
        and p.name in {"pip", "pip3", "apt", "apt-get"}
        or p.is_dir()
        and p.name.startswith(("pip-", "setuptools-", "wheel-"))
        and p.name.endswith(".dist-info")
    ]
    assert found == [], found


def test_operator_labels(operator_bundle):
    labels = operator_bundle.image_config["config"]["Labels"]
    assert labels["org.opencontainers.image.title"] == "lorarl"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    for key in ("description", "source", "revision"):
        assert labels[f"org.opencontainers.image.{key}"], key
    assert operator_bundle.image_config["config"]["ExposedPorts"].keys() == {"8080/tcp", "9090/tcp"}


def test_job_image_has_what_lorarl_touches(job_bundle):
    versions = job_bundle.run("python3", "-c", "import ray, huggingface_hub, sys; print(ray.__version__, huggingface_hub.__version__, sys.executable)")
    assert versions.returncode == 0, versions.stderr
    assert versions.stdout.split() == ["2.55.1", "1.33.0", "/opt/venv/bin/python3"]
    ray = job_bundle.run("ray", "--version")
    assert ray.returncode == 0 and "2.55.1" in ray.stdout, ray.stderr
    hf = job_bundle.run("hf", "download", "--help")
    assert hf.returncode == 0 and "--local-dir" in hf.stdout and "--repo-type" in hf.stdout, hf.stderr
    for tool in (["flock", "--version"], ["wget", "--version"], ["bash", "--version"], ["ps", "--version"], ["mv", "--version"]):
        result = job_bundle.run(*tool)
        assert result.returncode == 0, (tool, result.stderr)
    assert "GNU Wget" in job_bundle.run("wget", "--version").stdout  # KubeRay's probe uses --tries/-T
    assert job_bundle.run("python3", "-m", "pip", "--version").returncode != 0
    train = job_bundle.run("test", "-f", "/root/miles/train.py")
    assert train.returncode == 0
    # a login shell (KubeRay's ENABLE_LOGIN_SHELL) still finds the venv first
    login = job_bundle.run("bash", "-lc", "command -v python3 ray hf")
    assert login.stdout.split() == ["/opt/venv/bin/python3", "/opt/venv/bin/ray", "/opt/venv/bin/hf"], login.stdout + login.stderr


def test_job_image_starts_ray_and_answers_kuberays_probes(job_bundle):
    """`ray start --head` as KubeRay's container command runs it, then its own probe commands."""
    # KubeRay's own joint (common/pod.go:480-492: "ulimit -n 65536; <ray start>"): the ulimit may
    # fail (this machine's hard limit is lower, and no CAP_SYS_RESOURCE) without stopping ray start
    script = "ulimit -n 65536; " + " && ".join(
        [
            "ray start --head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1 --num-cpus 1 --object-store-memory 100000000 --disable-usage-stats",
            # the probes retry as the kubelet would (period 5 s, failureThreshold 10): the agent may lag
            *(f"for i in $(seq 30); do bash -c {shlex.quote(p)} && break; sleep 1; done; bash -c {shlex.quote(p)}" for p in HEAD_PROBES),
            "python3 -c \"import ray; ray.init(address='auto'); print('tasks', ray.get(ray.remote(lambda: 21 * 2).remote()))\"",
            "ray stop --force",
        ]
    )
    # Ray's dashboard waits 30 s for each of its module subprocesses (dashboard/consts.py:102,
    # RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT): on 2 shared cores that was too short
    slow = "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT=180"
    result = job_bundle.run("env", slow, "bash", "-c", script, network=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "tasks 42" in result.stdout
    assert result.stdout.count("success") >= 2


def test_second_build_is_a_cache_hit(operator_image, job_image):
    for name, first in (("operator", operator_image), ("job", job_image)):
        stat = first.archive.stat()
        again = images.build(name)
        assert again == first and not again.built
        assert first.archive.stat().st_mtime_ns == stat.st_mtime_ns
