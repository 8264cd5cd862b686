"""Where the export and load pods may connect (issue 35): never into the node or the cluster.

A URL of the spec (spec.serve.url, an export destination's endpoint or registry) is the job's
author's choice; the pods that follow it run with the job's Secrets. So the pods refuse any
address that is
- loopback (127.0.0.0/8, ::1) or unspecified (0.0.0.0/8, ::): the pod itself;
- link-local (169.254.0.0/16, fe80::/10): the node's and the cloud's metadata services;
- in the cluster's own ranges (its Service and pod CIDRs): not knowable from inside a pod, so
  given by the operator's install (the chart's ``security.clusterCIDRs``, default none), less
  the ranges it allows (``security.allowedInternalCIDRs``, e.g. an in-cluster SGLang server's
  Service), which never lift loopback or link-local.
Both lists reach the pod as environment variables (``REFUSED_ENV``, ``ALLOWED_ENV``).

The check is on the addresses a host name resolves to, at every connection of the process
(``install`` wraps ``socket.getaddrinfo``, which urllib, urllib3, botocore and httpx all
connect through): a redirect, an upload URL a server hands out, or a name that resolves
differently the second time is checked as the first. The admission rules on the URL fields
(lorarl.api.types.internal_host_rules) refuse the literal forms earlier; the per-job egress
NetworkPolicy (lorarl.job.render.egress_policy) is the cluster's own guard.

Standard library only: the exporter zipapp and the load Job's ConfigMap ship this file."""

from __future__ import annotations

import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Iterable

REFUSED_ENV = "LORARL_EGRESS_REFUSED_CIDRS"
ALLOWED_ENV = "LORARL_EGRESS_ALLOWED_CIDRS"

# (range, what it is): refused whatever the install allows
ALWAYS_REFUSED: tuple[tuple[str, str], ...] = (
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("0.0.0.0/8", "unspecified"),
    ("::/128", "unspecified"),
    ("169.254.0.0/16", "link-local"),
    ("fe80::/10", "link-local"),
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(OSError):
    """A connection the pod will not make; the message names the host and the kind of range,
    never an address the host resolved to."""


def parse_cidrs(text: str | Iterable[str]) -> tuple[Network, ...]:
    """``10.96.0.0/12,10.244.0.0/16`` (or a list of them) as networks; '' is none. A bad entry
    raises ValueError naming it."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r}: not an IPv4 or IPv6 CIDR") from None
    return tuple(out)


class Policy:
    def __init__(self, refused: Iterable[Network] = (), allowed: Iterable[Network] = ()):
        self.always = tuple((ipaddress.ip_network(c), what) for c, what in ALWAYS_REFUSED)
        self.refused, self.allowed = tuple(refused), tuple(allowed)

    @classmethod
    def from_env(cls, env=None) -> Policy:
        env = os.environ if env is None else env
        return cls(parse_cidrs(env.get(REFUSED_ENV, "")), parse_cidrs(env.get(ALLOWED_ENV, "")))

    def why_refused(self, address: str) -> str | None:
        """The kind of range the address is in, or None when the pod may connect to it."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope id (fe80::1%eth0)
        except ValueError:
            return None  # not an IP address (an AF_UNIX path): not ours to judge
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        for net, what in self.always:
            if ip.version == net.version and ip in net:
                return what
        if any(ip.version == net.version and ip in net for net in self.refused):
            if not any(ip.version == net.version and ip in net for net in self.allowed):
                return "the cluster's own (security.clusterCIDRs)"
        return None

    def check_addresses(self, host: str, addresses: Iterable[str]) -> None:
        for address in addresses:
            what = self.why_refused(address)
            if what is not None:
                raise EgressRefused(f"{host} resolves to a {what} address: the pod connects to none (docs/security.md)")

    def check_host(self, host: str, port: int) -> None:
        """Resolve ``host`` and refuse it when any of its addresses is refused (a DNS failure is
        left to the connection, which reports it as it does)."""
        try:
            infos = _original_getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError:
            return
        self.check_addresses(host, [str(info[4][0]) for info in infos])


_original_getaddrinfo = socket.getaddrinfo


def install(policy: Policy) -> None:
    """Check every address the process resolves before it connects (see the module's text)."""

    def getaddrinfo(host, port, *args, **kwargs):
        infos = _original_getaddrinfo(host, port, *args, **kwargs)
        name = host.decode() if isinstance(host, bytes) else str(host)
        policy.check_addresses(name, [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)])
        return infos

    socket.getaddrinfo = getaddrinfo


def uninstall() -> None:
    socket.getaddrinfo = _original_getaddrinfo


def url_host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s) URL, the scheme's port when none is given; None when it names no host."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def destination_hosts(dest: dict) -> list[tuple[str, int]]:
    """The (host, port) pairs an export destination (the spec's camelCase form) connects to
    first; [] for a claim. The defaults are the public services (AWS S3, the Hugging Face Hub)."""
    if "s3" in dest and dest["s3"] is not None:
        endpoint = dest["s3"].get("endpoint")
        return [url_host_port(endpoint) or ("s3.amazonaws.com", 443)] if endpoint else [("s3.amazonaws.com", 443)]
    if "hub" in dest and dest["hub"] is not None:
        endpoint = dest["hub"].get("endpoint")
        return [url_host_port(endpoint) or ("huggingface.co", 443)] if endpoint else [("huggingface.co", 443)]
    if "oci" in dest and dest["oci"] is not None:
        registry = dest["oci"]["repository"].split("/", 1)[0]
        host, _, port = registry.partition(":")
        return [(host, int(port) if port else (80 if dest["oci"].get("plainHttp") else 443))]
    return []
