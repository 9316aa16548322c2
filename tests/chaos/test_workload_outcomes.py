"""How the workload classifies a failed send: only a failure that proves nothing was
written is definite; everything else may have landed (tests/chaos/history.py)."""

from __future__ import annotations

from lograft.client.errors import (
    ClientClosedError,
    ClusterUnreachableError,
    DeliveryTimeoutError,
    NetworkError,
)
from lograft.errors import NotEnoughReplicasError, NotLeaderOrFollowerError, RequestTimedOutError
from tests.chaos.history import Outcome
from tests.chaos.workload import classify


def test_a_delivery_timeout_is_definite_only_when_no_attempt_may_have_landed() -> None:
    assert classify(DeliveryTimeoutError("x", maybe_appended=False)) is Outcome.FAIL
    assert classify(DeliveryTimeoutError("x", maybe_appended=True)) is Outcome.UNKNOWN
    assert classify(DeliveryTimeoutError("x")) is Outcome.UNKNOWN


def test_refusals_before_the_append_are_definite() -> None:
    assert classify(NotEnoughReplicasError("isr too small")) is Outcome.FAIL
    assert classify(ClusterUnreachableError("nobody answered")) is Outcome.FAIL


def test_anything_that_may_follow_an_append_is_unknown() -> None:
    # an acks=all wait can fail with these after the leader appended
    assert classify(RequestTimedOutError("isr slow")) is Outcome.UNKNOWN
    assert classify(NotLeaderOrFollowerError("moved")) is Outcome.UNKNOWN
    assert classify(NetworkError("reset", sent=True)) is Outcome.UNKNOWN
    assert classify(ClientClosedError("closed with the record in flight")) is Outcome.UNKNOWN
    assert classify(RuntimeError("unexpected")) is Outcome.UNKNOWN
