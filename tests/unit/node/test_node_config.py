"""Node configuration: TOML, environment overrides, errors that name the key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lograft.api.http_config import HttpConfig
from lograft.brokers.replica_manager import BrokerSettings
from lograft.errors import InvalidConfigError
from lograft.node.config import fetches_within_requests, load_config, parse_config
from lograft.node.event_loop import run_on, running_loop_name
from lograft.protocol.fetch_wire import partitions_within
from lograft.storage.config import LogConfig

GOOD = """
node_id = 2
roles = ["controller", "broker"]
data_dir = "data/node-2"
cluster_secret = "unit-test-cluster-secret"

[http]
port = 9092

[[voters]]
id = 1
raft = "127.0.0.1:19091"
http = "127.0.0.1:9091"
[[voters]]
id = 2
raft = "127.0.0.1:19092"
http = "127.0.0.1:9092"
[[voters]]
id = 3
raft = "127.0.0.1:19093"
http = "127.0.0.1:9093"

[raft]
password = "a-raft-password-long-enough"
election_timeout_min_ms = 350

[raft.dial]
1 = "127.0.0.1:29021"

[controller]
broker_session_timeout_ms = 1500

[log_defaults]
segment_bytes = 1048576
"""


def test_a_full_config_parses(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(f, env={})
    assert cfg.node_id == 2
    assert cfg.is_controller and cfg.is_broker
    assert [v.raft for v in cfg.voters][1] == "127.0.0.1:19092"
    assert cfg.voter(3).http_url() == "http://127.0.0.1:9093"
    assert cfg.raft.dial == {1: "127.0.0.1:29021"}
    assert cfg.raft.password == "a-raft-password-long-enough"
    assert cfg.raft.election_timeout_min_ms == 350
    assert cfg.raft.tuning()["election_timeout_min_ms"] == 350
    assert cfg.raft.tuning()["journal_fsync"] is True  # the metadata log is fsynced by default
    assert cfg.controller.broker_session_timeout_ms == 1500
    assert cfg.http.port == 9092
    assert cfg.http_url == "http://127.0.0.1:9092"
    assert cfg.log_defaults.segment_bytes == 1048576
    assert cfg.log_defaults.retention_ms == LogConfig().retention_ms


def test_environment_overrides_win(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(
        f, env={"LOGRAFT_CFG_HTTP__PORT": "9999", "LOGRAFT_CFG_NODE_ID": "3", "OTHER": "x"}
    )
    assert cfg.http.port == 9999
    assert cfg.http.forward_connections_max == 100
    env = {"LOGRAFT_CFG_HTTP__FORWARD_CONNECTIONS_MAX": "8"}
    assert load_config(f, env=env).http.forward_connections_max == 8
    # Connection limits: defaults, and overridable like any [http] key.
    assert (cfg.http.connections_max, cfg.http.connections_per_ip_max) == (4096, 1024)
    assert (cfg.http.header_read_timeout_ms, cfg.http.keepalive_timeout_ms) == (10_000, 75_000)
    assert cfg.http.client_fault_log_interval_ms == 10_000
    # Keyless JSON records: on partitions led here unless told otherwise.
    assert cfg.http.keyless_partitions == "local"
    env = {"LOGRAFT_CFG_HTTP__KEYLESS_PARTITIONS": "all"}
    assert load_config(f, env=env).http.keyless_partitions == "all"
    env = {
        "LOGRAFT_CFG_HTTP__CONNECTIONS_PER_IP_MAX": "7",
        "LOGRAFT_CFG_HTTP__KEEPALIVE_TIMEOUT_MS": "9",
    }
    http = load_config(f, env=env).http
    assert (http.connections_per_ip_max, http.keepalive_timeout_ms) == (7, 9)
    # Request bodies: defaults (request_bodies.py), and overridable.
    assert cfg.http.request_bytes_inflight_max == 256 * 1024 * 1024
    assert cfg.http.request_bytes_inflight_wait_ms == 5_000
    assert cfg.http.body_read_timeout_ms == 30_000
    env = {
        "LOGRAFT_CFG_HTTP__BODY_READ_TIMEOUT_MS": "7",
        "LOGRAFT_CFG_HTTP__REQUEST_BYTES_MAX": "2048",
    }
    env["LOGRAFT_CFG_HTTP__REQUEST_BYTES_INFLIGHT_MAX"] = "4096"
    http = load_config(f, env=env).http
    assert (http.body_read_timeout_ms, http.request_bytes_inflight_max) == (7, 4096)
    assert cfg.node_id == 3


def test_the_node_runs_on_uvloop_unless_told_otherwise(tmp_path: Path):
    # uvloop by default: 14-20 % less node CPU per request on the hot routes
    # (docs/benchmarks.md, "Nodes on uvloop: CPU per request (issue 14)").
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    assert load_config(f, env={}).event_loop == "uvloop"
    env = {"LOGRAFT_CFG_EVENT_LOOP": "asyncio"}
    assert load_config(f, env=env).event_loop == "asyncio"
    f.write_text('event_loop = "asyncio"\n' + GOOD)
    assert load_config(f, env={}).event_loop == "asyncio"
    with pytest.raises(InvalidConfigError):
        load_config(f, env={"LOGRAFT_CFG_EVENT_LOOP": "tokio"})


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_on_runs_the_named_loop(name):
    async def which() -> str:
        return running_loop_name()

    assert run_on(name, which()) == name


def test_record_work_limits_have_defaults_and_can_be_set(tmp_path):
    f = tmp_path / "n.toml"
    f.write_text(GOOD)
    http = load_config(f, env={}).http
    assert http.produce_decompressed_bytes_max == 64 * 1024 * 1024
    assert http.fetch_decompressed_bytes_max == 64 * 1024 * 1024
    assert http.record_render_bytes_max == 8 * 1024 * 1024
    assert http.record_threads_max == 2
    env = {
        "LOGRAFT_CFG_HTTP__PRODUCE_DECOMPRESSED_BYTES_MAX": "2048",
        "LOGRAFT_CFG_HTTP__FETCH_DECOMPRESSED_BYTES_MAX": "4096",
        "LOGRAFT_CFG_HTTP__RECORD_RENDER_BYTES_MAX": "8192",
        "LOGRAFT_CFG_HTTP__RECORD_THREADS_MAX": "4",
    }
    http = load_config(f, env=env).http
    assert (
        http.produce_decompressed_bytes_max,
        http.fetch_decompressed_bytes_max,
        http.record_render_bytes_max,
        http.record_threads_max,
    ) == (2048, 4096, 8192, 4)


V = [{"id": 1, "raft": "h:1", "http": "h:2"}]


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"data_dir": "d", "voters": V}, "node_id"),
        ({"node_id": 1, "voters": V}, "data_dir"),
        ({"node_id": "one", "data_dir": "d", "voters": V}, "node_id"),
        ({"node_id": 1, "data_dir": "d", "voters": V, "colour": "red"}, "colour"),
        ({"node_id": 1, "data_dir": "d", "voters": V, "http": {"port": 70000}}, "http.port"),
        ({"node_id": 1, "data_dir": "d", "voters": V, "http": {"prot": 1}}, "http.prot"),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"forward_connections_max": 0}},
            "http.forward_connections_max",
        ),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"connections_max": 0}},
            "http.connections_max",
        ),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"header_read_timeout_ms": -1}},
            "http.header_read_timeout_ms",
        ),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"body_read_timeout_ms": 0}},
            "http.body_read_timeout_ms",
        ),
        (
            {
                "node_id": 1,
                "data_dir": "d",
                "voters": V,
                "http": {"request_bytes_inflight_wait_ms": 0},
            },
            "http.request_bytes_inflight_wait_ms",
        ),
        (
            # A budget smaller than one largest body would refuse those forever.
            {
                "node_id": 1,
                "data_dir": "d",
                "voters": V,
                "http": {"request_bytes_max": 2048, "request_bytes_inflight_max": 2047},
            },
            "http.request_bytes_inflight_max",
        ),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"keepalive_timeout_ms": "x"}},
            "http.keepalive_timeout_ms",
        ),
        *(
            ({"node_id": 1, "data_dir": "d", "voters": V, "http": {key: value}}, f"http.{key}")
            for key, value in (
                ("produce_decompressed_bytes_max", 1023),
                ("fetch_decompressed_bytes_max", "lots"),
                ("record_render_bytes_max", 10),
                ("record_threads_max", 0),
            )
        ),
        ({"node_id": 1, "data_dir": "d", "voters": V, "roles": ["leader"]}, "roles[0]"),
        ({"node_id": 1, "data_dir": "d", "voters": V, "roles": []}, "roles"),
        ({"node_id": 1, "data_dir": "d"}, "voters"),
        ({"node_id": 1, "data_dir": "d", "voters": [{"id": 1, "raft": "h:1"}]}, "voters[0].http"),
        (
            {"node_id": 1, "data_dir": "d", "voters": [{"id": 1, "raft": "h", "http": "h:1"}]},
            "voters[0].raft",
        ),
        ({"node_id": 4, "data_dir": "d", "voters": V}, "voters"),
        ({"node_id": 1, "data_dir": "d", "voters": V, "roles": ["broker"]}, "roles"),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "raft": {"dial": {"2": "nohost"}}},
            "raft.dial.2",
        ),
        ({"node_id": 1, "data_dir": "d", "voters": V, "raft": {"peers": {}}}, "raft.peers"),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "http": {"keyless_partitions": "any"}},
            "http.keyless_partitions",
        ),
        (
            {"node_id": 1, "data_dir": "d", "voters": V, "log_defaults": {"segment_bites": 1}},
            "log_defaults.segment_bites",
        ),
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


def test_topic_configs_are_checked_with_the_brokers_rules():
    from lograft.api.topic_configs import validate_topic_configs

    assert validate_topic_configs(
        {
            "retention_ms": 1000,
            "cleanup_policy": "compact",
            "min_insync_replicas": "2",
            "unclean_leader_election": True,
            "segment_bytes": None,
        }
    ) == {
        "retention_ms": "1000",
        "cleanup_policy": "compact",
        "min_insync_replicas": "2",
        "unclean_leader_election": "true",
        "segment_bytes": None,
    }
    for bad in (
        {"retention_ms": "soon"},
        {"cleanup_policy": "shred"},
        {"colour": "red"},
        {"segment_bytes": "12"},
        {"min_insync_replicas": "0"},
        {"unclean_leader_election": "maybe"},
    ):
        with pytest.raises(InvalidConfigError) as info:
            validate_topic_configs(bad)
        assert info.value.details["key"] in bad


def test_advertised_url_is_what_the_broker_registers(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(
        f,
        env={
            "LOGRAFT_CFG_HTTP__HOST": "0.0.0.0",
            "LOGRAFT_CFG_HTTP__ADVERTISED_URL": "http://node-2:9092/",
        },
    )
    assert cfg.http.host == "0.0.0.0"
    assert cfg.http.advertised_url == "http://node-2:9092"
    assert cfg.http_url == "http://node-2:9092"
    # Without it, the URL is built from the listen address, as before.
    assert load_config(f, env={}).http.advertised_url is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_a_broker_on_every_interface_needs_an_advertised_url(host):
    raw = {"node_id": 1, "data_dir": "d", "voters": V, "http": {"host": host}}
    with pytest.raises(InvalidConfigError) as info:
        parse_config(raw)
    assert info.value.details.get("key") == "http.advertised_url"
    # A controller-only node registers no broker endpoint.
    assert parse_config({**raw, "roles": ["controller"]}).http.host == host


@pytest.mark.parametrize(
    "url", ["node-1:9091", "ftp://node-1:9091", "http://node-1", "http://node-1:x", "http://:1"]
)
def test_a_bad_advertised_url_names_the_key(url):
    raw = {"node_id": 1, "data_dir": "d", "voters": V, "http": {"advertised_url": url}}
    with pytest.raises(InvalidConfigError) as info:
        parse_config(raw)
    assert info.value.details.get("key") == "http.advertised_url"


async def test_the_node_registers_its_advertised_url(tmp_path: Path, monkeypatch):
    """The endpoint a broker registers with the controller is the advertised URL."""
    from lograft.node import server as node_module

    registered: list[dict[str, str]] = []

    class FakeAgent:
        def __init__(self, node_id, endpoints, *args, **kwargs):
            registered.append(endpoints)

        async def start(self) -> None:
            pass

    cfg = parse_config(
        {
            "node_id": 5,
            "roles": ["broker"],
            "data_dir": str(tmp_path),
            "cluster_secret": "unit-test-cluster-secret",
            "voters": V,
            "http": {"host": "127.0.0.1", "port": 0, "advertised_url": "http://node-1:9091"},
        }
    )
    n = node_module.Node(cfg)

    async def nothing() -> None:
        pass

    monkeypatch.setattr(n.raft, "start", nothing)
    monkeypatch.setattr(node_module, "BrokerAgent", FakeAgent)
    try:
        await n.start()
        assert registered == [{"http": "http://node-1:9091"}]
    finally:
        n.agent = None
        await n.stop()


@pytest.mark.parametrize(
    ("section", "body", "key"),
    [
        ("raft", "bogus_ms = 5", "raft.bogus_ms"),
        ("raft", "election_timeout_min_ms = 10", "raft.election_timeout_min_ms"),
        ("controller", "bogus = 1", "controller.bogus"),
        ("controller", "broker_session_timeout_ms = 100", "controller.broker_session_timeout_ms"),
        ("broker", "bogus = 1", "broker.bogus"),
    ],
)
def test_sections_owned_by_other_modules_are_checked_before_the_node_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, body: str, key: str
):
    from lograft.cli.main import main
    from lograft.node.server import check_config

    data_dir = tmp_path / "data"
    text = (
        f'node_id = 1\ndata_dir = "{data_dir}"\ncluster_secret = "unit-test-cluster-secret"\n'
        '[[voters]]\nid = 1\nraft = "127.0.0.1:19091"\nhttp = "127.0.0.1:9091"\n'
        f"[{section}]\n{body}\n"
    )
    path = tmp_path / "node.toml"
    path.write_text(text)
    # Every section is checked as the config is built (the Raft identity, which
    # comes from several sections, by check_config).
    with pytest.raises(InvalidConfigError) as exc:
        check_config(load_config(path, env={}))
    assert exc.value.details["key"] == key
    assert key in exc.value.message
    # `lograft node` stops with the message, before binding or writing anything.
    assert main(["node", "--config", str(path)]) == 1
    assert key.split(".")[1] in capsys.readouterr().err
    assert not data_dir.exists()


def test_min_insync_replicas_may_not_exceed_the_replication_factor():
    from lograft.api.topic_configs import validate_topic_configs

    assert validate_topic_configs({"min_insync_replicas": 3}, 3) == {"min_insync_replicas": "3"}
    with pytest.raises(InvalidConfigError, match="exceeds the replication factor 1"):
        validate_topic_configs({"min_insync_replicas": 2}, 1)


def test_other_lograft_variables_are_not_settings(tmp_path: Path):
    """A harness's LOGRAFT_SRC or setup.sh's LOGRAFT_EXTRAS does not stop a node."""
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    env = {
        "LOGRAFT_SRC": "/src/lograft",
        "LOGRAFT_EXTRAS": "dev,spark",
        "LOGRAFT_SKIP_TOXIPROXY": "1",
        "LOGRAFT_HTTP__PORT": "1",  # the old spelling: no longer an override
    }
    assert load_config(f, env=env) == load_config(f, env={})


def test_a_digits_only_secret_stays_a_string(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    secret = "0123456789012345678901234567890123"
    cfg = load_config(
        f,
        env={
            "LOGRAFT_CFG_CLUSTER_SECRET": secret,
            "LOGRAFT_CFG_RAFT__PASSWORD": "1e5",
            "LOGRAFT_CFG_CLUSTER_ID": "true",
        },
    )
    assert (cfg.cluster_secret, cfg.raft.password, cfg.cluster_id) == (secret, "1e5", "true")


def test_overrides_are_typed_by_the_setting(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    cfg = load_config(
        f,
        env={
            "LOGRAFT_CFG_RAFT__SEND_ENTRIES_IMMEDIATELY": "false",
            "LOGRAFT_CFG_RAFT__JOURNAL_FSYNC": "false",
            "LOGRAFT_CFG_STREAM__SOURCE__FETCH_WAIT_MS": "250",
            "LOGRAFT_CFG_GROUPS__ASSIGNOR_DEFAULT": "range",
            "LOGRAFT_CFG_ROLES": "controller,broker",
            "LOGRAFT_CFG_HTTP__DIAL__3": "127.0.0.1:29023",
            "LOGRAFT_CFG_LOG_DEFAULTS__RETENTION_MS": "1000",
        },
    )
    assert cfg.raft.send_entries_immediately is False
    assert cfg.raft.tuning()["journal_fsync"] is False
    assert cfg.stream.source.fetch_wait_ms == 250
    assert cfg.groups.assignor_default == "range"
    assert cfg.roles == ("controller", "broker")
    assert cfg.http.dial == {3: "127.0.0.1:29023"}
    assert cfg.log_defaults.retention_ms == 1000
    roles = load_config(f, env={"LOGRAFT_CFG_ROLES": '["controller"]'}).roles
    assert roles == ("controller",)


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("LOGRAFT_CFG_HTTP__PORT", "ninety", "http.port"),
        ("LOGRAFT_CFG_HTTP__PORT", "70000", "http.port"),
        ("LOGRAFT_CFG_HTTP__PROT", "1", "http.prot"),
        ("LOGRAFT_CFG_BROKER__MIN_INSYNC_REPLICAS", "0", "broker.min_insync_replicas"),
        (
            "LOGRAFT_CFG_CONTROLLER__BROKER_SESSION_TIMEOUT_MS",
            "100",
            "controller.broker_session_timeout_ms",
        ),
        ("LOGRAFT_CFG_NODE_ID__X", "1", "node_id"),
    ],
)
def test_a_bad_override_names_the_key_and_the_variable(tmp_path: Path, name, text, key):
    f = tmp_path / "node.toml"
    f.write_text(GOOD)
    with pytest.raises(InvalidConfigError) as info:
        load_config(f, env={name: text})
    assert info.value.details.get("key") == key
    assert name in info.value.message


def test_tls_makes_every_node_url_https(tmp_path: Path):
    from lograft.node.peer_urls import PeerUrls

    tls = '\n[tls]\ncertificate_file = "n.pem"\nkey_file = "n-key.pem"\n'
    f = tmp_path / "node.toml"
    f.write_text(GOOD + tls)
    cfg = load_config(f, env={})
    assert cfg.http_scheme == "https"
    assert cfg.http_url == "https://127.0.0.1:9092"
    peers = PeerUrls(cfg.http.dial, cfg.http_scheme)
    voter = cfg.voter(3)
    assert voter is not None
    assert peers.voter(voter) == "https://127.0.0.1:9093"
    assert PeerUrls({3: "127.0.0.1:1"}, "https").voter(voter) == "https://127.0.0.1:1"
    # An advertised URL must name the scheme the listener speaks.
    f.write_text(GOOD.replace("port = 9092", 'port = 9092\nadvertised_url = "http://n:9092"') + tls)
    with pytest.raises(InvalidConfigError, match=r"\(with \[tls\]\), so write https://") as exc:
        load_config(f, env={})
    assert exc.value.details["key"] == "http.advertised_url"
    f.write_text(GOOD.replace("port = 9092", 'port = 9092\nadvertised_url = "https://n:9092"'))
    with pytest.raises(InvalidConfigError, match="so write http://"):
        load_config(f, env={})


def test_fetches_as_a_follower_name_no_more_partitions_than_a_request_holds(caplog) -> None:
    """A node whose peers take requests of 256 KiB names at most what such a
    request holds in one replica fetch (a larger one would be refused and
    replication would stop); at the default 16 MiB the setting stands."""
    broker = BrokerSettings()
    assert fetches_within_requests(broker, HttpConfig().request_bytes_max) is broker
    with caplog.at_level(logging.INFO, logger="lograft.node.config"):
        small = fetches_within_requests(broker, 256 << 10)
    assert small.replica_fetch_request_partitions_max == partitions_within(256 << 10) == 618
    assert "http.request_bytes_max=262144" in caplog.text
