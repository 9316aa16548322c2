"""The controller listener on a real three-node cluster: the brokers register
and heartbeat through it, it serves heartbeats from the active controller
(others answer NOT_CONTROLLER naming it), and it refuses an unauthenticated
caller and bad input with a JSON 4xx, never a 500."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.cluster_harness import (
    SECRET_HEADER,
    LograftCluster,
    Response,
    http_request,
)

pytestmark = [pytest.mark.timeout(180)]


def controller_call(
    cluster: LograftCluster, node_id: int, name: str, body: Any, secret: str | None
) -> Response:
    spec = cluster[node_id].spec
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    return http_request(
        "POST",
        f"http://{spec.controller_address}/internal/v1/controller/{name}",
        body,
        headers=headers,
    )


def test_the_controller_listener_serves_heartbeats_and_refuses_bad_input(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = lograft_cluster(3)
    cluster.start()
    secret = cluster[1].spec.cluster_secret
    view = cluster[1].cluster_view()
    active = view["active_controller"]
    assert active is not None, view
    brokers = cluster[1].brokers()
    assert sorted(brokers) == [1, 2, 3] and not any(b["fenced"] for b in brokers.values())
    offset = view.get("metadata_offset", 0)
    beat = {"broker_id": 2, "broker_epoch": brokers[2]["epoch"], "metadata_offset": offset}
    answer = controller_call(cluster, active, "heartbeat", beat, secret)
    assert answer.status == 200 and answer.body["fenced"] is False, answer
    other = next(n for n in (1, 2, 3) if n != active)
    refused = controller_call(cluster, other, "heartbeat", beat, secret)
    assert refused.status == 421, refused
    assert refused.body["error"]["code"] == "NOT_CONTROLLER", refused
    assert refused.body["error"]["details"]["leader_id"] in (active, str(active)), refused

    bad = [
        controller_call(cluster, active, "heartbeat", beat, None),
        controller_call(cluster, active, "heartbeat", beat, "not-the-secret"),
        controller_call(cluster, active, "heartbeat", b"{not json", secret),
        controller_call(cluster, active, "heartbeat", {"broker_id": "two"}, secret),
        controller_call(cluster, active, "no-such-call", {}, secret),
        controller_call(cluster, active, "heartbeat", {**beat, "broker_epoch": 10**6}, secret),
    ]
    assert [r.status for r in bad][:5] == [401, 401, 400, 400, 400], bad
    assert 400 <= bad[5].status < 500, bad[5]  # a stale broker epoch: the runtime's refusal
    for r in bad:
        assert isinstance(r.body, dict) and {"code", "message"} <= set(r.body["error"]), r
    # The controller listener answers health too, and only the active one is ready.
    ready = http_request("GET", f"http://{cluster[active].spec.controller_address}/readyz")
    assert ready.status == 200 and ready.body["controller_active"] is True, ready
    idle = http_request("GET", f"http://{cluster[other].spec.controller_address}/readyz")
    assert idle.status == 503 and idle.body["controller_active"] is False, idle
    # /healthz of a voter reports its controller loop's lag beside the main loop's.
    health = cluster[active].get("/healthz").json()
    assert health["controller_loop_lag_ms"]["max"] >= 0, health
    # The brokers stayed registered and unfenced throughout.
    assert not any(b["fenced"] for b in cluster[1].brokers().values())
