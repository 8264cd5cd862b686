"""An OCI registry for the export tests: go-containerregistry's ``crane registry serve``
(pkg/registry, a real implementation of the OCI distribution API, v0.22.1 built from the Go module
proxy by hack/controlplane/build.sh), and ``crane`` itself as a reader independent of the
exporter's client (oras-py): ``crane manifest``, ``crane blob``."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence

from lorarl_dev.binaries import ensure_binaries
from lorarl_dev.processes import free_port


def crane() -> pathlib.Path:
    """The crane binary, built (or found cached) by build.sh."""
    return ensure_binaries(["crane"]) / "crane"


def serve_command(address: str, disk: pathlib.Path) -> list[str]:
    """The registry on ``address`` (host:port), blobs on ``disk`` (which must exist)."""
    return [str(crane()), "registry", "serve", "--address", address, "--disk", str(disk)]


def read(*args: str, prefix: Sequence[str] = (), timeout: float = 60) -> subprocess.CompletedProcess:
    """``crane --insecure ARGS`` (plain HTTP), e.g. ("manifest", "host:port/repo:tag")."""
    return subprocess.run([*prefix, str(crane()), "--insecure", *args], capture_output=True, timeout=timeout, check=False)


@contextlib.contextmanager
def server(disk: pathlib.Path, log: pathlib.Path, timeout: float = 30) -> Iterator[str]:
    """The registry on a free 127.0.0.1 port; yields its host:port once /v2/ answers."""
    address = f"127.0.0.1:{free_port()}"
    disk.mkdir(parents=True, exist_ok=True)  # crane writes uploads there; it does not create it
    with log.open("w") as out:
        proc = subprocess.Popen(serve_command(address, disk), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"crane registry serve did not come up on {address} (log: {log})")
            time.sleep(0.2)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
