"""A Git server for the GitOps tests: Debian's ``git http-backend`` (git's own smart-HTTP server,
a CGI program) behind a small HTTP front on 127.0.0.1, serving bare repositories under one root.

Flux's source-controller clones over http(s) or ssh only (GitRepository ``spec.url`` pattern
``^(http|https|ssh)://.*$``: config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml:210 in
v1.9.6), and go-git speaks only git's *smart* HTTP protocol (COMPATIBILITY.md:209 in v5.19.1: no dumb
protocol), so ``git daemon`` (git://) and a static file server (dumb HTTP) will not do. The front passes each
request to ``git http-backend`` as CGI/1.1 (RFC 3875) with the variables git-http-backend(1)
reads, and returns what it prints.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["GitServer", "commit_tree", "git"]


def git(*args: str, cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``git ARGS`` (output returned; a failure raises with git's message)."""
    exe = shutil.which("git")
    if exe is None:
        raise RuntimeError("git is not installed (Debian package git)")
    proc = subprocess.run([exe, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _author_env() -> dict[str, str]:
    ident = {"GIT_AUTHOR_NAME": "lorarl tests", "GIT_AUTHOR_EMAIL": "tests@lorarl.invalid"}
    ident |= {"GIT_COMMITTER_NAME": ident["GIT_AUTHOR_NAME"], "GIT_COMMITTER_EMAIL": ident["GIT_AUTHOR_EMAIL"]}
    # no user or system config: the machine's git settings never change what is committed
    return {**os.environ, **ident, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def commit_tree(bare: pathlib.Path, files: dict[str, str], message: str, branch: str = "main") -> str:
    """Commit ``files`` (path -> text; the whole tree) on ``branch`` of the bare repository
    ``bare`` through a scratch clone, push it, and return the commit's SHA."""
    env = _author_env()
    work = bare.parent / f".{bare.name}.work"
    if work.exists():
        shutil.rmtree(work)
    git("clone", "--quiet", str(bare), str(work), env=env)
    try:
        git("checkout", "--quiet", "-B", branch, cwd=work, env=env)
        for entry in work.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        for rel, text in files.items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git("add", "--all", cwd=work, env=env)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=work, env=env)
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work, env=env)
        return git("rev-parse", "HEAD", cwd=work, env=env).strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, fmt, *args):  # the server's own log list, not stderr
        self.server.requests.append(self.requestline)

    def do_GET(self):
        self._cgi()

    def do_POST(self):
        self._cgi()

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",  # every repository under the root, without git-daemon-export-ok
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": self.request_version,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
        }
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        proc = subprocess.run([shutil.which("git") or "git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, sep, payload = proc.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, sep, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        if proc.returncode != 0 and not sep:
            status, headers, payload = 500, [("Content-Type", "text/plain")], proc.stderr
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: pathlib.Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.requests: list[str] = []


class GitServer:
    """Bare repositories under ``root`` served at ``http://127.0.0.1:<port>/<name>.git``."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self._server: _Server | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[str]:
        """The request lines served so far (method, path, version)."""
        return list(self._server.requests) if self._server else []

    def create(self, name: str) -> pathlib.Path:
        """A new empty bare repository ``<name>.git``; its HEAD names ``main``."""
        bare = self.root / f"{name}.git"
        git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), env=_author_env())
        return bare

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}.git"

    @contextlib.contextmanager
    def running(self) -> Iterator[GitServer]:
        self.root.mkdir(parents=True, exist_ok=True)
        self._server = _Server(self.root)
        thread = threading.Thread(target=self._server.serve_forever, name="gitserver", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=10)
