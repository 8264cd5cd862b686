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
import hashlib
import hmac
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO_TYPES = {"models": "model", "datasets": "dataset"}
ACCESS_FILE = "hubstub-access.json"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
DEFAULT_LFS_THRESHOLD = 10 << 20  # the Hub stores files over 10 MB in LFS
CHUNK = 1 << 20


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
            elif not hmac.compare_digest(token, wanted):
                raise HubError(401, None, "Invalid credentials in Authorization header")
        return repo

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
                sys.stderr.write(f"hubstub: {self.address_string()} {fmt % args}\n")

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


def write_repo(root: str, repo_id: str, files: dict, *, repo_type: str = "model", revision: str = "main", token: str | None = None, gated: bool = False) -> str:
    """Write one revision of a repo (``files``: path -> bytes or str); returns its directory."""
    kind = {"model": "models", "dataset": "datasets"}[repo_type]
    repo_dir = os.path.join(root, kind, *repo_id.split("/"))
    rev_dir = os.path.join(repo_dir, revision)
    for rel, content in files.items():
        path = os.path.join(rev_dir, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content.encode() if isinstance(content, str) else content)
    os.makedirs(rev_dir, exist_ok=True)
    if token:
        with open(os.path.join(repo_dir, ACCESS_FILE), "w", encoding="utf-8") as f:
            json.dump({"token": token, "gated": gated}, f)
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
