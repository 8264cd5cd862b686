"""Per-job metrics: the collector's output read back by prometheus_client's own text parser
(the exposition format Prometheus scrapes), over jobs as the operator caches them."""

from __future__ import annotations

from lorarl.control import jobmetrics
from lorarl.control.cache import compact_job
from lorarl.runtime.metrics import SampleCollector
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def iso(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_job(name="a", namespace="ml", uid="u1", created=NOW - 3600, reported=NOW - 42, hours=1.5):
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "generation": 1, "creationTimestamp": iso(created)},
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Training"},
                {"type": "Stalled", "status": "False", "reason": "NoError"},
                {"type": "TrainingHealthy", "status": "True", "reason": "WithinThresholds"},
            ],
            "progress": {"rollout": 40, "total": 100, "percent": 40, "etaSeconds": 900, "lastUpdateTime": iso(reported), "attempts": 1, "gpuHours": hours},
            "metrics": {"rawReward": 0.6772, "trainRolloutLogprobAbsDiff": 0.0131, "trainRolloutLogprobAbsDiffMean": 0.01211},
            "eval": [
                {"name": "gsm8k", "latest": 0.81, "latestRollout": 39, "best": 0.81, "bestRollout": 39},
                {"name": "math", "latest": 0.4, "latestRollout": 39, "best": 0.41, "bestRollout": 19},
            ],
        },
    }


def finished(body, completed):
    out = {**body, "status": {**body["status"], "phase": "Succeeded", "completionTime": iso(completed)}}
    out["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Succeeded"}]
    return out


def scrape(per_job: jobmetrics.JobMetrics, jobs, now=NOW) -> dict[str, dict[tuple, float]]:
    """{metric name: {sorted label items: value}} as Prometheus would read /metrics."""
    collector = SampleCollector()
    collector.bind(lambda: per_job.samples(jobs, now), jobmetrics.HELP, jobmetrics.COUNTERS)
    registry = CollectorRegistry()
    registry.register(collector)
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(series: dict[tuple, float]) -> float:
    assert len(series) == 1, series
    return next(iter(series.values()))


def test_a_running_job_shows_every_status_number_labelled_by_namespace_and_job():
    got = scrape(jobmetrics.JobMetrics(started=NOW - 10_000, finished_seconds=3600), [running_job()])
    ids = (("lorarljob", "a"), ("namespace", "ml"))
    assert got["lorarl_job_rollout"] == {ids: 40.0}
    assert one(got["lorarl_job_rollouts_planned"]) == 100 and one(got["lorarl_job_progress_percent"]) == 40
    assert one(got["lorarl_job_reward"]) == 0.6772
    assert one(got["lorarl_job_logprob_abs_diff"]) == 0.0131 and one(got["lorarl_job_logprob_abs_diff_mean"]) == 0.01211
    assert one(got["lorarl_job_attempts"]) == 1 and one(got["lorarl_job_gpu_hours"]) == 1.5 and one(got["lorarl_job_eta_seconds"]) == 900
    assert one(got["lorarl_job_seconds_since_report"]) == 42
    assert got["lorarl_job_eval_score"] == {(("dataset", "gsm8k"), *ids): 0.81, (("dataset", "math"), *ids): 0.4}
    phases = {dict(k)["phase"]: v for k, v in got["lorarl_job_phase"].items()}
    assert phases == {"Pending": 0, "Preparing": 0, "Running": 1, "Succeeded": 0, "Failed": 0, "Suspended": 0}
    assert got["lorarl_job_status_reason"] == {(("lorarljob", "a"), ("namespace", "ml"), ("phase", "Running"), ("reason", "Training")): 1.0}
    conditions = {(dict(k)["condition"], dict(k)["status"], dict(k)["reason"]) for k in got["lorarl_job_condition"]}
    assert conditions == {("Ready", "True", "Training"), ("Stalled", "False", "NoError"), ("TrainingHealthy", "True", "WithinThresholds")}
    assert got["lorarl_jobs"][(("phase", "Running"),)] == 1 and got["lorarl_jobs"][(("phase", "Failed"),)] == 0
    per_job = sum(len(v) for k, v in got.items() if k.startswith("lorarl_job_"))
    assert per_job == 23  # 6 phase + 1 reason + 3 conditions + 9 values + 2 eval + since + created (docs/observability.md)


def test_series_follow_the_cached_jobs_and_finished_ones_go_after_the_configured_time():
    per_job = jobmetrics.JobMetrics(started=NOW - 10_000, finished_seconds=600)
    both = scrape(per_job, [running_job("a"), running_job("b", uid="u2")])
    assert {dict(k)["lorarljob"] for k in both["lorarl_job_rollout"]} == {"a", "b"}
    gone = scrape(per_job, [running_job("a")])  # b deleted: it left the cache
    assert {dict(k)["lorarljob"] for k in gone["lorarl_job_rollout"]} == {"a"}
    assert all(dict(k).get("lorarljob") != "b" for series in gone.values() for k in series)
    done = compact_job(finished(running_job("a"), completed=NOW - 599))  # what the cache keeps of it
    recent = scrape(per_job, [done])
    assert one(recent["lorarl_job_gpu_hours"]) == 1.5 and "lorarl_job_reward" not in recent  # the compact form keeps progress
    assert recent["lorarl_job_status_reason"] == {(("lorarljob", "a"), ("namespace", "ml"), ("phase", "Succeeded"), ("reason", "Succeeded")): 1.0}
    assert "lorarl_job_seconds_since_report" not in recent  # a finished job does not report any more
    later = scrape(per_job, [compact_job(finished(running_job("a"), completed=NOW - 601))])
    assert not [k for k in later if k.startswith("lorarl_job_")]
    assert later["lorarl_jobs"][(("phase", "Succeeded"),)] == 1  # still counted by phase


def test_the_namespace_gpu_hours_counter_counts_increments_and_keeps_them_when_jobs_go():
    started = NOW - 100
    per_job = jobmetrics.JobMetrics(started=started, finished_seconds=3600)
    old = running_job("old", created=started - 50, hours=10.0)  # there at the first listing: a baseline
    new = running_job("new", uid="u2", created=started + 10, hours=2.0)  # created since: counted from 0
    first = scrape(per_job, [old, new])
    assert first["lorarl_namespace_gpu_hours_total"] == {(("namespace", "ml"),): 2.0}
    old["status"]["progress"]["gpuHours"] = 10.5
    assert one(scrape(per_job, [old, new])["lorarl_namespace_gpu_hours_total"]) == 2.5
    assert one(scrape(per_job, [old])["lorarl_namespace_gpu_hours_total"]) == 2.5  # new deleted: its hours stay
    other = running_job("x", namespace="team-b", uid="u3", created=started + 20, hours=4.0)
    got = scrape(per_job, [old, other])["lorarl_namespace_gpu_hours_total"]
    assert got == {(("namespace", "ml"),): 2.5, (("namespace", "team-b"),): 4.0}
    old["status"]["progress"]["gpuHours"] = 3.0  # never negative (a reset status counts nothing)
    assert scrape(per_job, [old, other])["lorarl_namespace_gpu_hours_total"][(("namespace", "ml"),)] == 2.5


def test_a_job_with_no_status_yet_is_counted_and_shows_no_numbers():
    body = {"metadata": {"namespace": "ml", "name": "fresh", "uid": "u9", "creationTimestamp": iso(NOW - 1)}}
    got = scrape(jobmetrics.JobMetrics(started=NOW - 5, finished_seconds=60), [body])
    assert set(k for k in got if k.startswith("lorarl_job_")) == {"lorarl_job_created_timestamp_seconds"}
    bad = {
        "metadata": {"namespace": "ml", "name": "odd"},
        "status": {"phase": "Running", "progress": {"rollout": "x", "lastUpdateTime": "yesterday"}, "eval": ["x"]},
    }
    got = scrape(jobmetrics.JobMetrics(started=NOW - 5, finished_seconds=60), [bad])  # unreadable values are left out, never a traceback
    assert "lorarl_job_rollout" not in got and "lorarl_job_seconds_since_report" not in got
