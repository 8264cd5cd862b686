"""A TCP relay from a listening socket in the root network namespace to an address in ours.

The harness creates the listening socket (127.0.0.1:<free port>, root namespace) and hands its fd
to this process, which runs inside the cluster's network namespace: accepted connections belong to
the socket's namespace, the connections it opens belong to its own. So clients in the root
namespace (pytest, kubectl, the operator) reach the API server without any address or route on
the machine's own interfaces.

    python -m lorarl_dev.node.relay --listen-fd 3 --to 10.212.0.2:6443
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


async def _main(fd: int, host: str, port: int) -> None:
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(lambda r, w: _serve_one(r, w, host, port), sock=sock)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-fd", type=int, required=True, help="an inherited listening TCP socket")
    parser.add_argument("--to", required=True, help="HOST:PORT to connect to (in this process's namespace)")
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--to: expected HOST:PORT, got {args.to!r}")
    asyncio.run(_main(args.listen_fd, host, int(port)))


if __name__ == "__main__":
    main()
