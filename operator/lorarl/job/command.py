"""The miles train.py command of a LoraRLJob, block by block (pure functions).

Block order and flag order follow the recorded recipe snapshot
(``shared/reference/recipe-qwen3-4b-lora-amd.md``): model, checkpoint, lora, rollout, eval,
optimizer, grpo, wandb, sglang, misc, then the user's extra args.

Why every token must be shell-inert: KubeRay (K8sJobMode) pastes ``spec.entrypoint`` verbatim
into a ``/bin/bash -c`` command line of the submitter; ``ray job submit`` re-joins the parsed
words with ``subprocess.list2cmdline`` (Windows rules: it quotes only words with blanks; Ray
after ray-project/ray#63797 uses ``shlex.join``) and the head runs that string with
``/bin/sh -c`` again. A word made only of ``SHELL_SAFE`` characters is the same after all three
steps; any other word could be split, expanded or executed. So the API restricts every string
that reaches the command to that alphabet, and ``entrypoint`` re-checks each word (defence in
depth) instead of trying to out-quote three parsers. tests/api/quoting_chain.py runs the real
chain (bash, both Ray joiners, dash and bash on the head) to prove it.
"""

from __future__ import annotations

import re

from ..api.problems import Problem
from ..api.types import ACCESS_KEY_SHAPED_VALUE, CREDENTIAL_FLAG, NOT_A_CREDENTIAL_FLAG, SHELL_SAFE, SHELL_SAFE_HELP, LoraRLJob
from .paths import REPORTER_PATH, UnsafeTokenError, dataset_file, model_dir, save_dir
from .profiles import fmt, gpus_per_node, model_shape, profile_of

MILES_ROOT = "/root/miles"
MEGATRON_ROOT = "/root/Megatron-LM"

_SAFE = re.compile(SHELL_SAFE)

Block = tuple[str, list[str]]


def _switch(enabled: bool, name: str) -> list[str]:
    return [name] if enabled else []


def model_block(job: LoraRLJob) -> list[str]:
    m = model_shape(job)
    return [
        "--swiglu",
        "--num-layers",
        str(m.num_layers),
        "--hidden-size",
        str(m.hidden_size),
        "--ffn-hidden-size",
        str(m.ffn_hidden_size),
        "--num-attention-heads",
        str(m.num_attention_heads),
        "--group-query-attention",
        "--num-query-groups",
        str(m.num_query_groups),
        "--use-rotary-position-embeddings",
        "--disable-bias-linear",
        "--normalization",
        "RMSNorm",
        "--norm-epsilon",
        m.norm_epsilon,
        "--rotary-base",
        str(m.rotary_base),
        "--vocab-size",
        str(m.vocab_size),
        "--kv-channels",
        str(m.kv_channels),
        *_switch(m.qk_layernorm, "--qk-layernorm"),
        *_switch(m.untie_embeddings, "--untie-embeddings-and-output-weights"),
    ]


def checkpoint_block(job: LoraRLJob) -> list[str]:
    return [
        "--hf-checkpoint",
        model_dir(job),
        "--megatron-to-hf-mode",
        "bridge",
        "--save",
        save_dir(job),
        "--save-interval",
        str(job.spec.checkpoint.save_interval),
    ]


def lora_block(job: LoraRLJob) -> list[str]:
    lora = job.spec.lora
    return [
        "--lora-rank",
        str(lora.rank),
        "--lora-alpha",
        str(lora.alpha),
        "--lora-dropout",
        fmt(lora.dropout),
        "--target-modules",
        ",".join(lora.target_modules),
        *_switch(lora.base_cpu_backup, "--lora-base-cpu-backup"),
    ]


def rollout_block(job: LoraRLJob) -> list[str]:
    r = job.spec.rollout
    return [
        "--prompt-data",
        dataset_file(r.prompt_data),
        "--input-key",
        r.input_key,
        "--label-key",
        r.label_key,
        *_switch(r.apply_chat_template, "--apply-chat-template"),
        *_switch(r.shuffle, "--rollout-shuffle"),
        *_switch(r.balance_data, "--balance-data"),
        "--rm-type",
        r.reward_type,
        "--num-rollout",
        str(r.num_rollouts),
        "--rollout-batch-size",
        str(r.batch_size),
        "--n-samples-per-prompt",
        str(r.samples_per_prompt),
        "--rollout-max-response-len",
        str(r.max_response_length),
        "--rollout-temperature",
        fmt(r.temperature),
        "--global-batch-size",
        str(r.global_batch_size),
    ]


def eval_block(job: LoraRLJob) -> list[str]:
    e = job.spec.eval
    if not e.enabled:
        return []
    data: list[str] = []
    for ds in e.datasets:
        data += [ds.name, dataset_file(ds)]
    return [
        "--eval-interval",
        str(e.interval),
        "--eval-prompt-data",
        *data,
        "--n-samples-per-eval-prompt",
        str(e.samples_per_prompt),
        "--eval-max-response-len",
        str(e.max_response_length),
        "--eval-top-p",
        fmt(e.top_p),
    ]


def optimizer_block(job: LoraRLJob) -> list[str]:
    o = job.spec.optimizer
    return [
        "--optimizer",
        o.name,
        "--lr",
        fmt(o.lr),
        "--lr-decay-style",
        o.lr_decay_style,
        "--weight-decay",
        fmt(o.weight_decay),
        "--adam-beta1",
        fmt(o.adam_beta1),
        "--adam-beta2",
        fmt(o.adam_beta2),
    ]


def grpo_block(job: LoraRLJob) -> list[str]:
    a = job.spec.algorithm
    return [
        "--advantage-estimator",
        a.advantage_estimator,
        "--kl-loss-coef",
        fmt(a.kl_loss_coef),
        "--kl-loss-type",
        a.kl_loss_type,
        "--kl-coef",
        fmt(a.kl_coef),
        "--entropy-coef",
        fmt(a.entropy_coef),
        "--eps-clip",
        fmt(a.eps_clip),
        "--eps-clip-high",
        fmt(a.eps_clip_high),
    ]


def wandb_block(job: LoraRLJob) -> list[str]:
    """W&B flags without --wandb-key: wandb reads WANDB_API_KEY (from the Secret) itself."""
    w = job.spec.tracking.wandb
    if w is None:
        return []
    out = [
        "--use-wandb",
        "--wandb-project",
        w.project,
        "--wandb-group",
        w.group or job.metadata.name,
        "--disable-wandb-random-suffix",
    ]
    if w.team:
        out += ["--wandb-team", w.team]
    return out


def sglang_block(job: LoraRLJob) -> list[str]:
    s = job.spec.sglang
    profile = profile_of(job)
    lora_backend = s.lora_backend or profile.sglang_lora_backend
    attention_backend = s.attention_backend or profile.sglang_attention_backend
    out = [
        "--rollout-num-gpus-per-engine",
        str(s.gpus_per_engine),
        "--sglang-mem-fraction-static",
        fmt(s.mem_fraction_static),
        "--sglang-decode-log-interval",
        str(s.decode_log_interval),
        "--sglang-chunked-prefill-size",
        str(s.chunked_prefill_size),
    ]
    if lora_backend:
        out += ["--sglang-lora-backend", lora_backend]
    if attention_backend:
        out += ["--sglang-attention-backend", attention_backend]
    return out


def misc_block(job: LoraRLJob) -> list[str]:
    gpus = str(gpus_per_node(job))
    return [
        "--train-backend",
        "megatron",
        "--attention-dropout",
        "0.0",
        "--hidden-dropout",
        "0.0",
        "--accumulate-allreduce-grads-in-fp32",
        "--attention-softmax-in-fp32",
        "--calculate-per-token-loss",
        "--actor-num-nodes",
        str(job.spec.hardware.nodes),
        "--actor-num-gpus-per-node",
        gpus,
        "--num-gpus-per-node",
        gpus,
        "--colocate",
    ]


BLOCKS = (
    ("model", model_block),
    ("checkpoint", checkpoint_block),
    ("lora", lora_block),
    ("rollout", rollout_block),
    ("eval", eval_block),
    ("optimizer", optimizer_block),
    ("grpo", grpo_block),
    ("wandb", wandb_block),
    ("sglang", sglang_block),
    ("misc", misc_block),
)


def train_blocks(job: LoraRLJob) -> list[Block]:
    """The train.py arguments as named blocks (empty blocks omitted)."""
    blocks = [(name, build(job)) for name, build in BLOCKS]
    blocks.append(("extra", refuse_credentials(list(job.spec.extra_args or []))))
    return [(name, args) for name, args in blocks if args]


def refuse_credentials(extra_args: list[str]) -> list[str]:
    """The CRD refuses credential-like flags at admission; the renderer refuses them again, so a
    job admitted under an older CRD (or with the rule disabled) never puts a secret on the
    command line. Credentials reach the job only through Secret-backed environment variables."""
    for i, word in enumerate(extra_args):
        if re.search(CREDENTIAL_FLAG, word) and not re.search(NOT_A_CREDENTIAL_FLAG, word):
            raise ValueError(
                f"spec.extraArgs[{i}]: {word.split('=', 1)[0]!r} looks like a credential flag; "
                "pass credentials through spec.tracking / spec.dataPrep Secret references"
            )
        if re.search(ACCESS_KEY_SHAPED_VALUE, word):  # never echo the value: it may be a live token
            raise ValueError(f"spec.extraArgs[{i}] looks like an access token; pass credentials through spec.tracking / spec.dataPrep Secret references")
    return extra_args


def train_argv(job: LoraRLJob) -> list[str]:
    return ["python3", f"{MILES_ROOT}/train.py", *(a for _, block in train_blocks(job) for a in block)]


def total_gpus(job: LoraRLJob) -> int:
    """GPUs of the job; with --colocate every one is a training rank that writes its own shard."""
    return job.spec.hardware.nodes * gpus_per_node(job)


def steps_per_rollout(job: LoraRLJob) -> int:
    r = job.spec.rollout
    return max(1, r.batch_size * r.samples_per_prompt // r.global_batch_size)


def reporter_argv(job: LoraRLJob) -> list[str]:
    """The in-job launcher and reporter: on a retry it resumes from the newest complete
    checkpoint (its own --save and --num-rollout per attempt), passes the output through and
    reports progress. The train.py command after ``--`` is the recipe's, unchanged."""
    argv = [
        "python3",
        REPORTER_PATH,
        "--namespace",
        job.metadata.namespace,
        "--name",
        job.metadata.name,
        "--total-rollouts",
        str(job.spec.rollout.num_rollouts),
        "--save-dir",
        save_dir(job),
        "--gpus",
        str(total_gpus(job)),
        "--steps-per-rollout",
        str(steps_per_rollout(job)),
    ]
    if job.spec.checkpoint.resume:
        argv.append("--resume")
    return argv


def entrypoint_argv(job: LoraRLJob) -> list[str]:
    return [*reporter_argv(job), "--", *train_argv(job)]


def check_tokens(argv: list[str]) -> None:
    for i, word in enumerate(argv):
        if not isinstance(word, str) or not _SAFE.fullmatch(word):
            raise UnsafeTokenError(
                f"command word {i} ({word!r}) may hold only {SHELL_SAFE_HELP}: it passes through KubeRay's submitter shell and Ray's job shell"
            )


def entrypoint(job: LoraRLJob) -> str:
    """The RayJob entrypoint: a plain word list that every shell on the way leaves unchanged."""
    argv = entrypoint_argv(job)
    check_tokens(argv)
    return " ".join(argv)


def command_problems(job: LoraRLJob) -> list[Problem]:
    """Defence in depth: the schema already keeps every word shell-inert and every path inside
    its directory; the renderer checks again."""
    try:
        entrypoint(job)
    except (UnsafeTokenError, ValueError) as err:
        return [Problem("spec", str(err))]
    return []
