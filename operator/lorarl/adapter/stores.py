"""Where an adapter is written to and read from: an s3:// prefix (botocore: SigV4, retries, the
AWS_* environment), an OCI registry (oras: the adapter as one OCI artifact), a Hugging Face Hub
repo (huggingface_hub: the adapter as one commit) or a directory (a claim mounted in the export
pod, or a local path when pulling). Each store copies files by name;
it never chooses or checks them (package.py, pull.py do). The manifest is written last, so a
directory with a manifest is a whole export; ``finish`` ends an export (the OCI manifest)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from typing import BinaryIO, Protocol


class StoreError(Exception):
    """The store refused or could not be reached; the message names no credential, and no text
    of the server's beyond an HTTP status and an error code from a fixed list (issue 35: an
    endpoint is the job author's choice, the message goes to the job's status)."""


# The error codes a message may name, as S3 (its XML <Code>) and the Hub (X-Error-Code) give them:
# any other code a server sends is not repeated (it could be any text of any server's).
S3_ERROR_CODES = frozenset(
    {
        "AccessDenied", "AccountProblem", "AllAccessDisabled", "BadDigest", "BucketAlreadyExists", "BucketAlreadyOwnedByYou",
        "EntityTooLarge", "ExpiredToken", "InternalError", "InvalidAccessKeyId", "InvalidArgument", "InvalidBucketName",
        "InvalidObjectState", "InvalidRequest", "InvalidToken", "KeyTooLongError", "MissingContentLength", "NoSuchBucket",
        "NoSuchKey", "NoSuchUpload", "NotImplemented", "PermanentRedirect", "PreconditionFailed", "QuotaExceeded",
        "RequestTimeTooSkewed", "RequestTimeout", "ServiceUnavailable", "SignatureDoesNotMatch", "SlowDown",
        "TemporaryRedirect", "TokenRefreshRequired", "XAmzContentSHA256Mismatch",
    }
)  # fmt: skip
HUB_ERROR_CODES = frozenset({"RepoNotFound", "RevisionNotFound", "EntryNotFound", "GatedRepo", "DisabledRepo", "BucketNotFound"})


def known_code(code: object, known: frozenset[str]) -> str | None:
    return code if isinstance(code, str) and code in known else None


def refuse_cross_host_redirect(response_url: str, location: str | None) -> str | None:
    """Why a redirect is not followed (another host, or another scheme or port), or None to follow it."""
    import urllib.parse

    if not location:
        return None
    here, there = urllib.parse.urlsplit(response_url), urllib.parse.urlsplit(urllib.parse.urljoin(response_url, location))
    if (here.scheme, here.hostname, here.port) != (there.scheme, there.hostname, there.port):
        return "the server redirected to another host: the export follows redirects on the same host only"
    return None


class Store(Protocol):
    uri: str

    def put(self, name: str, path: str) -> None: ...
    def open(self, name: str) -> BinaryIO: ...
    def finish(self) -> None: ...


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
        response = getattr(err, "response", None)
        if not isinstance(response, dict):
            response = {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        code = known_code((response.get("Error") or {}).get("Code"), S3_ERROR_CODES)
        said = " ".join(x for x in (f"HTTP {status}" if status else "", code or "") if x)
        return StoreError(f"{what} s3://{self.bucket}/{self.prefix}: {said or type(err).__name__}")

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

    def finish(self) -> None:
        pass


# The adapter as an OCI artifact, laid out as `oras push` lays out files (oras-go v2.7.0
# pack.go:306-364, packManifestV1_1; content/file/file.go:56-57): an image manifest with
# artifactType set and the empty config descriptor (image-spec v1.1 manifest.md, "Guidelines for
# Artifact Usage": artifactType MUST be set when config is the empty value), one layer per file
# with the media type oras gives a file and its name in org.opencontainers.image.title, and
# org.opencontainers.image.created. `oras pull` writes each layer to its title.
ARTIFACT_TYPE = "application/vnd.lorarl.adapter.v1"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
}
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
TITLE = "org.opencontainers.image.title"


def oci_uri(reference: str) -> str:
    return "oci://" + reference


class OciStore:
    """``registry/repository:tag`` through oras-py's Registry (its blob upload, manifest upload and
    docker-config authentication; https unless ``plain_http``, as `oras --plain-http`)."""

    def __init__(
        self, reference: str, plain_http: bool = False, docker_config: str | None = None, created: str | None = None, same_host_redirects: bool = False
    ):
        try:
            import oras.provider
            import requests
        except ImportError:
            raise StoreError("oci:// needs oras (the ORAS Python SDK): set spec.export.image to an image that has it") from None
        if reference.startswith("oci://"):
            reference = reference[len("oci://") :]
        self.reference, self.uri = reference, oci_uri(reference)
        self._created = created
        self._registry = oras.provider.Registry(insecure=plain_http)
        session = getattr(self._registry, "session", None)
        if same_host_redirects and isinstance(session, requests.Session):
            session.hooks.setdefault("response", []).append(_requests_same_host_redirects)
        try:
            self._container = self._registry.get_container(reference)
        except ValueError:
            raise StoreError(f"{reference}: not a registry/repository:tag reference") from None
        self._errors = (requests.RequestException, ValueError, OSError)
        if docker_config:
            self._registry.auth.load_configs(self._container, configs=[docker_config])
        self._layers: list[dict] = []
        self._manifest: dict | None = None

    def _fail(self, what: str, err: Exception) -> StoreError:
        response = getattr(err, "response", None)
        code = f"HTTP {response.status_code}" if response is not None else type(err).__name__
        if err.args and isinstance(err.args[0], str) and err.args[0].startswith("the server redirected"):
            code += f": {err.args[0]}"  # ours (_requests_same_host_redirects), not the server's
        return StoreError(f"{what} {self.uri}: {code}")

    def _check(self, response) -> None:
        if response.status_code not in (200, 201, 202):
            import requests

            raise requests.HTTPError(response=response)

    def put(self, name: str, path: str) -> None:
        h, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                size += len(chunk)
        layer = {"mediaType": LAYER_MEDIA_TYPE, "digest": "sha256:" + h.hexdigest(), "size": size, "annotations": {TITLE: name}}
        try:
            self._check(self._registry.upload_blob(path, self._container, layer))
        except self._errors as err:
            raise self._fail(f"writing {name} to", err) from None
        self._layers.append(layer)

    def finish(self) -> None:
        """Push the empty config and the image manifest naming every layer (the tag moves last)."""
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "artifactType": ARTIFACT_TYPE, "config": EMPTY_CONFIG, "layers": self._layers}
        if self._created:
            manifest["annotations"] = {"org.opencontainers.image.created": self._created}
        with tempfile.TemporaryDirectory(prefix="lorarl-oci-") as tmp:
            config = os.path.join(tmp, "config.json")
            with open(config, "wb") as f:
                f.write(b"{}")
            try:
                self._check(self._registry.upload_blob(config, self._container, dict(EMPTY_CONFIG)))
                self._check(self._registry.upload_manifest(manifest, self._container))
            except self._errors as err:
                raise self._fail("writing the manifest to", err) from None

    def _layer(self, name: str) -> dict:
        if self._manifest is None:
            try:
                response = self._registry.do_request(
                    f"{self._registry.prefix}://{self._container.manifest_url()}", "GET", headers={"Accept": MANIFEST_MEDIA_TYPE}
                )
                self._check(response)
                self._manifest = response.json()
            except self._errors as err:
                raise self._fail("reading the manifest of", err) from None
        for layer in self._manifest.get("layers") or []:
            if (layer.get("annotations") or {}).get(TITLE) == name:
                return layer
        raise StoreError(f"reading {name} from {self.uri}: no layer titled {name}")

    def open(self, name: str) -> BinaryIO:
        layer = self._layer(name)
        try:
            response = self._registry.get_blob(self._container, layer["digest"], stream=True)
            self._check(response)
        except self._errors as err:
            raise self._fail(f"reading {name} from", err) from None
        response.raw.decode_content = True
        return response.raw


def _requests_same_host_redirects(response, *args, **kwargs):
    """A requests response hook: a redirect to another host is an error, not followed (the
    hook runs on each response before requests follows it)."""
    import requests

    if response.is_redirect and (why := refuse_cross_host_redirect(response.url, response.headers.get("Location"))):
        raise requests.HTTPError(why, response=response)
    return response


class RedirectRefused(OSError):
    pass


def _httpx_same_host_redirects(response) -> None:
    """The same, as an httpx response event hook (huggingface_hub's client)."""
    if response.has_redirect_location and (why := refuse_cross_host_redirect(str(response.url), response.headers.get("Location"))):
        raise RedirectRefused(why)


# hf://<repo>@<revision>: huggingface_hub's own URI form (HfFileSystem, hf_file_system.py:379-385),
# with the commit id as the revision, so the URI names the exported files and nothing later.
HUB_SCHEME = "hf://"


def hub_uri(repo: str, revision: str) -> str:
    return f"{HUB_SCHEME}{repo}@{revision}"


def parse_hub_uri(uri: str) -> tuple[str, str]:
    """hf://<org>/<name>[@<revision>] -> (repo, revision); models only, the files at the root."""
    rest = uri[len(HUB_SCHEME) :].rstrip("/")
    repo, _, revision = rest.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or repo.startswith(("datasets/", "spaces/", "buckets/")) or "/" in revision:
        raise StoreError(f"{uri}: hf://<org>/<name>[@<revision>] of a model repo is expected")
    return repo, revision or "main"


class HubStore:
    """A model repo on the Hugging Face Hub through huggingface_hub's public API: the files are
    collected and ``finish`` makes ONE commit of them (``HfApi.create_commit`` with
    ``CommitOperationAdd``: preupload, LFS upload, commit) on the branch; ``uri`` is then
    ``hf://<repo>@<commit id>``. Files go to the repo's root (where PEFT and a server that loads
    ``hf://<repo>`` look). Reading is ``hf_hub_download`` at the revision, into a directory of
    the store's. The token is passed to the client, never put in a message."""

    def __init__(
        self,
        repo: str,
        revision: str = "main",
        token: str | None = None,
        endpoint: str | None = None,
        message: str = "lorarl export",
        same_host_redirects: bool = False,
    ):
        try:
            import httpx2
            import huggingface_hub
            import huggingface_hub.errors
        except ImportError:
            raise StoreError("hf:// needs huggingface_hub: set spec.export.image to an image that has it") from None
        self._hf = huggingface_hub
        self._errors = (huggingface_hub.errors.HfHubHTTPError, httpx2.HTTPError, OSError, ValueError, RuntimeError)
        self.repo, self.revision, self.uri = repo, revision, hub_uri(repo, revision)
        self._token = token if token else None
        self._endpoint = endpoint
        self._message = message
        if same_host_redirects:
            _hub_same_host_redirects(huggingface_hub)
        self._api = huggingface_hub.HfApi(endpoint=endpoint, token=self._token)
        self._adds: list = []
        self._downloads: tempfile.TemporaryDirectory | None = None

    def _fail(self, what: str, err: Exception) -> StoreError:
        cause: BaseException = err
        while cause.__cause__ is not None and getattr(cause, "response", None) is None:
            cause = cause.__cause__  # the upload's RuntimeError wraps the HTTP error
        response = getattr(cause, "response", None)
        if isinstance(cause, RedirectRefused):
            code = str(cause)
        elif response is not None:
            code = f"HTTP {response.status_code}"
            detail = known_code(response.headers.get("X-Error-Code"), HUB_ERROR_CODES) or {
                401: "the token is missing or invalid",
                403: "the token may not write there",
            }.get(response.status_code)
            code += f" ({detail})" if detail else ""
        else:
            code = type(cause).__name__
        return StoreError(f"{what} {self.uri}: {code}")

    def put(self, name: str, path: str) -> None:
        self._adds.append(self._hf.CommitOperationAdd(path_in_repo=name, path_or_fileobj=path))

    def finish(self) -> None:
        """One commit of every file put; the URI then names that commit."""
        try:
            info = self._api.create_commit(self.repo, operations=self._adds, commit_message=self._message, revision=self.revision)
        except self._errors as err:
            raise self._fail("committing to", err) from None
        self.uri = hub_uri(self.repo, info.oid)

    def open(self, name: str) -> BinaryIO:
        if self._downloads is None:
            self._downloads = tempfile.TemporaryDirectory(prefix="lorarl-hub-")
        try:
            path = self._hf.hf_hub_download(self.repo, name, revision=self.revision, endpoint=self._endpoint, token=self._token, local_dir=self._downloads.name)
            return open(path, "rb")
        except self._errors as err:
            raise self._fail(f"reading {name} from", err) from None


def _hub_same_host_redirects(huggingface_hub) -> None:
    """huggingface_hub's client (one per process, from its client factory) with the response
    hook of ``_httpx_same_host_redirects``; a huggingface_hub without the factory is left as is."""
    try:
        from huggingface_hub.utils import _http
    except ImportError:
        return
    default = getattr(_http, "default_client_factory", None)
    if default is None or not hasattr(huggingface_hub, "set_client_factory"):
        return

    def factory():
        client = default()
        client.event_hooks["response"] = [*client.event_hooks.get("response", []), _httpx_same_host_redirects]
        return client

    huggingface_hub.set_client_factory(factory)


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

    def finish(self) -> None:
        pass


def for_uri(uri: str, endpoint: str | None = None, plain_http: bool = False) -> Store:
    """A store to pull from: s3:// (credentials from the AWS_* environment), oci:// (the docker
    config's, as oras reads it), hf:// (HF_TOKEN and HF_ENDPOINT, as huggingface_hub reads
    them; ``endpoint`` overrides) or a local directory."""
    if uri.startswith(HUB_SCHEME):
        repo, revision = parse_hub_uri(uri)
        return HubStore(repo, revision, token=os.environ.get("HF_TOKEN"), endpoint=endpoint or os.environ.get("HF_ENDPOINT"))
    if uri.startswith("s3://"):
        return S3Store(uri if uri.endswith("/") else uri + "/", endpoint=endpoint or os.environ.get("AWS_ENDPOINT_URL"))
    if uri.startswith("oci://"):
        return OciStore(uri, plain_http=plain_http)
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" in uri:
        raise StoreError(f"{uri}: only s3://, oci://, hf:// and local directories can be pulled")
    return DirStore(uri)
