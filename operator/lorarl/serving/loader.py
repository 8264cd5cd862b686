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
text that leaves this process has it masked. No text of the server's leaves it either (issue 35:
spec.serve.url is the job author's choice, and the report becomes the job's status): a refusal is
an HTTP status and a sentence of ours. Redirects are not followed, and an address in a range the
pod refuses (egress.py: loopback, link-local, the cluster's own) is not connected to."""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import sys
import urllib.error
import urllib.request

try:  # in the package (lorarl.serving.loader); in the load pod, egress.py is this file's neighbour
    from ..adapter import egress
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python3 -I leaves it out
    import egress  # type: ignore[no-redef,import-not-found]  # egress.py beside it, in the load pod only

TERMINATION_LIMIT = 4096  # the kubelet keeps at most 4096 bytes of a termination message
RETRY, REFUSED = 1, 2
KEY_ENV = "SGLANG_API_KEY"  # noqa: S105 - the variable's name, not a key


class Refused(Exception):
    def __init__(self, reason: str, message: str, code: int = REFUSED, said: object = None):
        super().__init__(message)
        self.reason, self.message, self.code = reason, message, code
        self.said = said  # the server's own answer: read here (already_loaded), never written out


def _mask(text: str, key: str | None) -> str:
    return text.replace(key, "***") if key else text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is an answer, not a place to go (the request and its key stay with spec.serve.url)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _call(url: str, path: str, body: dict | None, key: str | None, timeout: float = 30) -> tuple[int, object]:
    req = urllib.request.Request(url.rstrip("/") + path, data=None if body is None else json.dumps(body).encode(), method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:  # http(s) only (spec.serve.url's pattern)
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:  # HTTPException: not HTTP at all
        reason = getattr(err, "reason", err)
        if isinstance(reason, egress.EgressRefused):
            raise Refused(
                "AddressRefused",
                f"{path}: {reason}; set spec.serve.url to a server outside the cluster's own ranges, or ask the operator's admin to allow it (security.allowedInternalCIDRs)",
            ) from None
        # the exception's kind only: its text may quote the peer (a non-HTTP service's first line)
        raise Refused("ServerUnreachable", f"{path}: the server at {url} cannot be reached ({type(reason).__name__})", RETRY) from None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def _refusal(path: str, status: int, body: object) -> Refused:
    if 300 <= status < 400:
        return Refused("Redirected", f"POST {path} answered HTTP {status}, a redirect: the loader follows none; set spec.serve.url to the server itself")
    if status in (401, 403):
        return Refused("Unauthorized", f"POST {path}: the server refused the API key (HTTP {status}); check spec.serve.apiKeySecretRef")
    if status == 404:
        return Refused("NotSGLang", f"POST {path} answered 404: is spec.serve.url an SGLang server (started with --enable-lora)?")
    if status >= 500:
        return Refused("ServerError", f"POST {path} answered HTTP {status}", RETRY)
    said = body.get("error_message") if isinstance(body, dict) and body.get("error_message") else body
    return Refused("LoadRefused", f"POST {path} answered HTTP {status}: the server refused the adapter (its reason is in the server's log)", said=said)


def _post(url: str, path: str, body: dict, key: str | None) -> dict:
    status, answer = _call(url, path, body, key)
    if status == 200 and isinstance(answer, dict) and answer.get("success") is True:
        return answer
    raise _refusal(path, status, answer)


def already_loaded(err: Refused, name: str) -> bool:
    """lora_manager.py:354-358: the one refusal that means the name is taken."""
    return err.reason == "LoadRefused" and f"{name} because it is already loaded" in str(err.said)


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
    try:
        egress.install(egress.Policy.from_env())
    except ValueError as err:  # the operator's --egress-*-cidrs are checked where it starts: not expected
        report, code = {"ok": False, "reason": "BadEgressPolicy", "message": f"the pod's egress ranges: {err}"}, REFUSED
    else:
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
