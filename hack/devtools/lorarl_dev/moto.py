"""moto's S3 server for the tests that need an S3 store (the prepare step's s3:// inputs, the
adapter export): a real S3 implementation in Python, run on a loopback port from a venv of its
own (its botocore pins python-dateutil<3 in its metadata while kubernetes needs >=3), built once
from PyPI and cached by version under ~/.cache/lorarl/venvs. No S3-compatible server built from
a Go module is served here (docs/adapters.md)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence

from lorarl_dev.processes import free_port
from lorarl_dev.venvs import cached_venv

VERSION = "5.2.5"


def python() -> pathlib.Path:
    """The interpreter of the venv holding moto[server] (and with it botocore)."""
    return cached_venv(f"moto-{VERSION}", f"moto[server]=={VERSION}") / "bin/python3"


def client_env(endpoint: str, key_id: str, secret: str) -> dict[str, str]:
    """What botocore reads to reach the server (credentials are the test's own, not real ones)."""
    return {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}


def run(code: str, env: Mapping[str, str], timeout: float = 60, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run botocore code in moto's interpreter, with ``s3`` bound to a client of the server
    (``prefix``: e.g. an nsenter into the cluster's network namespace)."""
    prelude = "import botocore.session\ns3 = botocore.session.get_session().create_client('s3')\n"
    return subprocess.run([*prefix, str(python()), "-c", prelude + code], env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def server(log: pathlib.Path, seed: str, key_id: str = "AKIDTEST", secret: str | None = None, timeout: float = 60) -> Iterator[tuple[str, dict[str, str]]]:
    """moto's S3 server on a free 127.0.0.1 port; ready once ``seed`` (botocore code, e.g. the
    buckets a test needs) ran against it. Yields (endpoint, the client environment). Without a
    ``secret`` the clients get a fresh random one (moto accepts any)."""
    secret = secret or secrets.token_hex(16)
    endpoint = f"http://127.0.0.1:{free_port()}"
    env = client_env(endpoint, key_id, secret)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(python().with_name("moto_server")), "-H", "127.0.0.1", "-p", endpoint.rsplit(":", 1)[1]], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + timeout
        while (done := run(seed, env)).returncode != 0:  # refused until the server listens
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto's S3 server did not come up on {endpoint}: {done.stderr[-400:]} (log: {log})")
            time.sleep(0.3)
        yield endpoint, env
    finally:
        proc.terminate()
        proc.wait(timeout=30)
