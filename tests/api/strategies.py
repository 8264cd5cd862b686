"""Helpers moved out of tests/api/test_fuzz.py (test modules hold tests only)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st
from lorarl.api import types as api

FUZZ_EXAMPLES = int(os.environ.get("LORARL_FUZZ_EXAMPLES", "500"))


identifier = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z")


repo_id = st.builds(lambda a, b: f"{a}/{b}", identifier, identifier)


profiles = st.sampled_from([p.value for p in api.AcceleratorProfile])


qwen_sizes = st.sampled_from(["0.6B", "1.7B", "4B", "8B", "14B", "32B"])


dns_label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\Z")


dns_subdomain = st.builds(lambda parts: ".".join(parts), st.lists(dns_label, min_size=1, max_size=3))


label_value = st.from_regex(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?\Z")


label_key = st.builds(
    lambda prefix, name: f"{prefix}/{name}" if prefix else name,
    st.one_of(st.none(), dns_subdomain),
    st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z"),
)


# Kubernetes quantity forms (apimachinery resource.ParseQuantity): integers, decimals ("1.", ".5"),
# a leading "+", binary and decimal SI suffixes, exponents ("1e3", "5E2"); positive values.
quantity = st.one_of(
    st.from_regex(r"\A\+?[1-9][0-9]{0,3}(\.[0-9]{0,2})?(m|k|Ki|Mi|Gi|Ti|M|G|T)?\Z"),
    st.from_regex(r"\A\+?\.[1-9]{1,2}(Gi|G)?\Z"),
    st.from_regex(r"\A[1-9][0-9]?[eE][0-9]\Z"),
)


tolerations = st.lists(
    st.one_of(
        st.builds(
            lambda k, e: {"key": k, "operator": "Exists", **({"effect": e} if e else {})}, label_key, st.sampled_from([None, "NoSchedule", "PreferNoSchedule"])
        ),
        st.builds(lambda k, v: {"key": k, "operator": "Equal", "value": v, "effect": "NoSchedule"}, label_key, label_value),
        st.builds(lambda k, s: {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}, label_key, st.integers(0, 86400)),
        st.just({"operator": "Exists"}),
    ),
    max_size=3,
)


match_expression = st.builds(
    lambda k, op, vs: {"key": k, "operator": op, **({"values": vs} if op in ("In", "NotIn") else {})},
    label_key,
    st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    st.lists(label_value, min_size=1, max_size=3),
)


affinity = st.one_of(
    st.builds(
        lambda exprs: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}},
        st.lists(match_expression, min_size=1, max_size=3),
    ),
    st.builds(
        lambda w, exprs: {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": w, "preference": {"matchExpressions": exprs}}]}},
        st.integers(1, 100),
        st.lists(match_expression, max_size=2),
    ),
    st.builds(
        lambda key, labels: {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": key, "labelSelector": {"matchLabels": labels}}]}
        },
        label_key,
        st.dictionaries(label_key, label_value, max_size=2),
    ),
)


data_prep = st.fixed_dictionaries(
    {},
    optional={
        "hfTokenSecretRef": st.builds(lambda n: {"name": n, "key": "token"}, dns_label),
        "endpoint": st.sampled_from(["https://hf-mirror.com", "http://10.0.0.1:8080/hf"]),
        "image": st.sampled_from(["python:3.12-slim", "registry.example.com/team/hf-dl:1.0", "busybox@sha256:0123abcd"]),
        "skip": st.booleans(),
    },
)


def pass_through(accelerator):
    amd = accelerator.startswith("MI")
    return st.fixed_dictionaries(
        {},
        optional={
            "nodeSelector": st.dictionaries(label_key, label_value, max_size=3),
            "tolerations": tolerations,
            "affinity": affinity,
            "resourceName": st.sampled_from(["amd.com/gpu", "amd.com/cpx_nps4"] if amd else ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]),
            "cpu": quantity,
            "memory": quantity,
            "shmSize": quantity,
            "profileNodeSelector": st.booleans(),
        },
    )


@st.composite
def valid_specs(draw):
    accelerator = draw(profiles)
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.sampled_from([None, 1, 2, 4, 8]))
    gpus = nodes * (gpn or 8)
    samples = draw(st.sampled_from([2, 4, 8, 16]))
    m, j = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    gbs = gpus * m * samples
    batch = gpus * m * j
    engine = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (gpn or 8) % e == 0]))
    spec = {
        "model": {"name": f"Qwen/Qwen3-{draw(qwen_sizes)}"},
        "hardware": {"accelerator": accelerator, "nodes": nodes},
        "lora": {
            "rank": draw(st.integers(1, 256)),
            "alpha": draw(st.integers(1, 512)),
            "dropout": draw(st.floats(0, 0.9)),
            "targetModules": draw(st.lists(identifier, min_size=1, max_size=4)),
            "baseCpuBackup": draw(st.booleans()),
        },
        "rollout": {
            "promptData": {"repo": draw(repo_id)},
            "inputKey": draw(identifier),
            "numRollouts": draw(st.integers(1, 5000)),
            "batchSize": batch,
            "samplesPerPrompt": samples,
            "globalBatchSize": gbs,
            "temperature": draw(st.floats(0, 2)),
            "shuffle": draw(st.booleans()),
        },
        "eval": draw(
            st.one_of(
                st.just({"enabled": False}),
                st.builds(
                    lambda names, repo, interval: {
                        "interval": interval,
                        "datasets": [{"name": n, "repo": repo} for n in names],
                        "topP": 0.95,
                    },
                    st.lists(identifier, min_size=1, max_size=3, unique=True),
                    repo_id,
                    st.integers(1, 5),
                ),
            )
        ),
        "optimizer": {"lr": draw(st.floats(1e-7, 1e-2)), "lrDecayStyle": draw(st.sampled_from(["constant", "cosine"]))},
        "algorithm": {"epsClip": 0.2, "epsClipHigh": draw(st.floats(0.2, 1.0))},
        "sglang": {"gpusPerEngine": engine, "memFractionStatic": draw(st.floats(0.05, 0.95))},
        "checkpoint": {"saveInterval": draw(st.integers(1, 100)), "resume": draw(st.booleans())},
        "runPolicy": {
            "backoffLimit": draw(st.integers(0, 5)),
            # the field, or its deprecated old name
            draw(st.sampled_from(["holdGpusAfterFinishSeconds", "ttlSecondsAfterFinished"])): draw(st.integers(0, 86400)),
        },
        "suspend": draw(st.booleans()),
    }
    if gpn:
        spec["hardware"]["gpusPerNode"] = gpn
    spec["hardware"].update(draw(pass_through(accelerator)))
    if "interval" in spec["eval"]:
        spec["eval"]["interval"] = min(spec["eval"]["interval"], spec["rollout"]["numRollouts"])
    if draw(st.booleans()):
        spec["checkpoint"]["storage"] = {"existingClaim": draw(dns_subdomain)}
    elif nodes > 1:
        spec["checkpoint"]["storage"] = {"accessModes": ["ReadWriteMany"]}
    if draw(st.booleans()):
        spec["dataPrep"] = draw(data_prep)
    if draw(st.booleans()):
        spec["tracking"] = {"wandb": {"project": draw(identifier), "apiKeySecretRef": {"name": "wandb", "key": "k"}}}
    if draw(st.booleans()):
        spec["scheduling"] = {"queueName": "q"}
    spec["extraArgs"] = draw(
        st.lists(st.from_regex(r"\A--[a-z][a-z0-9-]{0,20}\Z"), max_size=3).filter(
            lambda xs: not set(xs) & {"--wandb-key", "--hf-token", "--tensor-model-parallel-size"}
        )
    )
    name = draw(st.from_regex(r"\A[a-z][a-z0-9-]{0,45}[a-z0-9]\Z"))
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name, "namespace": "ns", "uid": "u-1"}, "spec": spec}


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def expected_words(spec: dict) -> dict[str, str]:
    """Flag -> value, read from the spec document itself (not from lorarl.job.command)."""
    out = {
        "--input-key": spec["rollout"]["inputKey"],
        "--num-rollout": str(spec["rollout"]["numRollouts"]),
        "--rollout-batch-size": str(spec["rollout"]["batchSize"]),
        "--n-samples-per-prompt": str(spec["rollout"]["samplesPerPrompt"]),
        "--global-batch-size": str(spec["rollout"]["globalBatchSize"]),
        "--lora-rank": str(spec["lora"]["rank"]),
        "--lora-alpha": str(spec["lora"]["alpha"]),
        "--target-modules": ",".join(spec["lora"]["targetModules"]),
        "--save-interval": str(spec["checkpoint"]["saveInterval"]),
        "--actor-num-nodes": str(spec["hardware"]["nodes"]),
        "--rollout-num-gpus-per-engine": str(spec["sglang"]["gpusPerEngine"]),
        "--lr-decay-style": spec["optimizer"]["lrDecayStyle"],
    }
    if "interval" in spec["eval"]:
        out["--eval-interval"] = str(spec["eval"]["interval"])
    if "gpusPerNode" in spec["hardware"]:
        out["--actor-num-gpus-per-node"] = str(spec["hardware"]["gpusPerNode"])
    if "tracking" in spec:
        out["--wandb-project"] = spec["tracking"]["wandb"]["project"]
    return out


def trainer_and_reporter_read(received: list[str]) -> tuple[Any, list[str]]:
    """What the head's `python3` got (``received``), read by the real parsers that read it: the
    in-job reporter's options (lorarl.reporter.cli), then train.py's argv by miles' parser (its
    dump, hack/images/job/miles/miles_standin/options.py). Returns train.py's namespace and argv;
    a word that parses as an option fails here with argparse's message, as it would in the pod."""
    import contextlib
    import io

    from lorarl.reporter.cli import build_parser, split_argv

    from tests.standins.standin_lib import miles_options

    options = miles_options()

    reporter_options, train = split_argv(received[1:])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(reporter_options)
            namespace = _MILES_PARSER.setdefault("parser", options.build_parser()).parse_args(train[2:])
    except SystemExit as exit_:
        raise AssertionError(f"the pod's parsers refuse the command ({exit_.code}): {err.getvalue().strip().splitlines()[-1:]}") from None
    return namespace, train


_MILES_PARSER: dict[str, Any] = {}  # built once: 2,208 options
