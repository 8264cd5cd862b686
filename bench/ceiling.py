"""The ceiling: what this API server allows, with none of an operator's overhead.

A tight asyncio client that watches LoraRLJobs and, for each new one, does exactly the create
path's writes that a perfect operator must do and nothing else: parse the stored job and render
its children with the operator's own pure functions (``parse_stored``, ``render.render``), server-
side apply the children in order, write the status once (``status.compute`` on the applied
RayJob, as a merge patch) and post the one ``Pending`` Event. No reads besides the watch, no
retries of successful work, ``--concurrency`` jobs in flight; at start-up, a listed job whose
status already has its generation observed (handled before: e.g. finished) is left alone. Run as its own process so that its
CPU and memory are measured like an operator's::

    python -m bench.ceiling --kubeconfig K --namespace NS --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import signal
import sys
from typing import Any

from lorarl.control import health, queueing, reconcile, status
from lorarl.control.stored import parse_stored
from lorarl.job import render

from .kclient import Client

MANAGER = "lorarl-ceiling"


def _event(body: dict[str, Any], event: status.Event, now: datetime.datetime) -> dict[str, Any]:
    meta = body["metadata"]
    stamp = reconcile.rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": body["apiVersion"], "kind": body["kind"], "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:1024],
        "source": {"component": MANAGER},
        "reportingComponent": MANAGER,
        "reportingInstance": MANAGER,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "action": "Reconcile",
        "count": 1,
    }


async def handle(client: Client, body: dict[str, Any]) -> None:
    job, _ = parse_stored(body)
    verdict = health.evaluate(job.spec.health, {})
    children = render.render(job)
    children[-1], _ = queueing.rayjob_apply(children[-1], job, None, verdict)
    rayjob = None
    for child in children:  # in order: the RayJob mounts the ConfigMap
        rayjob = await client.apply(child, MANAGER)
    now = reconcile.utcnow()
    facts = status.Facts(
        generation=body["metadata"].get("generation", 1),
        now=reconcile.rfc3339(now),
        user_suspended=job.spec.suspend,
        queue_name=job.spec.scheduling.queue_name,
        verdict=verdict,
    )
    new_status, events = status.compute({}, rayjob, facts)
    meta = body["metadata"]
    await client.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", meta["namespace"], meta["name"], new_status)
    for event in events:
        await client.create(_event(body, event, now))


async def run(kubeconfig: str, namespace: str, concurrency: int) -> None:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    seen: set[str] = set()
    async with Client(kubeconfig, concurrency, user_agent=MANAGER) as client:

        async def worker() -> None:
            while True:
                body = await queue.get()
                try:
                    await handle(client, body)
                except Exception as err:  # report and go on: the bench sees the job never finish
                    print(f"ceiling: {body['metadata']['name']}: {err}", file=sys.stderr, flush=True)

        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        listed = await client.list("lorarl.dev/v1alpha1", "LoraRLJob", namespace)
        for item in listed["items"]:
            seen.add(item["metadata"]["name"])
            if (item.get("status") or {}).get("observedGeneration") != item["metadata"].get("generation"):
                queue.put_nowait(item)  # a job handled before (e.g. finished) needs nothing: skipped
        resource_version = listed["metadata"]["resourceVersion"]
        del listed
        print("ceiling: ready", flush=True)
        async for kind, obj in client.watch("lorarl.dev/v1alpha1", "LoraRLJob", namespace, resource_version):
            name = obj["metadata"]["name"]
            if kind == "ADDED" and name not in seen:
                seen.add(name)
                queue.put_nowait(obj)
        for w in workers:
            w.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description="the ceiling client (see the module docstring)")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        asyncio.run(run(args.kubeconfig, args.namespace, args.concurrency))
    except (KeyboardInterrupt, SystemExit):
        pass


if __name__ == "__main__":
    main()
