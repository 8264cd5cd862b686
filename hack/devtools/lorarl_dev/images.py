"""Container images built on this machine with no registry: the operator image and the job image.

A Debian base is made from Debian packages (``mmdebstrap``, from the mirror this machine's apt
uses), and ``buildah`` builds on it the operator image from the repository's own ``Dockerfile``
and the job image from ``hack/images/job/Dockerfile``. Each image is written as an OCI archive,
``~/.cache/lorarl/images/<name>-<hash12>.oci.tar``, that the node imports with
``ctr -n k8s.io images import``; a pod names it by :attr:`ImageArtifact.ref`.

Everything is content-addressed: the base by its package list, suite and mirror; an image by its
Dockerfile, the files its COPY lines read, the base and its build arguments. An unchanged input
is a cache hit (no process started), a changed one a new archive. Builds are serialised with a
file lock, so two test sessions never build the same image twice at once.

Buildah keeps its storage in ``~/.cache/lorarl/buildah`` (the vfs driver: no overlay mounts;
``--isolation chroot``: no user or network namespaces; the host network for pip and PyPI only).
The job image keeps buildah's layer cache (``--layers``, its ``COPY miles/`` last), so a rebuild
after a change in ``hack/images/job/miles/`` costs a COPY, not a Ray install; the operator image
does not (with vfs every cached step is a full copy of the root filesystem: 434 s against 276 s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from lorarl import __version__

from .locations import cache_root

__all__ = [
    "BASE_PACKAGES",
    "IMAGES",
    "ImageArtifact",
    "ImageBuildError",
    "ImageSpec",
    "base_key",
    "build",
    "debian_mirrors",
    "image_key",
    "images_dir",
    "planned",
    "resolve_pins",
]

REPO = pathlib.Path(__file__).resolve().parents[3]
SUITE = "bookworm"
# what both images need from Debian: python3 (and its venv module, whose ensurepip gives the
# builder stages a pip: the base has none of its own, so the final stages carry no installer),
# CA certificates (the operator's TLS to the API server, pip and hf to HTTPS), passwd (the
# operator's Dockerfile adds its user), and for the job image bash + GNU wget (KubeRay's
# container command and probes, see hack/images/job/Dockerfile), flock (util-linux), ps, and
# libstdc++6 (Ray's raylet, gcs_server and _raylet.so link it: "libstdc++.so.6: cannot open
# shared object file" without it).
BASE_PACKAGES = ("bash", "ca-certificates", "libstdc++6", "passwd", "procps", "python3", "python3-venv", "util-linux", "wget")
# Essential: yes packages plus the ones above, no apt (nothing installs packages in the images);
# docs, man pages and translations left out (copyright files kept); /dev left to the runtime.
MMDEBSTRAP_OPTIONS = (
    "--variant=essential",
    "--mode=root",
    "--format=tar",
    "--skip=output/dev",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/lintian/*",
)
BASE_REPOSITORY = "localhost/lorarl/debian-bookworm"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# "deb [options] URI SUITE COMPONENTS..." (sources.list(5), one-line style)
ONE_LINE_SOURCE = re.compile(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s+(.+)$")
# what the build contexts never send (their .dockerignore files say the same)
IGNORED = re.compile(r"(^|/)(__pycache__|[^/]+\.egg-info)(/|$)|\.pyc$")


class ImageBuildError(RuntimeError):
    """A build step failed (its command and the end of its output are in the message)."""


@dataclasses.dataclass(frozen=True)
class ImageArtifact:
    """An image as the node gets it: the archive to import and the reference a pod spec names.

    ``ctr images import`` names the image after the archive's ``org.opencontainers.image.ref.name``
    annotation, kept whole when it is a full reference (containerd v1.6.20 import.go:221-232,
    images/archive/reference.go:36-54; cmd/ctr/commands/images/import.go:97-103), so with
    ``imagePullPolicy: IfNotPresent`` (or Never) the kubelet finds ``ref`` in containerd.
    """

    ref: str
    archive: pathlib.Path
    # whether this call built it (False: it was in the cache)
    built: bool = dataclasses.field(default=False, compare=False)


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """One image: its Dockerfile and build context (relative to the repository) and the build
    argument that names its base."""

    name: str
    dockerfile: str
    context: str
    base_arg: str
    build_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # said when a COPY source is missing (a part another module provides)
    missing_hint: str = ""
    # buildah's layer cache: worth its cost (vfs copies the root filesystem per step) only where
    # a rebuild reuses an expensive step
    layers: bool = False

    @property
    def repository(self) -> str:
        return f"localhost/lorarl/{self.name}"


IMAGES: dict[str, ImageSpec] = {
    # the operator image: the repository's own Dockerfile, repository root as context
    "operator": ImageSpec(
        "operator",
        "Dockerfile",
        ".",
        "PYTHON_IMAGE",
        {"VERSION": __version__, "SOURCE": "local build (lorarl-dev images build operator)"},
    ),
    # the job image: Ray, the hf CLI and the trainer stand-in (miles/, written by its own module)
    "job": ImageSpec(
        "job",
        "hack/images/job/Dockerfile",
        "hack/images/job",
        "BASE_IMAGE",
        missing_hint="hack/images/job/miles/ is the trainer stand-in (its entry point /root/miles/train.py)",
        layers=True,
    ),
}


def images_dir() -> pathlib.Path:
    return cache_root() / "images"


def buildah_dir() -> pathlib.Path:
    return cache_root() / "buildah"


def _digest(parts: Sequence[str | bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------- base


def _deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif line[0] in " \t" and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()


def debian_mirrors(suite: str = SUITE, apt_dir: pathlib.Path = pathlib.Path("/etc/apt")) -> tuple[str, ...]:
    """The apt sources of ``suite`` (and its -updates and -security suites) that this machine's apt
    uses, as mmdebstrap mirror lines ("deb [signed-by=...] URI SUITE main")."""
    wanted = (suite, f"{suite}-updates", f"{suite}-security")
    entries: list[tuple[str, str, str, str]] = []  # (uri, suite, components, signed_by)
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".sources":
            for p in _deb822_paragraphs(text):
                if "deb" not in p.get("types", "").split() or p.get("enabled", "yes").lower() == "no":
                    continue
                for uri in p.get("uris", "").split():
                    for s in p.get("suites", "").split():
                        entries.append((uri, s, p.get("components", ""), p.get("signed-by", "")))
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                m = ONE_LINE_SOURCE.match(line.split("#", 1)[0].strip())
                if m:
                    options, uri, s, components = m.groups()
                    signed = next((o.split("=", 1)[1] for o in (options or "").split() if o.startswith("signed-by=")), "")
                    entries.append((uri, s, components, signed))
    lines = []
    for uri, s, components, signed_by in entries:
        if s in wanted and "main" in components.split():
            opt = f"[signed-by={signed_by}] " if signed_by and not signed_by.startswith("-") else ""
            line = f"deb {opt}{uri} {s} main"
            if line not in lines:
                lines.append(line)
    if not any(f" {suite} main" in line for line in lines):
        raise ImageBuildError(f"no apt source for Debian {suite} (main) in {apt_dir}/sources.list*: the base is made from the mirror this machine's apt uses")
    return tuple(lines)


def _architecture() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def base_key(packages: Sequence[str] = BASE_PACKAGES, mirrors: Sequence[str] | None = None, suite: str = SUITE) -> str:
    """The base's content hash: what mmdebstrap is asked for (packages, suite, mirrors, options)."""
    mirrors = debian_mirrors(suite) if mirrors is None else mirrors
    return _digest(["base", suite, _architecture(), *sorted(packages), "--", *mirrors, "--", *MMDEBSTRAP_OPTIONS])


def _base_tar(key: str) -> pathlib.Path:
    return images_dir() / f"debian-{SUITE}-{key[:12]}.rootfs.tar"


def _base_ref(key: str) -> str:
    return f"{BASE_REPOSITORY}:{key[:12]}"


# ----------------------------------------------------------------------------------------- images


def _copy_sources(dockerfile: str) -> list[str]:
    """The build-context paths a Dockerfile's COPY/ADD lines read (not COPY --from=)."""
    text = re.sub(r"\\\n", " ", dockerfile)
    sources: list[str] = []
    for line in text.splitlines():
        words = line.strip().split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        if args and args[0].startswith("["):
            raise ImageBuildError(f"the JSON form of {words[0]} is not supported here: {line.strip()}")
        sources.extend(args[:-1])
    return sources


def _context_files(spec: ImageSpec, repo: pathlib.Path) -> list[pathlib.Path]:
    """Every file the build reads from its context, sorted (what the image hash covers)."""
    context = repo / spec.context
    dockerfile = repo / spec.dockerfile
    files: set[pathlib.Path] = set()
    for source in _copy_sources(dockerfile.read_text(encoding="utf-8")):
        path = context / source
        if not path.exists():
            hint = f": {spec.missing_hint}" if spec.missing_hint else ""
            raise ImageBuildError(f"{spec.dockerfile}: COPY source {source!r} is missing from {spec.context}{hint}")
        if path.is_dir():
            found = [p for p in path.rglob("*") if (p.is_file() or p.is_symlink()) and not IGNORED.search(p.relative_to(context).as_posix())]
            if not found:
                raise ImageBuildError(f"{spec.dockerfile}: COPY source {source!r} in {context} is empty")
            files.update(found)
        else:
            files.add(path)
    return sorted(files)


def image_key(spec: ImageSpec, base: str, repo: pathlib.Path = REPO) -> str:
    """The image's content hash: its Dockerfile, the bytes and modes of the files its COPY lines
    read, the base's hash and the build arguments."""
    context = repo / spec.context
    parts: list[str | bytes] = ["image", spec.name, base, json.dumps(dict(spec.build_args), sort_keys=True)]
    parts += ["Dockerfile", (repo / spec.dockerfile).read_bytes()]
    for path in _context_files(spec, repo):
        rel = path.relative_to(context).as_posix()
        if path.is_symlink():
            parts += [rel, "symlink", os.readlink(path)]
        else:
            parts += [rel, oct(path.stat().st_mode & 0o111), path.read_bytes()]
    return _digest(parts)


def _artifact(spec: ImageSpec, key: str) -> ImageArtifact:
    return ImageArtifact(f"{spec.repository}:{key[:12]}", images_dir() / f"{spec.name}-{key[:12]}.oci.tar")


def planned(name: str, repo: pathlib.Path = REPO) -> ImageArtifact:
    """The artifact ``build(name)`` returns, without building anything (it may not exist yet)."""
    spec = _spec(name)
    return _artifact(spec, image_key(spec, base_key(), repo))


def _spec(name: str) -> ImageSpec:
    try:
        return IMAGES[name]
    except KeyError:
        raise ImageBuildError(f"unknown image {name!r}: one of {', '.join(IMAGES)}") from None


# ---------------------------------------------------------------------------------------- running


class _Builder:
    """Runs mmdebstrap and buildah, every command's output appended to one log file."""

    def __init__(self, log: pathlib.Path, echo: bool) -> None:
        self.log, self.echo = log, echo
        root = buildah_dir()
        root.mkdir(parents=True, exist_ok=True)
        # registries: none (every name here is localhost/...; nothing is ever pulled)
        registries = root / "registries.conf"
        if not registries.exists():
            registries.write_text("unqualified-search-registries = []\n")
        self.env = {
            **os.environ,
            "CONTAINERS_REGISTRIES_CONF": str(registries),
            "BUILDAH_ISOLATION": "chroot",
            "TMPDIR": str(root / "tmp"),
        }
        (root / "tmp").mkdir(exist_ok=True)
        self.buildah_global = ["buildah", "--root", str(root / "storage"), "--runroot", str(root / "run"), "--storage-driver", "vfs"]

    def run(self, argv: Sequence[str], *, capture: bool = False, env: Mapping[str, str] | None = None) -> str:
        """Run argv; its output (stderr, and stdout unless captured) goes to the log, each line
        stamped with the seconds since the command started (where a build spends its time)."""
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"\n$ {shlex.join(argv)}\n")
            log.flush()
            started = time.monotonic()
            proc = subprocess.Popen(
                list(argv),
                env=self.env if env is None else env,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if capture else subprocess.STDOUT,
            )
            captured = ""
            if capture:  # (small outputs only: an id)
                captured, errors = proc.communicate()
                lines: Iterable[str] = errors.splitlines()
            else:
                lines = proc.stdout  # type: ignore[assignment]
            for line in lines:
                log.write(f"[{time.monotonic() - started:6.1f}] {line.rstrip()}\n")
                log.flush()
            proc.wait()
            log.write(f"# exit {proc.returncode} after {time.monotonic() - started:.1f} s\n")
        if proc.returncode != 0:
            tail = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
            raise ImageBuildError(f"{argv[0]} failed (exit {proc.returncode}): {shlex.join(argv)}\n" + "\n".join(tail) + f"\n(full log: {self.log})")
        return captured

    def build_volumes(self) -> list[str]:
        """Read-only mounts for the builds' RUN steps (never committed to a layer): this machine's
        CA bundle, and a pip config that points pip at it (pip trusts its own certifi bundle
        otherwise). Where the machine reaches PyPI through a TLS-inspecting proxy, its CA is in
        that bundle; the images keep Debian's own ca-certificates."""
        bundle = pathlib.Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
        if not bundle.is_file():
            return []
        pip_conf = buildah_dir() / "pip.conf"
        pip_conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        return [f"--volume={bundle}:/etc/ssl/certs/ca-certificates.crt:ro", f"--volume={pip_conf}:/etc/pip.conf:ro"]

    def buildah(self, *args: str, capture: bool = False) -> str:
        return self.run([*self.buildah_global, *args], capture=capture)

    def has_image(self, ref: str) -> bool:
        proc = subprocess.run(
            [*self.buildah_global, "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        return proc.returncode == 0

    def say(self, message: str) -> None:
        if self.echo:
            print(message, flush=True)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    images_dir().mkdir(parents=True, exist_ok=True)
    with (images_dir() / ".build.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _require_tools() -> None:
    missing = [tool for tool in ("buildah", "mmdebstrap") if not shutil.which(tool)]
    if missing:
        raise ImageBuildError(f"{' and '.join(missing)} not found: apt-get install -y {' '.join(missing)} (Debian packages)")
    if os.geteuid() != 0:
        raise ImageBuildError("building images needs root (mmdebstrap --mode=root, buildah --isolation chroot)")


def _ensure_base(builder: _Builder, key: str, mirrors: Sequence[str]) -> str:
    """The base in buildah's storage (made by mmdebstrap first when its rootfs is not cached)."""
    ref = _base_ref(key)
    if builder.has_image(ref):
        return ref
    tar = _base_tar(key)
    if not tar.exists():
        builder.say(f"base: mmdebstrap {SUITE} with {', '.join(BASE_PACKAGES)}")
        partial = tar.with_name(tar.name + ".partial")
        # (its own temporary directory, where apt's _apt user can read it)
        builder.run(["mmdebstrap", *MMDEBSTRAP_OPTIONS, f"--include={','.join(BASE_PACKAGES)}", SUITE, str(partial), *mirrors], env=os.environ)
        os.replace(partial, tar)
    builder.say(f"base: {tar.name} into buildah as {ref}")
    container = builder.buildah("from", "scratch", capture=True).strip()
    try:
        # ADD of a local tar archive extracts it (owners, modes and links kept)
        builder.buildah("add", container, str(tar), "/")
        builder.buildah(
            "config",
            "--env",
            f"PATH={BASE_PATH}",
            "--env",
            "LANG=C.UTF-8",
            "--cmd",
            "/bin/bash",
            "--label",
            f"org.opencontainers.image.title=debian-{SUITE}",
            "--label",
            f"dev.lorarl.base-key={key}",
            container,
        )
        builder.buildah("commit", "--format", "oci", "--rm", container, ref)
    except BaseException:
        subprocess.run([*builder.buildah_global, "rm", container], env=builder.env, capture_output=True)
        raise
    return ref


def build(name: str, *, repo: pathlib.Path = REPO, echo: bool = False) -> ImageArtifact:
    """Build image ``name`` ("operator" or "job") unless its archive is cached; return it."""
    spec = _spec(name)
    mirrors = debian_mirrors()
    base = base_key(mirrors=mirrors)
    key = image_key(spec, base, repo)
    artifact = _artifact(spec, key)
    # an archive appears only by rename(2) once complete: its existence is the cache hit
    if artifact.archive.exists():
        return artifact
    _require_tools()
    with _locked():
        if artifact.archive.exists():  # another process built it while we waited
            return artifact
        logs = images_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        builder = _Builder(logs / f"{spec.name}-{key[:12]}.log", echo)
        base_ref = _ensure_base(builder, base, mirrors)
        builder.say(f"{spec.name}: buildah bud {spec.dockerfile} as {artifact.ref}")
        args = [f"--build-arg={k}={v}" for k, v in {spec.base_arg: base_ref, **spec.build_args}.items()]
        builder.buildah(
            "bud",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--pull=never",
            f"--layers={str(spec.layers).lower()}",
            "--format",
            "oci",
            *builder.build_volumes(),
            "--file",
            str(repo / spec.dockerfile),
            *args,
            "--tag",
            artifact.ref,
            str(repo / spec.context),
        )
        partial = artifact.archive.with_name(artifact.archive.name + ".partial")
        partial.unlink(missing_ok=True)
        builder.buildah("push", "--format", "oci", artifact.ref, f"oci-archive:{partial}:{artifact.ref}")
        os.replace(partial, artifact.archive)
        builder.say(f"{spec.name}: {artifact.archive} ({artifact.archive.stat().st_size / 2**20:.0f} MiB)")
    return dataclasses.replace(artifact, built=True)


def resolve_pins(requirements: pathlib.Path, python: str = "python3") -> list[str]:
    """pip's resolution of a requirements file as ``name==version`` lines (for constraints.txt),
    from a scratch virtualenv of ``python`` (so the machine's own site-packages never count)."""
    with tempfile.TemporaryDirectory(prefix="lorarl-pins-") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        report = pathlib.Path(tmp) / "report.json"
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                "--requirement",
                str(requirements),
            ],
            check=True,
        )
        installs = json.loads(report.read_text())["install"]
    return sorted((f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs), key=str.lower)
