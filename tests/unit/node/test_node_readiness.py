"""What /readyz adds about a broker's replicas (lograft.node.server.broker_unready)."""

from __future__ import annotations

from lograft.node.server import READY_FAILED_REPLICAS_SHOWN, broker_unready


def test_all_well_adds_nothing() -> None:
    assert broker_unready({}, None) == {}


def test_failed_replicas_are_named_boundedly_and_counted() -> None:
    failed = {f"t-{i}": f"OSError: disk {i}" for i in range(50)}
    out = broker_unready(failed, None)
    assert out["failed_replicas_count"] == 50
    assert len(out["failed_replicas"]) == READY_FAILED_REPLICAS_SHOWN
    assert all(failed[tp] == why for tp, why in out["failed_replicas"].items())


def test_a_failing_metadata_apply_is_reported() -> None:
    out = broker_unready({}, "applying metadata at offset 9 failed: RuntimeError('x')")
    assert out == {
        "metadata_apply_error": "applying metadata at offset 9 failed: RuntimeError('x')"
    }
