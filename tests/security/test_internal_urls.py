"""Issue 35, point 2: the export's and the load's URLs are not a way into the node or the cluster.

- admission: a URL field naming loopback, 0.0.0.0/8, link-local or localhost (or an IPv4 address
  in another form than four decimal numbers) is refused with the field named, by `lorarl
  validate` and by the real API server alike (the CRD's CEL);
- the pods: a host NAME resolving there (or into the cluster's own ranges, security.clusterCIDRs)
  is refused before any connection, at every connection of the process (egress.install);
- redirects: the loader follows none, the export's OCI and Hub clients none to another host;
- status: no text of the server's is copied into a report (an HTTP status and our sentence);
- the export and load Jobs' egress NetworkPolicies: DNS and the destinations' ports only.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import ipaddress
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from lorarl.adapter import egress, export, stores
from lorarl.admission.validation import validate
from lorarl.api import types as api
from lorarl.job import export_job
from lorarl.job import export_plan as plan
from lorarl.job.settings import EgressSettings, NetworkPolicySettings, RenderSettings
from lorarl.serving import serve_job

from tests.adapter import saves
from tests.api.apiserver import dry_run_apply, dry_run_create
from tests.helpers import ServiceNetns, with_spec

NOW = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
SENTINEL = "internal-sentinel-35-2"  # what an internal endpoint would answer: never in a report

REFUSED_URLS = [
    "http://169.254.169.254",
    "http://127.0.0.1:8080",
    "http://127.9.9.9",
    "http://localhost:30000",
    "http://LocalHost.",
    "http://metadata.localhost",
    "http://0.0.0.0:80",
    "http://2130706433",  # 127.0.0.1 as one number (inet_aton)
    "http://0x7f.1",
    "http://0177.0.0.1",  # octal
    "http://169.254.169.254.",
    "https://127.0.0.1/",
]
ADMITTED_URLS = ["http://sglang.serving.svc:30000", "https://kubernetes.default.svc", "http://10.0.0.5", "http://192.0.2.7:8080/", "https://hf-mirror.com"]


def serve_doc(url: str) -> dict:
    return with_spec(export={"destinations": [{"claim": {"claimName": "c"}}]}, serve={"url": url, "adapterPath": "/adapters/x"})


def destinations_doc(endpoint: str, registry: str) -> dict:
    return with_spec(
        export={
            "destinations": [
                {"s3": {"bucket": "adapters", "endpoint": endpoint}},
                {"hub": {"repo": "team/x", "endpoint": endpoint, "tokenSecretRef": {"name": "hub", "key": "token"}}},
                {"oci": {"repository": f"{registry}/team/x"}},
            ]
        }
    )


URL_FIELDS = ["spec.export.destinations[0].s3.endpoint", "spec.export.destinations[1].hub.endpoint", "spec.export.destinations[2].oci.repository"]


def refused_fields(doc: dict) -> set[str]:
    job, problems = validate(doc)
    assert job is None, "expected the document to be refused"
    return {p.field for p in problems if "loopback" in p.message}


# ------------------------------------------------------------------------------ admission


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_lorarl_validate_refuses_an_internal_url_naming_the_field(url):
    assert refused_fields(serve_doc(url)) == {"spec.serve.url"}
    if url.count("/") == 2:  # a registry is host[:port] only
        registry = url.split("://", 1)[1]
        assert refused_fields(destinations_doc(url, registry)) == set(URL_FIELDS)


@pytest.mark.parametrize("url", ADMITTED_URLS)
def test_lorarl_validate_admits_a_name_or_another_address(url):
    """A name (kubernetes.default.svc among them) is judged in the pod, once resolved."""
    job, problems = validate(serve_doc(url))
    assert job is not None, problems
    registry = url.split("://", 1)[1].rstrip("/")
    job, problems = validate(destinations_doc(url, registry))
    assert job is not None, problems


# ------------------------------------------------------------------------------ the pods


def test_the_pods_refuse_loopback_link_local_and_the_clusters_ranges_unless_allowed():
    policy = egress.Policy(egress.parse_cidrs("10.96.0.0/12,10.244.0.0/16"), egress.parse_cidrs("10.96.5.5/32"))
    refused = {
        "127.0.0.1": "loopback",
        "::1": "loopback",
        "::ffff:127.0.0.1": "loopback",
        "0.0.0.0": "unspecified",
        "169.254.169.254": "link-local",
        "fe80::1%eth0": "link-local",
        "10.96.0.1": "the cluster's own (security.clusterCIDRs)",
        "10.244.3.4": "the cluster's own (security.clusterCIDRs)",
    }
    assert {a: policy.why_refused(a) for a in refused} == refused
    assert [policy.why_refused(a) for a in ("10.96.5.5", "192.0.2.7", "2001:db8::1")] == [None, None, None]
    # allowedInternalCIDRs never lifts loopback or link-local
    assert egress.Policy((), egress.parse_cidrs("127.0.0.0/8,169.254.0.0/16")).why_refused("169.254.169.254") == "link-local"
    assert egress.Policy.from_env({egress.REFUSED_ENV: "10.96.0.0/12", egress.ALLOWED_ENV: ""}).why_refused("10.96.0.1") is not None
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 CIDR"):
        egress.parse_cidrs("10.96.0.0/12,nonsense")


def test_every_connection_of_the_process_is_checked_once_resolved():
    """The guard sits under every HTTP client (they resolve through socket.getaddrinfo): a name
    resolving to loopback is refused before a connection is made, and the message names no address."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    egress.install(egress.Policy())
    try:
        with pytest.raises(egress.EgressRefused, match="localhost resolves to a loopback address"):
            socket.create_connection(("localhost", port), timeout=5)
        with pytest.raises(urllib.error.URLError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)  # noqa: S310 - loopback, refused
        assert isinstance(err.value.reason, egress.EgressRefused) and "127.0.0.1" in str(err.value.reason)
    finally:
        egress.uninstall()
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever connected
    listener.close()


def run_loader(tmp_path, url: str, env: dict | None = None, netns: ServiceNetns | None = None) -> tuple[int, dict]:
    """The load pod's program as the pod runs it: the ConfigMap's files, python3 -I; in the
    namespace ``netns`` if given (where the test's servers are)."""
    job = api.LoraRLJob.model_validate(
        saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "c"}}]}, serve={"url": "http://x", "adapterPath": "/a"})
    )
    for name, text in serve_job.configmap(job)["data"].items():
        (tmp_path / name).write_text(text)
    log = tmp_path / "termination-log"
    log.unlink(missing_ok=True)
    argv = [
        *(netns.prefix if netns else ()),
        sys.executable,
        "-I",
        str(tmp_path / "loader.py"),
        "--url",
        url,
        "--name",
        "x",
        "--path",
        "/a",
        "--termination-log",
        str(log),
    ]
    done = subprocess.run(argv, env=env or {}, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, json.loads(log.read_text())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_loader_refuses_a_loopback_server_for_good_without_connecting(tmp_path, host):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    code, report = run_loader(tmp_path, f"http://{host}:{listener.getsockname()[1]}")
    assert (code, report["reason"]) == (2, "AddressRefused"), report
    assert "security.allowedInternalCIDRs" in report["message"]
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


@pytest.mark.servers
def test_the_loader_refuses_the_clusters_own_ranges_given_to_the_pod(tmp_path, service_netns):
    address, ns = service_netns.ADDRESS, service_netns
    code, report = run_loader(tmp_path, f"http://{address}:9", {egress.REFUSED_ENV: f"{address}/32"}, ns)
    assert (code, report["reason"]) == (2, "AddressRefused"), report
    code, report = run_loader(tmp_path, f"http://{address}:9", {egress.REFUSED_ENV: f"{address}/32", egress.ALLOWED_ENV: f"{address}/32"}, ns)
    assert report["reason"] == "ServerUnreachable", report  # allowed: it connects (nothing listens on 9)


def export_plan(*destinations: dict) -> dict:
    return plan.export_plan(api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": list(destinations)})))


@pytest.mark.parametrize(
    "destination,field",
    [
        ({"s3": {"bucket": "adapters", "endpoint": "http://localhost:9000"}}, "spec.export.destinations[0].s3"),
        ({"hub": {"repo": "team/x", "endpoint": "http://localhost", "tokenSecretRef": {"name": "h", "key": "t"}}}, "spec.export.destinations[0].hub"),
        ({"oci": {"repository": "localhost:5000/team/x"}}, "spec.export.destinations[0].oci"),
    ],
)
def test_the_export_refuses_a_destination_resolving_to_loopback_before_any_work(tmp_path, destination, field):
    report = export.run(export_plan(destination), saves.STATUS, str(tmp_path / "no-save"), NOW, policy=egress.Policy())
    assert report == {
        "ok": False,
        "reason": "DestinationRefused",
        "message": f"{field}: localhost resolves to a loopback address: the pod connects to none (docs/security.md)",
    }


def test_the_exporter_zipapp_ships_the_guard():
    _, cm, job = export_job.children(api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "c"}}]})))
    import base64
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(cm["binaryData"]["exporter.pyz"])[len(b"#!/usr/bin/env python3\n") :])).namelist()
    assert "lorarl_exporter/adapter/egress.py" in names
    assert not [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("LORARL_EGRESS")]
    job = export_job.job_object(exporting_job(), RenderSettings(egress=CLUSTER))
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env[egress.REFUSED_ENV], env[egress.ALLOWED_ENV]) == ("10.96.0.0/12,10.244.0.0/16,fd00:10::/108", "10.96.7.7/32")


# ------------------------------------------------------------------ redirects and server text


def test_a_redirect_to_another_host_is_refused_by_the_export_clients():
    same, other = "https://registry.example:5000/v2/x/blobs/uploads/", "https://storage.example/bucket?sig=1"
    assert stores.refuse_cross_host_redirect(same, "/v2/x/blobs/uploads/1") is None
    assert stores.refuse_cross_host_redirect(same, other) is not None
    assert stores.refuse_cross_host_redirect(same, "http://registry.example:5000/v2/") is not None  # another scheme
    assert stores.refuse_cross_host_redirect(same, "https://registry.example:5001/v2/") is not None  # another port

    class Response:  # the shape requests and httpx give a hook
        is_redirect = has_redirect_location = True
        url, headers, status_code = same, {"Location": other}, 307

    requests = pytest.importorskip("requests")
    with pytest.raises(requests.HTTPError, match="another host"):
        stores._requests_same_host_redirects(Response())
    with pytest.raises(stores.RedirectRefused, match="another host"):
        stores._httpx_same_host_redirects(Response())


def test_store_messages_name_no_text_of_the_servers():
    s3 = stores.S3Store.__new__(stores.S3Store)
    s3.bucket, s3.prefix = "adapters", "team/"

    class ClientError(Exception):
        def __init__(self, code):
            self.response = {"Error": {"Code": code, "Message": SENTINEL}, "ResponseMetadata": {"HTTPStatusCode": 403}}

    assert str(s3._fail("writing x to", ClientError(f"<html>{SENTINEL}"))) == "writing x to s3://adapters/team/: HTTP 403"
    assert str(s3._fail("writing x to", ClientError("AccessDenied"))) == "writing x to s3://adapters/team/: HTTP 403 AccessDenied"
    assert stores.known_code(SENTINEL, stores.HUB_ERROR_CODES) is None and stores.known_code("RepoNotFound", stores.HUB_ERROR_CODES) == "RepoNotFound"


@contextlib.contextmanager
def http_server(netns: ServiceNetns, answer):
    """A server in the harness's namespace ``netns``, off loopback, whose every request gets
    ``answer(handler)``; yields (url, hits)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self):
            hits.append(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            answer(self)

        do_GET = do_POST = _any

        def log_message(self, *args):
            pass

    server = netns.call(http.server.ThreadingHTTPServer, (netns.ADDRESS, 0), Handler)  # its socket in there
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{server.server_address[0]}:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def reply(status: int, body: bytes = b"", headers: dict | None = None):
    def answer(handler):
        handler.send_response(status)
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.mark.servers
def test_the_loader_copies_no_server_text_and_follows_no_redirect(tmp_path, service_netns):
    ns = service_netns
    refusal = json.dumps({"success": False, "error_message": f"{SENTINEL} " * 50}).encode()
    with http_server(ns, reply(400, refusal)) as (url, _):
        code, report = run_loader(tmp_path, url, netns=ns)
    assert (code, report["reason"]) == (2, "LoadRefused") and "HTTP 400" in report["message"], report
    assert SENTINEL not in json.dumps(report)
    with (
        http_server(ns, reply(200, SENTINEL.encode())) as (elsewhere, elsewhere_hits),
        http_server(ns, reply(302, SENTINEL.encode(), {"Location": elsewhere + "/x"})) as (url, _),
    ):
        code, report = run_loader(tmp_path, url, netns=ns)
    assert (code, report["reason"]) == (2, "Redirected"), report
    assert elsewhere_hits == [] and SENTINEL not in json.dumps(report)
    with http_server(ns, lambda h: h.wfile.write(f"-ERR {SENTINEL}\r\n".encode())) as (url, _):  # not HTTP at all
        code, report = run_loader(tmp_path, url, netns=ns)
    assert report["reason"] == "ServerUnreachable" and SENTINEL not in json.dumps(report), report


@pytest.mark.servers
def test_the_export_hub_client_follows_no_redirect_to_another_host(service_netns):
    ns = service_netns
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.utils import _http

    stores._hub_same_host_redirects(huggingface_hub)
    try:
        with (
            http_server(ns, reply(200, b"{}")) as (elsewhere, elsewhere_hits),
            http_server(ns, reply(307, b"", {"Location": elsewhere.replace(ns.ADDRESS, "localhost") + "/x"})) as (url, _),
        ):
            with pytest.raises(stores.RedirectRefused):
                ns.call(lambda: huggingface_hub.get_session().get(url + "/api/models/team/x"))
            moved = reply(307, b"", {"Location": "/moved"})
            with http_server(ns, lambda h: (moved if h.path != "/moved" else reply(200, b"{}"))(h)) as (same, same_hits):
                ns.call(lambda: huggingface_hub.get_session().get(same + "/api/models/team/x"))  # the same host: followed
        assert elsewhere_hits == [] and same_hits == ["/api/models/team/x", "/moved"]
    finally:
        huggingface_hub.set_client_factory(_http.default_client_factory)


# ------------------------------------------------------------------ the egress NetworkPolicies

CLUSTER = EgressSettings(refused_cidrs=("10.96.0.0/12", "10.244.0.0/16", "fd00:10::/108"), allowed_cidrs=("10.96.7.7/32",))


def exporting_job(namespace: str = "ml") -> api.LoraRLJob:
    doc = saves.tiny_job_doc(
        export={
            "destinations": [
                {"s3": {"bucket": "adapters", "endpoint": "https://minio.data:9000"}},
                {"oci": {"repository": "10.1.2.3:5000/team/x", "plainHttp": True}},
                {"hub": {"repo": "team/x", "tokenSecretRef": {"name": "h", "key": "t"}}},
                {"claim": {"claimName": "c"}},
            ]
        },
        serve={"url": "http://sglang.serving.svc:30000", "adapterPath": "/adapters/x"},
    )
    doc["metadata"]["namespace"] = namespace
    doc["status"] = {**saves.STATUS, "adapter": {"uri": "s3://adapters/x/"}}
    return api.LoraRLJob.model_validate(doc)


def allows(policy: dict, address: str, port: int, protocol: str = "TCP") -> bool:
    """What the policy lets the selected pods send to address:port (NetworkPolicy's egress semantics)."""
    ip = ipaddress.ip_address(address)

    def in_peer(peer):
        block = peer["ipBlock"]
        net = ipaddress.ip_network(block["cidr"])
        return (
            ip.version == net.version
            and ip in net
            and not any(ip in ipaddress.ip_network(e) for e in block.get("except", []) if ipaddress.ip_network(e).version == ip.version)
        )

    return any(
        any(p["port"] == port and p["protocol"] == protocol for p in rule["ports"]) and ("to" not in rule or any(in_peer(peer) for peer in rule["to"]))
        for rule in policy["spec"]["egress"]
    )


def test_the_export_pods_reach_dns_and_their_destinations_ports_only():
    settings = RenderSettings(egress=CLUSTER)
    policy, *_ = export_job.children(exporting_job(), settings)
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "tiny-lora-export-egress"
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["podSelector"]["matchExpressions"] == [{"key": "app.kubernetes.io/component", "operator": "In", "values": ["export"]}]
    assert allows(policy, "10.96.0.10", 53, "UDP") and allows(policy, "10.96.0.10", 53)  # DNS, wherever it runs
    assert allows(policy, "203.0.113.9", 9000) and allows(policy, "203.0.113.9", 443)  # a name: minio.data:9000, huggingface.co:443
    assert allows(policy, "10.1.2.3", 5000) and not allows(policy, "10.1.2.4", 5000)  # a literal IP: that address alone
    assert not allows(policy, "203.0.113.9", 22) and not allows(policy, "203.0.113.9", 80)
    assert not allows(policy, "169.254.169.254", 443) and not allows(policy, "10.96.0.1", 443)  # metadata, kubernetes.default.svc
    assert not allows(policy, "10.244.1.1", 9000) and allows(policy, "10.96.7.7", 9000)  # the cluster's pods; an allowed range
    inside = exporting_job()
    inside.spec.export.destinations[1].oci.repository = "10.96.0.9:5000/team/x"  # a literal the pod refuses too
    assert not allows(export_job.egress_policy(inside, settings), "10.96.0.9", 5000)
    assert not allows(policy, "fd00:10::1", 443) and not allows(policy, "fe80::1", 443) and allows(policy, "2001:db8::1", 443)


def test_the_load_pod_reaches_the_servers_port_only_and_a_claim_export_nothing():
    policy, cm, _ = serve_job.children(exporting_job().model_copy(), RenderSettings(egress=CLUSTER))
    assert policy["metadata"]["name"] == "tiny-lora-serve-egress" and cm["data"].keys() == {"loader.py", "egress.py"}
    assert allows(policy, "203.0.113.9", 30000) and not allows(policy, "203.0.113.9", 443) and not allows(policy, "10.96.0.1", 443)
    claim_only = api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "c"}}]}))
    assert export_job.egress_policy(claim_only)["spec"]["egress"] == []  # no network at all
    off = RenderSettings(NetworkPolicySettings(egress=False))
    assert [c["kind"] for c in export_job.children(claim_only, off)] == ["ConfigMap", "Job"]


@pytest.mark.controlplane
def test_the_api_server_admits_the_egress_policies(kube_api, namespace):
    job = exporting_job(namespace)
    for settings in (RenderSettings(), RenderSettings(egress=CLUSTER)):
        for policy in (export_job.egress_policy(job, settings), serve_job.egress_policy(job, settings)):
            answer = dry_run_apply(kube_api, policy)
            assert answer.accepted, answer


@pytest.mark.controlplane
def test_the_api_server_refuses_an_internal_url_naming_the_field(kube_api, namespace):
    for url in ("http://169.254.169.254", "http://localhost:30000", "http://2130706433"):
        answer = dry_run_create(kube_api, namespace, serve_doc(url))
        assert not answer.accepted and "spec.serve.url" in answer.fields and "loopback" in answer.message, answer
    answer = dry_run_create(kube_api, namespace, destinations_doc("http://127.0.0.1:9000", "169.254.1.1"))
    assert not answer.accepted and set(URL_FIELDS) <= set(answer.fields), answer
    answer = dry_run_create(kube_api, namespace, serve_doc("https://kubernetes.default.svc"))
    assert answer.accepted, answer  # a name: the pod judges it, once resolved
