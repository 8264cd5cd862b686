"""A TCP proxy in front of the API server that injects faults, for the chaos tests.

TLS passes through untouched (the API server's certificate names 127.0.0.1, so a kubeconfig that
points at the proxy verifies as before). Switches, flipped from the test's thread at any time:

- ``latency``: seconds added before each chunk is forwarded, in both directions (a slow API
  server or a slow network: every request and every watch event arrives late);
- ``cut()``: close every open connection (watches included) - what a load balancer or an API
  server restart does to a client;
- ``blocked``: accept new connections and close them at once (the API server unreachable);
- ``hang()``: every open connection, and every one accepted until ``answer()``, goes silent:
  bytes either way are read and thrown away, nothing is forwarded and nothing is closed (no FIN,
  no RST) - a half-open connection, as a NAT or load balancer that forgot the flow, or a peer
  behind a partition, leaves it. ``answer()`` serves new connections again; the silent ones stay
  silent (their state is lost) until the client gives up on them.

``connections`` counts accepted connections: a client in a busy loop shows up there.
``swallowed`` counts the bytes thrown away per direction (``"up"``: the client's requests,
``"down"``: the API server's answers and watch events), so a test can show that requests and
watch streams were cut off mid-way.

The event loop runs in a daemon thread of its own, so a blocking test can use it::

    with ChaosProxy("127.0.0.1", 6443) as proxy:
        kubeconfig = proxy.kubeconfig(cp.kubeconfig, tmp_path / "kubeconfig")
        proxy.latency = 0.3
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import threading

__all__ = ["ChaosProxy"]

_CHUNK = 64 * 1024


class _Link:
    """One client connection; ``silent``: everything on it is swallowed from now on."""

    def __init__(self, silent: bool) -> None:
        self.silent = silent


class ChaosProxy:
    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port: int | None = None
        self.latency = 0.0
        self.blocked = False
        self.connections = 0
        self.swallowed = {"up": 0, "down": 0}
        self._hanging = False
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    def for_server(cls, server_url: str) -> ChaosProxy:
        """A proxy for ``https://host:port`` (a :class:`~lorarl_dev.controlplane.ControlPlane`'s ``server``)."""
        host, port = server_url.split("://", 1)[1].rsplit(":", 1)
        return cls(host, int(port))

    # -- lifecycle -------------------------------------------------------

    def start(self) -> ChaosProxy:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._accept, self.listen_host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._run(self._shutdown())
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://{self.listen_host}:{self.port}"

    def kubeconfig(self, source: os.PathLike[str] | str, dest: os.PathLike[str] | str) -> pathlib.Path:
        """A copy of kubeconfig ``source`` (JSON, as the harness writes it) that goes through the proxy."""
        config = json.loads(pathlib.Path(source).read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        path = pathlib.Path(dest)
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)
        return path

    # -- faults ------------------------------------------------------------

    def cut(self) -> None:
        """Close every open connection now (new ones are accepted unless ``blocked``)."""
        self._run(self._cut())

    async def _cut(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()  # a reset, not a polite close: what a dying peer looks like
        self._open.clear()

    def hang(self) -> None:
        """Open connections and new ones go silent (see the module docstring)."""
        self._run(self._hang())

    async def _hang(self) -> None:
        self._hanging = True
        for link in self._links:
            link.silent = True

    def answer(self) -> None:
        """New connections are served again; the silent ones stay silent."""
        self._run(self._answer())

    async def _answer(self) -> None:
        self._hanging = False

    async def _shutdown(self) -> None:
        await self._cut()  # the pipes then end by themselves (a cancelled stream task logs noise)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    # -- plumbing ------------------------------------------------------------

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.blocked:
            writer.transport.abort()
            return
        link = _Link(silent=self._hanging)
        self._links.add(link)
        try:
            if link.silent:  # accepted, then never answered
                self._open.add(writer)
                await self._swallow(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()
                return
            self._open.update((writer, up_writer))
            try:
                await asyncio.gather(self._pipe(reader, up_writer, link, "up"), self._pipe(up_reader, writer, link, "down"))
            finally:
                self._open.discard(up_writer)
                up_writer.transport.abort()
        finally:
            self._links.discard(link)
            self._open.discard(writer)
            writer.transport.abort()

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        """Read the client's bytes until it closes, and throw them away."""
        try:
            while data := await reader.read(_CHUNK):
                self.swallowed["up"] += len(data)
        except (ConnectionError, OSError):
            pass

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, direction: str) -> None:
        try:
            while data := await reader.read(_CHUNK):
                if self.latency and not link.silent:
                    await asyncio.sleep(self.latency)
                if link.silent:
                    self.swallowed[direction] += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # one side ended: end the other (the peer sees the close), unless the link is silent:
            # then the API server's close never reaches the client; the client's own close ends it
            if not (link.silent and direction == "down"):
                writer.transport.abort()
