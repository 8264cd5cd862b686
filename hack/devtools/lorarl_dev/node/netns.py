"""The cluster's network namespace: created, entered and deleted by the harness.

Everything of the real-node cluster runs in one namespace ``lorarl-<id>`` (``ip netns add``):
its loopback carries the node IP as a second address, the pods' CNI bridge and every pod address
live inside it, so no address or route is ever added to the machine's own interfaces.

Processes are started in it with ``nsenter --net=/run/netns/NAME`` (network namespace only; ``ip
netns exec`` would also give them a private mount namespace, hiding the kubelet's mounts from
containerd). The harness itself talks to addresses inside it from a thread that has entered it
(:class:`NetnsThread`): ``setns(CLONE_NEWNET)`` changes only the calling thread.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import pathlib
import subprocess
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NETNS_DIR = pathlib.Path("/run/netns")
ETC_NETNS_DIR = pathlib.Path("/etc/netns")  # `ip netns exec NAME` bind-mounts /etc/netns/NAME/* over /etc
_CLONE_NEWNET = 0x40000000


def netns_path(name: str) -> pathlib.Path:
    return NETNS_DIR / name


def nsenter_prefix(name: str) -> list[str]:
    """The command prefix that runs a program in namespace ``name`` (network only)."""
    return ["nsenter", f"--net={netns_path(name)}", "--"]


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(("-n", netns) if netns else ()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def create(name: str, node_ip: str | None = None, service_cidr: str | None = None) -> None:
    """``ip netns add NAME``, loopback up with ``node_ip``/32 on it (if given), IPv4 forwarding on.

    Forwarding is needed inside the namespace only: a pod reaching another pod through a
    ClusterIP is DNATed at the bridge gateway and routed back out of the bridge.
    ``service_cidr`` gets a route (on lo, inside the namespace): a process in the namespace
    itself (a hostNetwork pod, an operator) needs one for connect() to a ClusterIP to reach
    kube-proxy's OUTPUT DNAT, which then reroutes the packet to the pod.
    """
    _ip("netns", "add", name)
    try:
        _ip("link", "set", "lo", "up", netns=name)
        if node_ip:
            _ip("addr", "add", f"{node_ip}/32", "dev", "lo", netns=name)
        if service_cidr:
            _ip("route", "add", service_cidr, "dev", "lo", "src", node_ip, netns=name)
        sysctl(name, "net.ipv4.ip_forward", "1")
    except BaseException:
        delete(name)
        raise


#: the names of :func:`create_owned`'s namespaces: ``lorarl-owned-<owner pid>-<tag>``
OWNED_PREFIX = "lorarl-owned"


def owner_pid(name: str) -> int | None:
    """The process a namespace of :func:`create_owned` belongs to (None for any other name)."""
    if not name.startswith(f"{OWNED_PREFIX}-"):
        return None
    pid = name.removeprefix(f"{OWNED_PREFIX}-").split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def owner_running(name: str) -> bool | None:
    """Whether the process a namespace of :func:`create_owned` belongs to still runs (None for
    any other name)."""
    pid = owner_pid(name)
    return None if pid is None else pathlib.Path(f"/proc/{pid}").exists()


def create_owned(tag: str, address: str | None = None) -> str:
    """A namespace with only a loopback that belongs to this process, named
    ``lorarl-owned-<pid>-<tag>``, with ``address``/32 on that loopback if given; those whose
    process is gone (a run that was killed) are deleted first."""
    if NETNS_DIR.is_dir():
        for path in NETNS_DIR.glob(f"{OWNED_PREFIX}-*"):
            if owner_running(path.name) is False:
                delete(path.name)
    name = f"{OWNED_PREFIX}-{os.getpid()}-{tag}"
    delete(name)
    create(name, address)
    return name


def ensure_dir_mounted() -> None:
    """/run/netns made a mount if it is not one yet, as `ip netns add` makes it (a bind mount of
    the directory on itself, left when the namespace goes): a namespace created and deleted by
    another harness process meanwhile (Argo CD's, in the api tier beside the e2e tier) then no
    longer changes the machine between a before/after comparison's two readings."""
    delete(create_owned("netns-dir"))


def sysctl(name: str, key: str, value: str) -> None:
    """Set a per-namespace sysctl inside namespace ``name``."""
    cmd = [*nsenter_prefix(name), "sysctl", "-q", "-w", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def delete(name: str) -> None:
    """Delete the namespace (its interfaces, addresses, routes and iptables rules go with it)."""
    if netns_path(name).exists():
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def _enter(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns_path(name)}): {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsThread:
    """One worker thread that lives in namespace ``name``: sockets it opens are in there."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"netns-{name}", initializer=_enter, initargs=(name,))

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        return self._pool.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def run_in(name: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` once in namespace ``name`` (a short-lived thread)."""
    t = NetnsThread(name)
    try:
        return t.call(fn)
    finally:
        t.close()
