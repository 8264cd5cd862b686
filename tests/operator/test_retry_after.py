"""The client's Retry-After rule (kube.honouring_retry_after), as client-go's: a 429, or a 5xx
with Retry-After, is sent again after the seconds asked, at most 10 times; nothing else is.
The live case (a real API server's APF answering 429) is tests/chaos/test_overload.py."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client.rest import ApiException
from lorarl.runtime.kube import RETRY_AFTER_ATTEMPTS, _api_error, honouring_retry_after, retry_after


def answer(status: int, retry_after_header: str | None = None) -> ApiException:
    err = ApiException(status=status, reason="x")
    err.headers = {"Retry-After": retry_after_header} if retry_after_header is not None else {}
    return err


class Waits(threading.Event):
    """A stop flag that records the waits asked of it instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout=None):  # type: ignore[override]
        self.asked.append(timeout)
        return self.is_set()


def sender(*answers: ApiException):
    calls = iter(answers)

    def send():
        nxt = next(calls, None)
        if nxt is None:
            return "ok"
        raise nxt

    return send


def test_a_429_is_sent_again_after_the_seconds_asked():
    waits = Waits()
    assert honouring_retry_after(sender(answer(429, "1"), answer(429, "4"), answer(503, "2")), waits) == "ok"
    assert waits.asked == [1.0, 4.0, 2.0]


@pytest.mark.parametrize("err", [answer(429), answer(500), answer(409, "1"), answer(403, "1"), answer(429, "soon")])
def test_without_a_usable_retry_after_the_answer_is_raised_at_once(err):
    waits = Waits()
    with pytest.raises(ApiException):
        honouring_retry_after(sender(err), waits)
    assert waits.asked == []


def test_after_ten_retries_the_429_is_raised_with_its_retry_after():
    waits = Waits()
    with pytest.raises(ApiException) as caught:
        honouring_retry_after(sender(*[answer(429, "3")] * (RETRY_AFTER_ATTEMPTS + 1)), waits)
    assert len(waits.asked) == RETRY_AFTER_ATTEMPTS == 10
    error = _api_error(caught.value)
    assert (error.status, error.retry_after, error.transient, error.needs_fix) == (429, 3.0, True, False)


def test_a_stopping_process_does_not_wait():
    waits = Waits()
    waits.set()
    with pytest.raises(ApiException):
        honouring_retry_after(sender(answer(429, "30")), waits)
    assert waits.asked == [30.0]


def test_retry_after_reads_only_throttling_answers():
    assert retry_after(answer(429, "2")) == 2.0
    assert retry_after(answer(504, "0")) == 0.0
    assert retry_after(answer(422, "2")) is None


def test_a_jobs_backoff_is_never_shorter_than_the_retry_after_still_standing():
    from lorarl.controller import error_backoff

    assert [error_backoff(True, 8.0)(n) for n in range(5)] == [8.0, 8.0, 8.0, 8.0, 16.0]
    assert error_backoff(True)(0) == 1.0
