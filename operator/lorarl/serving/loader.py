"""The load pod's program: ask a running SGLang server to load the exported adapter, then check
``GET /v1/models`` lists it; report in the termination message, as the export pod does.

    python3 loader.py --url URL --name NAME --path PATH [--replace]   (API key: env SGLANG_API_KEY)

One file, the standard library only (shipped in the load Job's ConfigMap, run by the image's
python3). SGLang's API as its source defines it (0.5.23, python/sglang/srt/):
``POST /load_lora_adapter {"lora_name", "lora_path"}`` answers ``{"success", "error_message",
"loaded_adapters"}``, 200 or 400 (entrypoints/http_server.py:1652-1660, managers/io_struct.py:
2516-2580); a name already loaded is refused with ``... because it is already loaded``
(lora/lora_manager.py:354-358), and there is no replace-in-place: ``--replace`` unloads first
(``POST /unload_lora_adapter {"lora_name"}``). A bad key is 401 (utils/auth.py:153-203).

Exit codes: 0 served; 1 retry (the server cannot be reached, or answered 5xx); 2 refused for
good (the Job's podFailurePolicy fails the Job at once). The key is sent, never written: every
text that leaves this process has it masked, and server texts are quoted bounded."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import urllib.error
import urllib.request

QUOTE_LIMIT = 300  # of a server's own words in a message
TERMINATION_LIMIT = 4096  # the kubelet keeps at most 4096 bytes of a termination message
RETRY, REFUSED = 1, 2
KEY_ENV = "SGLANG_API_KEY"  # noqa: S105 - the variable's name, not a key


class Refused(Exception):
    def __init__(self, reason: str, message: str, code: int = REFUSED):
        super().__init__(message)
        self.reason, self.message, self.code = reason, message, code


def _mask(text: str, key: str | None) -> str:
    return text.replace(key, "***") if key else text


def quote(text: object, key: str | None) -> str:
    """A server's words, masked and bounded, in quotes."""
    s = _mask(" ".join(str(text).split()), key)
    return json.dumps(s if len(s) <= QUOTE_LIMIT else s[: QUOTE_LIMIT - 3] + "...")


def _call(url: str, path: str, body: dict | None, key: str | None, timeout: float = 30) -> tuple[int, object]:
    req = urllib.request.Request(url.rstrip("/") + path, data=None if body is None else json.dumps(body).encode(), method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only (spec.serve.url's pattern)
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise Refused("ServerUnreachable", f"{path}: the server at {url} cannot be reached ({type(reason).__name__}: {quote(reason, key)})", RETRY) from None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def _refusal(path: str, status: int, body: object, key: str | None) -> Refused:
    if status in (401, 403):
        return Refused("Unauthorized", f"POST {path}: the server refused the API key (HTTP {status}); check spec.serve.apiKeySecretRef")
    if status == 404:
        return Refused("NotSGLang", f"POST {path} answered 404: is spec.serve.url an SGLang server (started with --enable-lora)?")
    if status >= 500:
        return Refused("ServerError", f"POST {path} answered HTTP {status}", RETRY)
    said = body.get("error_message") if isinstance(body, dict) and body.get("error_message") else body
    return Refused("LoadRefused", f"POST {path} answered HTTP {status}; the server said {quote(said, key)}")


def _post(url: str, path: str, body: dict, key: str | None) -> dict:
    status, answer = _call(url, path, body, key)
    if status == 200 and isinstance(answer, dict) and answer.get("success") is True:
        return answer
    raise _refusal(path, status, answer, key)


def already_loaded(err: Refused, name: str) -> bool:
    """lora_manager.py:354-358: the one refusal that means the name is taken."""
    return err.reason == "LoadRefused" and f"{name} because it is already loaded" in err.message


def serve(url: str, name: str, path: str, key: str | None, replace: bool, now: datetime.datetime) -> dict:
    body = {"lora_name": name, "lora_path": path}
    try:
        _post(url, "/load_lora_adapter", body, key)
    except Refused as err:
        if not already_loaded(err, name):
            raise
        if not replace:
            raise Refused(
                "AdapterNameTaken",
                f"the server at {url} already serves an adapter named {name}: set spec.serve.adapterName to another name, "
                "or spec.serve.replace to unload it first",
            ) from None
        _post(url, "/unload_lora_adapter", {"lora_name": name}, key)
        _post(url, "/load_lora_adapter", body, key)
    status, models = _call(url, "/v1/models", None, key)
    listed = {c.get("id"): c for c in models.get("data") or [] if isinstance(c, dict)} if status == 200 and isinstance(models, dict) else {}
    if name not in listed:
        raise Refused("NotListed", f"the server loaded {name} but GET /v1/models (HTTP {status}) does not list it")
    return {"server": url, "name": name, "path": str(listed[name].get("root") or path), "loadTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")}


def run(url: str, name: str, path: str, key: str | None, replace: bool, now: datetime.datetime) -> tuple[dict, int]:
    try:
        return {"ok": True, "serving": serve(url, name, path, key, replace, now)}, 0
    except Refused as err:
        return {"ok": False, "reason": err.reason, "message": _mask(err.message, key)}, err.code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loader.py", description="Load the exported adapter into an SGLang server.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--replace", action="store_true")
    parser.add_argument("--termination-log", default="/dev/termination-log")
    args = parser.parse_args(argv)
    report, code = run(args.url, args.name, args.path, os.environ.get(KEY_ENV) or None, args.replace, datetime.datetime.now(datetime.UTC))
    line = json.dumps(report, separators=(",", ":"))[:TERMINATION_LIMIT]
    try:
        with open(args.termination_log, "w", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass
    print(line, file=sys.stdout if report["ok"] else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
