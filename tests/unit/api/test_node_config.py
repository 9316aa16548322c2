"""Node configuration: TOML, environment overrides, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.api.node_config import load_config, parse_config
from lograft.errors import InvalidConfigError

GOOD = """
node_id = 2
roles = ["controller", "broker"]
data_dir = "data/node-2"
cluster_secret = "s3cret"
quorum_voters = ["1@127.0.0.1:19091", "2@127.0.0.1:19092", "3@127.0.0.1:19093"]

[http]
port = 9092

[raft]
port = 19092
password = "pw"

[raft.dial]
1 = "127.0.0.1:29021"

[log_defaults]
segment_bytes = 1048576
"""


def test_a_full_config_parses(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(f, env={})
    assert cfg.node_id == 2
    assert cfg.is_controller and cfg.is_broker
    assert [v.address for v in cfg.quorum_voters][1] == "127.0.0.1:19092"
    assert cfg.raft.dial == {1: "127.0.0.1:29021"}
    assert cfg.raft.password == "pw"
    assert cfg.http.port == 9092
    assert cfg.http_url == "http://127.0.0.1:9092"
    assert cfg.log_defaults == {"segment_bytes": 1048576}


def test_environment_overrides_win(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(
        f, env={"LOGRAFT_HTTP__PORT": "9999", "LOGRAFT_ROLES": "broker", "OTHER": "x"}
    )
    assert cfg.http.port == 9999
    assert cfg.roles == ("broker",)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"data_dir": "d"}, "node_id"),
        ({"node_id": 1}, "data_dir"),
        ({"node_id": "one", "data_dir": "d"}, "node_id"),
        ({"node_id": 1, "data_dir": "d", "colour": "red"}, "colour"),
        ({"node_id": 1, "data_dir": "d", "http": {"port": 70000}}, "http.port"),
        ({"node_id": 1, "data_dir": "d", "http": {"prot": 1}}, "http.prot"),
        ({"node_id": 1, "data_dir": "d", "roles": ["leader"]}, "roles"),
        ({"node_id": 1, "data_dir": "d", "quorum_voters": ["127.0.0.1:1"]}, "quorum_voters[0]"),
        ({"node_id": 4, "data_dir": "d", "quorum_voters": ["1@h:1"]}, "quorum_voters"),
        ({"node_id": 1, "data_dir": "d", "raft": {"dial": {"2": "nohost"}}}, "raft.dial.2"),
        ({"node_id": 1, "data_dir": "d", "log_defaults": {"segment_bites": 1}}, "segment_bites"),
    ],
)
def test_bad_settings_name_the_key(raw, key):
    with pytest.raises(InvalidConfigError) as info:
        parse_config(raw)
    assert info.value.details.get("key") == key
    assert key.split("[")[0] in info.value.message


def test_missing_file_and_bad_toml(tmp_path: Path):
    with pytest.raises(InvalidConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("node_id = = 1")
    with pytest.raises(InvalidConfigError, match="not valid TOML"):
        load_config(bad, env={})
