"""Helpers moved out of tests/api/test_validation.py (test modules hold tests only)."""

from __future__ import annotations

CASES = [
    # (spec overrides, field, words in the message)
    ({"rollout": {"batchSize": 8, "samplesPerPrompt": 8, "globalBatchSize": 48}}, "spec.rollout.globalBatchSize", "multiple of rollout.globalBatchSize"),
    ({"rollout": {"samplesPerPrompt": 1, "batchSize": 64, "globalBatchSize": 64}}, "spec.rollout.samplesPerPrompt", "at least 2"),
    ({"hardware": {"accelerator": "MI355X", "gpusPerNode": 6}, "sglang": {"gpusPerEngine": 4}}, "spec.sglang.gpusPerEngine", "must divide"),
    ({"checkpoint": {"storage": {"existingClaim": "data", "size": "1Ti"}}}, "spec.checkpoint.storage", "cannot be combined"),
    (
        {"hardware": {"accelerator": "MI355X", "nodes": 2}, "checkpoint": {"storage": {"accessModes": ["ReadWriteOnce"]}}},
        "spec.checkpoint.storage.accessModes",
        "ReadWriteMany",
    ),
    ({"model": {"name": "meta-llama/Llama-3.1-8B"}}, "spec.model", "architecture is required"),
    ({"model": {"name": "Qwen/Qwen3-4B", "architecture": {"preset": "qwen3-4B", "numLayers": 3}}}, "spec.model.architecture", "not both"),
    ({"model": {"name": "acme/x", "architecture": {"numLayers": 3}}}, "spec.model.architecture", "needs numLayers"),
    ({"eval": {"datasets": []}}, "spec.eval.datasets", "must not be empty"),
    ({"eval": {"interval": 500}}, "spec.eval.interval", "larger than rollout.numRollouts"),
    ({"algorithm": {"epsClip": 0.3, "epsClipHigh": 0.2}}, "spec.algorithm.epsClipHigh", ">= algorithm.epsClip"),
    ({"hardware": {"accelerator": "H200", "resourceName": "amd.com/gpu"}}, "spec.hardware.resourceName", "amd.com/"),
    ({"extraArgs": ["--wandb-key", "abc"]}, "spec.extraArgs[0]", "secret on the command line"),
    ({"extraArgs": ["--max-tokens-per-gpu", "9000", "--wandb-api-key", "abc"]}, "spec.extraArgs[2]", "secret on the command line"),
    ({"extraArgs": ["--lora-rank", "8"]}, "spec.extraArgs[0]", "--lora-rank is set by spec.lora.rank"),
    ({"extraArgs": ["--rollout-batch-size=4"]}, "spec.extraArgs[0]", "--rollout-batch-size is set by spec.rollout.batchSize"),
    ({"extraArgs": ["--swiglu"]}, "spec.extraArgs[0]", "--swiglu is set by spec.model"),
    ({"extraArgs": ["--colocate"]}, "spec.extraArgs[0]", "--colocate is set by the recipe"),
    ({"model": {"name": "Qwen/Qwen3-4B", "revision": "--help"}}, "spec.model.revision", "read as a command-line option"),
    ({"rollout": {"promptData": {"repo": "a/b", "revision": "-x"}}}, "spec.rollout.promptData.revision", "read as a command-line option"),
    ({"eval": {"datasets": [{"name": "e", "repo": "a/b", "revision": "--local-dir=/"}]}}, "spec.eval.datasets[0].revision", "read as a command-line option"),
    ({"hardware": {"accelerator": "MI355X", "gpusPerNode": 3}, "sglang": {"gpusPerEngine": 1}}, "spec.rollout.globalBatchSize", "data-parallel size"),
    ({"extraArgs": ["--tensor-model-parallel-size", "3"]}, "spec.hardware", "model-parallel groups"),
    ({"lora": {"rank": 0}}, "spec.lora.rank", "greater than or equal to 1"),
    ({"hardware": {"accelerator": "MI999X"}}, "spec.hardware.accelerator", "MI355X"),
    ({"lora": {"rnak": 8}}, "spec.lora.rnak", "unknown field"),
    ({"rollout": {"inputKey": "a b"}}, "spec.rollout.inputKey", "should match pattern"),
    (
        {"runPolicy": {"holdGpusAfterFinishSeconds": 60, "ttlSecondsAfterFinished": 600}},
        "spec.runPolicy.ttlSecondsAfterFinished",
        "deprecated name of runPolicy.holdGpusAfterFinishSeconds",
    ),
]
