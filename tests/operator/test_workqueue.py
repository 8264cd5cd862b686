"""The keyed work queue (pure): dedup, one worker per key, due times, per-key backoff."""

from __future__ import annotations

import threading

from lorarl.control.status import apply_backoff
from lorarl.control.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drain(q: WorkQueue) -> list:
    out = []
    while (item := q.get(timeout=0)) is not None:
        out.append(item)
        q.done(item[0])
    return out


def test_a_key_added_many_times_is_handled_once_with_the_most_telling_trigger():
    q = WorkQueue(Clock())
    for trigger in ("resync", "job-event", "rayjob-event", "job-event", "resync"):
        q.add(("ns", "a"), trigger)
    q.add(("ns", "b"), "resync")
    assert len(q) == 2
    assert drain(q) == [(("ns", "a"), "rayjob-event"), (("ns", "b"), "resync")]


def test_a_key_in_progress_is_not_handed_out_twice_and_runs_again_after_done():
    q = WorkQueue(Clock())
    q.add("a", "change")
    assert q.get(timeout=0) == ("a", "change")
    q.add("a", "job-event")  # arrives while a worker holds "a"
    q.add("a", "resync")
    assert q.get(timeout=0) is None  # not to a second worker
    q.done("a")
    assert q.get(timeout=0) == ("a", "job-event")  # once more, merged
    q.done("a")
    assert q.get(timeout=0) is None


def test_due_times_order_the_keys_and_the_earlier_schedule_wins():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("late", "timer", after=30)
    q.add("soon", "timer", after=10)
    q.add("late", "timer", after=60)  # later than what is scheduled: ignored
    assert q.get(timeout=0) is None
    clock.now += 10
    assert q.get(timeout=0) == ("soon", "timer")
    q.done("soon")
    q.add("late", "job-event")  # an event does not wait for the timer
    assert q.get(timeout=0) == ("late", "job-event")
    q.done("late")
    clock.now += 100
    assert q.get(timeout=0) is None  # the superseded timer entry does not fire again


def test_failures_back_off_per_key_and_forget_resets():
    clock = Clock()
    q = WorkQueue(clock)
    delays = []
    for _ in range(4):
        delays.append(q.add_rate_limited("a", "retry", apply_backoff))
        clock.now += delays[-1]
        assert q.get(timeout=0) == ("a", "retry")
        q.done("a")
    assert delays == [5.0, 10.0, 20.0, 40.0] and q.failures("a") == 4
    q.forget("a")
    assert q.add_rate_limited("a", "retry", apply_backoff) == 5.0


def test_a_resync_does_not_cut_a_backoff_short_but_an_event_does():
    clock = Clock()
    q = WorkQueue(clock)
    q.add_rate_limited("a", "retry", lambda n: 40.0)
    q.add("a", "resync", respect_backoff=True)
    assert q.get(timeout=0) is None
    assert q.waiting() == {"a": 1040.0}
    clock.now += 40
    assert q.get(timeout=0) == ("a", "retry")  # the backoff's run, once
    q.done("a")
    q.add_rate_limited("a", "retry", lambda n: 40.0)
    q.add("a", "change")  # the user edited the job: try now
    assert q.get(timeout=0) == ("a", "change")


def test_remove_forgets_a_key_and_shutdown_wakes_the_workers():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("gone", "timer", after=5)
    q.add_rate_limited("gone", "retry", lambda n: 5)
    q.remove("gone")
    clock.now += 10
    assert q.get(timeout=0) is None and q.failures("gone") == 0
    got = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    q.shutdown()
    worker.join(timeout=10)
    assert got == [None] and not worker.is_alive()
    q.add("late", "change")  # after shutdown nothing is queued
    assert len(q) == 0


def test_a_blocked_worker_wakes_for_a_new_key():
    q = WorkQueue()
    got = []
    worker = threading.Thread(target=lambda: got.append(q.get(timeout=30)))
    worker.start()
    q.add("a", "change")
    worker.join(timeout=30)
    assert got == [("a", "change")]


def test_a_run_is_named_by_what_makes_it_run():
    clock = Clock()
    q = WorkQueue(clock)
    q.add("a", "timer", after=3600)  # the startup deadline, an hour away
    q.add("a", "resync")  # pulls it forward: this run is a resync
    assert q.get(timeout=0) == ("a", "resync")
    q.done("a")
    q.add("b", "job-event")
    q.add("b", "timer", after=60)  # later than what is queued: the run stays the event's
    assert q.get(timeout=0) == ("b", "job-event")
