"""The benchmark: ours, the ceiling and KubeRay's operator on one embedded control plane.

    .venv/bin/python -m bench --quick     # a smoke run (small N, short windows), a few minutes
    .venv/bin/python -m bench --full      # the figures in docs/benchmarks.md (make bench)

Phases (each system in a fresh namespace, its process started for the phase and measured from
/proc; its API requests read from the audit log by its own ServiceAccount):

1. burst: N objects created at once; seconds until every job is reconciled (ours and the
   ceiling: its RayJob exists and its status has observedGeneration; KubeRay: the RayJob has a
   RayCluster and KubeRay's status names it);
2. steady: jobs created at a fixed rate; apply-to-RayJob latency (KubeRay: RayJob-to-RayCluster);
3. idle: ours with the largest-but-one burst's jobs settled (half Succeeded, half Running) for a
   window: CPU and requests per minute;
4. history: ours idle over an empty namespace, then over many finished jobs;
5. restart: with many finished jobs present, the seconds from a system's start to a new job's
   RayJob (ours and the ceiling), and from a SIGKILLed leader to the same with ours as two
   replicas with leader election; peak RSS, and idle CPU once started.

``--phases churn`` (bench/churn.py) and ``--phases realnode`` (bench/realnode.py) run on control
planes of their own and write their own figures (see bench/__main__.py).

Not a test: nothing here asserts a duration; it prints each target as met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any

import aiohttp
from lorarl_dev.binaries import ensure_binaries
from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.kuberay import kuberay_crd_path

from . import report
from .kclient import Client, KubeError
from .measure import AuditTail, ProcMeter, by_verb, percentile
from .systems import Ceiling, KubeRay, Ours, System, identity, stop_all
from .workload import (
    JOB,
    RAYCLUSTER,
    RAYJOB,
    Tracker,
    finished_job,
    job_name,
    job_status_mark,
    kuberay_status_mark,
    kuberay_statuses,
    lorarl_job,
    owned_rayjob_mark,
    raycluster_mark,
    rayjob_for_kuberay,
    stored,
)

REPO = pathlib.Path(__file__).resolve().parents[1]
SYSTEMS = ("ours", "ceiling", "kuberay")
CHILDREN = ("serviceaccounts", "roles", "rolebindings", "configmaps", "persistentvolumeclaims", "networkpolicies", "rayjobs")


@dataclass
class Plan:
    sizes: list[int]
    steady_rate: float
    steady_seconds: float
    idle_seconds: float
    history_jobs: int
    history_idle_seconds: float
    settled_jobs: int
    restart_jobs: int = 200
    restart_idle_seconds: float = 15
    systems: tuple[str, ...] = SYSTEMS
    phases: tuple[str, ...] = ("burst", "steady", "idle", "history", "restart")
    ceiling_concurrency: int = 32
    create_concurrency: int = 32
    cleanup: bool = False
    # a burst of up to repeat_max_jobs lasts a few seconds, where one busy second moves the ratio
    # to the ceiling by 25 points: it runs in rounds (each system once per round, interleaved, so
    # that a slow spell weighs on all of them) and the run with the median duration is reported
    rounds: int = 1
    repeat_max_jobs: int = 200
    ours_args: tuple[str, ...] = ()  # extra `lorarl run` flags for every start of ours (an A/B of one flag)


QUICK = Plan(sizes=[20, 100], steady_rate=10, steady_seconds=15, idle_seconds=30, history_jobs=200, history_idle_seconds=30, settled_jobs=100)
FULL = Plan(
    sizes=[100, 1000],
    steady_rate=10,
    steady_seconds=60,
    idle_seconds=120,
    history_jobs=10000,
    history_idle_seconds=90,
    settled_jobs=1000,
    rounds=5,
    restart_jobs=10000,
    restart_idle_seconds=60,
)
LEASE = "bench-operator"  # the Lease of the fail-over point (in its namespace)
SEED_THROUGH_API = 20  # finished jobs created through the API server; the rest are copies (finished_namespace)


def etcd_url(cp: ControlPlane) -> str:
    """etcd's client URL, from its command line (the control plane keeps its ports to itself)."""
    args = pathlib.Path(f"/proc/{cp.pids['etcd']}/cmdline").read_bytes().split(b"\0")
    flag = next(a for a in args if a.startswith(b"--listen-client-urls="))
    return flag.split(b"=", 1)[1].decode().split(",")[0]


async def etcd_copies(cp: ControlPlane, prefix: str, original: str, names: list[str], per_txn: int = 100) -> None:
    """Put copies of the object stored at ``prefix + original`` under ``prefix + name`` for each
    name, each with that name and a uid of its own, through etcd's JSON gateway (/v3/kv/range,
    /v3/kv/txn: the etcdserverpb messages, keys and values base64)."""
    url = etcd_url(cp)
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v3/kv/range", json={"key": b64((prefix + original).encode())}) as resp:
            kvs = (await resp.json()).get("kvs") or []
        if not kvs:
            raise RuntimeError(f"{prefix + original} is not in etcd")
        stored_doc = json.loads(base64.b64decode(kvs[0]["value"]))
        gate = asyncio.Semaphore(4)
        # a transaction stays under etcd's request limit (--max-request-bytes, 1.5 MiB by default):
        # a stored RayJob (~15 KB) is twice a LoraRLJob
        size = len(base64.b64decode(kvs[0]["value"])) * 4 // 3 + 256
        per_txn = max(1, min(per_txn, 1_000_000 // size))

        async def batch(chunk: list[str]) -> None:
            puts = []
            for name in chunk:
                stored_doc["metadata"].update(name=name, uid=str(uuid.uuid4()))
                value = json.dumps(stored_doc, separators=(",", ":")).encode()
                puts.append({"requestPut": {"key": b64((prefix + name).encode()), "value": b64(value)}})
            async with gate, http.post(f"{url}/v3/kv/txn", json={"success": puts}) as resp:
                answer = await resp.json()
                if resp.status != 200 or not answer.get("succeeded", False):
                    raise RuntimeError(f"etcd refused the copies: {resp.status} {str(answer)[:300]}")

        await asyncio.gather(*(batch(names[i : i + per_txn]) for i in range(0, len(names), per_txn)))


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, cp: ControlPlane, plan: Plan, workdir: pathlib.Path):
        self.cp, self.plan, self.workdir = cp, plan, workdir
        self.audit = AuditTail(str(cp.audit_log_path), ":bench-system:")
        self.apiserver = ProcMeter(cp.pids["kube-apiserver"])
        self.etcd = ProcMeter(cp.pids["etcd"])
        self.ids = {name: identity(cp, name) for name in plan.systems}
        self.results: dict[str, Any] = {"burst": {}, "steady": {}, "idle": None, "history": {}, "restart": {}, "errors": []}
        self.finished: dict[int, str] = {}  # n -> a namespace holding n finished jobs (history and restart share it)

    def system(self, name: str, extra_args: tuple[str, ...] = ()) -> System:
        user, kubeconfig = self.ids[name]
        if name == "ours":
            return Ours(self.cp, kubeconfig, user, self.workdir, extra_args=(*self.plan.ours_args, *extra_args))
        if name == "ceiling":
            return Ceiling(self.cp, kubeconfig, user, self.workdir, concurrency=self.plan.ceiling_concurrency)
        return KubeRay(self.cp, kubeconfig, user, self.workdir)

    # -- namespaces --------------------------------------------------------------------------
    async def new_namespace(self, client: Client, name: str) -> None:
        await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    async def delete_namespace(self, client: Client, name: str, timeout: float = 300) -> None:
        """Delete and wait until it is gone, so that its garbage collection does not run into
        the next phase."""
        try:
            await client.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError as err:
            if err.status == 404:
                return
            raise
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                await client.request("GET", f"/api/v1/namespaces/{name}")
            except KubeError as err:
                if err.status == 404:
                    return
                raise
            await asyncio.sleep(1)
        raise TimeoutError(f"namespace {name} still terminating after {timeout:.0f}s")

    async def cleanup(self, client: Client, ns: str) -> None:
        """With --cleanup, delete a phase's namespace before the next phase (minutes for
        thousands of jobs). By default it stays: every system watches only its own namespace,
        and the control plane goes at the end."""
        if self.plan.cleanup:
            await self.delete_namespace(client, ns)

    # -- helpers -----------------------------------------------------------------------------
    def objects(self, system: str, namespace: str, n: int, start: int = 0) -> list[dict[str, Any]]:
        if system == "kuberay":
            return [rayjob_for_kuberay(namespace, i) for i in range(start, start + n)]
        return [lorarl_job(namespace, i) for i in range(start, start + n)]

    async def watches(self, client: Client, system: str, namespace: str, tracker: Tracker) -> list[asyncio.Task]:
        if system == "kuberay":
            kinds = [(RAYJOB, kuberay_status_mark), (RAYCLUSTER, raycluster_mark)]
        else:
            kinds = [(JOB, job_status_mark), (RAYJOB, owned_rayjob_mark)]
        tasks = []
        for kind, mark in kinds:
            rv = (await client.list(*kind, namespace, limit=1))["metadata"]["resourceVersion"]  # now; not the objects
            tasks.append(asyncio.create_task(tracker.follow(client, kind, namespace, rv, mark)))
        return tasks

    async def create_all(self, client: Client, objs: list[dict[str, Any]], sent: dict[str, float] | None = None) -> None:
        gate = asyncio.Semaphore(self.plan.create_concurrency)

        async def one(obj: dict[str, Any]) -> None:
            async with gate:
                if sent is not None:
                    sent[obj["metadata"]["name"]] = time.monotonic()
                await client.create(obj)

        await asyncio.gather(*(one(o) for o in objs))

    async def quiet(self, user: str, seconds: float = 5, timeout: float = 120, reads: bool = False) -> None:
        """Wait until ``user`` made no write (with ``reads``: no request) for ``seconds``."""
        deadline = time.monotonic() + timeout
        since = self.audit.last_request_at if reads else self.audit.last_write_at
        while time.monotonic() < deadline:
            self.audit.poll()
            last = since.get(user, 0)
            if time.monotonic() - last >= seconds:
                return
            await asyncio.sleep(0.5)
        log(f"{user} still writing after {timeout:.0f}s; measuring anyway")

    def usage(self, sysm: System, start: dict[str, float], audit_from: int, n: int) -> dict[str, Any]:
        """CPU, memory and requests of the phase that started at ``start``/``audit_from``."""
        end = self.audit.poll()
        reqs = self.audit.between(audit_from, end, sysm.user)
        verbs = by_verb(reqs)
        writes = [r for r in reqs if r.write]
        return {
            "cpu_s": sysm.meter.cpu_seconds() - start["cpu"],
            "peak_rss_mib": sysm.meter.peak_rss_mib(),
            "apiserver_cpu_s": self.apiserver.cpu_seconds() - start["apiserver"],
            "etcd_cpu_s": self.etcd.cpu_seconds() - start["etcd"],
            "requests": len(reqs),
            "writes": len(writes),
            "by_verb": verbs,
            "per_job": {k: v / n for k, v in verbs.items()} if n else {},
            "errors": sum(1 for r in reqs if r.code >= 400),
        }

    def counters(self, sysm: System) -> dict[str, float]:
        return {"cpu": sysm.meter.cpu_seconds(), "apiserver": self.apiserver.cpu_seconds(), "etcd": self.etcd.cpu_seconds()}

    # -- phases ------------------------------------------------------------------------------
    async def burst(self, client: Client, system: str, n: int, round_: int = 0) -> dict[str, Any]:
        ns = f"burst-{system}-{n}" + (f"-{round_ + 1}" if round_ else "")
        await self.new_namespace(client, ns)
        sysm = await asyncio.to_thread(self.system(system).start, ns)
        tasks: list[asyncio.Task] = []
        try:
            tracker = Tracker(("status", "child"))
            tasks = await self.watches(client, system, ns, tracker)
            objs = await asyncio.to_thread(self.objects, system, ns, n)
            start, audit_from = self.counters(sysm), self.audit.poll()
            t0 = time.monotonic()
            await self.create_all(client, objs)
            created = time.monotonic() - t0
            timeout = 60 + n * 1.0
            await tracker.wait(lambda: tracker.done_count >= n or not sysm.alive(), timeout, lambda: f"{system}: {tracker.done_count}/{n} jobs reconciled")
            if not sysm.alive():
                raise RuntimeError(f"{system} exited during the burst:\n{sysm.log_tail()}")
            done = [tracker.done_at(obj["metadata"]["name"]) - t0 for obj in objs]
            seconds = max(done)
            await self.quiet(sysm.user)
            out = {
                "jobs": n,
                "seconds": seconds,
                "jobs_per_s": n / seconds,
                "create_seconds": created,
                "median_job_s": percentile(done, 50),
                **self.usage(sysm, start, audit_from, n),
            }
            out["child_writes_per_job"] = {r: out["by_verb"].get(f"patch {r}", 0) / n for r in CHILDREN} if system != "kuberay" else {}
            out["status_writes_per_job"] = (
                out["by_verb"].get("patch lorarljobs/status", 0) / n
                if system != "kuberay"
                else (out["by_verb"].get("update rayjobs/status", 0) + out["by_verb"].get("patch rayjobs/status", 0)) / n
            )
            log(
                f"burst {system} N={n}: {seconds:.1f}s ({n / seconds:.1f} jobs/s), cpu {out['cpu_s']:.1f}s, "
                f"peak RSS {out['peak_rss_mib']:.0f} MiB, {out['requests'] / n:.1f} requests/job, {out['writes'] / n:.1f} writes/job"
            )
            if system == "ours" and n == self.plan.settled_jobs and "idle" in self.plan.phases and round_ == 0:
                self.results["idle"] = await self.settle_and_idle(client, sysm, tracker, ns, n)
            return out
        finally:
            await self.tear_down(client, ns, sysm, tasks)

    async def tear_down(self, client: Client, ns: str, sysm: System, tasks: list) -> None:
        """Stop a phase's watches, clean its namespace (before the system stops: KubeRay's
        finalizers on RayJobs need KubeRay to go), then stop the system."""
        for t in tasks:
            t.cancel()
        try:
            await self.cleanup(client, ns)
        finally:
            await asyncio.to_thread(sysm.stop)

    async def settle_and_idle(self, client: Client, sysm: System, tracker: Tracker, ns: str, n: int) -> dict[str, Any]:
        """KubeRay (the stand-in) moves half the RayJobs to Succeeded and half to Running; once
        the operator shows those phases and stops writing, measure a window of idleness."""
        gate = asyncio.Semaphore(self.plan.create_concurrency)
        expected = {}

        async def settle(i: int) -> None:
            rayjob = rayjob_for_kuberay(ns, i)
            final = kuberay_statuses(rayjob, finished=i % 2 == 0)[-1]
            expected[rayjob["metadata"]["name"]] = "Succeeded" if i % 2 == 0 else "Running"
            async with gate:
                await client.patch_status(*RAYJOB, ns, rayjob["metadata"]["name"], final)

        t0 = time.monotonic()
        await asyncio.gather(*(settle(i) for i in range(n)))
        await tracker.wait(
            lambda: all(tracker.phases.get(k) == v for k, v in expected.items()),
            60 + n * 0.5,
            lambda: f"ours: {sum(tracker.phases.get(k) == v for k, v in expected.items())}/{n} jobs Running/Succeeded",
        )
        settle_s = time.monotonic() - t0
        await self.quiet(sysm.user, seconds=10, timeout=180)
        window = await self.idle_window(sysm, self.plan.idle_seconds)
        window.update(jobs=n, settle_seconds=settle_s, peak_rss_mib=sysm.meter.peak_rss_mib(), cached=sysm.cached_jobs())  # type: ignore[attr-defined]
        log(f"idle with {n} settled jobs: {window['cpu_pct']:.2f}% of a core, {window['requests_per_min']:.0f} requests/min, {window['writes']} writes")
        return window

    async def idle_window(self, sysm: System, seconds: float) -> dict[str, Any]:
        start, audit_from = self.counters(sysm), self.audit.poll()
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - t0
        use = self.usage(sysm, start, audit_from, 0)
        return {
            "seconds": elapsed,
            "cpu_pct": use["cpu_s"] / elapsed * 100,
            "requests_per_min": use["requests"] / elapsed * 60,
            "writes": use["writes"],
            "by_verb_per_min": {k: v / elapsed * 60 for k, v in use["by_verb"].items()},
            "apiserver_cpu_pct": use["apiserver_cpu_s"] / elapsed * 100,
            "rss_mib": sysm.meter.rss_mib(),
        }

    async def steady(self, client: Client, system: str) -> dict[str, Any]:
        rate, seconds = self.plan.steady_rate, self.plan.steady_seconds
        n = int(rate * seconds)
        ns = f"steady-{system}"
        await self.new_namespace(client, ns)
        sysm = await asyncio.to_thread(self.system(system).start, ns)
        tasks: list[asyncio.Task] = []
        try:
            tracker = Tracker(("child",))
            tasks = await self.watches(client, system, ns, tracker)
            objs = await asyncio.to_thread(self.objects, system, ns, n)
            sent: dict[str, float] = {}
            start, audit_from = self.counters(sysm), self.audit.poll()
            t0 = time.monotonic()

            async def one(i: int, obj: dict[str, Any]) -> None:
                await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
                sent[obj["metadata"]["name"]] = time.monotonic()
                await client.create(obj)

            await asyncio.gather(*(one(i, o) for i, o in enumerate(objs)))
            await tracker.wait(lambda: tracker.done_count >= n or not sysm.alive(), 120, lambda: f"{system}: {tracker.done_count}/{n} jobs reconciled")
            latencies = [tracker.done_at(name) - at for name, at in sent.items()]
            use = self.usage(sysm, start, audit_from, n)
            out = {
                "rate": rate,
                "seconds": seconds,
                "jobs": n,
                "p50": percentile(latencies, 50),
                "p95": percentile(latencies, 95),
                "p99": percentile(latencies, 99),
                "max": max(latencies),
                "cpu_s": use["cpu_s"],
                "peak_rss_mib": use["peak_rss_mib"],
                "latencies": sorted(latencies),
            }
            log(f"steady {system} {rate:g}/s for {seconds:g}s: p50 {out['p50']:.3f}s p95 {out['p95']:.3f}s p99 {out['p99']:.3f}s")
            return out
        finally:
            await self.tear_down(client, ns, sysm, tasks)

    async def finished_namespace(self, client: Client, n: int) -> tuple[str, float]:
        """(a namespace with ``n`` finished jobs, seconds it took to create them: 0 when an
        earlier phase made it). Jobs a running operator finished long ago: their RayJobs gone,
        as KubeRay's ttlSecondsAfterFinished does.

        The first ``SEED_THROUGH_API`` jobs are created through the API server (create, then the
        status patch); the rest are byte copies of the first one as kube-apiserver stored it in
        etcd, each with its own name and uid, put into etcd directly (100 per transaction).
        Through the API server, each job costs its CEL rules twice: ~4 jobs/s on this shared
        machine (10,000 in 40+ min); the copies take seconds. The API server's watch cache takes
        them from its etcd watch like any other write, and everything the systems read still
        comes from the API server."""
        if n in self.finished:
            return self.finished[n], 0.0
        ns = f"history-{n}"
        await self.new_namespace(client, ns)
        t0 = time.monotonic()
        through_api = min(n, SEED_THROUGH_API)
        gate = asyncio.Semaphore(self.plan.create_concurrency)

        async def one(i: int) -> None:
            doc, st = finished_job(ns, i)
            async with gate:
                await client.create(doc)
                await client.patch_status(*JOB, ns, doc["metadata"]["name"], st)

        await asyncio.gather(*(one(i) for i in range(through_api)))
        if n > through_api:
            await etcd_copies(self.cp, f"/registry/lorarl.dev/lorarljobs/{ns}/", job_name(0), [job_name(i) for i in range(through_api, n)])
            t1 = time.monotonic()
            await self.cache_holds(client, ns, n)
            log(f"the API server serves the {n} jobs {time.monotonic() - t1:.0f}s after the copies were put")
        self.finished[n] = ns
        log(f"{n} finished jobs in {ns} ({time.monotonic() - t0:.0f}s; {through_api} through the API server)")
        return ns, time.monotonic() - t0

    async def finished_rayjobs_namespace(self, client: Client, n: int) -> str:
        """A namespace with ``n`` RayJobs that KubeRay saw through to SUCCEEDED (the RayJobs of
        the restart point's finished jobs, for KubeRay's own start-up over them): seeded as
        ``finished_namespace`` seeds jobs (a few through the API server, the rest etcd copies)."""
        ns = f"rayjobs-{n}"
        await self.new_namespace(client, ns)
        t0 = time.monotonic()
        through_api = min(n, SEED_THROUGH_API)
        for i in range(through_api):
            rayjob = rayjob_for_kuberay(ns, i)
            await client.create(rayjob)
            await client.patch_status(*RAYJOB, ns, rayjob["metadata"]["name"], kuberay_statuses(rayjob, finished=True)[-1])
        if n > through_api:
            names = [rayjob_for_kuberay(ns, i)["metadata"]["name"] for i in range(n)]
            await etcd_copies(self.cp, f"/registry/ray.io/rayjobs/{ns}/", names[0], names[through_api:])
            await self.cache_holds(client, ns, n, url="/apis/ray.io/v1/namespaces/{ns}/rayjobs")
        log(f"{n} finished RayJobs in {ns} ({time.monotonic() - t0:.0f}s; {through_api} through the API server)")
        return ns

    async def cache_holds(
        self, client: Client, ns: str, n: int, timeout: float = 900, url: str = "/apis/lorarl.dev/v1alpha1/namespaces/{ns}/lorarljobs"
    ) -> None:
        """Wait until the API server serves all ``n`` jobs of ``ns``: it decodes the copies from
        its etcd watch into its watch cache (seconds to minutes under load), and until then a
        consistent LIST waits for the cache and answers 504 "Too large resource version". A
        system started before that would measure the API server's catching up, not itself."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                # the operator's own first request (a page of 500): one of 1 item was answered while
                # a page of 500 still waited for the cache
                page = await client.request("GET", url.format(ns=ns), params={"limit": "500"}, retries=0)
                held = len(page.get("items") or []) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)
                if held >= n:
                    await self.watch_cache_current(client, url.format(ns=ns), deadline)
                    return
            except KubeError as err:
                if err.status != 504:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"the API server did not serve the {n} jobs of {ns} in {timeout:.0f}s")
            await asyncio.sleep(2)

    async def watch_cache_current(self, client: Client, url: str, deadline: float) -> None:
        """Wait until the API server's watch cache has caught up with etcd. The copies arrive in
        its etcd watch 100 objects per revision, and it decodes them slowly on busy cores
        (measured: 50 revisions behind 3 minutes after the copies); meanwhile a consistent LIST
        that it cannot answer from the cache within 3 s goes to etcd, which decodes every object
        (a field-selected page of 500 timed out at 60 s). A running cluster's cache is current:
        without this wait the bench would measure the seeding."""
        newest = int((await client.request("GET", url, params={"limit": "1"}))["metadata"]["resourceVersion"])
        t0 = time.monotonic()
        while True:
            # resourceVersion 0: answered from the watch cache, at the revision it has reached
            cached = await client.request("GET", url, params={"resourceVersion": "0", "labelSelector": "bench.lorarl.dev/none=none"})
            if int(cached["metadata"]["resourceVersion"]) >= newest:
                log(f"the API server's watch cache reached etcd's revision {newest} {time.monotonic() - t0:.0f}s later")
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the watch cache of {url} stayed behind etcd's revision {newest}")
            await asyncio.sleep(2)

    async def history_point(self, client: Client, n: int) -> dict[str, Any]:
        """Ours idle over ``n`` finished jobs that it handled in an earlier life."""
        ns, created = await self.finished_namespace(client, n)
        sysm: System | None = None
        try:
            sysm = await asyncio.to_thread(self.system("ours").start, ns)
            t1 = time.monotonic()
            ours: Ours = sysm  # type: ignore[assignment]
            deadline = t1 + 120 + n * 0.2

            def seen() -> int:  # every job cached (a listed finished job is not reconciled: nothing to do)
                return sum(ours.cached_jobs().values())

            while seen() < n:
                if time.monotonic() > deadline or not sysm.alive():
                    raise TimeoutError(f"ours cached {seen()} of {n} history jobs in {time.monotonic() - t1:.0f}s")
                await asyncio.sleep(0.5)
            startup = time.monotonic() - t1
            # kopf's start-up requests (discovery, the listings) are not idle cost: wait them out
            await self.quiet(sysm.user, seconds=10, timeout=120, reads=True)
            window = await self.idle_window(sysm, self.plan.history_idle_seconds)
            window.update(jobs=n, create_seconds=created, startup_seconds=startup, peak_rss_mib=sysm.meter.peak_rss_mib(), cached=ours.cached_jobs())
            log(
                f"history {n} finished jobs: startup {startup:.1f}s, idle {window['cpu_pct']:.2f}% of a core, "
                f"{window['requests_per_min']:.0f} requests/min, {window['writes']} writes"
            )
            return window
        finally:
            if sysm is not None:
                await asyncio.to_thread(sysm.stop)

    async def new_job_done(self, client: Client, ns: str, name: str, watching: Tracker, alive, timeout: float, system: str = "ours") -> float:
        """Create job ``name`` now; the monotonic time its RayJob exists and its status is written
        (KubeRay: a RayJob, until its RayCluster exists and its status names it)."""
        doc = rayjob_for_kuberay(ns, 0) if system == "kuberay" else lorarl_job(ns, 0)
        doc["metadata"]["name"] = name
        await client.create(doc)
        await watching.wait(lambda: watching.done_at(name) is not None or not alive(), timeout, lambda: f"the new job {name} reconciled")
        if watching.done_at(name) is None:
            raise RuntimeError(f"the system exited before {name} was reconciled")
        return watching.done_at(name)

    async def restart_point(self, client: Client, system: str, ns: str, n: int) -> dict[str, Any]:
        """``system`` started over ``n`` finished jobs, a new job created as it starts: seconds
        until that job is reconciled, peak RSS, and an idle window once it is quiet."""
        tracker = Tracker(("status", "child"))
        tasks = await self.watches(client, system, ns, tracker)
        sysm = self.system(system)
        try:
            t0 = time.monotonic()
            await asyncio.to_thread(sysm.launch, ns, "-restart")
            ready = asyncio.create_task(self.ready_at(sysm))
            done = await self.new_job_done(client, ns, f"new-{system}", tracker, sysm.alive, 120 + n * 0.1, system)
            out = {"jobs": n, "seconds": done - t0, "cpu_s_to_done": sysm.meter.cpu_seconds(), "ready_s": (await ready) - t0}
            if isinstance(sysm, Ours):  # the finished jobs are listed after it is ready: when are they all in?
                out["all_cached_s"] = await self.all_listed(sysm, 120 + n * 0.1) - t0
            out["listings"] = listings(sysm)
            await self.quiet(sysm.user, seconds=10, timeout=120, reads=True)
            window = await self.idle_window(sysm, self.plan.restart_idle_seconds)
            out.update(
                idle_cpu_pct=window["cpu_pct"],
                idle_requests_per_min=window["requests_per_min"],
                rss_mib=window["rss_mib"],
                peak_rss_mib=sysm.meter.peak_rss_mib(),
                idle_seconds=window["seconds"],
            )
            if isinstance(sysm, Ours):
                out["cached"] = sysm.cached_jobs()
            log(
                f"restart {system} over {n} finished jobs: new job reconciled {out['seconds']:.1f}s after the start, "
                f"peak RSS {out['peak_rss_mib']:.0f} MiB, idle {out['idle_cpu_pct']:.2f}% of a core"
            )
            return out
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.to_thread(sysm.stop)

    async def all_listed(self, ours: Ours, timeout: float) -> float:
        """The monotonic time ours logs its RayJob listing (after the finished jobs: every kind
        is then cached), read from its log every 0.2 s (its /metrics would cost it a scrape each time)."""
        deadline = time.monotonic() + timeout
        while "rayjobs.ray.io in " not in ours.log_tail(400):
            if time.monotonic() > deadline or not ours.alive():
                return float("nan")
            await asyncio.sleep(0.2)
        return time.monotonic()

    async def ready_at(self, sysm: System) -> float:
        """The monotonic time ``sysm`` first answers ready (ours: /readyz, once every kind is
        listed; the ceiling: its "ready" line, once its one LIST is done), polled every 0.1 s."""
        while not await asyncio.to_thread(sysm.ready):
            if not sysm.alive():
                return float("nan")
            await asyncio.sleep(0.1)
        return time.monotonic()

    async def reconciles_settled(self, ours: System, seconds: float = 10, timeout: float = 120) -> None:
        """Wait until the operator's own reconcile counter has not moved for ``seconds``."""
        deadline, last, since = time.monotonic() + timeout, -1.0, time.monotonic()
        while time.monotonic() < deadline:
            now = ours.reconciles()  # type: ignore[attr-defined]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= seconds:
                return
            await asyncio.sleep(0.5)
        log(f"{ours.name} still reconciling after {timeout:.0f}s; measuring anyway")

    async def failover_point(self, client: Client, ns: str, n: int) -> dict[str, Any]:
        """Ours as two replicas with leader election (the defaults: lease 15 s, renew 10 s,
        retry 2 s) over ``n`` finished jobs: the leader SIGKILLed, a new job created at once;
        seconds from the kill and from the standby's takeover (the Lease's holder changing, read
        every 0.1 s) until the new job is reconciled; the new leader's peak RSS and idle CPU."""
        election = ("--leader-elect", "--leader-election-namespace", ns, "--leader-election-id", LEASE)
        lease_url = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}"

        async def holder() -> str:
            try:
                return (await client.request("GET", lease_url)).get("spec", {}).get("holderIdentity") or ""
            except KubeError:
                return ""

        first, second = self.system("ours", election), self.system("ours", election)
        tracker = Tracker(("status", "child"))
        tasks = await self.watches(client, "ours", ns, tracker)
        try:
            await asyncio.to_thread(first.launch(ns, "-leader").wait_ready, 120 + n * 0.1)
            deadline = time.monotonic() + 60
            while not (leader := await holder()):  # ready as a standby at once: wait until it leads
                if time.monotonic() > deadline or not first.alive():
                    raise RuntimeError(f"the first replica took no lease in 60s:\n{first.log_tail()}")
                await asyncio.sleep(0.2)
            await asyncio.to_thread(first.wait_ready, 120 + n * 0.1)  # leading: ready once it has listed every kind
            await asyncio.to_thread(second.launch(ns, "-standby").wait_ready, 60)
            await self.reconciles_settled(first)  # (not quiet(): the leader renews its Lease every 2 s)
            t_kill = time.monotonic()
            await asyncio.to_thread(first.kill)
            taken: dict[str, float] = {}

            async def watch_lease() -> None:
                while True:
                    if (await holder()) not in ("", leader):
                        taken["at"] = time.monotonic()
                        return
                    await asyncio.sleep(0.1)

            lease_task = asyncio.create_task(watch_lease())
            done = await self.new_job_done(client, ns, "new-failover", tracker, second.alive, 120 + n * 0.1)
            await asyncio.wait_for(lease_task, 30)
            out = {"jobs": n, "kill_to_done_s": done - t_kill, "takeover_s": taken["at"] - t_kill, "seconds": done - taken["at"]}
            out["all_cached_s"] = await self.all_listed(second, 120 + n * 0.1) - taken["at"]  # the idle window starts after the background listing
            out["listings"] = listings(second)
            await self.reconciles_settled(second)
            window = await self.idle_window(second, self.plan.restart_idle_seconds)
            out.update(
                idle_cpu_pct=window["cpu_pct"],
                rss_mib=window["rss_mib"],
                peak_rss_mib=second.meter.peak_rss_mib(),
                idle_seconds=window["seconds"],
                cached=second.cached_jobs(),
            )  # type: ignore[attr-defined]
            log(
                f"fail-over over {n} finished jobs: lease taken {out['takeover_s']:.1f}s after the kill, new job reconciled "
                f"{out['seconds']:.1f}s after that; peak RSS {out['peak_rss_mib']:.0f} MiB"
            )
            return out
        finally:
            for t in tasks:
                t.cancel()
            for sysm in (first, second):
                await asyncio.to_thread(sysm.stop)

    async def restart(self, client: Client) -> None:
        n = self.plan.restart_jobs
        ns, created = await self.finished_namespace(client, n)
        self.results["restart"]["create_seconds"] = created
        for system in [s for s in ("ours", "ceiling") if s in self.plan.systems]:
            await self.guard(f"restart {system} over {n} finished jobs", self.results["restart"], system, self.restart_point(client, system, ns, n))
        if "kuberay" in self.plan.systems:  # KubeRay's operator over the same number of finished RayJobs
            rayjobs_ns = await self.finished_rayjobs_namespace(client, n)
            await self.guard(
                f"restart kuberay over {n} finished RayJobs", self.results["restart"], "kuberay", self.restart_point(client, "kuberay", rayjobs_ns, n)
            )
        if "ours" in self.plan.systems:
            await self.guard(f"fail-over over {n} finished jobs", self.results["restart"], "ours_failover", self.failover_point(client, ns, n))

    # -- the whole run -----------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        plan = self.plan
        async with Client(str(self.cp.kubeconfig), plan.create_concurrency + 8, user_agent="lorarl-bench-driver") as client:
            if "burst" in plan.phases:
                for n in plan.sizes:
                    rounds = plan.rounds if n <= plan.repeat_max_jobs else 1
                    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in plan.systems}
                    for round_ in range(rounds):
                        for system in plan.systems:
                            holder: dict[str, Any] = {}
                            label = f"burst {system} N={n}" + (f" (round {round_ + 1} of {rounds})" if rounds > 1 else "")
                            await self.guard(label, holder, system, self.burst(client, system, n, round_))
                            if system in holder:
                                runs[system].append(holder[system])
                    into = self.results["burst"].setdefault(str(n), {})
                    for system, outs in runs.items():
                        if outs:
                            into[system] = median_run(outs)
            if "steady" in plan.phases:
                for system in plan.systems:
                    await self.guard(f"steady {system}", self.results["steady"], system, self.steady(client, system))
            if "idle" in plan.phases and self.results["idle"] is None and "ours" in plan.systems:
                # no burst of the settled size ran: make one for the idle figure
                holder: dict[str, Any] = {}
                await self.guard(f"burst ours N={plan.settled_jobs} (for idle)", holder, "ours", self.burst(client, "ours", plan.settled_jobs))
            if "history" in plan.phases and "ours" in plan.systems:
                for n in (0, plan.history_jobs):
                    await self.guard(f"history {n}", self.results["history"], str(n), self.history_point(client, n))
            if "restart" in plan.phases:
                await self.restart(client)
        return self.results

    async def guard(self, what: str, into: dict[str, Any], key: str, coro) -> None:
        """Run a phase; a failure is recorded (and reported) instead of ending the run. The
        figures so far are saved after each phase (``--from-json`` makes a page of them)."""
        log(f"{what} ...")
        try:
            into[key] = await coro
        except Exception as err:
            message = f"{what}: {type(err).__name__}: {err}"
            log("FAILED " + message)
            traceback.print_exc(file=sys.stderr)
            self.results["errors"].append(message)
        (self.workdir / "partial.json").write_text(json.dumps(self.results, indent=1, sort_keys=True) + "\n")


def listings(sysm: System) -> list[dict[str, Any]]:
    """What ours logged of its listings ("listed 3 lorarljobs.lorarl.dev in NS (unfinished) in 0.2s",
    "listed 10000 lorarljobs.lorarl.dev in NS (the rest, after start-up) in 31.0s")."""
    found = re.findall(r"listed (\d+) (\S+) in [^(\n]*?(?: \(([^)]*)\))? in ([\d.]+)s", sysm.log_tail(400)) if isinstance(sysm, Ours) else []
    return [{"objects": int(count), "kind": kind, "part": part or "all", "seconds": float(seconds)} for count, kind, part, seconds in found]


def median_run(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median duration (the slower of the middle two for an even count), with
    every run's duration beside it."""
    ordered = sorted(outs, key=lambda o: o["seconds"])
    median = ordered[len(ordered) // 2]
    return {**median, "runs_seconds": [o["seconds"] for o in outs]} if len(outs) > 1 else median


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = 0
    try:
        mem = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal"))) // 1024 // 1024
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(), "kernel": platform.release()}


def render_cost(n: int = 200) -> dict[str, float]:
    from lorarl.control.stored import parse_stored
    from lorarl.job import render

    doc = stored(lorarl_job("bench", 0))
    t = time.perf_counter()
    for _ in range(n):
        job, _ = parse_stored(doc)
    parse_ms = (time.perf_counter() - t) / n * 1000
    t = time.perf_counter()
    for _ in range(n):
        render.render(job)
    return {"parse_stored_ms": parse_ms, "render_ms": (time.perf_counter() - t) / n * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small N and short windows (the default)")
    mode.add_argument("--full", action="store_true", help="N = 100 and 1000; 60 s steady; 120 s idle; 10,000 finished jobs")
    parser.add_argument("--jobs", type=lambda s: [int(x) for x in s.split(",")], help="burst sizes, comma-separated")
    parser.add_argument("--systems", type=lambda s: tuple(s.split(",")), help=f"subset of {','.join(SYSTEMS)}")
    parser.add_argument("--ours-args", help="extra `lorarl run` flags for ours, one string (e.g. '--resync-seconds 3600')")
    parser.add_argument("--phases", type=lambda s: tuple(s.split(",")), help="subset of burst,steady,idle,history,restart")
    parser.add_argument("--steady-seconds", type=float)
    parser.add_argument("--idle-seconds", type=float, help="idle window (settled jobs, history and restart)")
    parser.add_argument("--settled-jobs", type=int, help="jobs settled for the idle figure (default: the largest-but-one burst size)")
    parser.add_argument("--history-jobs", type=int)
    parser.add_argument("--restart-jobs", type=int, help="finished jobs present at the restart and fail-over points")
    parser.add_argument("--restart", action="store_true", help="only the restart phase (= --phases restart)")
    parser.add_argument("--ceiling-concurrency", type=int)
    parser.add_argument("--rounds", type=int, help=f"rounds of each burst of up to {Plan.repeat_max_jobs} jobs (the median run is reported)")
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs", help="where benchmarks.md/.png/.json go")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--cleanup", action="store_true", help="delete each phase's namespace before the next (slower)")
    parser.add_argument("--from-json", type=pathlib.Path, help="only write the page and plot from a results file")
    parser.add_argument("--merge", action="store_true", help="keep the figures of the phases (and burst sizes and systems) not run from OUT/benchmarks.json")
    args = parser.parse_args(argv)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
        # a partial.json of an unfinished run lacks what the end of a run adds
        results.setdefault("started", datetime.datetime.fromtimestamp(args.from_json.stat().st_mtime, datetime.UTC).isoformat(timespec="seconds"))
        results.setdefault("command", "(an unfinished run)")
        results.setdefault("minutes", float("nan"))
        results.setdefault("machine", machine())
        results.setdefault("load_before", os.getloadavg())
        results.setdefault("load_after", os.getloadavg())
        results.setdefault("render", render_cost())
        results.setdefault("plan", asdict(FULL))
        return write(results, args.out, not args.no_plot)

    plan = FULL if args.full else QUICK
    plan = Plan(**{**asdict(plan)})
    if args.jobs:
        plan.sizes = args.jobs
        plan.settled_jobs = args.jobs[-2] if len(args.jobs) > 1 else args.jobs[0]
    plan.cleanup = args.cleanup
    plan.ours_args = tuple(args.ours_args.split()) if args.ours_args else ()
    if args.restart:
        args.phases = ("restart",)
    for name in ("systems", "phases", "steady_seconds", "settled_jobs", "history_jobs", "restart_jobs", "ceiling_concurrency", "rounds"):
        if getattr(args, name) is not None:
            setattr(plan, name, getattr(args, name))
    if args.idle_seconds is not None:
        plan.idle_seconds = plan.history_idle_seconds = plan.restart_idle_seconds = args.idle_seconds
    # the page and the JSON show no local path: whatever --out named is OUT_DIR
    command = report.neutral_command("python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]))

    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="lorarl-bench-"))
    log(f"plan: {plan}; logs in {workdir}")
    results: dict[str, Any] = {}
    t0 = time.monotonic()
    # no process of ours outlives the bench: the systems stop at exit, and SIGTERM/SIGHUP exit
    # (the control plane's own exit hook then stops it)
    atexit.register(stop_all)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: sys.exit(128 + signum))
    if "kuberay" in plan.systems:
        ensure_binaries(("kuberay-operator",))  # built by hack/controlplane/build.sh on first use
    # the history point gets a control plane of its own: what the other phases leave behind
    # (at N = 5,000: ~18,000 jobs of three systems, 12,200 ConfigMaps of ~88 KB) plus 10,000 more
    # jobs took kube-apiserver to 21 GB of RSS on this 24 GiB machine, and it stopped answering
    # (the restart point shares it: both need the same finished jobs)
    stages = [tuple(p for p in plan.phases if p not in ("history", "restart"))]
    stages.append(tuple(p for p in plan.phases if p in ("history", "restart")))
    for phases in filter(None, stages):
        with ControlPlane() as cp:
            cp.install_crds([kuberay_crd_path("RayService")])  # KubeRay's operator will not start without it
            log(f"control plane up ({cp.version}) for {', '.join(phases)}; audit log {cp.audit_log_path}")
            bench = Bench(cp, replace(plan, phases=phases), workdir)
            if results:
                bench.results = results  # one results record across both control planes
            results = asyncio.run(bench.run())
            results["audit_log_mib"] = results.get("audit_log_mib", 0) + os.path.getsize(cp.audit_log_path) / 2**20
            results["kubernetes"] = cp.version
    results.update(
        plan=asdict(plan),
        command=command,
        started=started.isoformat(timespec="seconds"),
        minutes=(time.monotonic() - t0) / 60,
        machine=machine(),
        load_before=load_before,
        load_after=os.getloadavg(),
        render=render_cost(),
    )
    if args.merge and (args.out / "benchmarks.json").is_file():
        results = merged(json.loads((args.out / "benchmarks.json").read_text()), results, plan.phases)
    status = write(results, args.out, not args.no_plot)
    log(f"done in {results['minutes']:.1f} min; process logs in {workdir}")
    if not results["errors"]:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


def merged(base: dict[str, Any], new: dict[str, Any], phases: tuple[str, ...]) -> dict[str, Any]:
    """``base`` (an earlier run's figures) with what ``new`` measured of ``phases`` in their place:
    burst figures per size and system, history per point; the page names both runs."""
    out = dict(base)
    for phase in phases:
        if phase == "burst":
            for n, systems in (new.get("burst") or {}).items():
                out.setdefault("burst", {}).setdefault(n, {}).update(systems)
        elif phase in ("history", "restart"):  # per point / per system: a run of one system keeps the others
            out[phase] = {**(base.get(phase) or {}), **(new.get(phase) or {})}
        elif new.get(phase):
            out[phase] = new[phase]
    out["errors"] = list(base.get("errors") or []) + list(new.get("errors") or [])
    out["later_runs"] = list(base.get("later_runs") or []) + [
        {
            "phases": list(phases),
            "covers": covers(new, phases),
            "command": new["command"],
            "started": new["started"],
            "minutes": new["minutes"],
            "load_before": new["load_before"],
            "load_after": new["load_after"],
        }
    ]
    return out


def covers(new: dict[str, Any], phases: tuple[str, ...]) -> list[list[str]]:
    """What a merged run measured, as the page's "Where the figures come from" names it:
    [phase, burst size or "", system or ""]."""
    out = []
    for phase in phases:
        if phase == "burst":
            out += [["burst", n, s] for n, systems in (new.get("burst") or {}).items() for s in systems]
        elif phase == "restart":
            out += [["restart", "", s] for s in new.get("restart") or {} if s in ("ours", "ceiling", "kuberay")]
        elif new.get(phase):
            out.append([phase, "", ""])
    return out


def write(results: dict[str, Any], out: pathlib.Path, with_plot: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmarks.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    png = report.plot(results, out / "benchmarks.png") if with_plot else None
    page = out / "benchmarks.md"
    kept = report.kept_analysis(page.read_text() if page.is_file() else "")
    page.write_text(report.markdown(results, png.name if png else None) + kept)
    print(report.targets_text(results))
    log(f"wrote {out / 'benchmarks.md'}")
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
