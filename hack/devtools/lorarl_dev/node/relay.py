"""A TCP relay from listening sockets made in one network namespace to addresses in another.

The harness creates the listening socket (127.0.0.1:<free port>, root namespace) and hands its fd
to this process, which runs inside the cluster's network namespace: accepted connections belong to
the socket's namespace, the connections it opens belong to its own. So clients in the root
namespace (pytest, kubectl, the operator) reach the API server without any address or route on
the machine's own interfaces.

    python -m lorarl_dev.node.relay --listen-fd 3 --to 10.212.0.2:6443

The same the other way round: Argo CD's application controller, in a namespace of its own (its
metrics server binds 0.0.0.0 with no flag to change it), reaches the API server, the Redis and the
repo server on the root namespace's 127.0.0.1 through listening sockets made in its namespace and
a relay in the root namespace, one ``--listen-fd``/``--to`` pair each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # half-close so the other direction can finish (TLS close_notify, HTTP/2 GOAWAY)
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _serve_one(client_r, client_w, host: str, port: int) -> None:
    try:
        up_r, up_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    for w in (client_w, up_w):
        w.close()


async def _main(routes: list[tuple[int, str, int]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers = []
    for fd, host, port in routes:
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        servers.append(await asyncio.start_server(lambda r, w, host=host, port=port: _serve_one(r, w, host, port), sock=sock))
    try:
        await stop.wait()
    finally:
        for server in servers:
            server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-fd", type=int, action="append", required=True, help="an inherited listening TCP socket (repeatable)")
    parser.add_argument("--to", action="append", required=True, help="HOST:PORT to connect to (in this process's namespace), one per --listen-fd")
    args = parser.parse_args(argv)
    if len(args.listen_fd) != len(args.to):
        parser.error("give one --to for each --listen-fd")
    routes = []
    for fd, to in zip(args.listen_fd, args.to, strict=True):
        host, _, port = to.rpartition(":")
        if not host or not port.isdigit():
            parser.error(f"--to: expected HOST:PORT, got {to!r}")
        routes.append((fd, host, int(port)))
    asyncio.run(_main(routes))


if __name__ == "__main__":
    main()
