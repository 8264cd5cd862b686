"""Where things live in the job's pods: the model and datasets on the shared volume (one
directory per repository and revision), each run's directory and checkpoints, the reporter."""

from __future__ import annotations

import posixpath
import urllib.parse

from ..api.types import DatasetRef, EvalDataset, LoraRLJob

MODELS_DIR = "/root/models"
DATASETS_DIR = "/root/datasets"
SHARED_DIR = "/root/shared_data"
# what `hf download` fetches without --revision (huggingface_hub constants.DEFAULT_REVISION)
DEFAULT_REVISION = "main"
# The reporter zipapp in the head pod: an emptyDir the tools image's init container fills
# (render.reporter_install_container), read-only in the trainer's container.
REPORTER_DIR = "/opt/lorarl"
REPORTER_FILE = "reporter.pyz"
REPORTER_PATH = f"{REPORTER_DIR}/{REPORTER_FILE}"
# Where the tools image (the operator image) holds the zipapp, written by its build (Dockerfile)
TOOLS_REPORTER_PATH = f"/opt/lorarl-tools/{REPORTER_FILE}"
# prepare.sh and fetch.py from the job's ConfigMap, mounted in the prepare container only
PREPARE_DIR = "/opt/lorarl-prepare"


class UnsafeTokenError(ValueError):
    """A word of the command would be reinterpreted by a shell on its way to the head."""


def repo_basename(repo: str) -> str:
    return repo.rsplit("/", 1)[-1]


def input_dir(root: str, repo: str, revision: str | None) -> str:
    """Where one (repository, revision) lives on the shared volume: ``<root>/<org>/<name>/<rev>``.

    Unique per (repository, revision), so jobs sharing a volume never share or overwrite each
    other's inputs. ``org`` and ``name`` (HF_REPO_ID: start with a letter or digit, no '/' or
    '@') are one path segment each and never '.' or '..'. The revision is percent-encoded with
    ``quote(safe="")`` ('/', '%', '@' ... become %XX; the revisions '.' and '..' become %2E and
    %2E%2E): one segment, never containing '@', never '.' or '..',
    decodable, so the mapping is injective; at most 3 x 64 characters, within NAME_MAX. No
    revision means "main", as for ``hf download`` (huggingface_hub DEFAULT_REVISION).
    prepare.sh keeps its lock and in-progress download beside it as ``<dir>@lock`` and
    ``<dir>@partial``: names no input directory can have.
    """
    org, name = repo.split("/", 1)
    segment = urllib.parse.quote(revision or DEFAULT_REVISION, safe="")
    if segment in (".", ".."):  # quote() keeps dots: "." would name the model's own directory, ".." its org's
        segment = segment.replace(".", "%2E")
    return posixpath.join(root, org, name, segment)


def uri_dir(root: str, uri: str) -> str:
    """Where a downloaded URI lives: ``<root>/<scheme>/<host or bucket>/<the rest, one segment>``
    (percent-encoded as a revision is, so distinct URIs never share a directory)."""
    scheme, rest = uri.split("://", 1)
    host, _, path = rest.partition("/")
    return input_dir(root, f"{scheme}/{host}", path)


def model_dir(job: LoraRLJob) -> str:
    model = job.spec.model
    if model.path:
        return posixpath.join(MODELS_DIR, model.path)
    if model.uri:
        return uri_dir(MODELS_DIR, model.uri)
    return input_dir(MODELS_DIR, model.name, model.revision)


def dataset_dir(ref: DatasetRef | EvalDataset) -> str:
    """The directory a dataset is downloaded into (for a path on the volume: the file's own)."""
    if ref.path:
        return posixpath.dirname(posixpath.join(DATASETS_DIR, ref.path))
    if ref.uri:
        return uri_dir(DATASETS_DIR, ref.uri)
    assert ref.repo is not None  # the API requires one of repo, path and uri
    return input_dir(DATASETS_DIR, ref.repo, ref.revision)


def dataset_file(ref: DatasetRef | EvalDataset) -> str:
    """The file's path in the dataset's directory (see input_dir); the API refuses absolute
    paths and '..', and this re-checks that the path stays inside the datasets directory."""
    directory = dataset_dir(ref)
    if ref.path:
        name = posixpath.basename(ref.path)
    elif ref.uri:
        name = posixpath.basename(ref.uri)
    else:
        assert ref.repo is not None
        name = ref.file or f"{repo_basename(ref.repo)}.jsonl"
    path = posixpath.join(directory, name)
    if not posixpath.normpath(path).startswith(directory + "/") or not directory.startswith(DATASETS_DIR + "/"):
        raise UnsafeTokenError(f"dataset file {path!r} leaves {directory}")
    return path


def run_dir(job: LoraRLJob) -> str:
    """Per-job directory on the shared volume (the launcher's <run_id>)."""
    return posixpath.join(SHARED_DIR, job.metadata.name)


def save_dir(job: LoraRLJob) -> str:
    return posixpath.join(run_dir(job), "checkpoints")
