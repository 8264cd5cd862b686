"""The chart's alerts, evaluated by the real promtool (`promtool test rules`, Debian's prometheus
package: hack/observability/packages.sh) on the PrometheusRule the real helm renders: every
alert firing on the series that should fire it and silent on those that should not.

The expected labels and annotations are written out here, not derived from files/alerts.yaml."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest
import yaml

from tests.chart.helm import pick, servicemonitor_crd_path

pytestmark = pytest.mark.controlplane  # the helm binary comes from hack/controlplane/build.sh
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: run hack/observability/packages.sh (make packages) as root")
RUNBOOK = "https://runbooks.example/lorarl.md"
OPERATOR = 'job="lorarl-lorarl-operator-metrics", namespace="lorarl-system"'


def rendered_rules(helm, **values) -> dict:
    docs = helm.render(values={"prometheusRule": {"enabled": True, "runbookURL": RUNBOOK, "labels": {"release": "kube-prometheus"}, **values}})
    rule = pick(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert pick(docs, "Service")["metadata"]["name"] == "lorarl-lorarl-operator-metrics"  # what OPERATOR's job= names
    return rule["spec"]


def job_alert(name, description, anchor, **labels):
    ns, job = labels["namespace"], labels["lorarljob"]
    return {
        "exp_labels": {"severity": "warning", **labels},
        "exp_annotations": {"summary": SUMMARY[name], "description": description.format(job=f"{ns}/{job}"), "runbook_url": f"{RUNBOOK}#{anchor}"},
    }


SUMMARY = {
    "LoraRLJobFailed": "A LoraRLJob failed.",
    "LoraRLJobTrainingUnhealthy": "A LoraRLJob trains outside its health thresholds (spec.health).",
    "LoraRLJobNoProgress": "A running LoraRLJob has made no progress for many rollout times.",
    "LoraRLJobStartingTooLong": "A LoraRLJob has been Pending or Preparing for too long.",
    "LoraRLJobStalled": "A LoraRLJob needs a human (Stalled).",
    "LoraRLJobExportFailed": "A LoraRLJob succeeded but its adapter was not exported.",
}


def s(metric: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def cond(job, condition, status, reason, values="1x60", ns="ml"):
    return s("lorarl_job_condition", values, namespace=ns, lorarljob=job, condition=condition, status=status, reason=reason)


def phase(job, name, values="1x60", ns="ml"):
    return s("lorarl_job_phase", values, namespace=ns, lorarljob=job, phase=name)


def ids(job, ns="ml"):
    return {"namespace": ns, "lorarljob": job}


JOB_TESTS = [
    {  # failed: fires with the reason and its runbook anchor; a running job does not
        "interval": "1m",
        "input_series": [
            s("lorarl_job_status_reason", "1x10", **ids("a"), phase="Failed", reason="AppFailed"),
            s("lorarl_job_status_reason", "1x10", **ids("b"), phase="Running", reason="Training"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "1m",
                "alertname": "LoraRLJobFailed",
                "exp_alerts": [job_alert("LoraRLJobFailed", "LoraRLJob {job} failed: AppFailed.", "appfailed", **ids("a"), phase="Failed", reason="AppFailed")],
            }
        ],
    },
    {  # unhealthy training: TrainingHealthy=False fires, True does not
        "interval": "1m",
        "input_series": [cond("a", "TrainingHealthy", "False", "LogprobDiffTooHigh"), cond("b", "TrainingHealthy", "True", "WithinThresholds")],
        "alert_rule_test": [
            {
                "eval_time": "1m",
                "alertname": "LoraRLJobTrainingUnhealthy",
                "exp_alerts": [
                    job_alert(
                        "LoraRLJobTrainingUnhealthy",
                        "LoraRLJob {job} is unhealthy: LogprobDiffTooHigh.",
                        "logprobdifftoohigh",
                        **ids("a"),
                        condition="TrainingHealthy",
                        status="False",
                        reason="LogprobDiffTooHigh",
                    )
                ],
            }
        ],
    },
    {  # no progress: a rollout takes 10 s (ETA 600 s for 60 left); 5 x 10 s is under the 900 s floor.
        # a: silent for 20 min -> fires once past 900 s; b reports every half minute; c is silent
        # as long but finished; d's rollouts take 1,000 s (5,000 s threshold)
        "interval": "1m",
        "input_series": [
            *[s(m, v, **ids(j)) for j in "abcd" for m, v in (("lorarl_job_rollouts_planned", "100x30"), ("lorarl_job_rollout", "40x30"))],
            *[s("lorarl_job_eta_seconds", "600x30", **ids(j)) for j in "abc"],
            s("lorarl_job_eta_seconds", "60000x30", **ids("d")),
            s("lorarl_job_seconds_since_report", "0+60x30", **ids("a")),
            s("lorarl_job_seconds_since_report", "30x30", **ids("b")),
            s("lorarl_job_seconds_since_report", "0+60x30", **ids("c")),
            s("lorarl_job_seconds_since_report", "0+60x30", **ids("d")),
            *[phase(j, "Running", "1x30") for j in "abd"],
            phase("c", "Running", "0x30"),
            phase("c", "Succeeded", "1x30"),
        ],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "LoraRLJobNoProgress", "exp_alerts": []},  # 900 s: not more than the floor yet
            {
                "eval_time": "20m",
                "alertname": "LoraRLJobNoProgress",
                "exp_alerts": [
                    job_alert(
                        "LoraRLJobNoProgress",
                        "LoraRLJob {job} has reported no progress for 20m 0s, more than 5 times its recent rollout time.",
                        "noprogress",
                        **ids("a"),
                    )
                ],
            },
        ],
    },
    {  # starting too long: p is Pending 20 min then Preparing (one series across both): fires after
        # 30 min; q waits in a Kueue queue as long and stays silent
        "interval": "1m",
        "input_series": [
            phase("p", "Pending", "1x19 0x30"),
            phase("p", "Preparing", "0x19 1x30"),
            phase("q", "Pending", "1x50"),
            phase("q", "Preparing", "0x50"),
            cond("q", "Suspended", "True", "Queued", "1x50"),
        ],
        "alert_rule_test": [
            {"eval_time": "29m", "alertname": "LoraRLJobStartingTooLong", "exp_alerts": []},
            {
                "eval_time": "35m",
                "alertname": "LoraRLJobStartingTooLong",
                "exp_alerts": [job_alert("LoraRLJobStartingTooLong", "LoraRLJob {job} has not started training for 30m.", "startingtoolong", **ids("p"))],
            },
        ],
    },
    {  # stalled: a startup timeout fires; a failed job and unhealthy training have their own alerts
        "interval": "1m",
        "input_series": [
            cond("s", "Stalled", "True", "StartupTimeout"),
            phase("s", "Pending"),
            cond("f", "Stalled", "True", "AppFailed"),
            phase("f", "Failed"),
            cond("u", "Stalled", "True", "LogprobDiffTooHigh"),
            cond("u", "TrainingHealthy", "False", "LogprobDiffTooHigh"),
            phase("u", "Running"),
            cond("ok", "Stalled", "False", "NoError"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "1m",
                "alertname": "LoraRLJobStalled",
                "exp_alerts": [
                    job_alert(
                        "LoraRLJobStalled",
                        "LoraRLJob {job} is stalled: StartupTimeout.",
                        "startuptimeout",
                        **ids("s"),
                        condition="Stalled",
                        status="True",
                        reason="StartupTimeout",
                    )
                ],
            }
        ],
    },
    {  # export failed (issue 21's AdapterExported condition): False on a succeeded run for 10 min;
        # not on a run that still trains
        "interval": "1m",
        "input_series": [
            cond("e", "AdapterExported", "False", "ExportFailed"),
            phase("e", "Succeeded"),
            cond("r", "AdapterExported", "False", "Pending"),
            phase("r", "Running"),
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "LoraRLJobExportFailed", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "LoraRLJobExportFailed",
                "exp_alerts": [
                    job_alert(
                        "LoraRLJobExportFailed",
                        "LoraRLJob {job}: the adapter export failed: ExportFailed.",
                        "exportfailed",
                        **ids("e"),
                        condition="AdapterExported",
                        status="False",
                        reason="ExportFailed",
                    )
                ],
            },
        ],
    },
]


def operator_alert(name, summary, description, anchor, severity="critical", **labels):
    return {
        "exp_labels": {"severity": severity, **labels},
        "exp_annotations": {"summary": summary, "description": description, "runbook_url": f"{RUNBOOK}#{anchor}"},
    }


OP = {"job": "lorarl-lorarl-operator-metrics", "namespace": "lorarl-system"}


def op(metric, values, **labels):
    return s(metric, values, **OP, **labels)


DOWN = operator_alert(
    "LoraRLOperatorDown",
    "No lorarl operator replica is scraped up.",
    f"No target of up{{{OPERATOR}}} has been up for 5 minutes: LoraRLJobs are not reconciled (running jobs keep training).",
    "operatordown",  # absent() of a comparison has no labels to keep
)
NOT_LEADING = operator_alert(
    "LoraRLOperatorNotLeading",
    "Operator replicas are up but none holds the Lease.",
    "The lorarl operator replicas in lorarl-system are up, but none has led for 5 minutes.",
    "operatornotleading",
    namespace="lorarl-system",
)
ERRORS = operator_alert(
    "LoraRLReconcileErrors",
    "The lorarl operator keeps failing reconciles.",
    'The lorarl operator in lorarl-system has failed 0.10 reconciles per second for 15m (its log names the jobs: "reconcile ... failed").',
    "reconcileerrors",
    severity="warning",
    namespace="lorarl-system",
)
OPERATOR_TESTS = [
    {  # both replicas down for 10 min: fires after 5 min; a replica of another release does not count
        "interval": "1m",
        "input_series": [op("up", "0x20", pod="a"), op("up", "0x20", pod="b"), s("up", "1x20", job="other-metrics", namespace="lorarl-system")],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "LoraRLOperatorDown", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "LoraRLOperatorDown", "exp_alerts": [DOWN]},
        ],
    },
    {  # one replica up (the standby down): silent; no series at all: fires
        "interval": "1m",
        "input_series": [op("up", "1x20", pod="a"), op("up", "0x20", pod="b")],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "LoraRLOperatorDown", "exp_alerts": []}],
    },
    {
        "interval": "1m",
        "input_series": [s("up", "1x20", job="other-metrics", namespace="lorarl-system")],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "LoraRLOperatorDown", "exp_alerts": [DOWN]}],
    },
    {  # two standbys and no leader for 10 min: fires; a leader back at minute 3 of the other: silent
        "interval": "1m",
        "input_series": [op("lorarl_leader", "0x20", pod="a"), op("lorarl_leader", "0x20", pod="b")],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "LoraRLOperatorNotLeading", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "LoraRLOperatorNotLeading", "exp_alerts": [NOT_LEADING]},
        ],
    },
    {
        "interval": "1m",
        "input_series": [op("lorarl_leader", "0 0 0 1x20", pod="a"), op("lorarl_leader", "0x20", pod="b")],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "LoraRLOperatorNotLeading", "exp_alerts": []}],
    },
    {  # 6 failed reconciles a minute from minute 10: fires 15 min later; ok ones do not count
        "interval": "1m",
        "input_series": [
            op("lorarl_reconcile_total", "0x10 0+6x40", trigger="change", result="error"),
            op("lorarl_reconcile_total", "0+60x40", trigger="resync", result="ok"),
        ],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "LoraRLReconcileErrors", "exp_alerts": []},  # erroring for 10 of the 15 min
            {"eval_time": "30m", "alertname": "LoraRLReconcileErrors", "exp_alerts": [ERRORS]},
        ],
    },
    {  # errors that stopped: the 10-minute rate falls to 0 and the alert resolves
        "interval": "1m",
        "input_series": [op("lorarl_reconcile_total", "0+6x30 180x30", trigger="change", result="error")],
        "alert_rule_test": [{"eval_time": "50m", "alertname": "LoraRLReconcileErrors", "exp_alerts": []}],
    },
]


def promtool(*args, cwd):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@needs_promtool
def test_every_alert_fires_when_it_should_and_only_then(helm, tmp_path):
    spec = rendered_rules(helm)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    alerts = {r["alert"] for g in spec["groups"] for r in g["rules"]}
    tests = JOB_TESTS + OPERATOR_TESTS
    tested = {t["alertname"] for case in tests for t in case["alert_rule_test"]}
    assert tested == alerts, f"alerts without a promtool test: {alerts - tested}"
    # each fires somewhere; promtool compares the exact set of alerts at each eval_time, so the
    # other jobs' series beside it (and the empty exp_alerts) are its not-firing cases
    firing = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert firing == alerts
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    out = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@needs_promtool
def test_promtool_fails_an_alert_that_does_not_fire_as_expected(helm, tmp_path):
    """The oracle can fail: the same test against rules with a raised threshold is refused."""
    spec = rendered_rules(helm, noProgress={"factor": 5, "minSeconds": 3600})
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [JOB_TESTS[2]]}))
    out = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert out.returncode != 0 and "LoraRLJobNoProgress" in out.stdout + out.stderr, out.stdout + out.stderr


def test_the_schema_refuses_bad_alert_values(helm):
    for values, field in (
        ({"runbookURL": "javascript:alert(1)"}, "/prometheusRule/runbookURL"),
        ({"startingFor": "30 minutes"}, "/prometheusRule/startingFor"),
        ({"noProgress": {"factor": 0}}, "/prometheusRule/noProgress/factor"),
        ({"operatorSelector": 'job="x"} or vector(1) #'}, "/prometheusRule/operatorSelector"),
        ({"severity": "page"}, "/prometheusRule"),
    ):
        out = helm("template", "x", helm_chart(), "--values", "-", input=yaml.safe_dump({"prometheusRule": values}), check=False)
        assert out.returncode != 0 and field in out.stderr, (values, out.stderr)


def helm_chart():
    from tests.chart.helm import CHART

    return CHART


def test_the_rule_and_the_dashboard_pass_the_api_server(control_plane, namespace, helm):
    """The PrometheusRule against prometheus-operator's own CRD (its Go module, like the
    ServiceMonitor's in tests/chart) and the dashboard ConfigMap, by server-side dry runs."""
    crd = servicemonitor_crd_path().parent / "monitoring.coreos.com_prometheusrules.yaml"
    control_plane.install_crds([crd])
    docs = helm.render(namespace=namespace, release=namespace, values={"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}})
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap" and "lorarl-jobs.json" in (d.get("data") or {})]
    objects = [pick(docs, "PrometheusRule"), dashboard]
    json.loads(objects[1]["data"]["lorarl-jobs.json"])  # the JSON survives the template
    assert objects[1]["metadata"]["labels"]["grafana_dashboard"] == "1"
    out = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(objects))
    assert out.stdout.count("serverside-applied (server dry run)") == 2, out.stdout
    broken = copy.deepcopy(objects[0])
    broken["spec"]["groups"][0]["rules"][0]["for"] = "soon"  # the CRD's duration pattern is really checked
    bad = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(broken), check=False)
    assert bad.returncode != 0 and "for" in bad.stderr, bad.stderr
