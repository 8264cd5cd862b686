"""The Grafana dashboard of the chart (charts/lorarl-operator/files/dashboard.json), generated:
``python hack/observability/dashboard.py > charts/lorarl-operator/files/dashboard.json``
(``make generate``). Every query is evaluated against a real Prometheus by
tests/observability/test_observe_live.py; the variables are $namespace and $lorarljob.

Sources of the metric names that are not ours: the AMD device metrics exporter's
gpu_gfx_activity and gpu_package_power (ROCm/device-metrics-exporter
pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go, GaugeOpts names; labels pod and namespace when the
exporter's GPUConfig.Labels enable POD and NAMESPACE), and Kueue's kueue_pending_workloads and
kueue_admission_wait_time_seconds (kubernetes-sigs/kueue pkg/metrics/metrics.go).
"""

from __future__ import annotations

import json

JOB = 'namespace="$namespace", lorarljob="$lorarljob"'
# the job's pods: KubeRay names them after the RayCluster, "<RayJob name = job name>-<suffix>-head-..."
JOB_PODS = 'namespace="$namespace", pod=~"$lorarljob-.+"'

FLEET = [
    ("Jobs by phase", "timeseries", "short", [("count by (phase) (lorarl_job_phase == 1)", "{{phase}}")]),
    ("Jobs by phase and reason", "table", "short", [("count by (phase, reason) (lorarl_job_status_reason)", "{{phase}} {{reason}}")]),
    (
        "GPU-hours by namespace (in the range)",
        "bargauge",
        "short",
        [("sum by (namespace) (increase(lorarl_namespace_gpu_hours_total[$__range]))", "{{namespace}}")],
    ),
    ("GPU-hours of live jobs by namespace", "timeseries", "short", [("sum by (namespace) (lorarl_job_gpu_hours)", "{{namespace}}")]),
    ("Kueue: pending workloads by ClusterQueue", "timeseries", "short", [("sum by (cluster_queue) (kueue_pending_workloads)", "{{cluster_queue}}")]),
    (
        "Kueue: admission wait p90 by ClusterQueue",
        "timeseries",
        "s",
        [("histogram_quantile(0.9, sum by (le, cluster_queue) (rate(kueue_admission_wait_time_seconds_bucket[5m])))", "{{cluster_queue}}")],
    ),
    ("Operator: reconciles per second", "timeseries", "ops", [("sum by (result) (rate(lorarl_reconcile_total[5m]))", "{{result}}")]),
    ("Operator: leader", "stat", "short", [("max(lorarl_leader)", "leader")]),
]
PER_JOB = [
    ("Progress", "timeseries", "percent", [(f"lorarl_job_progress_percent{{{JOB}}}", "percent"), (f"lorarl_job_rollout{{{JOB}}}", "rollout")]),
    ("Reward", "timeseries", "short", [(f"lorarl_job_reward{{{JOB}}}", "raw reward")]),
    (
        "Logprob gap (train vs rollout)",
        "timeseries",
        "short",
        [(f"lorarl_job_logprob_abs_diff{{{JOB}}}", "latest"), (f"lorarl_job_logprob_abs_diff_mean{{{JOB}}}", "mean (health signal)")],
    ),
    ("Eval score by dataset", "timeseries", "short", [(f"lorarl_job_eval_score{{{JOB}}}", "{{dataset}}")]),
    ("GPU-hours and attempts", "timeseries", "short", [(f"lorarl_job_gpu_hours{{{JOB}}}", "GPU-hours"), (f"lorarl_job_attempts{{{JOB}}}", "attempts")]),
    ("Seconds since the last report", "timeseries", "s", [(f"lorarl_job_seconds_since_report{{{JOB}}}", "since report")]),
    ("GPU activity of the job's pods (AMD exporter)", "timeseries", "percent", [(f"avg by (pod) (gpu_gfx_activity{{{JOB_PODS}}})", "{{pod}}")]),
    ("GPU power of the job's pods (AMD exporter)", "timeseries", "watt", [(f"sum by (pod) (gpu_package_power{{{JOB_PODS}}})", "{{pod}}")]),
]


def panel(pid: int, title: str, kind: str, unit: str, targets: list[tuple[str, str]], x: int, y: int) -> dict:
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr,
                "legendFormat": legend,
                "range": kind != "table",
                "instant": kind == "table",
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard() -> dict:
    panels, pid, y = [], 1, 0
    for title, group in (("Fleet", FLEET), ("Job $namespace/$lorarljob", PER_JOB)):
        panels.append({"id": pid, "type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, (name, kind, unit, targets) in enumerate(group):
            panels.append(panel(pid, name, kind, unit, targets, 12 * (i % 2), y + 8 * (i // 2)))
            pid += 1
        y += 8 * ((len(group) + 1) // 2)

    def variable(name: str, query: str) -> dict:
        return {
            "name": name,
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name},
            "definition": query,
            "refresh": 2,
            "sort": 1,
            "current": {},
        }

    return {
        "title": "lorarl: LoRA RL jobs",
        "uid": "lorarl-jobs",
        "description": "LoraRLJobs: the fleet and one job (docs/observability.md).",
        "tags": ["lorarl"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {}},
                variable("namespace", "label_values(lorarl_job_phase, namespace)"),
                variable("lorarljob", 'label_values(lorarl_job_phase{namespace="$namespace"}, lorarljob)'),
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    print(json.dumps(dashboard(), indent=1))
