"""Fixtures of the adapter suite: moto's S3 server (a real S3 implementation in Python; no
S3-compatible server built from a Go module is cached here, see docs/adapters.md) and an
interpreter path that gives our CLI botocore (moto's venv holds it: its botocore pins
python-dateutil<3 in its metadata, while our venv has 4, which botocore works with)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest

from tests.helpers import wait_for

MOTO = "5.2.5"  # the same cached venv as tests/prepare/test_prepare_sh.py


@pytest.fixture(scope="session")
def moto_python():
    venv = pathlib.Path.home() / ".cache/lorarl/venvs" / f"moto-{MOTO}"
    python = venv / "bin/python3"
    if not (venv / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"moto[server]=={MOTO}"], check=True, timeout=1800)
        (venv / ".installed").touch()
    return python


@pytest.fixture(scope="session")
def botocore_path(moto_python, tmp_path_factory):
    """A PYTHONPATH entry holding only botocore (from moto's venv) for our CLI's subprocesses."""
    site = subprocess.run(
        [str(moto_python), "-c", "import botocore, os; print(os.path.dirname(os.path.dirname(botocore.__file__)))"], capture_output=True, text=True, check=True
    ).stdout.strip()
    d = tmp_path_factory.mktemp("botocore")
    (d / "botocore").symlink_to(pathlib.Path(site) / "botocore")
    return str(d)


@pytest.fixture(scope="module")
def s3(moto_python, tmp_path_factory):
    """moto's S3 server on a loopback port with the bucket "adapters"; yields (endpoint, run)
    where run(code) executes botocore code against it in moto's interpreter."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    server = subprocess.Popen([str(moto_python.with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIDADMIN", "AWS_SECRET_ACCESS_KEY": "admin", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}

    def run(code: str) -> str:
        prelude = "import botocore.session\ns3 = botocore.session.get_session().create_client('s3')\n"
        done = subprocess.run([str(moto_python), "-c", prelude + code], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        wait_for(
            lambda: (
                subprocess.run(
                    [str(moto_python), "-c", "import botocore.session\nbotocore.session.get_session().create_client('s3').create_bucket(Bucket='adapters')"],
                    env=env,
                    capture_output=True,
                ).returncode
                == 0
            ),
            timeout=60,
            what="moto's S3 server",
        )
        yield endpoint, run
    finally:
        server.terminate()
        server.wait(timeout=30)
