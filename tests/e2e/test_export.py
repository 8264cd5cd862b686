"""The adapter's export and serving on the real node. After the seed job succeeded (real KubeRay,
real Ray, the trainer stand-in writing a PEFT export with its tensors), the operator
(helm-installed, its chart's RBAC) creates the export Job; the real Job controller, scheduler and
kubelet run its pod, which converts the newest complete save and writes it to the destinations;
its termination message becomes status.adapter; `lorarl adapter pull` reads each back and verifies
every digest against status.adapter.digest.

Two runs, started together by one fixture (each in its own namespace, 8 of the node's 16 GPUs and
a head of 200m CPU, so that both fit beside each other; they were three runs one after the other,
docs/development.md):
- a claim of the user's, with spec.export.onSave (the save at 49 is exported first, while the run
  goes on: status.adapter, AdapterExportedAtSave; that Job is deleted once the final export
  succeeded), and spec.serve: the SGLang stand-in (lorarl_dev/sglangstub.py, SGLang's LoRA
  endpoints from its source) runs in a pod of the job image mounting that claim read-only, with an
  API key from a Secret; the operator's load Job asks it to load the adapter under the job's name;
- a bucket, a registry and the Hub, with credentials from Secrets only.

The oracles outside lorarl: the kubelet's pod status (the container's exit code and termination
message), the files on the claim's volume (read from its host directory), the real safetensors
library, botocore, crane, the real `hf` CLI, the stand-in's own /v1/models (read inside its pod).
The model is two-layer (hubstub.TINY_ARCHITECTURE): the seed's real adapter is ~264 MB per save."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
from lorarl_dev import hubstub, seedrun

from tests.e2e.conftest import MEASURED, make_namespace, release_namespace
from tests.helpers import lorarl_cli

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
EXPORT_TIMEOUT = 300
SERVE_TIMEOUT = 300
NAME = "qwen3-4b-lora-amd"
#: two runs side by side on the node's 2 CPUs: each head 200m (Ray still gets one CPU: KubeRay
#: rounds the request up, common/pod.go), its submitter KubeRay's 500m
BESIDE = {"hardware": {"gpusPerNode": 8, "cpu": "200m"}}
CLAIM = "served-adapters"
SERVE_KEY = "sk-e2e-sentinel-serve-21"  # noqa: S105 - a test value, searched for
STANDIN = pathlib.Path(__file__).resolve().parents[2] / "hack/devtools/lorarl_dev/sglangstub.py"
MODELS = "import json, os, urllib.request as u; r = u.Request('http://127.0.0.1:30000/v1/models', headers={'Authorization': 'Bearer ' + os.environ['K']}); print(json.dumps([c['id'] for c in json.load(u.urlopen(r))['data']]))"
SENTINEL_KEY_ID = "AKIANODESENTINEL21"
SENTINEL_SECRET = "node21-export-sentinel-secret-do-not-print"  # noqa: S105 - a test value, searched for
SENTINEL_HF_TOKEN = "hf_node21_export_sentinel_token_do_not_print"  # noqa: S105 - a test value, searched for
HUB_REPO = "team/qwen3-4b-lora"


@dataclasses.dataclass
class Run:
    """One export run the fixture started: its namespace, its model revision, what a failing wait
    shows, and what it set up beside it (the SGLang stand-in's URL; the S3 endpoint, registry
    address and the namespace prefix of the stores)."""

    ns: str
    revision: str
    explain: Callable[[], str]
    extra: dict


@pytest.fixture(scope="module")
def runs(real_node_cluster, hub, node_images, lorarl_operator, tmp_path_factory):
    """Both runs started side by side; each test then waits for its own. The second is applied
    once the first's Ray head is up: `ray start` gives the raylet a fixed 30 s to register
    (ray/_private/node.py:409-425, Ray 2.55.1), which heads starting together on 2 loaded cores
    can miss."""
    cp = real_node_cluster
    claim_ns, stores_ns = make_namespace(cp), make_namespace(cp)
    try:
        claim = _start_claim_and_serve(cp, hub, node_images, claim_ns)
        seedrun.wait_for("the first run's Ray head up", lambda: seedrun.ray_head_up(cp, claim_ns, NAME), RUN_TIMEOUT, explain=claim.explain)
        yield {"claim": claim, "stores": _start_stores(cp, hub, node_images, stores_ns, tmp_path_factory.mktemp("registry"))}
    finally:
        release_namespace(cp, claim_ns)
        release_namespace(cp, stores_ns)


def _start_claim_and_serve(cp, hub, node_images, ns: str) -> Run:
    # 0.4 s a rollout: the 20 s after the save at 49 leave its export time to end while the run
    # goes on, beside the other run (at 0.5 s alone it ended 33 s before the run did)
    revision = hub.revision({"seconds_per_rollout": 0.4, "adapter_data": 1}, config=hubstub.tiny_config())
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": ns}}
    claim["spec"] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    _apply(cp, claim)
    _apply(cp, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sglang-api-key", "namespace": ns}, "stringData": {"api-key": SERVE_KEY}})
    url = _sglang_standin(cp, ns, node_images["job"])
    spec = {
        **BESIDE,
        "model": {"architecture": hubstub.TINY_ARCHITECTURE},
        "lora": {"rank": 8, "alpha": 16},
        "export": {"destinations": [{"claim": {"claimName": CLAIM, "path": "team/"}}], "onSave": True},
        "serve": {"url": url, "apiKeySecretRef": {"name": "sglang-api-key", "key": "api-key"}, "claimMountPath": "/adapters"},
    }
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=NAME, namespace=ns, model_revision=revision, spec=spec)
    return Run(ns, revision, explain, {"url": url})


def _start_stores(cp, hub, node_images, ns: str, registry_dir: pathlib.Path) -> Run:
    """Three destinations of one run: moto's S3 server, crane's OCI registry and the Hub stand-in
    (the one that served the model), all on the node IP inside the cluster's network namespace,
    where the export pod reaches them; the export pod runs the operator's image (its
    /opt/exporter: botocore, oras, huggingface_hub). The bucket's keys and the Hub token reach the
    pod only from Secrets (secretKeyRef)."""
    from lorarl_dev import moto

    admin = moto.client_env("", "AKIDADMIN", "admin")
    endpoint = seedrun.start_s3(cp, "s3.create_bucket(Bucket='adapters')", admin)
    address = seedrun.start_registry(cp, registry_dir)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "adapters-rw", "namespace": ns}}
    secret["stringData"] = {"AWS_ACCESS_KEY_ID": SENTINEL_KEY_ID, "AWS_SECRET_ACCESS_KEY": SENTINEL_SECRET}
    _apply(cp, secret)
    _apply(cp, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-rw", "namespace": ns}, "stringData": {"token": SENTINEL_HF_TOKEN}})
    hubstub.write_repo(str(hub.root), HUB_REPO, {"README.md": "# the seed job's adapter\n"}, write_tokens=(SENTINEL_HF_TOKEN,))
    revision = hub.revision({"seconds_per_rollout": 0.2, "adapter_data": 1}, config=hubstub.tiny_config())
    spec = {
        **BESIDE,
        "model": {"architecture": hubstub.TINY_ARCHITECTURE},
        "lora": {"rank": 8, "alpha": 16},
        "export": {
            "image": node_images["operator"],
            "destinations": [
                {"s3": {"bucket": "adapters", "prefix": "team/", "endpoint": endpoint, "credentialsSecretName": "adapters-rw"}},
                {"oci": {"repository": f"{address}/adapters/qwen3-4b", "plainHttp": True}},
                {"hub": {"repo": HUB_REPO, "endpoint": hub.endpoint, "tokenSecretRef": {"name": "hub-rw", "key": "token"}}},
            ],
        },
    }
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=NAME, namespace=ns, model_revision=revision, spec=spec)
    return Run(ns, revision, explain, {"admin": admin, "endpoint": endpoint, "address": address})


def _when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _settled(cp, ns: str, name: str, type_: str, timeout: float, explain) -> dict:
    """The job's status once its condition ``type_`` is True or False (the export's and the load's
    final word)."""

    def final():
        st = seedrun.job_status(cp, ns, name)
        return st if _condition(st, type_).get("status") in ("True", "False") else None

    return seedrun.wait_for(f"{type_} True or False", final, timeout, explain=explain)


def _host_dir(cp, ns: str, claim: str) -> pathlib.Path:
    pvc = seedrun.get(cp, "pvc", claim, ns)
    pv = seedrun.get(cp, "pv", pvc["spec"]["volumeName"], "")
    return pathlib.Path(pv["spec"]["hostPath"]["path"])


def _exported_at_save(cp, ns: str, name: str, rollout: int) -> dict | None:
    """The status once status.adapter is the export at the save of ``rollout`` while the job is
    Running; a run that ended before fails the wait at once."""
    st = seedrun.job_status(cp, ns, name)
    at = (st.get("adapter") or {}).get("rollout")
    if st.get("phase") in ("Succeeded", "Failed") and at != rollout:
        raise AssertionError(f"{ns}/{name} ended {st['phase']} before its save at {rollout} was exported (status.adapter {st.get('adapter')})")
    return st if at == rollout and st.get("phase") == "Running" else None


def _events(cp, ns: str, name: str, reason: str) -> list[dict]:
    out = cp.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name},reason={reason}", "-o", "json")
    return json.loads(out.stdout)["items"]


def _jobs(cp, ns: str, selector: str) -> list[dict]:
    return json.loads(cp.kubectl("get", "jobs.batch", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]


def _apply(cp, obj: dict) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps(obj))


def _sglang_standin(cp, ns: str, image: str) -> str:
    """The stand-in in a pod of the job image (restricted Pod Security), mounting the claim at /adapters: its URL."""
    _apply(
        cp, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sglang-standin", "namespace": ns}, "data": {"sglangstub.py": STANDIN.read_text()}}
    )
    args = ["python3", "/opt/standin/sglangstub.py", "--model-path", "Qwen/Qwen3-4B", "--host", "0.0.0.0", "--port", "30000"]  # noqa: S104 - the pod's address
    args += ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all", "--api-key", "$(SGLANG_API_KEY)"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sglang", "namespace": ns, "labels": {"app": "sglang"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "sglang",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": args,
                    "env": [{"name": "SGLANG_API_KEY", "valueFrom": {"secretKeyRef": {"name": "sglang-api-key", "key": "api-key"}}}],
                    "ports": [{"containerPort": 30000}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}, "periodSeconds": 2},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [
                        {"name": "standin", "mountPath": "/opt/standin", "readOnly": True},
                        {"name": "adapters", "mountPath": "/adapters", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "standin", "configMap": {"name": "sglang-standin"}},
                {"name": "adapters", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}},
            ],
        },
    }
    _apply(cp, pod)

    def ready():
        got = seedrun.get(cp, "pod", "sglang", ns) or {}
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in (got.get("status") or {}).get("conditions") or [])
        return got["status"].get("podIP") if ok else None

    ip = seedrun.wait_for("the SGLang stand-in's pod Ready", ready, 180)
    return f"http://{ip}:30000"


def test_the_seed_job_exports_to_a_claim_at_each_save_pull_verifies_it_and_sglang_serves_it(real_node_cluster, runs, tmp_path):
    cp, name = real_node_cluster, NAME
    run = runs["claim"]
    ns, revision, explain = run.ns, run.revision, run.explain

    # spec.export.onSave: the save at 49 is exported while the run goes on; status.adapter says so
    saved = seedrun.wait_for("status.adapter at rollout 49 while Running", lambda: _exported_at_save(cp, ns, name, 49), RUN_TIMEOUT, explain=explain)
    assert saved["adapter"]["uri"] == f"pvc://{CLAIM}/team/{ns}/{name}/rollout-0000049/" and "AdapterExported" not in {c["type"] for c in saved["conditions"]}
    at_save_events = _events(cp, ns, name, "AdapterExportedAtSave")
    assert any(saved["adapter"]["digest"] in e["message"] for e in at_save_events), at_save_events
    (at_save_pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-export-r0000049")
    ended = at_save_pod["status"]["containerStatuses"][0]["state"]["terminated"]  # the kubelet's record: it really ran
    assert ended["exitCode"] == 0 and json.loads(ended["message"])["adapter"]["digest"] == saved["adapter"]["digest"]

    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    event_time = next(e.get("eventTime") or e.get("firstTimestamp") for e in at_save_events)
    spare = (_when(status["completionTime"]) - _when(event_time)).total_seconds()
    MEASURED.append(
        f"export at the save at 49 (onSave): AdapterExportedAtSave {spare:.0f} s before the run's completionTime (0.4 s a rollout, beside the other run)"
    )
    status = _settled(cp, ns, name, "AdapterExported", EXPORT_TIMEOUT, explain)
    exported = _condition(status, "AdapterExported")
    assert exported["status"] == "True", (exported, explain())
    seconds = (_when(exported["lastTransitionTime"]) - _when(status["completionTime"])).total_seconds()
    MEASURED.append(f"export: Succeeded -> AdapterExported=True in {seconds:.0f} s (completionTime to the condition's lastTransitionTime)")

    adapter = status["adapter"]
    assert adapter["uri"] == f"pvc://{CLAIM}/team/{ns}/{name}/rollout-0000099/", adapter
    assert adapter["digest"].startswith("sha256:") and adapter["format"] == "peft-safetensors" and adapter["rollout"] == 99
    assert adapter["baseModel"] == "Qwen/Qwen3-4B" and adapter["baseModelRevision"] == revision

    # the final export replaced the one at the save; that one's Job and pod are deleted (the API
    # server's lists), its files stay on the claim
    seedrun.wait_for(
        "no export Job at a save left", lambda: not _jobs(cp, ns, f"lorarl.dev/job={name},lorarl.dev/export-rollout"), EXPORT_TIMEOUT, explain=explain
    )
    seedrun.wait_for("its pod gone", lambda: not seedrun.pods(cp, ns, "lorarl.dev/export-rollout"), EXPORT_TIMEOUT, explain=explain)
    assert [e["message"].split(" ")[3] for e in _events(cp, ns, name, "SavedExportDeleted")] == [f"{name}-export-r0000049"]
    saved_dir = _host_dir(cp, ns, CLAIM) / "team" / ns / name / "rollout-0000049"
    assert sorted(p.name for p in saved_dir.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]

    # the pod really ran: the kubelet's record of its container, and the report it wrote
    (pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-export")
    ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 0 and json.loads(ended["message"])["adapter"]["digest"] == adapter["digest"]
    assert pod["spec"]["automountServiceAccountToken"] is False

    # the files on the claim, pulled back and verified against the job's digest
    exported_dir = _host_dir(cp, ns, CLAIM) / "team" / ns / name / "rollout-0000099"
    files = sorted(p.name for p in exported_dir.iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"], files
    assert sum(p.stat().st_size for p in exported_dir.iterdir()) == adapter["size"]
    pulled = tmp_path / "pulled"
    result = lorarl_cli("adapter", "pull", str(exported_dir), str(pulled), "--digest", adapter["digest"])
    assert result.exit_code == 0 and "2 files verified" in result.stdout, (result.stdout, result.stderr)  # the manifest names the other two
    config = json.loads((pulled / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "Qwen/Qwen3-4B" and config["r"] == 8

    from safetensors import safe_open

    with safe_open(str(pulled / "adapter_model.safetensors"), "np") as f:
        assert len(list(f.keys())) == 2 * 7 * 2

    # a tampered copy is refused, naming the file
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for p in exported_dir.iterdir():
        data = p.read_bytes()
        (tampered / p.name).write_bytes(data[:-1] + bytes([data[-1] ^ 1]) if p.name == "adapter_model.safetensors" else data)
    refused = lorarl_cli("adapter", "pull", str(tampered), str(tmp_path / "nope"), "--digest", adapter["digest"])
    assert refused.exit_code == 1 and "adapter_model.safetensors" in refused.stderr and not (tmp_path / "nope").exists()

    # spec.serve: once exported, the load Job loads it into the SGLang stand-in under the job's name
    status = _settled(cp, ns, name, "AdapterServed", SERVE_TIMEOUT, explain)
    served = _condition(status, "AdapterServed")
    assert served["status"] == "True", (served, _condition(status, "AdapterExported"), explain())
    exported = _condition(status, "AdapterExported")
    seconds = (_when(served["lastTransitionTime"]) - _when(exported["lastTransitionTime"])).total_seconds()
    MEASURED.append(f"serve: AdapterExported=True -> AdapterServed=True in {seconds:.0f} s (the conditions' lastTransitionTime)")

    path = f"/adapters/team/{ns}/{name}/rollout-0000099"
    assert {k: status["serving"][k] for k in ("server", "name", "path")} == {"server": run.extra["url"], "name": name, "path": path}
    (pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-serve")
    ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 0 and json.loads(ended["message"])["serving"]["name"] == name
    # the stand-in's own word, inside its pod
    listed = cp.kubectl("exec", "-n", ns, "sglang", "--", "sh", "-c", f'K="$SGLANG_API_KEY" python3 -c "{MODELS}"', timeout=60).stdout
    assert json.loads(listed.strip().splitlines()[-1]) == ["Qwen/Qwen3-4B", name]
    # the key by reference only: not in the job, the load Job, its pod
    written = [seedrun.get(cp, "lorarljob", name, ns), seedrun.get(cp, "job", f"{name}-serve", ns), pod]
    assert not [o for o in written if SERVE_KEY in json.dumps(o)]


def test_the_seed_job_exports_to_a_bucket_a_registry_and_the_hub_and_pull_verifies_each(real_node_cluster, node_images, runs, tmp_path):
    """The sentinel values are in no object, event or log (nor the stand-in's access log). The
    oracles: botocore listing the bucket, crane reading the registry, the real `hf download` of the
    Hub commit, the pulls."""
    from lorarl_dev import exporter, moto, registry
    from lorarl_dev.node.netns import nsenter_prefix

    cp, name = real_node_cluster, NAME
    run = runs["stores"]
    ns, explain = run.ns, run.explain
    admin, endpoint, address = run.extra["admin"], run.extra["endpoint"], run.extra["address"]
    in_netns = nsenter_prefix(cp.netns)
    hub_endpoint = seedrun.hub_endpoint()

    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    status = _settled(cp, ns, name, "AdapterExported", EXPORT_TIMEOUT, explain)
    exported = _condition(status, "AdapterExported")
    assert exported["status"] == "True", (exported, explain())
    seconds = (_when(exported["lastTransitionTime"]) - _when(status["completionTime"])).total_seconds()
    MEASURED.append(f"export to s3 + oci + hub: Succeeded -> AdapterExported=True in {seconds:.0f} s")

    adapter = status["adapter"]
    prefix = f"team/{ns}/{name}/rollout-0000099/"
    reference = f"{address}/adapters/qwen3-4b:{name}-rollout-0000099"
    assert adapter["uri"] == f"s3://adapters/{prefix}" and adapter["uris"][:2] == [adapter["uri"], f"oci://{reference}"], adapter
    hub_uri = adapter["uris"][2]
    assert re.fullmatch(rf"hf://{HUB_REPO}@[0-9a-f]{{40}}", hub_uri), adapter

    # the bucket, listed by botocore (moto's interpreter) with the admin's keys
    listed = moto.run(
        "import json; print(json.dumps(sorted(o['Key'] for o in s3.list_objects_v2(Bucket='adapters')['Contents'])))",
        {**admin, "AWS_ENDPOINT_URL": endpoint},
        prefix=in_netns,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [prefix + n for n in ("adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json")]

    # the registry, read by crane
    manifest = registry.read("manifest", reference, prefix=in_netns)
    assert manifest.returncode == 0, manifest.stderr
    manifest = json.loads(manifest.stdout)
    assert manifest["artifactType"] == "application/vnd.lorarl.adapter.v1" and manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert [layer["annotations"]["org.opencontainers.image.title"] for layer in manifest["layers"]] == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "lorarl-adapter.json",
    ]
    assert sum(layer["size"] for layer in manifest["layers"]) == adapter["size"]

    # the Hub commit, read by the real hf CLI (no token: the repo is public to read)
    hf = os.path.join(os.path.dirname(sys.executable), "hf")
    hf_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    hf_env.update(HF_ENDPOINT=hub_endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1")
    got = tmp_path / "hf-download"
    commit = hub_uri.rsplit("@", 1)[1]
    dl = subprocess.run(
        [*in_netns, hf, "download", HUB_REPO, "--revision", commit, "--local-dir", str(got)], env=hf_env, capture_output=True, text=True, timeout=300
    )
    assert dl.returncode == 0, dl.stderr
    downloaded = {p.name: p.read_bytes() for p in got.iterdir() if p.is_file()}
    assert sorted(downloaded) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]
    assert "sha256:" + hashlib.sha256(downloaded["lorarl-adapter.json"]).hexdigest() == adapter["digest"]

    # both pulled back by `lorarl adapter pull` (in the namespace, where the stores listen) and verified
    libs = tmp_path / "libs"
    libs.mkdir()
    for package in ("botocore", "oras"):
        (libs / package).symlink_to(exporter.package_dir(package))
    env = {**os.environ, "PYTHONPATH": str(libs), "AWS_ACCESS_KEY_ID": "AKIDREADER", "AWS_SECRET_ACCESS_KEY": "reader", "AWS_DEFAULT_REGION": "us-east-1"}
    env = {**{k: v for k, v in env.items() if not k.startswith("HF_")}, "HF_HOME": str(tmp_path / "pull-hf-home"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    pulled = {}
    for uri, extra in ((adapter["uri"], ["--endpoint", endpoint]), (f"oci://{reference}", ["--plain-http"]), (hub_uri, ["--endpoint", hub_endpoint])):
        target = tmp_path / f"pulled-{len(pulled)}"
        cmd = [*in_netns, sys.executable, "-m", "lorarl.cli", "adapter", "pull", uri, str(target), "--digest", adapter["digest"], *extra]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "2 files verified, rollout 99" in done.stdout, (uri, done.stdout, done.stderr)
        pulled[uri] = {p.name: p.read_bytes() for p in target.iterdir()}
    assert len({json.dumps({k: v.hex() for k, v in files.items()}) for files in pulled.values()}) == 1  # the same bytes from each

    # the export pod ran the operator's image; the keys came by secretKeyRef, not as values
    (pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-export")
    assert pod["spec"]["containers"][0]["image"] == node_images["operator"]
    refs = [e["valueFrom"]["secretKeyRef"] for e in pod["spec"]["containers"][0]["env"] if "valueFrom" in e]
    assert refs == [
        {"name": "adapters-rw", "key": "AWS_ACCESS_KEY_ID"},
        {"name": "adapters-rw", "key": "AWS_SECRET_ACCESS_KEY"},
        {"name": "hub-rw", "key": "token"},
    ]

    # the sentinel: in no object of the namespace (the Secret aside), no event, no pod's log, no operator log
    texts = [cp.kubectl("get", kind, "-n", ns, "-o", "json").stdout for kind in ("lorarljobs", "rayjobs", "jobs", "pods", "configmaps", "events")]
    texts += [cp.kubectl("logs", "-n", ns, p["metadata"]["name"], "--all-containers", check=False).stdout for p in seedrun.pods(cp, ns)]
    texts += [
        cp.kubectl("logs", "-n", seedrun.OPERATOR_NAMESPACE, p["metadata"]["name"], check=False).stdout for p in seedrun.pods(cp, seedrun.OPERATOR_NAMESPACE)
    ]
    texts.append((cp.workdir / "logs" / "hubstub.log").read_text())  # the stand-in's access log
    assert not [t[:200] for t in texts if SENTINEL_KEY_ID in t or SENTINEL_SECRET in t or SENTINEL_HF_TOKEN in t]
