"""Decides the reconcile workers' transport (docs/architecture.md, lorarl/runtime/transport.py): server-side
applies of N ConfigMaps to the real API server, 8 in flight, three ways: 8 threads on the
official client (kubernetes' ApiClient over urllib3, the transport before 2026-12-04); 8 threads
on lorarl's Api (libcurl, a handle per thread); 8 asyncio tasks on aiohttp (the ceiling's way).
Wall time and this process's CPU seconds (the operator's cost per request).

    .venv/bin/python bench/core_async_vs_threads.py [N]
"""

import asyncio
import json
import queue
import ssl
import sys
import threading
import time

import aiohttp
from lorarl.runtime.kube import Api, path, raw_requests
from lorarl_dev.controlplane import ControlPlane

N = int(sys.argv[1]) if len(sys.argv) > 1 else 600
CONC = 8


def cm(ns, i, tag):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": ns}, "data": {"prepare.sh": ("x" * 2000) + tag}}


def threads(kube, ns, tag):
    return _threads(kube.apply, ns, tag)


def official_client(client, ns, tag):
    raw = raw_requests(client)

    def apply(obj):
        answer = raw.request(
            "PATCH",
            path("v1", "ConfigMap", ns, obj["metadata"]["name"]),
            body=obj,
            query_params=[("fieldManager", "bench"), ("force", "true")],
            content_type="application/apply-patch+yaml",
            header_params={"Accept": "application/json"},
            serialize=False,
        )
        json.loads(answer.data)

    return _threads(apply, ns, tag)


def _threads(apply, ns, tag):
    q = queue.Queue()
    for i in range(N):
        q.put(i)

    def work():
        while True:
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            apply(cm(ns, i, tag))

    ts = [threading.Thread(target=work) for _ in range(CONC)]
    c0, t0 = time.process_time(), time.perf_counter()
    [t.start() for t in ts]
    [t.join() for t in ts]
    return time.perf_counter() - t0, time.process_time() - c0


async def aio(cfg, ns, tag):
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    q = asyncio.Queue()
    for i in range(N):
        q.put_nowait(i)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=CONC)) as s:

        async def work():
            while not q.empty():
                i = q.get_nowait()
                obj = cm(ns, i, tag)
                url = cfg.host + path("v1", "ConfigMap", ns, obj["metadata"]["name"])
                async with s.patch(
                    url,
                    data=json.dumps(obj),
                    params={"fieldManager": "bench", "force": "true"},
                    headers={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                ) as r:
                    json.loads(await r.read())
                    assert r.status < 300, r.status

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(work() for _ in range(CONC)))
        return time.perf_counter() - t0, time.process_time() - c0


with ControlPlane() as cp:
    cp.kubectl("create", "namespace", "a")
    cp.kubectl("create", "namespace", "b")
    cp.kubectl("create", "namespace", "c")
    client = cp.api_client()
    cfg = client.configuration
    kube = Api(client)
    for rnd in range(2):
        variants = (
            ("threads, official client", lambda: official_client(client, "c", str(rnd))),
            ("threads, lorarl Api (libcurl)", lambda: threads(kube, "a", str(rnd))),
            ("asyncio, aiohttp", lambda: asyncio.run(aio(cfg, "b", str(rnd)))),
        )
        for name, fn in variants:
            wall, cpu = fn()
            print(f"round {rnd} {name}: {N} applies in {wall:.2f}s = {N / wall:.0f}/s; client CPU {cpu:.2f}s = {1000 * cpu / N:.2f} ms/request", flush=True)
