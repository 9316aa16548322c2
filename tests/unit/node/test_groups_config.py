"""A node config's `[groups]` section is checked before the node starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.errors import InvalidConfigError
from lograft.node.config import parse_config
from lograft.node.server import check_config


def config(tmp_path: Path, groups: dict[str, object]) -> dict[str, object]:
    return {
        "node_id": 1,
        "data_dir": str(tmp_path),
        "cluster_secret": "unit-test-cluster-secret",
        "voters": [{"id": 1, "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}],
        "groups": groups,
    }


def test_a_bad_groups_setting_stops_the_node(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError) as err:
        parse_config(config(tmp_path, {"session_timeout_ms": -1}))
    assert err.value.details["key"] == "groups.session_timeout_ms"
    assert "groups.session_timeout_ms" in err.value.message


def test_good_groups_settings_pass(tmp_path: Path) -> None:
    parsed = parse_config(config(tmp_path, {"offsets_topic_num_partitions": 3}))
    check_config(parsed)
    assert parsed.groups.offsets_topic_num_partitions == 3
