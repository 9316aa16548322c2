"""RaftConfig validation: every bad value is an InvalidConfigError naming its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lograft.errors import InvalidConfigError
from lograft.quorum.raft.config import RaftConfig, parse_address
from lograft.typed import build


def voter(**overrides: Any) -> RaftConfig:
    base: dict[str, Any] = {
        "node_id": "1",
        "data_dir": Path("/tmp/x"),
        "peers": {"2": "127.0.0.1:7002", "3": "127.0.0.1:7003"},
        "listen_address": "127.0.0.1:7001",
        "password": "pw",
    }
    return build({**base, **overrides}, RaftConfig, error=InvalidConfigError, detail="key")


def key_of(overrides: dict[str, Any]) -> str:
    with pytest.raises(InvalidConfigError) as info:
        voter(**overrides)
    return str(info.value.details["key"])


def test_valid_voter_and_observer() -> None:
    cfg = voter()
    assert cfg.voter_ids == ("1", "2", "3")
    assert cfg.journal_path == Path("/tmp/x/raft.journal")
    assert cfg.snapshot_path == Path("/tmp/x/raft.snapshot")
    obs = voter(node_id="b9", voter=False, listen_address=None)
    assert obs.voter_ids == ("2", "3")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"node_id": "a:b"}, "node_id"),
        ({"node_id": ""}, "node_id"),
        ({"peers": {"1": "127.0.0.1:7001"}}, "peers"),
        ({"peers": {"bad id": "127.0.0.1:1"}}, "peers.bad id"),
        ({"peers": {"2": "nohost"}}, "peers.2"),
        ({"peers": {"2": "h:99999"}}, "peers.2"),
        ({"listen_address": None}, "listen_address"),
        ({"voter": False}, "listen_address"),
        ({"voter": False, "listen_address": None, "peers": {}}, "peers"),
        ({"election_timeout_min_ms": 300}, "election_timeout_min_ms"),
        ({"election_timeout_max_ms": 400}, "election_timeout_max_ms"),
        ({"connection_timeout_ms": 1000}, "connection_timeout_ms"),
        ({"leader_fallback_timeout_ms": 50}, "leader_fallback_timeout_ms"),
        ({"append_timeout_ms": 0}, "append_timeout_ms"),
        ({"max_batch_bytes": -1}, "max_batch_bytes"),
        ({"max_pending_appends": True}, "max_pending_appends"),
        ({"log_compaction_min_entries": 1}, "log_compaction_min_entries"),
        ({"password": ""}, "password"),
        ({"password": None}, "password"),
    ],
)
def test_bad_values_name_their_key(overrides: dict[str, Any], key: str) -> None:
    assert key_of(overrides) == key


def test_build_rejects_unknown_and_missing_keys() -> None:
    raw = {
        "node_id": "1",
        "data_dir": "/tmp/x",
        "peers": {},
        "listen_address": "127.0.0.1:1",
        "password": "pw",
    }
    assert from_dict(raw).data_dir == Path("/tmp/x")
    with pytest.raises(InvalidConfigError) as info:
        from_dict({**raw, "electon_timeout_ms": 5})
    assert info.value.details["key"] == "electon_timeout_ms"
    with pytest.raises(InvalidConfigError) as info:
        from_dict({"node_id": "1", "peers": {}})
    assert info.value.details["key"] == "data_dir"
    # No password is no default: a Raft node never runs without one.
    without_password = {k: v for k, v in raw.items() if k != "password"}
    with pytest.raises(InvalidConfigError) as info:
        from_dict(without_password)
    assert info.value.details["key"] == "password"


def from_dict(raw: dict[str, Any]) -> RaftConfig:
    return build(raw, RaftConfig, error=InvalidConfigError, detail="key")


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_address("[::1]:9092") == ("::1", 9092)
    assert parse_address("node-a.local:9092") == ("node-a.local", 9092)
    for bad in ("127.0.0.1", ":80", "h:0", "h:x", 5):
        with pytest.raises(InvalidConfigError):
            parse_address(bad)  # type: ignore[arg-type]
