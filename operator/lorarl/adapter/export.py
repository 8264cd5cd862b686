"""The export pod's work: build the package once, copy it to every destination (manifest last),
and say what happened as one JSON line, the pod's termination message (at most 4096 bytes, the
kubelet's limit), which the operator maps to status.adapter and AdapterExported."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile

from . import egress, package, stores

CLAIM_MOUNT_ROOT = "/lorarl/export"  # destination i's claim is mounted at <root>/<i> in the export pod
AUTH_MOUNT_ROOT = "/lorarl/export-auth"  # destination i's dockerconfigjson Secret at <root>/<i>/config.json
TERMINATION_LIMIT = 4096


def credential_env(index: int) -> tuple[str, str]:
    """The environment variable names an s3 destination's keys reach the export pod under (secretKeyRef)."""
    return f"LORARL_EXPORT_{index}_AWS_ACCESS_KEY_ID", f"LORARL_EXPORT_{index}_AWS_SECRET_ACCESS_KEY"


def hub_token_env(index: int) -> str:
    """The environment variable a hub destination's token reaches the export pod under (secretKeyRef)."""
    return f"LORARL_EXPORT_{index}_HF_TOKEN"


def oci_tag(plan: dict, rollout: int) -> str:
    """The default tag: <job>-rollout-<NNNNNNN> (a re-run never moves another run's tag)."""
    return f"{plan['job']['name']}-rollout-{rollout:07d}"


def destination_store(
    plan: dict, index: int, dest: dict, rollout: int, claim_root: str, env, auth_root: str = AUTH_MOUNT_ROOT, created: str | None = None
) -> stores.Store:
    """The store of one destination of the plan (the spec's camelCase fields)."""
    rel = package.relative_dir(plan, rollout)
    if "s3" in dest:
        key_var, secret_var = credential_env(index)
        s3 = dest["s3"]
        uri = f"s3://{s3['bucket']}/{s3.get('prefix', '')}{rel}"
        try:
            return stores.S3Store(uri, s3.get("endpoint"), s3.get("region"), env.get(key_var), env.get(secret_var))
        except stores.StoreError as err:
            raise package.Refused("DestinationFailed", f"spec.export.destinations[{index}].s3: {err}") from None
    if "claim" in dest:
        c = dest["claim"]
        path = c.get("path", "")
        return stores.DirStore(os.path.join(claim_root, str(index), path, rel), uri=f"pvc://{c['claimName']}/{path}{rel}")
    if "oci" in dest:
        oci = dest["oci"]
        config = os.path.join(auth_root, str(index), "config.json") if oci.get("credentialsSecretName") else None
        reference = f"{oci['repository']}:{oci.get('tag') or oci_tag(plan, rollout)}"
        try:
            return stores.OciStore(reference, plain_http=bool(oci.get("plainHttp")), docker_config=config, created=created, same_host_redirects=True)
        except stores.StoreError as err:
            raise package.Refused("DestinationFailed", f"spec.export.destinations[{index}].oci: {err}") from None
    if "hub" in dest:
        hub = dest["hub"]
        job = plan["job"]
        message = f"lorarl export of {job['namespace']}/{job['name']}, rollout {rollout}"
        try:
            return stores.HubStore(
                hub["repo"],
                hub.get("revision", "main"),
                token=env.get(hub_token_env(index)),
                endpoint=hub.get("endpoint"),
                message=message,
                same_host_redirects=True,
            )
        except stores.StoreError as err:
            raise package.Refused("DestinationFailed", f"spec.export.destinations[{index}].hub: {err}") from None
    raise package.Refused("DestinationFailed", f"spec.export.destinations[{index}]: none of s3, claim, oci, hub")


def check_destinations(plan: dict, policy: egress.Policy) -> None:
    """Refuse, before any work, a destination whose host resolves into a range the pod refuses
    (egress.py); every later connection is checked too (``egress.install``)."""
    for index, dest in enumerate(plan["destinations"]):
        for host, port in egress.destination_hosts(dest):
            try:
                policy.check_host(host, port)
            except egress.EgressRefused as err:
                kind = next((k for k in ("s3", "oci", "hub") if k in dest), "destination")
                raise package.Refused("DestinationRefused", f"spec.export.destinations[{index}].{kind}: {err}") from None


def run(
    plan: dict,
    status: dict,
    save_root: str,
    now: datetime.datetime,
    claim_root: str = CLAIM_MOUNT_ROOT,
    env=None,
    auth_root: str = AUTH_MOUNT_ROOT,
    policy: egress.Policy | None = None,
) -> dict:
    """Export; returns the report (``ok`` true with the adapter's status fields, or the reason).
    With ``policy``, the destinations' hosts are checked first (``check_destinations``)."""
    env = os.environ if env is None else env
    try:
        if policy is not None:
            check_destinations(plan, policy)
        with tempfile.TemporaryDirectory(prefix="lorarl-export-") as tmp:
            pkg = package.build(plan, status, save_root, os.path.join(tmp, "adapter"), now)
            created = pkg.manifest["exportTime"]
            targets = [destination_store(plan, i, d, pkg.rollout, claim_root, env, auth_root, created) for i, d in enumerate(plan["destinations"])]
            names = [f["name"] for f in pkg.manifest["files"]] + [package.MANIFEST]
            for i, store in enumerate(targets):
                try:
                    for name in names:
                        store.put(name, os.path.join(pkg.directory, name))
                    store.finish()
                except stores.StoreError as err:
                    raise package.Refused("DestinationFailed", f"spec.export.destinations[{i}]: {err}") from None
    except package.Refused as refused:
        return {"ok": False, "reason": refused.reason, "message": refused.message}
    metrics = pkg.manifest["metrics"]
    adapter = {
        "uri": targets[0].uri,
        "uris": [t.uri for t in targets],
        "digest": pkg.digest,
        "format": package.FORMAT,
        "size": pkg.size,
        "baseModel": plan["baseModel"]["name"],
        "rollout": pkg.rollout,
        "exportTime": pkg.manifest["exportTime"],
        **({"baseModelRevision": plan["baseModel"]["revision"]} if plan["baseModel"].get("revision") else {}),
        **metrics,
    }
    return {"ok": True, "adapter": adapter}


def termination_message(report: dict) -> str:
    """One line within the kubelet's limit: a long message is cut, never the JSON."""
    line = json.dumps(report, separators=(",", ":"))
    if len(line.encode()) <= TERMINATION_LIMIT:
        return line
    short = dict(report)
    if "message" in short:
        short["message"] = short["message"][:1000]
    if "adapter" in short:
        short["adapter"] = {k: v for k, v in short["adapter"].items() if k not in ("eval", "uris")}
    return json.dumps(short, separators=(",", ":"))[:TERMINATION_LIMIT]


def main(argv: list[str]) -> int:
    """The export pod's entry point (exporter.pyz; standard library only, like the pod)."""
    parser = argparse.ArgumentParser(prog="exporter.pyz", description="Export the newest complete save (docs/adapters.md).")
    parser.add_argument("--plan", required=True, help="The export plan (JSON).")
    parser.add_argument("--status", default=None, help="The job's status (JSON), for the metrics at the exported rollout.")
    parser.add_argument("--save-root", required=True, help="The job's checkpoint directory (read-only).")
    parser.add_argument("--claim-root", default=CLAIM_MOUNT_ROOT, help="Where destination i's claim is mounted, as <root>/<i>.")
    parser.add_argument("--termination-log", default="/dev/termination-log")
    args = parser.parse_args(argv)
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    status = {}
    if args.status:
        with open(args.status, encoding="utf-8") as f:
            status = json.load(f)
    try:
        policy = egress.Policy.from_env()
    except ValueError as err:
        report = {"ok": False, "reason": "BadEgressPolicy", "message": f"the pod's egress ranges: {err}"}
    else:
        egress.install(policy)  # every connection of the process, redirects and upload URLs included
        report = run(plan, status, args.save_root, datetime.datetime.now(datetime.UTC), claim_root=args.claim_root, policy=policy)
    line = termination_message(report)
    try:
        with open(args.termination_log, "w", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass
    print(line, file=sys.stdout if report["ok"] else sys.stderr)
    return 0 if report["ok"] else 1
