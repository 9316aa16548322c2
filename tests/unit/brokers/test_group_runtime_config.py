"""`[groups]` settings: one flat table for the runtime and the pure core's
config, and a bad key or value is refused naming it."""

from __future__ import annotations

import pytest

from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.errors import InvalidConfigError
from lograft.typed import build


def from_dict(raw: dict[str, object]) -> GroupRuntimeSettings:
    return build(raw, GroupRuntimeSettings, error=InvalidConfigError, where="groups", detail="key")


def test_keys_go_to_their_owner() -> None:
    s = from_dict({"offsets_topic_num_partitions": 4, "session_timeout_ms": 3000})
    assert s.offsets_topic_num_partitions == 4
    assert s.coordinator.session_timeout_ms == 3000
    assert from_dict({}) == GroupRuntimeSettings()


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"no_such_setting": 1}, "groups.no_such_setting"),
        ({"offsets_topic_num_partitions": 0}, "groups.offsets_topic_num_partitions"),
        ({"offsets_commit_timeout_ms": "5s"}, "groups.offsets_commit_timeout_ms"),
        (
            {"session_timeout_ms": 100, "group_heartbeat_interval_ms": 100},
            "groups.group_heartbeat_interval_ms",
        ),
        ({"assignor_default": "magic"}, "groups.assignor_default"),
    ],
)
def test_bad_settings_are_refused(raw: dict[str, object], key: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        from_dict(raw)
    assert caught.value.details["key"] == key
    assert key in caught.value.message
