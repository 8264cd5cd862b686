"""The bench's results as targets (met or not), a Markdown page and a PNG plot."""

from __future__ import annotations

import math
import pathlib
import re
from typing import Any

NAMES = {"ours": "lorarl (ours)", "ceiling": "ceiling", "kuberay": "KubeRay operator"}
SHORT = {"ours": "ours", "ceiling": "ceiling", "kuberay": "KubeRay"}


def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _f(value: Any, fmt: str = "{:.1f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)


def targets(r: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """(target, met (None: not measured), what was measured)."""
    out: list[tuple[str, bool | None, str]] = []
    burst = r.get("burst") or {}
    ours = _get(burst, "1000", "ours")
    out.append(
        (
            "1,000 jobs fully reconciled in <= 60 s",
            None if ours is None else ours["seconds"] <= 60,
            "not measured (no N=1000 burst)" if ours is None else f"{ours['seconds']:.1f} s",
        )
    )
    for n in sorted(burst, key=int):
        o, c, k = (_get(burst, n, s) for s in ("ours", "ceiling", "kuberay"))
        if o and c:
            met = o["jobs_per_s"] >= 0.8 * c["jobs_per_s"] and (k is None or o["jobs_per_s"] >= k["jobs_per_s"])
            out.append(
                (
                    f"N={n}: burst throughput >= 80% of the ceiling and not below KubeRay's operator",
                    met,
                    f"{o['jobs_per_s']:.1f} jobs/s = {o['jobs_per_s'] / c['jobs_per_s']:.0%} of the ceiling ({c['jobs_per_s']:.1f}); "
                    + (f"KubeRay {k['jobs_per_s']:.1f} jobs/s" if k else "KubeRay not measured")
                    + _rounds(o, c),
                )
            )
    steady = _get(r, "steady", "ours")
    out.append(
        (
            f"p99 apply-to-RayJob <= 2 s at {_f(_get(steady, 'rate'), '{:g}')} jobs/s",
            None if steady is None else steady["p99"] <= 2,
            "not measured" if steady is None else f"p99 {steady['p99']:.2f} s (p50 {steady['p50']:.2f}, p95 {steady['p95']:.2f})",
        )
    )
    idle = r.get("idle")
    rss = [v for v in (_get(burst, "1000", "ours", "peak_rss_mib"), idle["peak_rss_mib"] if idle and idle["jobs"] == 1000 else None) if v]
    out.append(("peak RSS <= 150 MiB at 1,000 jobs", max(rss) <= 150 if rss else None, f"{max(rss):.0f} MiB" if rss else "not measured (no N=1000 run)"))
    if idle:
        out.append(
            (
                f"idle with {idle['jobs']} settled jobs (half finished): <= 1% of a core and zero writes",
                idle["cpu_pct"] <= 1 and idle["writes"] == 0,
                f"{idle['cpu_pct']:.2f}% of a core, {idle['writes']} writes, {idle['requests_per_min']:.0f} requests/min",
            )
        )
    else:
        out.append(("idle with 1,000 settled jobs: <= 1% of a core and zero writes", None, "not measured"))
    for n in sorted(burst, key=int):
        o = _get(burst, n, "ours")
        if o:
            children = o["child_writes_per_job"]
            once = all(abs(v - 1) < 1e-9 for v in children.values())
            out.append(
                (
                    f"N={n}: each child written once, <= 2 status writes per job on the create path",
                    once and o["status_writes_per_job"] <= 2,
                    "children "
                    + ", ".join(f"{k} {v:.2f}" for k, v in children.items())
                    + f"; status {o['status_writes_per_job']:.2f}; all writes {o['writes'] / o['jobs']:.2f} per job",
                )
            )
    hist = r.get("history") or {}
    zero = hist.get("0")
    many = next((hist[k] for k in sorted(hist, key=int, reverse=True) if k != "0"), None)
    if zero and many:
        # a watch re-opens every few minutes with or without jobs (kopf's server timeout): in a
        # 90 s window that is sampling luck, not a cost of history, so it is shown, not compared
        def calls(p: dict[str, Any]) -> float:
            return sum(v for k, v in p["by_verb_per_min"].items() if not k.startswith("watch "))

        def reopens(p: dict[str, Any]) -> float:
            return p["requests_per_min"] - calls(p)

        met = abs(calls(many) - calls(zero)) <= 1 and many["cpu_pct"] - zero["cpu_pct"] <= 0.5 and many["writes"] == 0
        out.append(
            (
                f"idle cost with {many['jobs']:,} finished jobs equals idle cost with none",
                met,
                f"{many['cpu_pct']:.2f}% vs {zero['cpu_pct']:.2f}% of a core; {calls(many):.0f} vs {calls(zero):.0f} requests/min "
                f"(+ {reopens(many):.0f} vs {reopens(zero):.0f} watch re-opens); {many['writes']} vs {zero['writes']} writes; "
                f"RSS {many['rss_mib']:.0f} vs {zero['rss_mib']:.0f} MiB",
            )
        )
    else:
        out.append(("idle cost with 10,000 finished jobs equals idle cost with none", None, "not measured"))
    out += restart_targets(r)
    return out


RESTART_SECONDS, RESTART_RSS_MIB = 15.0, 150.0


def restart_targets(r: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    restart = r.get("restart") or {}
    ours, failover, ceiling = restart.get("ours"), restart.get("ours_failover"), restart.get("ceiling")
    n = next((p["jobs"] for p in (ours, failover) if p), None)
    if n is None:
        return [("restart with 10,000 finished jobs: a new job reconciled <= 15 s after `lorarl run` starts", None, "not measured")]
    out: list[tuple[str, bool | None, str]] = []
    if ours:
        out.append(
            (
                f"restart with {n:,} finished jobs: a new job reconciled <= {RESTART_SECONDS:g} s after `lorarl run` starts",
                ours["seconds"] <= RESTART_SECONDS,
                f"{ours['seconds']:.1f} s" + (f" (the ceiling: {ceiling['seconds']:.1f} s)" if ceiling else ""),
            )
        )
    if failover:
        out.append(
            (
                f"fail-over with {n:,} finished jobs: a new job reconciled <= {RESTART_SECONDS:g} s after the standby takes the lease",
                failover["seconds"] <= RESTART_SECONDS,
                f"{failover['seconds']:.1f} s (lease taken {failover['takeover_s']:.1f} s after the leader's SIGKILL)",
            )
        )
    peaks = [p["peak_rss_mib"] for p in (ours, failover) if p]
    out.append(
        (
            f"peak RSS <= {RESTART_RSS_MIB:g} MiB after a start over {n:,} finished jobs",
            max(peaks) <= RESTART_RSS_MIB,
            " / ".join(f"{x:.0f}" for x in peaks) + " MiB (restart / fail-over)",
        )
    )
    zero = (r.get("history") or {}).get("0")
    if ours:
        base = f"; with none: {zero['cpu_pct']:.2f}%" if zero else ""
        out.append(
            (
                f"idle CPU after a start over {n:,} finished jobs equals none within noise (<= 0.5 points)",
                None if zero is None else ours["idle_cpu_pct"] - zero["cpu_pct"] <= 0.5,
                f"{ours['idle_cpu_pct']:.2f}% of a core{base}",
            )
        )
    return out


def _rounds(ours: dict[str, Any], ceiling: dict[str, Any]) -> str:
    """For a burst run in rounds: how many, and ours against the ceiling round by round."""
    o, c = ours.get("runs_seconds") or [], ceiling.get("runs_seconds") or []
    if len(o) < 2 or len(o) != len(c):
        return ""
    ratios = sorted(cs / os for os, cs in zip(o, c, strict=False))
    return f" (median run of {len(o)} rounds; ours / ceiling round by round {ratios[0]:.0%}-{ratios[-1]:.0%})"


def targets_text(r: dict[str, Any]) -> str:
    lines = ["targets:"]
    for target, met, measured in targets(r):
        word = "NOT MEASURED" if met is None else ("met" if met else "NOT MET")
        lines.append(f"  [{word}] {target}: {measured}")
    for err in r.get("errors") or []:
        lines.append(f"  [ERROR] {err}")
    return "\n".join(lines)


def _burst_table(r: dict[str, Any]) -> list[str]:
    burst = r.get("burst") or {}
    rows = [
        ("seconds until every job is reconciled", "seconds", "{:.1f}"),
        ("jobs/s", "jobs_per_s", "{:.1f}"),
        ("median job done (s after the burst began)", "median_job_s", "{:.1f}"),
        ("bench's own create burst (s)", "create_seconds", "{:.1f}"),
        ("CPU seconds (the system's process)", "cpu_s", "{:.1f}"),
        ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
        ("kube-apiserver CPU seconds", "apiserver_cpu_s", "{:.1f}"),
        ("etcd CPU seconds", "etcd_cpu_s", "{:.1f}"),
        ("API requests per job", "requests", None),
        ("writes per job", "writes", None),
    ]
    out = []
    for n in sorted(burst, key=int):
        systems = [s for s in ("ours", "ceiling", "kuberay") if s in burst[n]]
        if not systems:
            continue
        out += [
            f"**Burst, N = {int(n):,}**",
            "",
            "| figure | " + " | ".join(NAMES[s] for s in systems) + " | ours / ceiling |",
            "|---|" + "---|" * (len(systems) + 1),
        ]
        for label, key, fmt in rows:
            cells = []
            for s in systems:
                v = burst[n][s].get(key)
                cells.append(_f(v / int(n), "{:.2f}") if fmt is None and v is not None else _f(v, fmt or "{}"))
            o, c = _get(burst, n, "ours", key), _get(burst, n, "ceiling", key)
            ratio = _f(o / c, "{:.2f}") if o is not None and c else "–"
            out.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
        if any(len(burst[n][s].get("runs_seconds") or []) > 1 for s in systems):
            out.append(
                "| seconds, every round (the median run is the one above) | "
                + " | ".join(", ".join(f"{x:.1f}" for x in burst[n][s].get("runs_seconds") or []) or "–" for s in systems)
                + " | |"
            )
        out.append("")
        verbs = sorted({k for s in systems for k in burst[n][s]["by_verb"]})
        out += [
            f"Requests per job by verb and resource (N = {int(n):,}, from the audit log, each system's own identity):",
            "",
            "| request | " + " | ".join(NAMES[s] for s in systems) + " |",
            "|---|" + "---|" * len(systems),
        ]
        for v in verbs:
            out.append(f"| `{v}` | " + " | ".join(_f(burst[n][s]["per_job"].get(v), "{:.2f}") for s in systems) + " |")
        out.append("")
    return out


def _loads(loads: list[float]) -> str:
    """Load averages; a run merged from a stopped one may not have them (NaN)."""
    if any(math.isnan(x) for x in loads):
        return "not recorded"
    return " / ".join(f"{x:.1f}" for x in loads)


def neutral_command(command: str) -> str:
    """A run's command as the page shows it: whatever directory ``--out`` named is ``OUT_DIR``."""
    return re.sub(r"(--out)(=|\s+)\S+", r"\1\2OUT_DIR", command)


def _option(command: str, name: str) -> list[str] | None:
    m = re.search(rf"{name}(?:=|\s+)(\S+)", command)
    return m.group(1).split(",") if m else None


def _covers(run: dict[str, Any], plan: dict[str, Any]) -> set[tuple[str, str, str]]:
    """What a merged run measured: (phase, burst size or "", system or ""); recorded by
    ``run.merged``, else read back from its command."""
    if run.get("covers") is not None:
        return {tuple(c) for c in run["covers"]}  # type: ignore[misc]
    systems = _option(run["command"], "--systems") or list(plan.get("systems") or NAMES)
    sizes = _option(run["command"], "--jobs") or [str(n) for n in plan.get("sizes") or []]
    out: set[tuple[str, str, str]] = set()
    for phase in run["phases"]:
        if phase == "burst":
            out |= {("burst", n, s) for n in sizes for s in systems}
        elif phase == "restart":
            out |= {("restart", "", s) for s in systems}
        else:
            out.add((phase, "", ""))
    return out


def _describe(keys: set[tuple[str, str, str]]) -> str:
    parts = []
    for phase in dict.fromkeys(k[0] for k in sorted(keys)):
        mine = [k for k in keys if k[0] == phase]
        sizes = sorted({k[1] for k in mine if k[1]}, key=int)
        systems = [SHORT[s] for s in SHORT if any(k[2] == s for k in mine)]
        text = phase + (" N = " + ", ".join(f"{int(n):,}" for n in sizes) if sizes else "")
        parts.append(text + (f" ({', '.join(systems)})" if systems else ""))
    return "; ".join(parts)


def sources(r: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what it measured that the page still shows, the run), newest run first; a run whose
    figures a later one replaced entirely is left out."""
    plan = r.get("plan") or {}
    taken: set[tuple[str, str, str]] = set()
    out = []
    for run in reversed(r.get("later_runs") or []):
        mine = _covers(run, plan) - taken
        taken |= mine
        if mine:
            out.append((_describe(mine), run))
    rest = [p for p in ("burst", "steady", "idle", "history", "restart") if r.get(p) and not (p != "burst" and any(k[0] == p for k in taken))]
    if "burst" in rest:
        left = [n for n in sorted(r["burst"], key=int) if any(("burst", n, s) not in taken for s in r["burst"][n])]
        rest = [p for p in rest if p != "burst"] if not left else rest
        label = {"burst": "burst N = " + ", ".join(f"{int(n):,}" for n in left)} if left else {}
    else:
        label = {}
    if rest or not out:
        out.append((", ".join(label.get(p, p) for p in rest) or "all", r))
    return out


def markdown(r: dict[str, Any], png: str | None) -> str:
    m, plan = r["machine"], r["plan"]
    out = [
        "# Benchmarks",
        "",
        "Generated by `bench/` (`make bench`, i.e. `.venv/bin/python -m bench --full`); never a timed assertion in a test.",
        "Everything runs on the embedded control plane (real etcd, kube-apiserver and kube-controller-manager",
        f"{r.get('kubernetes', '')}, with the audit log on) on this machine. Three systems, one after the other, each a separate",
        "process in a fresh namespace, with its own ServiceAccount (cluster-admin) so that the API server's audit log tells its",
        "requests apart:",
        "",
        "- **lorarl (ours)**: `lorarl run -n NS` with its defaults (kopf, 30 s resync), the controller core in this tree;",
        "- **ceiling**: `python -m bench.ceiling`, a tight asyncio client that, for each new LoraRLJob seen in one watch, renders",
        "  the children with the operator's own `parse_stored` and `render.render`, server-side applies the six children, writes",
        "  the status once (`status.compute`) and posts the one Event: the create path's writes and nothing else, "
        f"{plan['ceiling_concurrency']} jobs in flight;",
        "- **KubeRay operator**: the real `kuberay-operator` v1.5.0 binary (hack/controlplane) with its defaults (reconcile",
        "  concurrency 1, QPS 100, burst 200), reconciling the same RayJobs (our rendered RayJob, no owner) into RayClusters;",
        "  a job counts as reconciled when its RayCluster exists and KubeRay's status names it (pods stay Pending: no nodes).",
        "",
        "Each phase's namespace is left in place afterwards (each system watches only its own; `--cleanup` deletes them).",
        "",
        "A LoraRLJob counts as reconciled when its RayJob exists and its status has `observedGeneration` (first time each is",
        "seen in the bench's watches). Burst: the bench creates N jobs at once (32 requests in flight) and the clock starts at",
        f"its first request. A burst of up to {plan.get('repeat_max_jobs', 200)} jobs lasts a few seconds, where one busy second moves",
        f"a ratio by 25 points: it runs in {plan.get('rounds', 1)} round(s), each system once per round, interleaved, and each",
        "system's run with the median duration is reported (its other figures are that run's). Steady: one job every 1/rate s;",
        "latency = the RayJob (KubeRay: the RayCluster) appearing in the watch",
        "minus the moment the job's create was sent. CPU seconds and peak RSS (VmHWM) of each system's process come from /proc;",
        "requests from the audit log. Idle: half the jobs of a burst are moved to Succeeded and half to Running by RayJob status",
        "writes of the KubeRay stand-in (`lorarl_dev.kuberay_sim.FakeKubeRay`: initializing, submitted, running (, succeeded),",
        "folded into one write); once the operator shows those phases and has stopped writing, a window is measured. History:",
        "the same idle window over an empty namespace and over N finished LoraRLJobs created directly through the API with the",
        "status `lorarl.control.status.compute` makes of that sequence (the operator keeps no record of its own on the object)",
        "(jobs a running operator finished long ago; their RayJobs gone, as KubeRay's `ttlSecondsAfterFinished` does), after",
        "a fresh operator has seen each of them once; on a control plane of its own, started after the other phases (what",
        "they leave behind would otherwise weigh on the API server during the history point).",
        "",
        "## How to run",
        "",
        "```sh",
        "make bench                          # = .venv/bin/python -m bench --full (~30 min on 2 quiet cores)",
        ".venv/bin/python -m bench --quick   # small N, short windows: a smoke run",
        ".venv/bin/python -m bench --jobs 100,500 --systems ours,ceiling --phases burst,idle --out OUT_DIR",
        ".venv/bin/python -m bench --restart --restart-jobs 10000 --merge   # one phase again, the rest of the page kept",
        ".venv/bin/python -m bench --phases churn --baseline main   # one tenant's edits vs another's new jobs (bench/churn.py)",
        "```",
        "",
        "It writes `docs/benchmarks.md` (this page), `docs/benchmarks.png` and the raw figures `docs/benchmarks.json` (or the",
        "same three files in `--out OUT_DIR`), and prints each target as met or not. Exit status 1 when a phase failed (the page",
        "says which).",
        "",
        "## Where the figures come from",
        "",
        "Each row is the run whose figures the page shows for what it names (newest first); a later run with `--merge`",
        "replaces only what it measured. `--out OUT_DIR` stands for wherever that run wrote before its figures were merged here.",
        "",
        "| figures | measured (UTC) | minutes | load average before / after (1/5/15 min) | command |",
        "|---|---|---|---|---|",
    ]
    for what, run in sources(r):
        out.append(
            f"| {what} | {run['started'][:16].replace('T', ' ')} | {run['minutes']:.1f} | {_loads(run['load_before'])}; "
            f"{_loads(run['load_after'])} | `{neutral_command(run['command'])}` |"
        )
    out += [
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}. "
        f"Offline cost per job: `parse_stored` {r['render']['parse_stored_ms']:.2f} ms, `render.render` {r['render']['render_ms']:.2f} ms.",
    ]
    out += [
        "",
        "## Targets",
        "",
        "| target | met | measured |",
        "|---|---|---|",
    ]
    for target, met, measured in targets(r):
        out.append(f"| {target} | {'–' if met is None else ('yes' if met else '**no**')} | {measured} |")
    for err in r.get("errors") or []:
        out.append(f"| phase failed | **error** | {err} |")
    out += ["", "## Figures", ""]
    if png:
        out += [f"![benchmark plot]({png})", ""]
    out += _burst_table(r)
    steady = r.get("steady") or {}
    if steady:
        systems = [s for s in ("ours", "ceiling", "kuberay") if s in steady]
        any_s = steady[systems[0]]
        out += [
            f"**Steady, {any_s['rate']:g} jobs/s for {any_s['seconds']:g} s** (ours and the ceiling: create -> RayJob; KubeRay: RayJob create -> RayCluster)",
            "",
            "| figure | " + " | ".join(NAMES[s] for s in systems) + " |",
            "|---|" + "---|" * len(systems),
        ]
        for label, key, fmt in (
            ("p50 (s)", "p50", "{:.3f}"),
            ("p95 (s)", "p95", "{:.3f}"),
            ("p99 (s)", "p99", "{:.3f}"),
            ("max (s)", "max", "{:.3f}"),
            ("CPU seconds", "cpu_s", "{:.1f}"),
            ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
        ):
            out.append(f"| {label} | " + " | ".join(_f(steady[s].get(key), fmt) for s in systems) + " |")
        out.append("")
    idle, hist = r.get("idle"), r.get("history") or {}
    points = ([(f"{idle['jobs']:,} settled jobs (half Succeeded, half Running)", idle)] if idle else []) + [
        (f"{int(k):,} finished jobs (history)", hist[k]) for k in sorted(hist, key=int)
    ]
    if points:
        out += [
            "**Idle (ours)**",
            "",
            "| state | window (s) | CPU (% of a core) | requests/min | writes | kube-apiserver CPU (%) | RSS (MiB) | "
            "peak RSS (MiB) | jobs cached whole / compact | startup: every job seen once (s) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, p in points:
            cached = p.get("cached")
            cached_text = f"{cached['whole']:,} / {cached['compact']:,}" if cached else "–"
            out.append(
                f"| {label} | {p['seconds']:.0f} | {p['cpu_pct']:.2f} | {p['requests_per_min']:.0f} | {p['writes']} | "
                f"{p['apiserver_cpu_pct']:.1f} | {p['rss_mib']:.0f} | {_f(p.get('peak_rss_mib'), '{:.0f}')} | "
                f"{cached_text} | {_f(p.get('startup_seconds'))} |"
            )
        out.append("")
        verbs = sorted({k for _, p in points for k in p["by_verb_per_min"]})
        if verbs:
            out += ["Idle requests per minute by verb:", "", "| request | " + " | ".join(label for label, _ in points) + " |", "|---|" + "---|" * len(points)]
            for v in verbs:
                out.append(f"| `{v}` | " + " | ".join(_f(p["by_verb_per_min"].get(v), "{:.0f}") for _, p in points) + " |")
            out.append("")
    out += _restart_table(r)
    out += [ANALYSIS_MARK, ""]
    return "\n".join(out)


def _restart_table(r: dict[str, Any]) -> list[str]:
    restart = r.get("restart") or {}
    columns = [
        (k, label)
        for k, label in (
            ("ours", NAMES["ours"]),
            ("ours_failover", "lorarl, fail-over (2 replicas)"),
            ("ceiling", NAMES["ceiling"]),
            ("kuberay", NAMES["kuberay"] + " (over finished RayJobs)"),
        )
        if k in restart
    ]
    if not columns:
        return []
    n = restart[columns[0][0]]["jobs"]
    rows = [
        ("seconds to the new job's RayJob and status: after the start (fail-over: after the lease is taken)", "seconds", "{:.1f}"),
        ("fail-over: seconds from the leader's SIGKILL to the lease taken", "takeover_s", "{:.1f}"),
        ("fail-over: seconds from the leader's SIGKILL to the new job reconciled", "kill_to_done_s", "{:.1f}"),
        ("seconds from the start to ready (ours: the unfinished jobs listed; the ceiling: its LIST done)", "ready_s", "{:.1f}"),
        ("seconds from the start (fail-over: the lease taken) to every job cached (ours: the finished ones listed after ready)", "all_cached_s", "{:.1f}"),
        ("CPU seconds from the start to the new job reconciled", "cpu_s_to_done", "{:.1f}"),
        ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
        ("RSS once idle (MiB)", "rss_mib", "{:.0f}"),
        ("idle CPU once started (% of a core)", "idle_cpu_pct", "{:.2f}"),
    ]
    out = [
        f"**Restart over {n:,} finished jobs** (a new job created as the system starts; idle window {restart[columns[0][0]].get('idle_seconds', 0):.0f} s)",
        "",
        "| figure | " + " | ".join(label for _, label in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for label, key, fmt in rows:
        out.append(f"| {label} | " + " | ".join(_f(restart[k].get(key), fmt) for k, _ in columns) + " |")
    listed = [restart[k].get("listings") for k, _ in columns]
    if any(listed):
        text = [
            "; ".join(
                f"{x['objects']:,} {x['kind'].split('.')[0]}{' (' + x['part'] + ')' if x.get('part', 'all') != 'all' else ''}: {x['seconds']:.1f} s" for x in ls
            )
            if ls
            else "–"
            for ls in listed
        ]
        out.append("| its LISTs, as it logged them | " + " | ".join(text) + " |")
    cached = [restart[k].get("cached") for k, _ in columns]
    out.append("| jobs cached whole / compact | " + " | ".join(f"{c['whole']:,} / {c['compact']:,}" if c else "–" for c in cached) + " |")
    out.append("")
    return out


ANALYSIS_MARK = "<!-- analysis -->"


def kept_analysis(old_page: str) -> str:
    """What a person wrote below the analysis mark of the previous page (kept across runs)."""
    return old_page.split(ANALYSIS_MARK, 1)[1].lstrip("\n") if ANALYSIS_MARK in old_page else ""


def plot(r: dict[str, Any], path: pathlib.Path) -> pathlib.Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    burst = r.get("burst") or {}
    ax = axes[0]
    for s, style in (("ours", "o-"), ("ceiling", "s--"), ("kuberay", "^-.")):
        pts = sorted((int(n), burst[n][s]["jobs_per_s"]) for n in burst if s in burst[n])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=NAMES[s])
    ax.set_xscale("log")
    ax.set_xlabel("jobs created at once (N)")
    ax.set_ylabel("jobs reconciled per second")
    ax.set_ylim(bottom=0)
    ax.set_title("Burst throughput")
    ax.legend()
    ax.grid(alpha=0.3)

    ax = axes[1]
    steady = r.get("steady") or {}
    for s, style in (("ours", "-"), ("ceiling", "--"), ("kuberay", "-.")):
        lat = (steady.get(s) or {}).get("latencies")
        if lat:
            ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], style, label=NAMES[s])
    ax.axvline(2.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("apply -> RayJob (KubeRay: -> RayCluster), seconds")
    ax.set_ylabel("fraction of jobs")
    rate = next((v["rate"] for v in steady.values()), None)
    ax.set_title(f"Steady latency at {rate:g} jobs/s" if rate else "Steady latency")
    if steady:
        ax.legend()
    ax.grid(alpha=0.3)

    ax = axes[2]
    idle, hist = r.get("idle"), r.get("history") or {}
    points = ([(f"{idle['jobs']:,}\nsettled", idle)] if idle else []) + [(f"{int(k):,}\nfinished", hist[k]) for k in sorted(hist, key=int)]
    if points:
        xs = range(len(points))
        ax.bar([x - 0.2 for x in xs], [p["cpu_pct"] for _, p in points], 0.4, label="CPU, % of a core")
        ax2 = ax.twinx()
        ax2.bar([x + 0.2 for x in xs], [p["requests_per_min"] for _, p in points], 0.4, color="tab:orange", label="API requests/min")
        ax2.set_ylabel("API requests per minute")
        ax.set_xticks(list(xs), [label for label, _ in points])
        ax.set_ylabel("operator CPU, % of one core")
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper left")
    ax.set_title("Idle cost of ours")
    load = r.get("load_before") or [0]
    fig.suptitle(f"lorarl benchmark, {r['started'][:16]} UTC, {r['machine']['cores']} cores, load average before {load[0]:.1f}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
