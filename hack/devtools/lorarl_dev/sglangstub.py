"""An SGLang server stand-in for its LoRA endpoints (SGLang needs a GPU; this machine has none).

    python3 sglangstub.py --model-path Qwen/Qwen3-4B [--enable-lora] [--lora-paths NAME=PATH ...]
        [--max-lora-rank R] [--lora-target-modules M ...] [--max-loras-per-batch N]
        [--api-key KEY] [--admin-api-key KEY] [--host 127.0.0.1] [--port 30000]

One file, the standard library only: it runs as ``python3 -m lorarl_dev.sglangstub`` here and as
a script from a ConfigMap in the job image (tests/e2e). It follows SGLang 0.5.23 (the PyPI wheel
``sglang-0.5.23-cp311``); file:line below are of ``python/sglang/srt/`` in it:

* ``POST /load_lora_adapter`` takes ``LoadLoRAAdapterReqInput`` ``{"lora_name", "lora_path",
  "pinned": false}`` (managers/io_struct.py:2516-2524) and ``POST /unload_lora_adapter``
  ``{"lora_name"}`` (io_struct.py:2535-2539); both answer ``LoRAUpdateOutput`` ``{"success",
  "error_message", "loaded_adapters": {name: path}}`` (io_struct.py:2572-2580), 200 on success
  and 400 on failure (entrypoints/http_server.py:1652-1660, 1676-1684).
* The load refuses, in this order, with these messages (the server's ``str(e)``):
  LoRA not enabled (managers/tokenizer_control_mixin.py:665-668, ``loaded_adapters`` null);
  no ``adapter_config.json`` (lora/lora_config.py:92-100: an existing directory is read as is,
  anything else goes to the Hub, which this stand-in does not have) or one without ``r``,
  ``lora_alpha``, ``target_modules`` (lora_config.py:47-49, a KeyError's ``str``);
  added tokens, DoRA, a name already loaded (lora/lora_manager.py:337-358); a rank above the pool's
  ``--max-lora-rank`` or target modules outside ``--lora-target-modules``, both with one message
  (lora_manager.py:367-375, lora/mem_pool.py:238-259 ``can_support``, module names normalized as
  lora/utils.py:277-327); a pinned adapter that would pin every slot (lora_manager.py:377-383);
  then the weights as ``DefaultModelLoader._prepare_weights`` finds them: ``*.safetensors``, else
  ``*.bin``, else ``*.pt``, training files left out, none is ``Cannot find any model weights with
  `PATH``` (model_loader/loader.py:499-553, 576-580; model_loader/weight_utils.py:868-883).
  A failed load leaves the registry as it was (tokenizer_control_mixin.py:692-696).
* Unloading an unknown name: ``LoRA with name X does not exist. Loaded LoRAs: ...``
  (lora/lora_registry.py unregister, caught at tokenizer_control_mixin.py:858-859).
* ``GET /v1/models``: the base model card, then one card per adapter with ``root`` its path and
  ``parent`` the base (http_server.py:1993-2022; the cards of entrypoints/openai/protocol.py:87-103).
* Auth (utils/auth.py:74-150, middleware 153-210): ``/health*``, ``/ready*``, ``/metrics*`` always
  open; the load/unload endpoints are ADMIN_OPTIONAL (the admin key if set, else the API key),
  the others NORMAL (the API key if set); a bad or missing ``Authorization: Bearer`` is 401
  ``{"error": "Unauthorized"}``.
* Start-up (arg_groups/lora_hook.py:33-160, lora_manager.py:743-762 and 800-917):
  ``--lora-paths`` turns LoRA on; without it both ``--max-lora-rank`` and
  ``--lora-target-modules`` are required; ``--lora-paths`` items are ``PATH``, ``NAME=PATH`` or
  JSON ``{"lora_name", "lora_path", "pinned"}`` (arg_groups/argparse_actions.py:8-25); each is
  loaded at start and a failure ends the server; the rank and the target modules not given are
  inferred from them, and given target modules must cover theirs.

Where the real loader reads tensors with torch/safetensors, the stand-in reads the safetensors
header as the format defines it (8-byte little-endian length, JSON, offsets inside the file) and
checks a ``.bin`` is a torch.save zip (an entry ``*/data.pkl``), without unpickling. It also
checks every ``lora_A`` tensor has ``r`` rows and every ``lora_B`` ``r`` columns (the stand-in's
own check: SGLang copies them into rank-``r`` buffers). Not followed: the Hub, eviction by
``--max-loaded-loras``, generation. The access log never holds a header, so never a key.
"""

from __future__ import annotations

import argparse
import glob
import hmac
import json
import os
import struct
import sys
import threading
import time
import zipfile
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# utils/common.py:4700-4724
SUPPORTED_LORA_TARGET_MODULES = [
    "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj",
    "wq_b", "wk", "weights_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj", "gate_up_proj",
    "embed_tokens", "lm_head", "qkvr", "wo_ud",
]  # fmt: skip
# lora/utils.py:298-320
PARAMS_MAPPING = {
    "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
    "out_proj": "out_proj", "embed_tokens": "embed_tokens", "vocab_emb": "embed_tokens", "embeddings": "embed_tokens",
    "word_embeddings": "embed_tokens", "lm_head": "lm_head", "output": "lm_head", "unembed_tokens": "lm_head",
    "q_a_proj": "fused_qkv_a_proj_with_mqa", "kv_a_proj_with_mqa": "fused_qkv_a_proj_with_mqa",
    "wq_b": "indexer.wq_b", "wk": "indexer.wk", "weights_proj": "indexer.weights_proj",
}  # fmt: skip
TRAINING_FILES = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")  # weight_utils.py:874-880
OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # auth.py:101-106
ADMIN_OPTIONAL = ("/load_lora_adapter", "/unload_lora_adapter")  # http_server.py:1653, 1677


class LoadError(Exception):
    """A refused load: its text is what SGLang puts in error_message."""


def normalized_target_modules(target_modules) -> set[str]:
    """lora/utils.py:277-327: suffixes mapped to SGLang's fused module names; 'all'/'all-linear' -> {'all'}."""
    if isinstance(target_modules, str):
        if target_modules not in ("all", "all-linear"):
            raise LoadError("Only 'all' or 'all-linear' can be used as the string for target module")
        return {"all"}
    return {PARAMS_MAPPING.get(name.split(".")[-1], name.split(".")[-1]) for name in target_modules}


def read_lora_config(path: str) -> dict:
    """lora_config.py:40-49, 92-100: adapter_config.json of a local directory; r, lora_alpha, target_modules required."""
    if not os.path.isdir(path):
        # SGLang hands a non-directory to huggingface_hub.snapshot_download; the stand-in has no Hub
        raise LoadError(f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{path}' (the stand-in has no Hub: give a directory)")
    config_file = os.path.join(path, "adapter_config.json")
    try:
        with open(config_file) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise LoadError(f"[Errno 2] No such file or directory: '{config_file}'") from None
    except ValueError as err:
        raise LoadError(str(err)) from None
    for key in ("target_modules", "r", "lora_alpha"):
        if key not in config:
            raise LoadError(repr(key))  # str(KeyError('r')) is "'r'"
    return config


def weight_files(path: str) -> list[str]:
    """loader.py:499-553, 576-580 (load format auto, fall_back_to_pt): the first pattern that matches wins."""
    for pattern in ("*.safetensors", "*.bin", "*.pt"):
        found = glob.glob(os.path.join(path, pattern))
        if found:
            if not pattern.endswith(".safetensors"):
                found = [f for f in found if not any(f.endswith(x) for x in TRAINING_FILES)]
            if found:
                return sorted(found)
    raise LoadError(f"Cannot find any model weights with `{path}`")


def safetensors_shapes(file: str) -> dict[str, list[int]]:
    """The header of a safetensors file: 8-byte little-endian length, a JSON object, every tensor's offsets inside the data."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise LoadError(f"Error while deserializing header: HeaderTooSmall ({os.path.basename(file)})")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise LoadError(f"Error while deserializing header: HeaderTooLarge ({os.path.basename(file)})")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise LoadError(f"Error while deserializing header: InvalidHeaderDeserialization ({os.path.basename(file)})") from None
    shapes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            shape = [int(d) for d in info["shape"]]
        except (KeyError, TypeError, ValueError):
            raise LoadError(f"Error while deserializing header: InvalidHeaderDeserialization ({os.path.basename(file)})") from None
        if not 0 <= begin <= end <= size - 8 - n:
            raise LoadError(f"Error while deserializing header: MetadataIncompleteBuffer ({os.path.basename(file)})")
        shapes[name] = shape
    return shapes


def check_weights(path: str, rank: int) -> None:
    for file in weight_files(path):
        if file.endswith(".safetensors"):
            for name, shape in safetensors_shapes(file).items():
                bad_a = "lora_A" in name and (len(shape) != 2 or shape[0] != rank)
                bad_b = "lora_B" in name and (len(shape) != 2 or shape[1] != rank)
                if bad_a or bad_b:
                    raise LoadError(f"LoRA weight {name} of shape {shape} does not fit rank {rank} (stand-in check)")
        else:
            try:
                with zipfile.ZipFile(file) as z:
                    if not any(n.endswith("/data.pkl") for n in z.namelist()):
                        raise LoadError(f"{os.path.basename(file)} is not a torch.save archive (stand-in check)")
            except zipfile.BadZipFile:
                raise LoadError(f"{os.path.basename(file)} is not a torch.save archive (stand-in check)") from None


def added_tokens(path: str, vocab_size: int) -> int:
    """lora_config.py:102-121: added_tokens.json, if any and readable, counted above the base vocabulary."""
    try:
        with open(os.path.join(path, "added_tokens.json")) as f:
            tokens = json.load(f)
    except (OSError, ValueError):
        return 0
    return sum(1 for token_id in tokens.values() if isinstance(token_id, int) and token_id >= vocab_size) if isinstance(tokens, dict) else 0


class Server:
    """The state SGLang keeps in its LoRARegistry and LoRAManager, behind one lock (SGLang's lora_update_lock)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lock = threading.Lock()
        self.adapters: OrderedDict[str, dict] = OrderedDict()  # name -> {"path", "pinned", "config"}
        refs = [parse_lora_path(p) for p in args.lora_paths or []]
        self.enable_lora = bool(args.enable_lora) or bool(refs)  # lora_hook.py:39-43
        if not self.enable_lora:
            return
        # lora_hook.py:152-155
        if not refs and not (args.max_lora_rank and args.lora_target_modules):
            raise SystemExit(
                "When no initial --lora-paths is provided, you need to specify both --max-lora-rank and --lora-target-modules for LoRA initialization."
            )
        configs = {}
        for ref in refs:  # lora_manager.py:743-762: a failed start-up load ends the server
            try:
                configs[ref["lora_name"]] = read_lora_config(ref["lora_path"])
            except LoadError as err:
                raise SystemExit(f"Failed to load LoRA adapter {ref['lora_name']}: {err}") from None
        # lora_manager.py:800-917: the pool's target modules and rank, given or inferred
        given = set(args.lora_target_modules or [])
        if given == {"all"}:
            self.target_modules = {PARAMS_MAPPING.get(m, m) for m in SUPPORTED_LORA_TARGET_MODULES}
        else:
            self.target_modules = normalized_target_modules(given)
        for name, config in configs.items():
            adapter_modules = normalized_target_modules(config["target_modules"])
            if given and "all" not in adapter_modules and not adapter_modules <= self.target_modules:
                raise SystemExit(
                    f"LoRA adapter '{name}' contains target modules {sorted(adapter_modules - self.target_modules)} "
                    f"that are not included in the specified --lora-target-modules {sorted(self.target_modules)}."
                )
            if not given:
                self.target_modules |= adapter_modules
        self.max_lora_rank = args.max_lora_rank if args.max_lora_rank is not None else max((c["r"] for c in configs.values()), default=0)
        for ref in refs:
            result, _status = self.load(ref["lora_name"], ref["lora_path"], bool(ref.get("pinned")))
            if not result["success"]:
                raise SystemExit(f"Failed to load LoRA adapter {ref['lora_name']}: {result['error_message']}")

    def _result(self, success: bool, error: str = "") -> dict:
        """lora_manager.py:267-277: the backend's answer lists what is loaded."""
        return {"success": success, "error_message": error, "loaded_adapters": {n: a["path"] for n, a in self.adapters.items()}}

    def load(self, name: str, path: str, pinned: bool) -> tuple[dict, int]:
        if not self.enable_lora:  # tokenizer_control_mixin.py:664-668, 732-736
            return {"success": False, "error_message": "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", "loaded_adapters": None}, 400
        with self.lock:
            try:
                config = read_lora_config(path)
                self._validate(name, path, config, pinned)
                check_weights(path, int(config["r"]))
            except LoadError as err:
                return self._result(False, str(err)), 400
            self.adapters[name] = {"path": path, "pinned": pinned, "config": config}
            return self._result(True), 200

    def _validate(self, name: str, path: str, config: dict, pinned: bool) -> None:
        """lora_manager.py:337-383 validate_new_adapter, with mem_pool.py:238-259 can_support."""
        if added_tokens(path, self.args.vocab_size):  # lora_config.py:59-75: ids below the base vocabulary do not count
            raise LoadError(f"Failed to load {name} because LoRA serving currently doesn't support adapters that add tokens to the vocabulary")
        if config.get("use_dora", False):
            raise LoadError(f"Failed to load {name} because LoRA serving currently doesn't support DoRA adapters")
        if name in self.adapters:
            raise LoadError(f"Failed to load LoRA adapter {name} because it is already loaded")
        modules = normalized_target_modules(config["target_modules"])
        if int(config["r"]) > self.max_lora_rank or not ("all" in modules or modules <= self.target_modules):
            raise LoadError(
                f"LoRA adapter {name} with rank {config['r']} is incompatible with the current "
                "LoRA memory pool configuration. Please ensure that the LoRA adapter's rank is within the configured "
                "`--max-lora-rank` and that the target modules are included in `--lora-target-modules`."
            )
        pinned_now = sum(1 for a in self.adapters.values() if a["pinned"])
        if pinned and pinned_now >= self.args.max_loras_per_batch - 1:
            raise LoadError(
                f"Failed to load LoRA adapter {name} as a pinned adapter. It is not allowed to pin all slots "
                "in the LoRA memory pool to avoid starvation for unpinned adapters and base models. Please increase your "
                "`--max-loras-per-batch` or load it as unpinned LoRA adapters."
            )

    def unload(self, name: str) -> tuple[dict, int]:
        if not self.enable_lora:
            return {"success": False, "error_message": "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", "loaded_adapters": None}, 400
        with self.lock:
            if name not in self.adapters:  # lora_registry.py unregister
                keys = ", ".join(repr(k) for k in self.adapters)
                return {
                    "success": False,
                    "error_message": f"LoRA with name {name} does not exist. Loaded LoRAs: odict_keys([{keys}])",
                    "loaded_adapters": None,
                }, 400
            del self.adapters[name]
            return self._result(True), 200

    def models(self) -> dict:
        """http_server.py:1993-2022."""
        base = self.args.served_model_name or self.args.model_path
        now = int(time.time())
        cards = [{"id": base, "object": "model", "created": now, "owned_by": "sglang", "root": base, "parent": None, "max_model_len": self.args.context_length}]
        if self.enable_lora:
            with self.lock:
                for name, adapter in self.adapters.items():
                    cards.append(
                        {"id": name, "object": "model", "created": now, "owned_by": "sglang", "root": adapter["path"], "parent": base, "max_model_len": None}
                    )
        return {"object": "list", "data": cards}


def parse_lora_path(item: str) -> dict:
    """argparse_actions.py:8-25 and lora_hook.py:75-112: PATH, NAME=PATH or JSON."""
    item = item.strip()
    if item.startswith("{") and item.endswith("}"):
        obj = json.loads(item)
        if "lora_path" not in obj or "lora_name" not in obj:
            raise SystemExit(f"{item!r} looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys.")
        return obj
    if "=" in item:
        name, path = item.split("=", 1)
        return {"lora_name": name, "lora_path": path, "pinned": False}
    return {"lora_name": item, "lora_path": item, "pinned": False}


def allowed(server: Server, path: str, authorization: str | None) -> bool:
    """utils/auth.py:74-150 decide_request_auth (OPTIONS aside)."""
    if path.startswith(OPEN_PREFIXES):
        return True

    def bearer(expected: str) -> bool:
        parts = (authorization or "").split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], expected)

    admin, key = server.args.admin_api_key, server.args.api_key
    if path in ADMIN_OPTIONAL:
        if admin:
            return bearer(admin)
        return bearer(key) if key else True
    return bearer(key) if key else True


def handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        server_version = "lorarl-sglangstub"

        def log_message(self, fmt, *args):  # path and status only: never a header
            sys.stderr.write(f"sglangstub: {self.command} {self.path.split('?')[0]} {args[1] if len(args) > 1 else ''}\n")

        def _send(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _guard(self) -> str | None:
            path = self.path.split("?", 1)[0]
            if not allowed(server, path, self.headers.get("Authorization")):
                self._send(401, {"error": "Unauthorized"})  # auth.py:191-203
                return None
            return path

        def do_GET(self):
            path = self._guard()
            if path is None:
                return
            if path.startswith("/health") or path == "/ready":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path == "/v1/models":
                self._send(200, server.models())
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            path = self._guard()
            if path is None:
                return
            if path not in ADMIN_OPTIONAL:
                self._send(404, {"detail": "Not Found"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            except ValueError:
                self._send(422, {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error"}]})
                return
            fields = ("lora_name", "lora_path") if path == "/load_lora_adapter" else ("lora_name",)
            missing = [f for f in fields if not isinstance(body, dict) or not isinstance(body.get(f), str)]
            if missing:  # FastAPI's request validation of the Body (the msgspec struct's required str fields)
                self._send(422, {"detail": [{"type": "missing", "loc": ["body", f], "msg": "Field required"} for f in missing]})
                return
            if path == "/load_lora_adapter":
                result, status = server.load(body["lora_name"], body["lora_path"], bool(body.get("pinned", False)))
            else:
                result, status = server.unload(body["lora_name"])
            self._send(status, result)

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags of arg_groups/fields/lora.py:34-69 and fields/serving.py (api_key, admin_api_key) this stand-in follows."""
    p = argparse.ArgumentParser(prog="sglangstub", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--context-length", type=int, default=40960)
    p.add_argument("--vocab-size", type=int, default=151936, help="Stand-in only: the base model's vocab_size (Qwen3's).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--enable-lora", action="store_true", default=None)
    p.add_argument("--lora-paths", nargs="*")
    p.add_argument("--max-lora-rank", type=int)
    p.add_argument("--lora-target-modules", nargs="*", choices=SUPPORTED_LORA_TARGET_MODULES + ["all"])
    p.add_argument("--max-loras-per-batch", type=int, default=8)
    p.add_argument("--api-key")
    p.add_argument("--admin-api-key")
    p.add_argument("--port-file", help="Stand-in only: write the bound port here (with --port 0).")
    args = p.parse_args(argv)
    if args.lora_target_modules and "all" in args.lora_target_modules and len(args.lora_target_modules) != 1:
        p.error("If 'all' is specified in --lora-target-modules, it should be the only module specified.")  # lora_hook.py:147-150
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = Server(args)
    httpd = ThreadingHTTPServer((args.host, args.port), handler(server))
    port = httpd.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)
    print(
        f"sglangstub: serving {args.served_model_name or args.model_path} at http://{args.host}:{port} (LoRA {'on' if server.enable_lora else 'off'})",
        flush=True,
    )
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
