"""Where an adapter is written to and read from: an s3:// prefix (botocore: SigV4, retries, the
AWS_* environment) or a directory (a claim mounted in the export pod, or a local path when
pulling). Each store copies files by name; it never chooses or checks them (package.py, pull.py do).
The manifest is written last, so a directory with a manifest is a whole export."""

from __future__ import annotations

import os
import shutil
from typing import BinaryIO, Protocol


class StoreError(Exception):
    """The store refused or could not be reached; the message names no credential."""


class Store(Protocol):
    uri: str

    def put(self, name: str, path: str) -> None: ...
    def open(self, name: str) -> BinaryIO: ...


class S3Store:
    def __init__(self, uri: str, endpoint: str | None = None, region: str | None = None, access_key: str | None = None, secret_key: str | None = None):
        try:
            import botocore.config
            import botocore.session
        except ImportError:
            raise StoreError("s3:// needs botocore (the AWS SDK's core): set spec.export.image to an image that has it") from None
        if not uri.startswith("s3://") or not uri.endswith("/"):
            raise StoreError(f"{uri}: an s3:// prefix ending in '/' is expected")
        self.uri = uri
        self.bucket, _, self.prefix = uri[len("s3://") :].partition("/")
        session = botocore.session.get_session()
        self._client = session.create_client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=botocore.config.Config(retries={"max_attempts": 5, "mode": "standard"}),
        )
        self._errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)

    def _fail(self, what: str, err: Exception) -> StoreError:
        code = getattr(err, "response", {}).get("Error", {}).get("Code") if hasattr(err, "response") else None
        return StoreError(f"{what} s3://{self.bucket}/{self.prefix}: {code or type(err).__name__}")

    def put(self, name: str, path: str) -> None:
        try:
            with open(path, "rb") as body:
                self._client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body)
        except self._errors as err:
            raise self._fail(f"writing {name} to", err) from None

    def open(self, name: str) -> BinaryIO:
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"]
        except self._errors as err:
            raise self._fail(f"reading {name} from", err) from None


class DirStore:
    def __init__(self, path: str, uri: str | None = None):
        self.path = path
        self.uri = uri or path

    def put(self, name: str, path: str) -> None:
        try:
            os.makedirs(self.path, exist_ok=True)
            part = os.path.join(self.path, name + ".part")
            shutil.copyfile(path, part)
            os.replace(part, os.path.join(self.path, name))
        except OSError as err:
            raise StoreError(f"writing {name} to {self.uri}: {err.strerror}") from None

    def open(self, name: str) -> BinaryIO:
        try:
            return open(os.path.join(self.path, name), "rb")
        except OSError as err:
            raise StoreError(f"reading {name} from {self.uri}: {err.strerror}") from None


def for_uri(uri: str, endpoint: str | None = None) -> Store:
    """A store to pull from: s3:// (credentials from the AWS_* environment) or a local directory."""
    if uri.startswith("s3://"):
        return S3Store(uri if uri.endswith("/") else uri + "/", endpoint=endpoint or os.environ.get("AWS_ENDPOINT_URL"))
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" in uri:
        raise StoreError(f"{uri}: only s3:// and local directories can be pulled so far")
    return DirStore(uri)
