"""The pure decisions of the leader election (lorarl.runtime.leader), with a fake clock, and the flags."""

from __future__ import annotations

import datetime

import pytest
from click.testing import CliRunner
from lorarl import cli
from lorarl.runtime import leader
from lorarl.runtime.leader import Record

ME, OTHER = "op-a_1", "op-b_2"


def test_a_lease_expires_only_a_full_duration_after_we_saw_it_change():
    # observed at t=100 with a 15 s lease: valid until 115 on our own clock
    assert not leader.expired(observed_at=100.0, lease_seconds=15, now=100.0)
    assert not leader.expired(observed_at=100.0, lease_seconds=15, now=114.999)
    assert leader.expired(observed_at=100.0, lease_seconds=15, now=115.0)
    assert leader.expired(observed_at=100.0, lease_seconds=15, now=400.0)


@pytest.mark.parametrize(
    "holder,now,ours",
    [
        (OTHER, 105.0, False),  # held by another, not expired: wait
        (OTHER, 115.0, True),  # held by another, expired: take over
        (ME, 105.0, True),  # ours: renew
        ("", 100.0, True),  # released (holderIdentity cleared): take at once, no waiting
    ],
)
def test_whose_turn(holder, now, ours):
    record = Record(holder, 15, "t0", "t0", 3)
    assert leader.may_take(record, ME, observed_at=100.0, now=now) is ours


def test_renewal_keeps_acquire_time_and_transitions():
    old = Record(ME, 15, "acq", "r1", 4)
    assert leader.next_record(old, ME, "r2", 15) == Record(ME, 15, "acq", "r2", 4)


def test_takeover_counts_a_transition_and_restarts_acquire_time():
    old = Record(OTHER, 15, "acq", "r1", 4)
    assert leader.next_record(old, ME, "now", 15) == Record(ME, 15, "now", "now", 5)
    # a released lease is taken over too: one more transition
    assert leader.next_record(leader.released(old, "rel"), ME, "now", 15).transitions == 5


def test_a_new_lease_starts_at_zero_transitions():
    assert leader.next_record(None, ME, "now", 15) == Record(ME, 15, "now", "now", 0)


def test_release_clears_the_holder_and_keeps_the_count():
    assert leader.released(Record(ME, 15, "acq", "r1", 7), "now") == Record("", 1, "now", "now", 7)
    assert Record("", 1, "now", "now", 7).to_spec()["holderIdentity"] == ""


def test_the_leader_gives_up_at_the_renew_deadline():
    assert not leader.renewal_overdue(last_renewed=50.0, renew_deadline=10.0, now=59.9)
    assert leader.renewal_overdue(last_renewed=50.0, renew_deadline=10.0, now=60.0)


def test_record_round_trips_through_a_lease_spec():
    rec = Record(ME, 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:02.000000Z", 2)
    assert Record.from_lease({"spec": rec.to_spec()}) == rec
    assert Record.from_lease({"spec": {}}) == Record()


def test_micro_time_always_has_six_fractional_digits():
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert leader.micro_time(moment) == "2026-01-02T03:04:05.000000Z"


def test_lease_seconds_round_up():
    assert leader.Timings(10.5, 10.0, 2.0).lease_seconds == 11


@pytest.mark.parametrize(
    "timings,word",
    [
        ((15, 10, 2), None),
        ((10, 10, 2), "--lease-duration"),
        ((15, 10, 10), "--renew-deadline"),
        ((15, 10, 0), "--retry-period"),
    ],
)
def test_timings_are_validated(timings, word):
    problem = leader.Timings(*timings).problem()
    assert (problem is None) if word is None else (word in problem)


def test_identity_is_the_pod_name_plus_a_random_suffix():
    a, b = leader.new_identity({"POD_NAME": "lorarl-7f9c-x2"}), leader.new_identity({"POD_NAME": "lorarl-7f9c-x2"})
    assert a.startswith("lorarl-7f9c-x2_") and b.startswith("lorarl-7f9c-x2_") and a != b


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["--leader-elect"], {}, "--leader-election-namespace"),
        (
            ["--leader-elect", "--leader-election-namespace", "ops", "--lease-duration", "5", "--renew-deadline", "6"],
            {},
            "--lease-duration (5) must be greater than --renew-deadline (6)",
        ),
        (
            ["--leader-elect", "--renew-deadline", "2", "--retry-period", "2"],
            {"POD_NAMESPACE": "ops"},
            "--renew-deadline (2) must be greater than --retry-period (2)",
        ),
        (["--liveness", "localhost:8080"], {}, "--liveness 'localhost:8080': expected http://HOST:PORT/PATH"),
    ],
)
def test_bad_run_flags_are_usage_errors(args, env, message, monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    result = CliRunner().invoke(cli.main, ["run", "-n", "jobs", *args], env=env)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
