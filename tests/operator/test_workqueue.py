"""The keyed work queue (pure): dedup, one worker per key, due times, per-key backoff."""

from __future__ import annotations

import ast
import threading

from lorarl.control.status import apply_backoff
from lorarl.control.workqueue import RESYNC, TRIGGER_RANK, WorkQueue

from tests.helpers import REPO


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


def test_a_timer_a_resync_pulled_forward_comes_back_after_the_run():
    """The controller skips a resync of a finished job; the timer a resync absorbed must come
    back at ``done`` (the ttlSecondsAfterFinished deletion was lost once: the reconcile that wrote
    Failed asked for a timer in 1 s while a resync queued from the older cached copy came in)."""
    clock = Clock()
    q = WorkQueue(clock)
    assert q.get(timeout=0) is None
    q.add("a", "change")
    assert q.get(timeout=0) == ("a", "change")
    q.add("a", "timer", after=1)  # while processing: the TTL's check
    q.add("a", "resync")  # the stale resync, due now: it runs first and is named so
    q.done("a")
    assert q.get(timeout=0) == ("a", "resync")
    q.done("a")  # the worker skipped it (the job is finished)
    assert q.waiting() == {"a": clock.now + 1}
    clock.now += 1
    assert q.get(timeout=0) == ("a", "timer")
    q.done("a")
    # the same for a waiting key: the startup deadline an hour away survives every resync
    q.add("b", "timer", after=3600)
    for _ in range(3):
        q.add("b", "resync")
        assert q.get(timeout=0) == ("b", "resync")
        q.done("b")
        assert q.waiting()["b"] == clock.now + 3600  # still there, neither pulled in nor lost
    q.remove("b")
    assert "b" not in q.waiting()


def test_a_timer_asked_for_after_a_resync_was_queued_comes_back_too():
    """The other order: a resync queued while the reconcile still runs (the cached job was
    exporting its adapter, so it was resynced), then that reconcile asks for its TTL timer. The
    resync runs first and is skipped (the job is finished now); the timer must still come (the
    ttlSecondsAfterFinished deletion after an export was lost once: tests/operator/test_export_live.py)."""
    clock = Clock()
    q = WorkQueue(clock)
    q.add("a", "pod-event")
    assert q.get(timeout=0) == ("a", "pod-event")
    q.add("a", "resync")  # the resync thread, from the cached copy
    q.add("a", "timer", after=1)  # the reconcile's TTL check
    q.done("a")
    assert q.get(timeout=0) == ("a", "resync")
    q.done("a")  # skipped by the worker
    assert q.waiting() == {"a": clock.now + 1}
    clock.now += 1
    assert q.get(timeout=0) == ("a", "timer")
    q.done("a")
    # a waiting key: a timer added after a resync due now is kept for after it as well
    q.add("b", "resync")
    q.add("b", "timer", after=60)
    assert q.get(timeout=0) == ("b", "resync")
    q.done("b")
    assert q.waiting() == {"b": clock.now + 60}


# -- fairness across namespaces --------------------------------------------------------------------


def test_a_burst_in_one_namespace_does_not_starve_a_new_key_of_another():
    q = WorkQueue(Clock())
    for i in range(100):
        q.add(("churn", f"job-{i}"), "change")
    q.add(("quiet", "new-job"), "change")  # added after the whole burst
    order = [key for key, _ in drain(q)]
    assert order.index(("quiet", "new-job")) <= 1  # one namespace's key at most before it, not 100
    assert [k for k in order if k[0] == "churn"] == [("churn", f"job-{i}") for i in range(100)]  # in order within a namespace


def test_namespaces_take_turns_and_each_keeps_its_order():
    q = WorkQueue(Clock())
    for i in range(3):
        q.add(("a", f"a{i}"), "change")
    for i in range(2):
        q.add(("b", f"b{i}"), "change")
    q.add(("c", "c0"), "change")
    assert [key[1] for key, _ in drain(q)] == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_a_busy_namespace_re_adding_its_keys_still_takes_turns():
    q = WorkQueue(Clock())
    served = []
    for i in range(10):
        q.add(("churn", f"job-{i}"), "change")
    for step in range(30):  # each reconcile of a churning job is followed by another edit of it
        if step == 5:
            q.add(("quiet", "new-job"), "change")
        key, _ = q.get(timeout=0)
        served.append(key)
        q.done(key)
        if key[0] == "churn":
            q.add(key, "change")
    assert served.index(("quiet", "new-job")) <= 6
    assert served.count(("quiet", "new-job")) == 1


def test_fairness_keeps_dedup_due_times_and_removal():
    clock = Clock()
    q = WorkQueue(clock)
    q.add(("a", "x"), "resync")
    q.add(("b", "later"), "timer", after=30)  # not due: no turn yet
    q.add(("a", "y"), "resync")
    q.add(("a", "x"), "job-event")  # waiting already: merged, not queued twice
    assert len(q) == 3
    q.add(("a", "z"), "change")
    q.remove(("a", "z"))
    q.add(("a", "z"), "timer", after=10)  # removed, then added again for later: not handed out now
    assert drain(q) == [(("a", "x"), "job-event"), (("a", "y"), "resync")]
    clock.now += 10
    assert drain(q) == [(("a", "z"), "timer")]
    clock.now += 20
    assert drain(q) == [(("b", "later"), "timer")]
    assert len(q) == 0


def test_a_due_key_removed_and_added_again_is_handed_out_once():
    q = WorkQueue(Clock())
    q.add(("a", "x"), "change")
    q.add(("b", "y"), "change")
    assert q.get(timeout=0) == (("a", "x"), "change")  # ("b", "y") now waits in its namespace's FIFO
    q.done(("a", "x"))
    q.remove(("b", "y"))
    q.add(("b", "y"), "job-event")
    assert drain(q) == [(("b", "y"), "job-event")]


def test_an_event_merged_with_a_stale_resync_keeps_its_name():
    """A worker skips a resync of a finished job (controller._work). A resync queued while the job
    was still exporting, then an event of its export Job at a save (which may end after the job
    settled): the run must be the event's, or its reconcile (deleting that superseded Job) is lost."""
    for event in ("export-event", "pod-event", "job-event", "rayjob-event", "change", "timer", "retry"):
        q = WorkQueue(Clock())
        q.add(("ns", "a"), RESYNC)
        q.add(("ns", "a"), event)
        assert drain(q) == [(("ns", "a"), event)], event


def test_every_trigger_the_controller_queues_is_ranked():
    """A trigger missing from TRIGGER_RANK would fail the merge (a KeyError in the queue): read from
    the controller's own calls, not listed by hand."""
    tree = ast.parse((REPO / "operator" / "lorarl" / "controller.py").read_text())
    queued = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("add", "add_rate_limited") and len(node.args) >= 2:
            trigger = node.args[1]
            options = [trigger.body, trigger.orelse] if isinstance(trigger, ast.IfExp) else [trigger]
            queued |= {o.value for o in options if isinstance(o, ast.Constant) and isinstance(o.value, str)}
    assert {"pod-event", "export-event", "resync", "timer", "retry"} <= queued, queued  # the reader finds them
    assert queued <= set(TRIGGER_RANK), queued - set(TRIGGER_RANK)
    assert max(TRIGGER_RANK, key=TRIGGER_RANK.get) == RESYNC
