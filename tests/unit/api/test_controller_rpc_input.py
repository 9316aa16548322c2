"""The controller's RPC bodies (internal endpoints, behind the cluster
secret) parse their integers as strictly as the public API: a peer's bad
body is INVALID_REQUEST, not a ValueError (a 500) or a value that overflows
a metadata record."""

from __future__ import annotations

from typing import Any

import pytest

from lograft.api.routes_internal import ControllerRpc
from lograft.errors import InvalidRequestError
from tests.unit.node.test_heartbeat_contact import Clock, SlowRaft, runtime


def alter(item: dict[str, Any], **body: Any) -> dict[str, Any]:
    part = {
        "topic_id": "t",
        "partition": 0,
        "leader_epoch": 0,
        "partition_epoch": 0,
        "new_isr": [2],
        **item,
    }
    return {"broker_id": 2, "broker_epoch": 7, "partitions": [part], **body}


@pytest.mark.parametrize(
    "body",
    [
        alter({"new_isr": ["x"]}),  # int("x") was a ValueError: a 500
        alter({"new_isr": [2.0]}),
        alter({"new_isr": [True]}),
        alter({"new_isr": [2**31]}),
        alter({"partition": 2**63}),
        alter({}, broker_id=True),
        alter({}, broker_epoch=-(2**63) - 1),
    ],
)
async def test_bad_integers_in_alter_partitions_are_invalid_request(body):
    rpc = ControllerRpc(runtime(SlowRaft(), Clock()))
    with pytest.raises(InvalidRequestError):
        await rpc.methods["alter-partitions"](body)
