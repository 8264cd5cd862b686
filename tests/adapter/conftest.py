"""Fixtures of the adapter suite: moto's S3 server (a real S3 implementation in Python; no
S3-compatible server built from a Go module is cached here, see docs/development.md) and an
interpreter path that gives our CLI botocore (moto's venv holds it: its botocore pins
python-dateutil<3 in its metadata, while our venv has 4, which botocore works with)."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
from lorarl_dev import moto


@pytest.fixture(scope="session")
def moto_python():
    return moto.python()


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
def s3(tmp_path_factory):
    """moto's S3 server on a loopback port with the bucket "adapters"; yields (endpoint, run)
    where run(code) executes botocore code against it in moto's interpreter."""
    with moto.server(tmp_path_factory.mktemp("moto") / "moto.log", "s3.create_bucket(Bucket='adapters')", key_id="AKIDADMIN", secret="admin") as (
        endpoint,
        env,
    ):

        def run(code: str) -> str:
            done = moto.run(code, env)
            assert done.returncode == 0, done.stderr
            return done.stdout

        yield endpoint, run


@pytest.fixture(scope="session")
def oras_path(tmp_path_factory):
    """A PYTHONPATH entry holding only oras (the ORAS Python SDK, the operator image's pin) for our
    CLI's subprocesses; its requests and jsonschema are our venv's."""
    from lorarl_dev import exporter

    d = tmp_path_factory.mktemp("oras")
    (d / "oras").symlink_to(exporter.package_dir("oras"))
    return str(d)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """go-containerregistry's registry (`crane registry serve`) on a loopback port: its host:port."""
    from lorarl_dev import registry as oci_registry

    root = tmp_path_factory.mktemp("registry")
    with oci_registry.server(root / "blobs", root / "registry.log") as address:
        yield address
