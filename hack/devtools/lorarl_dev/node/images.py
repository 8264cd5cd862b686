"""Container images built on this machine with no registry: OCI archives cached by content hash.

- the pause image (the pod sandbox): ``gcc -static`` of ``build/pause/linux/pause.c`` from the
  k8s.io/kubernetes module in the Go module cache (the same source the upstream
  registry.k8s.io/pause image is built from);
- a tiny busybox image from Debian's ``busybox-static`` (``/bin/busybox`` and its applet links),
  for the node's own tests (sh, wget, nslookup, httpd), plus Debian's ``openssl`` binary and the
  libraries it links: busybox's wget runs ``openssl s_client`` for https when it finds one, and its
  own TLS client offers only SHA-1 signatures, which Go (>= 1.25, GODEBUG tlssha1) and OpenSSL 3
  refuse, so without it a pod could not reach the API server over TLS.

Each is packed with ``umoci`` into an OCI image layout, tarred, and cached as
``~/.cache/lorarl/images/<name>-<sha256 of the inputs>.tar``; the manifest carries
``io.containerd.image.name`` so ``ctr images import`` names it without extra flags.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

from lorarl_dev.binaries import kubernetes_version
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.locations import cache_root

PAUSE_IMAGE = "registry.k8s.io/pause:3.10-lorarl"
BUSYBOX_IMAGE = "docker.io/library/busybox:lorarl"
BUSYBOX_BINARY = pathlib.Path("/bin/busybox")  # Debian's busybox-static
OPENSSL_BINARY = pathlib.Path("/usr/bin/openssl")  # Debian's openssl


def images_dir() -> pathlib.Path:
    return cache_root() / "images"


def _run(*cmd: str, cwd: str | os.PathLike[str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def _with_libraries(binary: pathlib.Path) -> dict[str, bytes]:
    """``binary`` and every shared library ``ldd`` says it loads, at their paths (no leading /)."""
    files = {str(binary).lstrip("/"): binary.read_bytes()}
    for line in _run("ldd", str(binary)).splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            real = pathlib.Path(path).resolve()
            files[path.lstrip("/")] = real.read_bytes()
    return files


def _layer_tar(path: pathlib.Path, files: dict[str, bytes], links: dict[str, str]) -> None:
    """A reproducible layer: fixed mtimes and owners, sorted entries."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(pathlib.PurePosixPath(p).parent) for p in [*files, *links]} - {"."})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o755
            tar.addfile(info, io.BytesIO(files[name]))
        for name in sorted(links):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, links[name], 0o777
            tar.addfile(info)


def _oci_archive(out: pathlib.Path, image: str, layer: pathlib.Path, config: list[str]) -> None:
    """An OCI layout with one layer, tarred to ``out`` (written to a temp name, then renamed)."""
    with tempfile.TemporaryDirectory(prefix="lorarl-image-") as tmp:
        layout = pathlib.Path(tmp) / "layout"
        ref = f"{layout}:latest"
        _run("umoci", "init", "--layout", str(layout))
        _run("umoci", "new", "--image", ref)
        _run("umoci", "raw", "add-layer", "--image", ref, str(layer))
        _run("umoci", "config", "--image", ref, "--os", "linux", "--architecture", "amd64", *config)
        _run("umoci", "gc", "--layout", str(layout))
        index_path = layout / "index.json"
        index = json.loads(index_path.read_text())
        for desc in index["manifests"]:
            desc.setdefault("annotations", {})["io.containerd.image.name"] = image
        index_path.write_text(json.dumps(index))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_name(out.name + f".tmp.{os.getpid()}")
        with tarfile.open(tmp_out, "w") as tar:
            for p in sorted(layout.rglob("*")):
                tar.add(p, arcname=str(p.relative_to(layout)), recursive=False)
        tmp_out.replace(out)


def _cached(name: str, inputs: list[bytes]) -> pathlib.Path:
    digest = hashlib.sha256()
    for part in inputs:
        digest.update(hashlib.sha256(part).digest())
    return images_dir() / f"{name}-{digest.hexdigest()[:16]}.tar"


def pause_source() -> pathlib.Path:
    """pause.c of the pinned k8s.io/kubernetes module, from the Go module cache."""
    gomodcache = _run("go", "env", "GOMODCACHE").strip()
    src = pathlib.Path(gomodcache) / f"k8s.io/kubernetes@{kubernetes_version()}" / "build/pause/linux/pause.c"
    if not src.is_file():
        _run("go", "mod", "download", f"k8s.io/kubernetes@{kubernetes_version()}", cwd=pathlib.Path.home())
    if not src.is_file():
        raise ControlPlaneError(f"{src} not found")
    return src


def pause_archive() -> pathlib.Path:
    """The pause image as an OCI archive (built once per source and compiler)."""
    src = pause_source().read_bytes()
    gcc = _run("gcc", "--version").splitlines()[0].encode()
    out = _cached("pause", [src, gcc, PAUSE_IMAGE.encode()])
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="lorarl-pause-") as tmp:
        c, binary = pathlib.Path(tmp) / "pause.c", pathlib.Path(tmp) / "pause"
        c.write_bytes(src)
        # upstream's Makefile: -Os -Wall -Werror -static, with the version baked in
        _run("gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-lorarl", "-o", str(binary), str(c))
        _run("strip", str(binary))
        layer = pathlib.Path(tmp) / "layer.tar"
        _layer_tar(layer, {"pause": binary.read_bytes()}, {})
        _oci_archive(out, PAUSE_IMAGE, layer, ["--config.entrypoint", "/pause", "--config.user", "65535:65535"])
    return out


def busybox_archive() -> pathlib.Path:
    """A busybox image: Debian's static busybox and a link for every applet it lists."""
    if not BUSYBOX_BINARY.is_file():
        raise ControlPlaneError(f"{BUSYBOX_BINARY} missing: apt-get install busybox-static")
    if not OPENSSL_BINARY.is_file():
        raise ControlPlaneError(f"{OPENSSL_BINARY} missing: apt-get install openssl")
    files = {"bin/busybox": BUSYBOX_BINARY.read_bytes(), **_with_libraries(OPENSSL_BINARY)}
    out = _cached("busybox", [*(k.encode() + v for k, v in sorted(files.items())), BUSYBOX_IMAGE.encode()])
    if out.is_file():
        return out
    applets = _run(str(BUSYBOX_BINARY), "--list").split()
    links = {f"bin/{a}": "busybox" for a in applets if a != "busybox"}
    with tempfile.TemporaryDirectory(prefix="lorarl-busybox-") as tmp:
        layer = pathlib.Path(tmp) / "layer.tar"
        _layer_tar(layer, files, links)
        _oci_archive(out, BUSYBOX_IMAGE, layer, ["--config.cmd", "sh", "--config.env", "PATH=/bin:/usr/bin"])
    return out


def have_tools() -> list[str]:
    """The image tools missing from PATH (empty when all are there)."""
    return [t for t in ("gcc", "strip", "umoci", "go") if shutil.which(t) is None]
