"""The exporter on saves laid out as miles writes them: what it exports, what it refuses, and
the pull that verifies every digest. The oracles are independent of the exporter: the real
safetensors library reads the converted file, hashlib the digests, the files written by
saves.py (torch.save's layout) the expected tensors."""

from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
import os
import pathlib
import zipfile

import pytest
import safetensors
from lorarl.adapter import export, package, pull, stores
from lorarl.api import types as api
from lorarl.job import export_plan

from tests.adapter import saves

NOW = datetime.datetime(2026, 12, 2, 3, 0, tzinfo=datetime.UTC)


def job(**spec):
    return api.LoraRLJob.model_validate(saves.tiny_job_doc(**spec))


def claim_job():
    return job(export={"destinations": [{"claim": {"claimName": "served", "path": "team/"}}]})


@pytest.fixture
def save_root(tmp_path):
    root = tmp_path / "checkpoints"
    root.mkdir()
    return root


def run(j, save_root, tmp_path, status=None):
    return export.run(export_plan.export_plan(j), status or saves.STATUS, str(save_root), NOW, claim_root=str(tmp_path / "mnt"))


def exported_dir(tmp_path, j, rollout) -> pathlib.Path:
    return tmp_path / "mnt" / "0" / "team" / package.relative_dir(export_plan.export_plan(j), rollout)


def test_the_newest_complete_save_is_exported_as_peft_safetensors_with_a_manifest_of_digests(save_root, tmp_path):
    saves.write_save(str(save_root), 49)
    saves.write_save(str(save_root), 99)
    j = claim_job()
    report = run(j, save_root, tmp_path)
    assert report["ok"], report
    out = exported_dir(tmp_path, j, 99)
    assert sorted(os.listdir(out)) == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]

    # the real safetensors library reads our file: the same names, shapes, dtype and bytes as the torch.save'd tensors
    loaded = dict(safetensors.deserialize((out / "adapter_model.safetensors").read_bytes()))
    want = saves.peft_tensors()
    assert set(loaded) == set(want)
    for name, shape in want.items():
        assert loaded[name]["dtype"] == "BF16" and tuple(loaded[name]["shape"]) == shape
        assert bytes(loaded[name]["data"]) == saves.tensor_bytes(name, shape[0] * shape[1])

    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "lorarl-test/tiny-base" and config["revision"] == "v1" and config["r"] == 8

    raw = (out / "lorarl-adapter.json").read_bytes()
    manifest = json.loads(raw)
    for f in manifest["files"]:
        data = (out / f["name"]).read_bytes()
        assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert report["adapter"]["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert manifest["rollout"] == 99 and manifest["lora"] == {"rank": 8, "alpha": 16, "dropout": 0.0, "targetModules": ["all-linear"]}
    assert manifest["metrics"] == {"rawReward": 0.7, "eval": [{"name": "aime", "score": 0.3, "rollout": 79}]}
    assert report["adapter"]["uri"] == "pvc://served/team/ml/tiny-lora/rollout-0000099/"
    assert report["adapter"]["size"] == sum(f.stat().st_size for f in out.iterdir())
    assert api.AdapterStatus.model_validate(report["adapter"]).rollout == 99  # the report is a valid status.adapter


def test_a_save_of_a_later_attempt_wins(save_root, tmp_path):
    saves.write_save(str(save_root), 49)
    (save_root / "lorarl-attempts").mkdir()
    (save_root / "lorarl-attempts" / "002.json").write_text(json.dumps({"saveDir": str(save_root / "attempt-002"), "offset": 50}))
    saves.write_save(str(save_root / "attempt-002"), 49)  # rollout 99 counted across attempts
    j = claim_job()
    report = run(j, save_root, tmp_path)
    assert report["ok"] and report["adapter"]["rollout"] == 99, report


def _refusal(j, save_root, tmp_path):
    report = run(j, save_root, tmp_path)
    assert not report["ok"], report
    assert not (tmp_path / "mnt").exists(), "a refused export wrote to its destination"
    return report["reason"], report["message"]


def test_an_incomplete_newest_save_is_refused_not_replaced_by_an_older_one(save_root, tmp_path):
    saves.write_save(str(save_root), 49)
    saves.write_save(str(save_root), 99, states=False)  # the ranks' training states not yet written
    reason, message = _refusal(claim_job(), save_root, tmp_path)
    assert reason == "SaveIncomplete" and "rollout 99" in message


def test_an_export_at_a_save_takes_that_rollout_while_a_newer_one_is_being_written(save_root, tmp_path):
    saves.write_save(str(save_root), 49)
    saves.write_save(str(save_root), 99, states=False)  # being written as the run goes on
    at = export_plan.export_plan(claim_job())
    report = export.run({**at, "rollout": 49}, saves.STATUS, str(save_root), NOW, claim_root=str(tmp_path / "mnt"))
    assert report["ok"] and report["adapter"]["rollout"] == 49 and report["adapter"]["uri"].endswith("/rollout-0000049/"), report
    refused = export.run({**at, "rollout": 99}, saves.STATUS, str(save_root), NOW, claim_root=str(tmp_path / "mnt2"))
    assert refused["reason"] == "SaveIncomplete" and "rollout 99" in refused["message"]
    missing = export.run({**at, "rollout": 60}, saves.STATUS, str(save_root), NOW, claim_root=str(tmp_path / "mnt3"))
    assert missing["reason"] == "NoCompleteSave" and "rollout 60" in missing["message"]


def test_a_save_proven_only_by_a_newer_one_is_not_exported_at_its_rollout(save_root, tmp_path):
    """At the end any save older than the newest counts as complete (reporter.checkpoints' rule);
    an export of one rollout needs its own files whole: a newer save proves nothing of a torn one."""
    saves.write_save(str(save_root), 49, states=False)
    saves.write_save(str(save_root), 99)
    report = export.run({**export_plan.export_plan(claim_job()), "rollout": 49}, saves.STATUS, str(save_root), NOW, claim_root=str(tmp_path / "mnt"))
    assert report["reason"] == "SaveIncomplete" and "rollout 49" in report["message"]


def test_a_torn_shard_is_refused(save_root, tmp_path):
    adapter = pathlib.Path(saves.write_save(str(save_root), 99))
    shard = adapter / "training_state_rank1.pt"
    shard.write_bytes(shard.read_bytes()[:-30])  # the zip's end record is written last
    assert _refusal(claim_job(), save_root, tmp_path)[0] == "SaveIncomplete"


def test_no_save_is_refused(save_root, tmp_path):
    assert _refusal(claim_job(), save_root, tmp_path)[0] == "NoCompleteSave"


def test_a_save_without_the_peft_export_is_refused(save_root, tmp_path):
    saves.write_save(str(save_root), 99, hf=False)
    assert _refusal(claim_job(), save_root, tmp_path)[0] == "NoPeftExport"


@pytest.mark.parametrize(
    ("config", "field"),
    [({"r": 16}, "spec.lora.rank"), ({"lora_alpha": 32}, "spec.lora.alpha"), ({"target_modules": ["q_proj", "v_proj"]}, "spec.lora.targetModules")],
)
def test_a_config_other_than_the_spec_is_refused_naming_the_field(save_root, tmp_path, config, field):
    saves.write_save(str(save_root), 99, config=config)
    reason, message = _refusal(claim_job(), save_root, tmp_path)
    assert reason == "ConfigMismatch" and field in message


def test_tensors_that_do_not_fit_the_base_model_are_refused(save_root, tmp_path):
    tensors = saves.peft_tensors()
    tensors["base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"] = (8, 95)  # ffn is 96
    saves.write_save(str(save_root), 99, tensors=tensors)
    reason, message = _refusal(claim_job(), save_root, tmp_path)
    assert reason == "TensorMismatch" and "[8, 96]" in message


def test_a_missing_layer_is_refused(save_root, tmp_path):
    saves.write_save(str(save_root), 99, tensors=saves.peft_tensors(layers=1))
    reason, message = _refusal(claim_job(), save_root, tmp_path)
    assert reason == "TensorMismatch" and "layer 1" in message


def test_a_pickle_naming_any_other_global_is_refused_unrun(save_root, tmp_path):
    adapter = pathlib.Path(saves.write_save(str(save_root), 99))
    marker = tmp_path / "ran"
    saves.torch_save(str(adapter / "adapter_model.bin"), saves.peft_tensors(), extra_globals={"x": _Evil(str(marker))})
    reason, message = _refusal(claim_job(), save_root, tmp_path)
    assert reason == "UnreadableAdapter" and "system, which a state dict of tensors never needs" in message
    assert not marker.exists()


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_non_contiguous_tensor_is_refused(save_root, tmp_path):
    adapter = pathlib.Path(saves.write_save(str(save_root), 99))
    saves.torch_save(str(adapter / "adapter_model.bin"), {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": (8, 64)}, stride=(1, 8))
    assert _refusal(claim_job(), save_root, tmp_path)[0] == "UnreadableAdapter"


def test_an_oci_destination_in_an_image_without_oras_is_refused_naming_it(save_root, tmp_path):
    """This venv has no oras (the operator image's /opt/exporter has): a clear refusal, nothing pushed."""
    if importlib.util.find_spec("oras") is not None:
        pytest.skip("oras is importable here")
    saves.write_save(str(save_root), 99)
    j = job(export={"destinations": [{"oci": {"repository": "registry.local:5000/adapters/tiny"}}]})
    reason, message = _refusal(j, save_root, tmp_path)
    assert reason == "DestinationFailed" and message.startswith("spec.export.destinations[0].oci: oci:// needs oras"), message


# ------------------------------------------------------------------------------------- pull


@pytest.fixture
def exported(save_root, tmp_path):
    saves.write_save(str(save_root), 99)
    j = claim_job()
    report = run(j, save_root, tmp_path)
    assert report["ok"], report
    return exported_dir(tmp_path, j, 99), report["adapter"]["digest"]


def test_pull_verifies_every_file_and_the_manifest_digest(exported, tmp_path):
    source, digest = exported
    target = tmp_path / "pulled"
    manifest = pull.pull(stores.DirStore(str(source)), str(target), digest)
    assert manifest["rollout"] == 99
    assert {f.name: f.read_bytes() for f in target.iterdir()} == {f.name: f.read_bytes() for f in source.iterdir()}


def test_pull_refuses_a_changed_file_and_keeps_nothing(exported, tmp_path):
    source, digest = exported
    weights = source / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    target = tmp_path / "pulled"
    with pytest.raises(pull.VerifyError, match="adapter_model.safetensors"):
        pull.pull(stores.DirStore(str(source)), str(target), digest)
    assert not target.exists() and not (tmp_path / "pulled.partial").exists()


def test_pull_refuses_a_manifest_other_than_the_status_digest(exported, tmp_path):
    source, _ = exported
    with pytest.raises(pull.VerifyError, match="expected sha256:0"):
        pull.pull(stores.DirStore(str(source)), str(tmp_path / "pulled"), "sha256:" + "0" * 64)


def test_the_reader_refuses_a_file_that_is_no_zip(tmp_path):
    bad = tmp_path / "adapter_model.bin"
    bad.write_bytes(b"\x80\x02}q\x00.")  # torch's legacy (pre-1.6) format is a bare pickle: not read
    from lorarl.adapter import torchfile

    with pytest.raises(torchfile.UnreadableError, match="zip"):
        torchfile.read_state_dict(str(bad))
    assert zipfile.is_zipfile(bad) is False


def test_the_exporter_needs_only_the_standard_library():
    """The export pod runs in the job image, which has neither pydantic nor kubernetes: the
    exporter's modules import nothing outside the standard library (botocore only when s3 is used)."""
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "import lorarl.adapter.export, lorarl.adapter.pull\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'kubernetes', 'kopf', 'yaml', 'botocore', 'click'))\n"
        "print(json.dumps(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_target_modules_in_megatron_names_plan_the_hf_names_miles_exports():
    j = job(lora={"rank": 8, "alpha": 16, "targetModules": ["linear_qkv", "linear_fc2"]}, export={"destinations": [{"claim": {"claimName": "c"}}]})
    assert export_plan.export_plan(j)["model"]["hfTargetModules"] == ["q_proj", "k_proj", "v_proj", "down_proj"]
