"""Renderer: golden snapshots of every example, determinism, and the contents that matter."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import pathlib
import zipfile

import pytest
import yaml
from lorarl.job import artifact, paths, render
from lorarl.job.settings import DEFAULT_TOOLS_IMAGE, RenderSettings

from tests.helpers import MANIFESTS, job_from, load, seed_doc, with_spec

SNAPSHOTS = pathlib.Path(__file__).with_name("snapshots")
EXAMPLES = sorted(p.name for p in MANIFESTS.glob("*.yaml"))
UPDATE = os.environ.get("LORARL_UPDATE_SNAPSHOTS") == "1"


def by_kind(objects):
    return {o["kind"]: o for o in objects}


def snapshot_form(objects):
    """The rendered objects with the ConfigMap's script bodies replaced by their digests (the
    scripts are tested on their own; snapshots stay readable)."""
    objects = copy.deepcopy(objects)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            obj["data"] = {k: "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:16] for k, v in obj["data"].items()}
            assert "binaryData" not in obj, "no ConfigMap carries the reporter (it comes from the tools image)"
    return objects


@pytest.mark.parametrize("example", EXAMPLES)
def test_snapshot(example):
    rendered = render.to_yaml(snapshot_form(render.render(job_from(load(MANIFESTS / example)))))
    snapshot = SNAPSHOTS / example
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        snapshot.write_text(rendered)
    assert snapshot.exists(), f"missing snapshot {snapshot}; run with LORARL_UPDATE_SNAPSHOTS=1"
    assert rendered == snapshot.read_text(), f"{example} renders differently from {snapshot} (LORARL_UPDATE_SNAPSHOTS=1 to accept)"


def test_every_example_has_a_snapshot_and_no_stale_ones():
    assert sorted(p.name for p in SNAPSHOTS.glob("*.yaml")) == EXAMPLES


def test_byte_identical_on_repeat():
    doc = seed_doc()
    assert render.to_yaml(render.render(job_from(doc))) == render.to_yaml(render.render(job_from(doc)))


def test_seed_rayjob_essentials():
    objs = by_kind(render.render(job_from(seed_doc())))
    rj = objs["RayJob"]
    spec = rj["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]
    pod = head["template"]["spec"]
    ray = pod["containers"][0]
    assert rj["apiVersion"] == "ray.io/v1" and rj["metadata"]["name"] == "qwen3-4b-lora-amd"
    assert ray["resources"]["limits"]["amd.com/gpu"] == "8" and ray["resources"]["requests"]["amd.com/gpu"] == "8"
    assert head["rayStartParams"]["num-gpus"] == "8"
    env = {e["name"]: e.get("value") for e in ray["env"]}
    assert env["RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
    assert "ROCR_VISIBLE_DEVICES" not in env
    assert "workerGroupSpecs" not in spec["rayClusterSpec"]  # one node: the head trains
    init = next(c for c in pod["initContainers"] if c["name"] == render.PREPARE_CONTAINER)
    assert init["args"][1::4] == ["Qwen/Qwen3-4B", "zhuzilin/dapo-math-17k", "zhuzilin/aime-2024"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["suspend"] is False
    assert "--wandb-key" not in spec["entrypoint"]
    shm = [v for v in pod["volumes"] if v["name"] == render.SHM_VOLUME][0]
    assert shm["emptyDir"]["medium"] == "Memory"
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
    assert runtime_env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and runtime_env["PYTHONPATH"].startswith("/root/miles:/root/Megatron-LM")
    assert objs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_two_node_mi300x():
    objs = by_kind(render.render(job_from(load(MANIFESTS / "mi300x-2node.yaml"))))
    cluster = objs["RayJob"]["spec"]["rayClusterSpec"]
    workers = cluster["workerGroupSpecs"]
    assert len(workers) == 1 and workers[0]["replicas"] == workers[0]["minReplicas"] == workers[0]["maxReplicas"] == 1
    wpod = workers[0]["template"]["spec"]
    assert "initContainers" not in wpod  # the head downloads onto the shared volume
    assert wpod["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "8", "memory": "1500Gi"}
    assert wpod["nodeSelector"] == {"amd.com/gpu.device-id": "74a1"}
    assert wpod["containers"][0]["image"] == "rlsys/miles:MI300-latest"
    assert "--actor-num-nodes 2" in objs["RayJob"]["spec"]["entrypoint"]
    env = wpod["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}} in env
    assert objs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_h200_has_no_rocm_and_default_backends():
    objs = by_kind(render.render(job_from(load(MANIFESTS / "h200.yaml"))))
    rj = objs["RayJob"]
    ray = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert ray["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert ray["image"] == "radixark/miles:latest"
    names = {e["name"] for e in ray["env"]}
    assert not names & {"RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES", "HSA_NO_SCRATCH_RECLAIM", "MILES_HARDWARE_PLATFORM"}
    assert "--sglang-attention-backend" not in rj["spec"]["entrypoint"]
    assert "PersistentVolumeClaim" not in objs  # existing claim
    vol = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"][0]
    assert vol == {"name": "data", "persistentVolumeClaim": {"claimName": "rl-shared"}}
    init_env = next(c for c in rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["initContainers"] if c["name"] == render.PREPARE_CONTAINER)[
        "env"
    ]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in init_env


def test_kueue_suspends_and_labels():
    rj = by_kind(render.render(job_from(load(MANIFESTS / "kueue.yaml"))))["RayJob"]
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "rl-team"
    assert rj["spec"]["suspend"] is True and rj["spec"]["shutdownAfterJobFinishes"] is True
    assert rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["priorityClassName"] == "rl-batch"


def test_partitioned_resource_sets_num_gpus_explicitly():
    doc = with_spec(hardware={"accelerator": "MI300X", "gpusPerNode": 8, "resourceName": "amd.com/cpx_nps4"})
    head = by_kind(render.render(job_from(doc)))["RayJob"]["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/cpx_nps4": "8"}
    assert head["rayStartParams"]["num-gpus"] == "8"


def test_owner_references_and_no_gitops_labels_copied():
    doc = seed_doc()
    doc["metadata"].update(
        uid="1234-uid",
        namespace="team-a",
        labels={"app.kubernetes.io/instance": "argo-app"},
        annotations={"argocd.argoproj.io/tracking-id": "app:lorarl.dev/LoraRLJob:team-a/x"},
    )
    for obj in render.render(job_from(doc)):
        meta = obj["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "lorarl.dev/v1alpha1",
                "kind": "LoraRLJob",
                "name": "qwen3-4b-lora-amd",
                "uid": "1234-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert "app.kubernetes.io/instance" not in meta["labels"]
        assert "annotations" not in meta


def test_reporter_role_allows_only_this_job():
    role = by_kind(render.render(job_from(seed_doc())))["Role"]
    for rule in role["rules"]:
        assert rule["resourceNames"] == ["qwen3-4b-lora-amd"]
        assert set(rule["verbs"]) <= {"get", "patch"}


def test_no_secret_values_anywhere():
    doc = with_spec(
        tracking={"wandb": {"apiKeySecretRef": {"name": "wandb", "key": "api-key"}}},
        dataPrep={"hfTokenSecretRef": {"name": "hf", "key": "token"}},
    )
    text = render.to_yaml(render.render(job_from(doc)))
    assert "secretKeyRef" in text
    assert "kind: Secret\n" not in text
    assert "--wandb-key" not in text and "--hf-token" not in text


@pytest.mark.parametrize("example", EXAMPLES)
def test_configmap_carries_the_prepare_script_and_no_reporter(example):
    """Issue 19, finding 10: the reporter is not resent with every job's ConfigMap."""
    cm = by_kind(render.render(job_from(load(MANIFESTS / example))))["ConfigMap"]
    assets = pathlib.Path(render.__file__).with_name("assets")
    assert cm["data"] == {name: (assets / name).read_text() for name in ("prepare.sh", "fetch.py")}
    assert "binaryData" not in cm
    assert len(json.dumps(cm).encode()) < 16_000  # was 117,847 bytes with the zipapp in it


def test_the_zipapp_holds_every_reporter_module():
    with zipfile.ZipFile(io.BytesIO(artifact.reporter_zipapp())) as z:  # every reporter module, and only those
        sources = pathlib.Path(render.__file__).parents[1] / "reporter"
        expected = {f"lorarl_reporter/{p.name}" for p in sources.glob("*.py") if p.name != "__main__.py"}
        assert set(z.namelist()) == expected | {"__main__.py"}
        assert z.read("lorarl_reporter/launcher.py").decode() == (sources / "launcher.py").read_text()


TOOLS = "registry.example/team/lorarl-operator@sha256:" + "ab" * 32
TIGHT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def head_and_workers(doc, tools=TOOLS):
    cluster = by_kind(render.render(job_from(doc), RenderSettings(tools_image=tools)))["RayJob"]["spec"]["rayClusterSpec"]
    return cluster["headGroupSpec"]["template"]["spec"], [w["template"]["spec"] for w in cluster.get("workerGroupSpecs", [])]


def test_the_head_gets_the_reporter_from_the_tools_image():
    """An init container from the tools image copies the zipapp into an emptyDir that the Ray
    container mounts read-only (the OpenTelemetry operator's pattern); the sidecar runs from
    the tools image itself; both as the image's non-root user, read-only, small, no GPU."""
    head, _ = head_and_workers(seed_doc())
    install, prepare = head["initContainers"]
    assert (install["name"], prepare["name"]) == (render.REPORTER_INSTALL_CONTAINER, render.PREPARE_CONTAINER)
    assert install["image"] == TOOLS and install["command"] == ["cp", paths.TOOLS_REPORTER_PATH, paths.REPORTER_PATH]
    assert install["volumeMounts"] == [{"name": render.REPORTER_VOLUME, "mountPath": paths.REPORTER_DIR}]
    volumes = {v["name"]: v for v in head["volumes"]}
    assert volumes[render.REPORTER_VOLUME] == {"name": render.REPORTER_VOLUME, "emptyDir": {"sizeLimit": render.REPORTER_VOLUME_SIZE}}
    ray, sidecar = head["containers"]
    assert {"name": render.REPORTER_VOLUME, "mountPath": paths.REPORTER_DIR, "readOnly": True} in ray["volumeMounts"]
    assert sidecar["image"] == TOOLS and sidecar["command"] == ["/opt/venv/bin/python3", "-m", "lorarl.reporter", "sidecar"]
    assert render.REPORTER_VOLUME not in {m["name"] for m in sidecar["volumeMounts"]}
    for c in (install, sidecar):
        assert c["securityContext"] == TIGHT, c["name"]
        assert c["imagePullPolicy"] == "IfNotPresent"
        assert set(c["resources"]["limits"]) == {"memory"} and set(c["resources"]["requests"]) == {"cpu", "memory"}
    # the prepare container alone mounts the ConfigMap (prepare.sh, fetch.py)
    assert volumes[render.PREPARE_VOLUME]["configMap"]["name"] == f"{seed_doc()['metadata']['name']}-lorarl"
    assert prepare["command"] == ["sh", f"{paths.PREPARE_DIR}/prepare.sh"]
    assert [m for m in prepare["volumeMounts"] if m["name"] == render.PREPARE_VOLUME] == [
        {"name": render.PREPARE_VOLUME, "mountPath": paths.PREPARE_DIR, "readOnly": True}
    ]
    assert all(render.PREPARE_VOLUME not in {m["name"] for m in c["volumeMounts"]} for c in (install, ray, sidecar))


def test_reporter_volume_on_the_head_only_and_without_prepare_or_sidecar():
    head, workers = head_and_workers(load(MANIFESTS / "mi300x-2node.yaml"))
    assert render.REPORTER_INSTALL_CONTAINER in [c["name"] for c in head["initContainers"]]
    for worker in workers:  # KubeRay runs the entrypoint (the reporter) on the head only
        assert "initContainers" not in worker
        assert {v["name"] for v in worker["volumes"]} == {render.DATA_VOLUME, render.SHM_VOLUME}
    # no download, and a user-named account (no sidecar: the reporter sends itself): still the zipapp
    head, _ = head_and_workers(with_spec(dataPrep={"skip": True}, scheduling={"serviceAccountName": "trainer"}))
    assert [c["name"] for c in head["initContainers"]] == [render.REPORTER_INSTALL_CONTAINER]
    assert [c["name"] for c in head["containers"]] == ["ray-head"]
    assert render.PREPARE_VOLUME not in {v["name"] for v in head["volumes"]}


def test_the_tools_image_defaults_to_the_charts_image_of_this_version():
    from lorarl import __version__

    head, _ = head_and_workers(seed_doc(), tools=DEFAULT_TOOLS_IMAGE)
    assert head["initContainers"][0]["image"] == f"ghcr.io/lorarl/lorarl-operator:{__version__}" == DEFAULT_TOOLS_IMAGE
    assert render.render(job_from(seed_doc())) == render.render(job_from(seed_doc()), RenderSettings())


def test_the_finished_cluster_and_its_gpus_go_at_once_unless_held_on_purpose():
    """issue 36: KubeRay deletes the RayCluster ttlSecondsAfterFinished after the run's end
    (shutdownAfterJobFinishes): 0 by default; runPolicy.holdGpusAfterFinishSeconds keeps it, and
    the deprecated runPolicy.ttlSecondsAfterFinished still means the same when it is the one given."""

    def kept(run_policy):
        spec = by_kind(render.render(job_from(with_spec(runPolicy=run_policy))))["RayJob"]["spec"]
        assert spec["shutdownAfterJobFinishes"] is True
        return spec["ttlSecondsAfterFinished"]

    assert kept({}) == 0
    assert kept({"holdGpusAfterFinishSeconds": 300}) == 300
    assert kept({"ttlSecondsAfterFinished": 600}) == 600  # an older manifest, or a job stored with the old default
    assert kept({"ttlSecondsAfterFinished": 120, "holdGpusAfterFinishSeconds": 120}) == 120
    assert kept({"ttlSecondsAfterFinished": 0}) == 0
