"""A Hugging Face Hub stand-in: what ``hf download`` needs, served from a directory tree.

    python -m lorarl_dev.hubstub --root DIR [--host 127.0.0.1] [--port 0]

It follows huggingface_hub 2.4.0 (the test venv's and the job image's version); file:line below
are of that version's source:

* ``hf download REPO [--repo-type dataset] [--revision R] --local-dir D`` is ``snapshot_download``
  (cli/download.py:177-187): unless R is a 40-hex commit id, ``repo_info`` =
  ``GET {endpoint}/api/{models|datasets}/{repo}[/revision/{quote(R)}]`` (hf_api.py:3202-3206,
  3273-3277), which must carry ``id`` and ``sha`` (_snapshot_download.py:279-281, hf_api.py:914-916);
  then ``list_repo_tree`` = ``GET /api/{type}s/{repo}/tree/{commit}?recursive=True&expand=False``
  (hf_api.py:4023-4027), a JSON list of ``{"type": "file", "path", "size", "oid"}`` /
  ``{"type": "directory", ...}`` entries (hf_api.py:711-725), paginated by a ``Link: <url>;
  rel="next"`` header (utils/_pagination.py:41-53, 68-69);
* then per file ``hf_hub_download`` at the commit: ``HEAD {endpoint}/[datasets/]{repo}/resolve/
  {commit}/{path}`` (constants.py:70) whose answer must have ``X-Repo-Commit`` and an ``ETag``
  (or ``X-Linked-Etag``), and a size in ``X-Linked-Size`` or ``Content-Length``
  (file_download.py:1672-1690, 1787-1805); same-host redirects are followed with the
  metadata of the last answer (utils/_http.py:763-783); then ``GET`` with ``Range: bytes=N-``
  when resuming a partial file (file_download.py:371-378), answered 206;
* errors are mapped from ``X-Error-Code`` (utils/_http.py:871-950): ``RepoNotFound`` (404, or 401
  for a private repo without a valid token: the Hub answers the same for both),
  ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with ``X-Repo-Commit``), ``GatedRepo``
  (401 without a token, 403 with a wrong one); a bad token on a private repo is 401 with
  ``X-Error-Message: Invalid credentials in Authorization header``.

Uploads, as ``HfApi.create_commit`` / ``upload_folder`` make them with ``HF_HUB_DISABLE_XET=1``
(with hf_xet installed and not disabled the client uploads through Xet storage instead,
_commit_api.py:396-411, utils/_runtime.py:157-162, which is not served here):

* preupload: ``POST /api/{type}s/{repo}/preupload/{revision}`` with ``{"files": [{"path",
  "sample" (base64 of the first 512 bytes), "size"}]}`` (_commit_api.py:749-770); the answer is
  ``{"files": [{"path", "uploadMode": "lfs"|"regular", "shouldIgnore", "oid"}]}`` with ``oid``
  the file's current id on the branch (sha256 for LFS, git blob SHA-1 otherwise) so that an
  unchanged file is left out of the commit (_commit_api.py:771-779, 687-700, 285-305;
  hf_api.py:5228-5250). LFS: ``--lfs-threshold`` bytes or more, a name the Hub's default
  ``.gitattributes`` tracks in LFS (``*.safetensors``, ``*.bin``, ...), or a NUL byte in the sample;
* LFS batch: ``POST {endpoint}/[datasets/]{repo}.git/info/lfs/objects/batch`` with
  ``{"operation": "upload", "transfers": ["basic", "multipart"], "objects": [{"oid", "size"}],
  "hash_algo": "sha256", "ref": {"name"}}`` (lfs.py:185-199), answered ``{"transfer": "basic",
  "objects": [...]}``: an object already stored has no ``actions`` (skipped, _commit_api.py:515-522),
  else ``actions.upload.href`` (a presigned-style URL: the client PUTs the bytes there without
  its Authorization header, lfs.py:287-297, 351-368) and ``actions.verify.href`` (POSTed
  ``{"oid", "size"}`` with the token, lfs.py:300-309); a malformed object gets an ``error``
  (lfs.py:218-219, 337-348). The upload is refused (400) unless the bytes have that sha256 and
  size, so nothing but the named object is ever stored; verify answers 404 for an object not stored;
* commit: ``POST /api/{type}s/{repo}/commit/{revision}``, an NDJSON body: ``{"key": "header",
  "value": {"summary", "description", "parentCommit"?}}``, then ``file`` (``content`` base64,
  ``path``, ``encoding``), ``lfsFile`` (``path``, ``algo``, ``oid``, ``size``), ``deletedFile``,
  ``deletedFolder`` (_commit_api.py:909-1010, 1013-1068); the answer ``{"commitUrl", "commitOid",
  "pullRequestUrl"}`` (_commit_api.py:1070-1080). An ``lfsFile`` whose object was never uploaded
  (or of another size) is refused (400), so is a ``parentCommit`` that is not the branch's head
  (412). The new commit is a directory named by its id, the branch moves to it, and both are
  served by the download path above (``hf download REPO --revision <commitOid>``).
* write access: ``hubstub-access.json`` may list ``writeTokens`` (may commit) and
  ``readTokens`` (known to the Hub, no write here). A write without a token: 401; with an
  unknown token: 401 ``Invalid credentials in Authorization header``; with a known token that may
  not write: 403; to a missing repo: 404 ``RepoNotFound``; to a revision that is not a branch:
  404 ``RevisionNotFound``. Not followed: Xet, the multipart LFS transfer, pull requests
  (``create_pr``), ``.gitignore``, the Hub's own commit ids (here: the SHA-1 of the tree, so the
  same files committed twice give the same id).

Layout under ``--root``: ``models/<repo_id>/<revision>/<files>`` and ``datasets/<repo_id>/
<revision>/<files>``; a revision directory is a branch or tag (``main``), or a 40-hex commit id.
A branch's commit id is the SHA-1 of its file list and contents (stable while the files are).
``<repo dir>/hubstub-access.json`` (optional): ``{"token": "...", "gated": false}`` makes the repo
private (or gated) and requires ``Authorization: Bearer <token>``. Files of ``--lfs-threshold``
bytes or more are served as LFS files: a 302 to ``/hubstub-lfs/<sha256>`` with
``X-Linked-Etag``/``X-Linked-Size``. Path traversal (``..``, absolute paths, symlinks leaving the
revision) is refused with 400. The access log never contains a header, so never a token.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO_TYPES = {"models": "model", "datasets": "dataset"}
ACCESS_FILE = "hubstub-access.json"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
DEFAULT_LFS_THRESHOLD = 10 << 20  # the Hub stores files over 10 MB in LFS
CHUNK = 1 << 20
LFS_DIR, TMP_DIR = "hubstub-lfs", "hubstub-tmp"  # under --root, beside models/ and datasets/
OID_RE = re.compile(r"[0-9a-f]{64}")
# names the Hub's default .gitattributes of a new repo tracks in LFS (a subset)
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".npy", ".npz", ".pkl", ".zip", ".tar", ".gz", ".parquet", ".arrow")


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


def git_blob_sha1(path: str) -> str:
    """The git blob id: what the Hub gives as ETag/oid of a regular (non-LFS) file."""
    h = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _walk(top: str) -> list:
    """Every file under top, relative, sorted; hidden tool files of the stand-in excluded."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), top)
            out.append(rel.replace(os.sep, "/"))
    return sorted(out)


class Repo:
    def __init__(self, root: str, kind: str, repo_id: str):
        self.kind, self.repo_id = kind, repo_id
        self.path = os.path.join(root, kind, *repo_id.split("/"))

    def access(self) -> dict:
        try:
            with open(os.path.join(self.path, ACCESS_FILE), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def revisions(self) -> dict:
        """revision name -> directory; a branch's computed commit id is a name too."""
        out = {}
        for name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, name)
            if name == ACCESS_FILE or not os.path.isdir(full):
                continue
            out[name] = full
            if not COMMIT_RE.fullmatch(name):
                out.setdefault(self.commit_of(full), full)
        return out

    @staticmethod
    def commit_of(rev_dir: str) -> str:
        if COMMIT_RE.fullmatch(os.path.basename(rev_dir)):
            return os.path.basename(rev_dir)
        h = hashlib.sha1(usedforsecurity=False)
        for rel in _walk(rev_dir):
            h.update(f"{rel}\0{git_blob_sha1(os.path.join(rev_dir, rel))}\n".encode())
        return h.hexdigest()


class Hub:
    def __init__(self, root: str, lfs_threshold: int = DEFAULT_LFS_THRESHOLD, page_size: int = 1000):
        self.root = os.path.abspath(root)
        self.lfs_threshold = lfs_threshold
        self.page_size = max(1, page_size)
        self.secret = secrets.token_bytes(32)  # signs upload hrefs; new at each start
        self.lock = threading.Lock()  # one commit at a time (the branch moves under it)

    def repo(self, kind: str, repo_id: str, token: str | None) -> Repo:
        parts = repo_id.split("/")
        if not 1 <= len(parts) <= 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise HubError(400, None, f"Invalid repo id {repo_id!r}")
        repo = Repo(self.root, kind, repo_id)
        if not os.path.isdir(repo.path):
            raise HubError(404, "RepoNotFound", "Repository not found")
        access = repo.access()
        wanted = access.get("token")
        if wanted:
            if access.get("gated"):
                if token is None:
                    raise HubError(401, "GatedRepo", "Access to this model is restricted: you must be authenticated")
                if not hmac.compare_digest(token, wanted):
                    raise HubError(403, "GatedRepo", "Access to this model is restricted and you are not in the authorized list")
            elif token is None:
                raise HubError(401, "RepoNotFound", "Repository not found")
            elif not any(hmac.compare_digest(token, t) for t in [wanted, *access.get("writeTokens", [])]):
                raise HubError(401, None, "Invalid credentials in Authorization header")
        return repo

    def writable(self, kind: str, repo_id: str, token: str | None) -> Repo:
        """The repo a write goes to, if the token may write there (the refusals in the docstring)."""
        parts = repo_id.split("/")
        if not 1 <= len(parts) <= 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise HubError(400, None, f"Invalid repo id {repo_id!r}")
        if token is None:
            raise HubError(401, None, "Invalid username or password.")
        repo = Repo(self.root, kind, repo_id)
        if not os.path.isdir(repo.path):
            raise HubError(404, "RepoNotFound", "Repository not found")
        access = repo.access()
        if any(hmac.compare_digest(token, t) for t in access.get("writeTokens", [])):
            return repo
        known = [t for t in [access.get("token"), *access.get("readTokens", [])] if t]
        if any(hmac.compare_digest(token, t) for t in known):
            raise HubError(403, None, f"You don't have the rights to create a commit on {repo_id}")
        raise HubError(401, None, "Invalid credentials in Authorization header")

    def branch(self, repo: Repo, revision: str) -> str:
        """A branch's directory (or its symlink to its commit); a commit id is not a branch."""
        path = os.path.join(repo.path, revision)
        if COMMIT_RE.fullmatch(revision) or "/" in revision or revision.startswith(".") or revision == ACCESS_FILE or not os.path.isdir(path):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return path

    def lfs_path(self, repo: Repo, oid: str) -> str:
        return os.path.join(self.root, LFS_DIR, repo.kind, *repo.repo_id.split("/"), oid)

    def upload_signature(self, repo: Repo, oid: str, size: int) -> str:
        """What makes an upload href usable without the token (as a presigned S3 URL)."""
        return hmac.new(self.secret, f"{repo.kind}/{repo.repo_id}/{oid}/{size}".encode(), hashlib.sha256).hexdigest()

    def upload_mode(self, path: str, size: int, sample: bytes) -> str:
        return "lfs" if size >= self.lfs_threshold or path.lower().endswith(LFS_SUFFIXES) or b"\0" in sample else "regular"

    def commit(self, repo: Repo, revision: str, lines: list) -> str:
        """Apply one NDJSON commit to the branch; returns the new commit id."""
        if not lines or lines[0].get("key") != "header" or not isinstance(lines[0].get("value"), dict):
            raise HubError(400, None, "The first line of a commit must be its header")
        header = lines[0]["value"]
        if not str(header.get("summary", "")).strip():
            raise HubError(400, None, "A commit needs a summary")
        with self.lock:
            branch = self.branch(repo, revision)
            head = Repo.commit_of(branch)
            if header.get("parentCommit") and header["parentCommit"] != head:
                raise HubError(412, None, "A commit has happened since. Please refresh and try again.")
            tmp_root = os.path.join(self.root, TMP_DIR)
            os.makedirs(tmp_root, exist_ok=True)
            work = tempfile.mkdtemp(dir=tmp_root)
            try:
                tree = os.path.join(work, "tree")
                shutil.copytree(os.path.realpath(branch), tree)
                for line in lines[1:]:
                    self._apply(repo, tree, line, head)
                commit = Repo.commit_of(tree)
                target = os.path.join(repo.path, commit)
                if not os.path.isdir(target):
                    os.replace(tree, target)
                link = os.path.join(work, "link")
                os.symlink(commit, link)
                if not os.path.islink(branch):  # a branch written as a directory: keep its tree as its commit's
                    old = Repo.commit_of(branch)
                    if not os.path.exists(os.path.join(repo.path, old)):
                        os.replace(branch, os.path.join(repo.path, old))
                    else:
                        os.replace(branch, os.path.join(work, "old"))
                os.replace(link, branch)
                return commit
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def _apply(self, repo: Repo, tree: str, line: dict, head: str) -> None:
        key, value = line.get("key"), line.get("value")
        if not isinstance(value, dict) or not isinstance(value.get("path"), str):
            raise HubError(400, None, f"Malformed commit line {key!r}")
        path = value["path"].strip("/") if key == "deletedFolder" else value["path"]
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path or parts[0] == ".git":
            raise HubError(400, None, f"Invalid path {path!r}")
        full = os.path.join(tree, *parts)
        if key == "file":
            if value.get("encoding") != "base64":
                raise HubError(400, None, f"{path}: encoding must be base64")
            try:
                content = base64.b64decode(value.get("content", ""), validate=True)
            except ValueError:
                raise HubError(400, None, f"{path}: content is not base64") from None
            self._write(full, content=content)
        elif key == "lfsFile":
            oid = str(value.get("oid", ""))
            stored = self.lfs_path(repo, oid)
            if value.get("algo", "sha256") != "sha256" or not OID_RE.fullmatch(oid) or not os.path.isfile(stored):
                raise HubError(400, None, f"{path}: LFS object {oid} was never uploaded")
            if "size" in value and value["size"] != os.path.getsize(stored):
                raise HubError(400, None, f"{path}: LFS object {oid} has {os.path.getsize(stored)} bytes, not {value['size']}")
            self._write(full, source=stored)
        elif key in ("deletedFile", "deletedFolder"):
            if key == "deletedFile" and os.path.isfile(full):
                os.remove(full)
            elif key == "deletedFolder" and os.path.isdir(full):
                shutil.rmtree(full)
            else:
                raise HubError(404, "EntryNotFound", f"A file with this name doesn't exist: {path}", commit=head)
        else:
            raise HubError(400, None, f"Unknown commit line {key!r}")

    @staticmethod
    def _write(full: str, content: bytes | None = None, source: str | None = None) -> None:
        if os.path.isdir(full):
            raise HubError(400, None, "A directory has this name")
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if source is not None:
            shutil.copyfile(source, full)
        else:
            with open(full, "wb") as f:
                f.write(content or b"")

    def revision(self, repo: Repo, revision: str) -> tuple:
        rev_dir = repo.revisions().get(revision)
        if rev_dir is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return rev_dir, Repo.commit_of(rev_dir)

    @staticmethod
    def file_in(rev_dir: str, path: str, commit: str) -> str:
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
            raise HubError(400, None, f"Invalid path {path!r}")
        full = os.path.join(rev_dir, *parts)
        real, base = os.path.realpath(full), os.path.realpath(rev_dir)
        if os.path.commonpath([real, base]) != base:
            raise HubError(400, None, f"Invalid path {path!r}")
        if not os.path.isfile(real):
            raise HubError(404, "EntryNotFound", f"Entry not found: {path}", commit=commit)
        return real

    def entry(self, rev_dir: str, rel: str) -> dict:
        full = os.path.join(rev_dir, rel)
        size = os.path.getsize(full)
        item = {"type": "file", "path": rel, "size": size, "oid": git_blob_sha1(full)}
        if size >= self.lfs_threshold:
            item["lfs"] = {"oid": sha256_of(full), "size": size, "pointerSize": 134}
        return item

    def tree(self, rev_dir: str, under: str, recursive: bool) -> list:
        base = os.path.join(rev_dir, *under.split("/")) if under else rev_dir
        if not os.path.isdir(base):
            raise HubError(404, "EntryNotFound", f"Entry not found: {under}")
        entries, dirs = [], set()
        for rel in _walk(base):
            full_rel = f"{under}/{rel}" if under else rel
            parent = full_rel.rsplit("/", 1)[0] if "/" in full_rel else ""
            while parent and parent != under and parent not in dirs:
                dirs.add(parent)
                parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
            if recursive or "/" not in rel:
                entries.append(self.entry(rev_dir, full_rel))
        for d in sorted(dirs):
            if recursive or d.count("/") == (under.count("/") + 1 if under else 0):
                entries.append({"type": "directory", "path": d, "oid": hashlib.sha1(d.encode(), usedforsecurity=False).hexdigest()})
        return sorted(entries, key=lambda e: e["path"])


def _token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def make_handler(hub: Hub, quiet: bool = True):
    class Handler(BaseHTTPRequestHandler):
        server_version = "lorarl-hubstub"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the request line only: never a header, so never a token
            if not quiet:
                # nor a query string: an upload href's signature is one
                line = re.sub(r"\?\S*", "?...", fmt % args)
                sys.stderr.write(f"hubstub: {self.address_string()} {line}\n")

        def _body(self, limit: int = 1 << 30) -> bytes:
            """The request's body: Content-Length or chunked (httpx streams a file so)."""
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    if len(out) + size > limit:
                        raise HubError(413, None, "Payload too large")
                    out += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            if length > limit:
                raise HubError(413, None, "Payload too large")
            return self.rfile.read(length)

        def _json_body(self):
            try:
                return json.loads(self._body(64 << 20))
            except ValueError:
                raise HubError(400, None, "The body is not JSON") from None

        def _base(self) -> str:
            host = self.headers.get("Host") or f"{self.server.server_address[0]}:{self.server.server_address[1]}"
            return f"http://{host}"

        # ------------------------------------------------------------------ plumbing
        def _send(self, status: int, headers: dict, body: bytes = b"") -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and body:
                self.wfile.write(body)

        def _json(self, obj, extra: dict | None = None) -> None:
            body = json.dumps(obj).encode()
            self._send(200, {"Content-Type": "application/json", **(extra or {})}, body)

        def _error(self, err: HubError) -> None:
            headers = {"Content-Type": "application/json", "X-Error-Message": err.message}
            if self.close_connection:
                headers["Connection"] = "close"
            if err.code:
                headers["X-Error-Code"] = err.code
            if err.commit:
                headers["X-Repo-Commit"] = err.commit
            self._send(err.status, headers, json.dumps({"error": err.message}).encode())

        def _route(self):
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            query = urllib.parse.parse_qs(url.query)
            token = _token(self.headers.get("Authorization"))
            if path.startswith("/hubstub-lfs/"):
                return self._lfs_blob(path[len("/hubstub-lfs/") :])
            if path.startswith("/api/"):
                return self._api(path[len("/api/") :], query, token)
            kind = "models"
            rest = path.lstrip("/")
            if rest.startswith("datasets/"):
                kind, rest = "datasets", rest[len("datasets/") :]
            if "/resolve/" in rest:
                repo_id, _, tail = rest.partition("/resolve/")
                revision, _, filename = tail.partition("/")
                return self._resolve(kind, urllib.parse.unquote(repo_id), urllib.parse.unquote(revision), urllib.parse.unquote(filename), token)
            raise HubError(404, None, "Not found")

        def _route_write(self):
            url = urllib.parse.urlsplit(self.path)
            path, query = url.path, urllib.parse.parse_qs(url.query)
            token = _token(self.headers.get("Authorization"))
            if self.command == "PUT" and path.startswith("/hubstub-lfs-upload/"):
                return self._lfs_upload(path[len("/hubstub-lfs-upload/") :], query)
            if self.command != "POST":
                raise HubError(405, None, "Method not allowed")
            if path.startswith("/api/"):
                kind, _, rest = path[len("/api/") :].partition("/")
                for marker in ("/preupload/", "/commit/"):
                    if kind in REPO_TYPES and marker in rest:
                        repo_id, _, revision = rest.partition(marker)
                        repo = hub.writable(kind, urllib.parse.unquote(repo_id), token)
                        if marker == "/preupload/":
                            return self._preupload(repo, urllib.parse.unquote(revision))
                        return self._commit(repo, urllib.parse.unquote(revision))
                raise HubError(404, None, "Not found")
            kind, rest = "models", path.lstrip("/")
            if rest.startswith("datasets/"):
                kind, rest = "datasets", rest[len("datasets/") :]
            for marker in (".git/info/lfs/objects/batch", ".git/info/lfs/objects/verify"):
                if rest.endswith(marker):
                    repo = hub.writable(kind, urllib.parse.unquote(rest[: -len(marker)]), token)
                    return self._lfs_batch(repo) if marker.endswith("batch") else self._lfs_verify(repo)
            raise HubError(404, None, "Not found")

        def _dispatch_write(self):
            try:
                self._route_write()
            except HubError as err:
                # the body may be unread: the connection cannot carry another request
                self.close_connection = True
                self._error(err)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_POST = _dispatch_write
        do_PUT = _dispatch_write

        # ------------------------------------------------------------------ uploads
        def _preupload(self, repo: Repo, revision: str) -> None:
            branch = hub.branch(repo, revision)
            body = self._json_body()
            files = body.get("files") if isinstance(body, dict) else None
            if not isinstance(files, list):
                raise HubError(400, None, "files: a list is expected")
            out = []
            for item in files:
                if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not isinstance(item.get("size"), int):
                    raise HubError(400, None, "files[]: path and size are expected")
                try:
                    sample = base64.b64decode(item.get("sample", ""))
                except ValueError:
                    raise HubError(400, None, f"{item['path']}: sample is not base64") from None
                mode = hub.upload_mode(item["path"], item["size"], sample)
                current = os.path.join(os.path.realpath(branch), *item["path"].split("/"))
                oid = None
                if os.path.isfile(current) and ".." not in item["path"].split("/"):
                    oid = sha256_of(current) if mode == "lfs" else git_blob_sha1(current)
                out.append({"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
            self._json({"files": out})

        def _lfs_batch(self, repo: Repo) -> None:
            body = self._json_body()
            if not isinstance(body, dict) or body.get("operation") != "upload" or not isinstance(body.get("objects"), list):
                raise HubError(400, None, "operation upload with objects is expected")
            if "basic" not in (body.get("transfers") or ["basic"]):
                raise HubError(422, None, "Only the basic transfer is served")
            if (body.get("hash_algo") or "sha256") != "sha256":
                raise HubError(422, None, "Only sha256 is served")
            ref = (body.get("ref") or {}).get("name")
            if ref:
                hub.branch(repo, ref)
            prefix = "" if repo.kind == "models" else "datasets/"
            objects = []
            for obj in body["objects"]:
                oid, size = (obj.get("oid"), obj.get("size")) if isinstance(obj, dict) else (None, None)
                if not isinstance(oid, str) or not OID_RE.fullmatch(oid) or not isinstance(size, int) or size < 0:
                    objects.append({"oid": str(oid), "size": size if isinstance(size, int) else 0, "error": {"code": 422, "message": "Invalid oid or size"}})
                    continue
                stored = hub.lfs_path(repo, oid)
                if os.path.isfile(stored) and os.path.getsize(stored) == size:
                    objects.append({"oid": oid, "size": size})
                    continue
                query = urllib.parse.urlencode({"size": size, "sig": hub.upload_signature(repo, oid, size)})
                objects.append(
                    {
                        "oid": oid,
                        "size": size,
                        "authenticated": True,
                        "actions": {
                            "upload": {"href": f"{self._base()}/hubstub-lfs-upload/{repo.kind}/{repo.repo_id}/{oid}?{query}"},
                            "verify": {"href": f"{self._base()}/{prefix}{repo.repo_id}.git/info/lfs/objects/verify"},
                        },
                    }
                )
            self._send(200, {"Content-Type": "application/vnd.git-lfs+json"}, json.dumps({"transfer": "basic", "objects": objects}).encode())

        def _lfs_upload(self, rest: str, query: dict) -> None:
            kind, _, tail = rest.partition("/")
            repo_id, _, oid = tail.rpartition("/")
            if kind not in REPO_TYPES or not OID_RE.fullmatch(oid):
                raise HubError(404, None, "Not found")
            repo = Repo(hub.root, kind, repo_id)
            try:
                size = int(query.get("size", [""])[0])
            except ValueError:
                raise HubError(403, None, "Request has expired or its signature does not match") from None
            if not hmac.compare_digest(query.get("sig", [""])[0], hub.upload_signature(repo, oid, size)):
                raise HubError(403, None, "Request has expired or its signature does not match")
            data = self._body(size + 1)
            if len(data) != size or hashlib.sha256(data).hexdigest() != oid:
                raise HubError(400, None, f"The body is not object {oid} of {size} bytes")
            stored = hub.lfs_path(repo, oid)
            os.makedirs(os.path.dirname(stored), exist_ok=True)
            part = f"{stored}.{secrets.token_hex(4)}.part"
            with open(part, "wb") as f:
                f.write(data)
            os.replace(part, stored)
            self._send(200, {"ETag": f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'})

        def _lfs_verify(self, repo: Repo) -> None:
            body = self._json_body()
            oid, size = (body.get("oid"), body.get("size")) if isinstance(body, dict) else (None, None)
            stored = hub.lfs_path(repo, oid) if isinstance(oid, str) and OID_RE.fullmatch(oid) else None
            if stored is None or not os.path.isfile(stored) or os.path.getsize(stored) != size:
                raise HubError(404, None, f"Object {oid} of {size} bytes was not uploaded")
            self._json({"success": True})

        def _commit(self, repo: Repo, revision: str) -> None:
            lines = []
            for raw in self._body(256 << 20).splitlines():
                if raw.strip():
                    try:
                        lines.append(json.loads(raw))
                    except ValueError:
                        raise HubError(400, None, "A commit line is not JSON") from None
            if not all(isinstance(line, dict) for line in lines):
                raise HubError(400, None, "A commit line is not an object")
            commit = hub.commit(repo, revision, lines)
            prefix = "" if repo.kind == "models" else "datasets/"
            self._json({"commitUrl": f"{self._base()}/{prefix}{repo.repo_id}/commit/{commit}", "commitOid": commit, "pullRequestUrl": None})

        def _dispatch(self):
            try:
                self._route()
            except HubError as err:
                self._error(err)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = _dispatch
        do_HEAD = _dispatch

        # ------------------------------------------------------------------ API
        def _api(self, rest: str, query: dict, token: str | None) -> None:
            kind, _, rest = rest.partition("/")
            if kind not in REPO_TYPES:
                raise HubError(404, None, "Not found")
            for marker in ("/revision/", "/tree/"):
                if marker in rest:
                    repo_id, _, tail = rest.partition(marker)
                    break
            else:
                repo_id, marker, tail = rest, "", ""
            repo = hub.repo(kind, urllib.parse.unquote(repo_id), token)
            if marker == "/tree/":
                revision, _, under = tail.partition("/")
                return self._tree(repo, urllib.parse.unquote(revision), urllib.parse.unquote(under), query)
            revision = urllib.parse.unquote(tail) if marker else "main"
            rev_dir, commit = hub.revision(repo, revision)
            siblings = [{"rfilename": rel} for rel in _walk(rev_dir)]
            access = repo.access()
            self._json(
                {
                    "id": repo.repo_id,
                    "_id": hashlib.sha1(repo.path.encode(), usedforsecurity=False).hexdigest()[:24],
                    "sha": commit,
                    "private": bool(access.get("token")) and not access.get("gated"),
                    "gated": "auto" if access.get("gated") else False,
                    "disabled": False,
                    "siblings": siblings,
                    "tags": [],
                    "downloads": 0,
                    "likes": 0,
                    "lastModified": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(os.path.getmtime(rev_dir))),
                }
            )

        def _tree(self, repo: Repo, revision: str, under: str, query: dict) -> None:
            rev_dir, commit = hub.revision(repo, revision)
            under = under.strip("/")
            if under and (
                any(p in (".", "..") or "\\" in p for p in under.split("/"))
                or os.path.commonpath([os.path.realpath(os.path.join(rev_dir, under)), os.path.realpath(rev_dir)]) != os.path.realpath(rev_dir)
            ):
                raise HubError(400, None, f"Invalid path {under!r}")
            recursive = (query.get("recursive", ["false"])[0]).lower() in ("1", "true")
            entries = hub.tree(rev_dir, under, recursive)
            cursor = int(query.get("cursor", ["0"])[0] or 0)
            page = entries[cursor : cursor + hub.page_size]
            extra = {}
            if cursor + hub.page_size < len(entries):
                params = {k: v[0] for k, v in query.items() if k != "cursor"}
                params["cursor"] = str(cursor + hub.page_size)
                host = self.headers.get("Host") or f"{self.server.server_address[0]}:{self.server.server_address[1]}"
                split = urllib.parse.urlsplit(self.path)
                nxt = f"http://{host}{split.path}?{urllib.parse.urlencode(params)}"
                extra["Link"] = f'<{nxt}>; rel="next"'
            self._json(page, extra)

        # ------------------------------------------------------------------ files
        def _resolve(self, kind: str, repo_id: str, revision: str, filename: str, token: str | None) -> None:
            repo = hub.repo(kind, repo_id, token)
            rev_dir, commit = hub.revision(repo, revision)
            full = hub.file_in(rev_dir, filename, commit)
            size = os.path.getsize(full)
            if size >= hub.lfs_threshold:
                digest = sha256_of(full)
                self._send(
                    302,
                    {
                        "Location": f"/hubstub-lfs/{digest}?repo={urllib.parse.quote(kind + '/' + repo_id)}&rev={commit}&path={urllib.parse.quote(filename)}",
                        "X-Repo-Commit": commit,
                        "X-Linked-Etag": f'"{digest}"',
                        "X-Linked-Size": str(size),
                        "ETag": f'"{git_blob_sha1(full)}"',
                    },
                )
                return
            self._file(full, f'"{git_blob_sha1(full)}"', commit)

        def _lfs_blob(self, rest: str) -> None:
            digest = rest.partition("?")[0]
            params = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            kind_repo = params.get("repo", [""])[0]
            kind, _, repo_id = kind_repo.partition("/")
            if kind not in REPO_TYPES:
                raise HubError(404, None, "Not found")
            repo = hub.repo(kind, repo_id, _token(self.headers.get("Authorization")))
            rev_dir, commit = hub.revision(repo, params.get("rev", [""])[0])
            full = hub.file_in(rev_dir, params.get("path", [""])[0], commit)
            if sha256_of(full) != digest:
                raise HubError(404, None, "Not found")
            self._file(full, f'"{digest}"', commit)

        def _file(self, full: str, etag: str, commit: str) -> None:
            size = os.path.getsize(full)
            start, status = 0, 200
            headers = {"ETag": etag, "X-Repo-Commit": commit, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
            end = size - 1
            if m:
                start = int(m.group(1))
                if m.group(2):
                    end = min(end, int(m.group(2)))
                if start >= size:
                    self._send(416, {**headers, "Content-Range": f"bytes */{size}"})
                    return
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            length = end - start + 1
            headers["Content-Length"] = str(length)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(full, "rb") as f:
                f.seek(start)
                left = length
                while left > 0:
                    chunk = f.read(min(CHUNK, left))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)

    return Handler


class HubStub:
    """The server in a thread (for tests): ``with HubStub(root) as hub: hub.endpoint``."""

    def __init__(self, root: str, host: str = "127.0.0.1", port: int = 0, **hub_options):
        self.hub = Hub(root, **hub_options)
        self.server = ThreadingHTTPServer((host, port), make_handler(self.hub))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------- repos for tests


def write_repo(
    root: str,
    repo_id: str,
    files: dict,
    *,
    repo_type: str = "model",
    revision: str = "main",
    token: str | None = None,
    gated: bool = False,
    write_tokens: tuple = (),
    read_tokens: tuple = (),
) -> str:
    """Write one revision of a repo (``files``: path -> bytes or str); returns its directory.
    ``token`` makes it private (or gated); ``write_tokens`` may commit, ``read_tokens`` may not."""
    kind = {"model": "models", "dataset": "datasets"}[repo_type]
    repo_dir = os.path.join(root, kind, *repo_id.split("/"))
    rev_dir = os.path.join(repo_dir, revision)
    for rel, content in files.items():
        path = os.path.join(rev_dir, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content.encode() if isinstance(content, str) else content)
    os.makedirs(rev_dir, exist_ok=True)
    access = {k: v for k, v in (("token", token), ("writeTokens", list(write_tokens)), ("readTokens", list(read_tokens))) if v}
    if access:
        with open(os.path.join(repo_dir, ACCESS_FILE), "w", encoding="utf-8") as f:
            json.dump({**access, "gated": gated}, f)
    return rev_dir


# Qwen3-4B's config.json values that miles checks against the model flags
# (shared/reference/recipe-qwen3-4b-lora-amd.md, "Other Qwen3 dense model blocks")
QWEN3_4B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
SEED_MODEL, SEED_PROMPTS, SEED_EVAL = "Qwen/Qwen3-4B", "zhuzilin/dapo-math-17k", "zhuzilin/aime-2024"
# A two-layer Qwen3-shaped model for tests that need the adapter's tensors themselves (the
# export): the seed's real adapter is ~264 MB per save. TINY_ARCHITECTURE is the LoraRLJob's
# spec.model.architecture, tiny_config() the config.json miles validates those flags against.
TINY_ARCHITECTURE = {"numLayers": 2, "hiddenSize": 64, "ffnHiddenSize": 96, "numAttentionHeads": 4, "numQueryGroups": 2, "kvChannels": 16}


def tiny_config() -> dict:
    return {
        **QWEN3_4B_CONFIG,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    }


def _jsonl(rows: list) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_seed_repos(root: str, knobs: dict | None = None, prompts: int = 64, eval_prompts: int = 30) -> dict:
    """The seed job's three inputs, small: the model (config.json, a tokenizer stub, a tiny
    weights file and the trainer stand-in's ``standin.json`` knobs), ``dapo-math-17k.jsonl``
    (``prompt``/``label`` rows) and ``aime-2024.jsonl``. Returns repo id -> revision directory."""
    knobs = {"seconds_per_rollout": 0.2} if knobs is None else knobs
    model = write_repo(
        root,
        SEED_MODEL,
        {
            "config.json": json.dumps(QWEN3_4B_CONFIG, indent=2),
            "generation_config.json": json.dumps({"do_sample": True, "temperature": 0.6}),
            "tokenizer_config.json": json.dumps({"model_max_length": 131072}),
            "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",  # an empty safetensors header
            "standin.json": json.dumps(knobs),
        },
    )
    train = write_repo(
        root,
        SEED_PROMPTS,
        {"dapo-math-17k.jsonl": _jsonl([{"prompt": f"What is {i} + {i}?", "label": str(2 * i)} for i in range(prompts)])},
        repo_type="dataset",
    )
    aime = write_repo(
        root, SEED_EVAL, {"aime-2024.jsonl": _jsonl([{"prompt": f"AIME problem {i}", "label": str(i)} for i in range(eval_prompts)])}, repo_type="dataset"
    )
    return {SEED_MODEL: model, SEED_PROMPTS: train, SEED_EVAL: aime}


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lorarl_dev.hubstub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="directory with models/ and datasets/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--lfs-threshold", type=int, default=DEFAULT_LFS_THRESHOLD)
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--seed-repos", action="store_true", help="write the seed job's three repos into --root first")
    parser.add_argument("--verbose", action="store_true", help="log request lines (never headers)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is not a directory")
    if args.seed_repos:
        make_seed_repos(args.root)
    hub = Hub(args.root, lfs_threshold=args.lfs_threshold, page_size=args.page_size)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(hub, quiet=not args.verbose))
    host, port = server.server_address[:2]
    print(f"hubstub: serving {hub.root} at http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
