"""`[groups]` settings: each key goes to the runtime or the pure core's config,
and a bad key or value is refused."""

from __future__ import annotations

import pytest

from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.errors import InvalidConfigError


def test_keys_go_to_their_owner() -> None:
    s = GroupRuntimeSettings.from_dict(
        {"offsets_topic_num_partitions": 4, "session_timeout_ms": 3000}
    )
    assert s.offsets_topic_num_partitions == 4
    assert s.coordinator.session_timeout_ms == 3000
    assert GroupRuntimeSettings.from_dict({}) == GroupRuntimeSettings()


@pytest.mark.parametrize(
    "raw",
    [
        {"no_such_setting": 1},
        {"offsets_topic_num_partitions": 0},
        {"offsets_commit_timeout_ms": "5s"},
        {"session_timeout_ms": 100, "group_heartbeat_interval_ms": 100},
        {"assignor_default": "magic"},
    ],
)
def test_bad_settings_are_refused(raw: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError):
        GroupRuntimeSettings.from_dict(raw)
