"""[http.dial]: parsing, and the one resolver every node-to-node HTTP call goes through."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.errors import InvalidConfigError
from lograft.node.config import Voter, load_config, parse_config
from lograft.node.controller_client import ControllerClient
from lograft.node.peer_client import PeerClient
from lograft.node.peer_urls import PeerUrls
from tests.integration.cluster_harness import NodeSpec, node_config_toml

VOTERS = [
    {"id": 1, "raft": "127.0.0.1:19091", "http": "127.0.0.1:9091"},
    {"id": 2, "raft": "127.0.0.1:19092", "http": "127.0.0.1:9092"},
    {"id": 3, "raft": "127.0.0.1:19093", "http": "127.0.0.1:9093"},
]


def _config(http: dict[str, object]) -> dict[str, object]:
    return {"node_id": 1, "data_dir": "d", "voters": VOTERS, "http": http}


def test_http_dial_parses_peer_ids_to_addresses():
    cfg = parse_config(_config({"port": 9091, "dial": {"2": "127.0.0.1:29012", "3": "p:7"}}))
    assert cfg.http.dial == {2: "127.0.0.1:29012", 3: "p:7"}
    # The advertised URL, what clients and the registration carry, is unchanged.
    assert cfg.http_url == "http://127.0.0.1:9091"


def test_http_dial_is_empty_by_default():
    assert parse_config(_config({})).http.dial == {}


@pytest.mark.parametrize(
    ("dial", "key"),
    [
        ({"2": "nohost"}, "http.dial.2"),
        ({"2": "h:99999"}, "http.dial.2"),
        ({"two": "h:1"}, "http.dial.two"),
        ({"-1": "h:1"}, "http.dial.-1"),
        ({"2": 29012}, "http.dial.2"),
    ],
)
def test_a_bad_http_dial_entry_names_its_key(dial: dict[str, object], key: str):
    with pytest.raises(InvalidConfigError) as info:
        parse_config(_config({"dial": dial}))
    assert info.value.details.get("key") == key


def test_http_dial_must_be_a_table():
    with pytest.raises(InvalidConfigError) as info:
        parse_config(_config({"dial": "127.0.0.1:1"}))
    assert info.value.details.get("key") == "http.dial"


def test_the_harness_writes_http_dial_that_the_node_reads(tmp_path: Path):
    spec = NodeSpec(
        node_id=1,
        http_port=9091,
        raft_port=19091,
        data_dir=tmp_path / "n1",
        http_dial={2: "127.0.0.1:30012"},
        dial={2: "127.0.0.1:31012"},
    )
    (tmp_path / "n1.toml").write_text(node_config_toml(spec, [spec]))
    cfg = load_config(tmp_path / "n1.toml", env={})
    assert cfg.http.dial == {2: "127.0.0.1:30012"}
    assert cfg.raft.dial == {2: "127.0.0.1:31012"}
    assert cfg.http.port == 9091


def test_resolve_replaces_host_and_port_of_a_peer_with_a_dial_entry():
    peers = PeerUrls({2: "127.0.0.1:29012"})
    assert peers.resolve(2, "http://node-2:9092") == "http://127.0.0.1:29012"
    # The scheme is the peer's: a proxy forwards bytes, TLS included.
    assert peers.resolve(2, "https://node-2:9092") == "https://127.0.0.1:29012"
    assert peers.resolve(3, "http://node-3:9093") == "http://node-3:9093"


def test_a_peer_without_an_address_gets_none_even_with_a_dial_entry():
    # An unregistered broker is no broker to call, wherever it would be dialled.
    assert PeerUrls({2: "127.0.0.1:29012"}).resolve(2, None) is None


class _Metadata:
    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls

    def broker_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)


def test_broker_and_voter_urls_go_through_the_dial_table():
    peers = PeerUrls({2: "127.0.0.1:29012"})
    md = _Metadata({2: "http://127.0.0.1:9092", 3: "http://127.0.0.1:9093"})
    assert peers.broker(md, 2) == "http://127.0.0.1:29012"  # type: ignore[arg-type]
    assert peers.broker(md, 3) == "http://127.0.0.1:9093"  # type: ignore[arg-type]
    assert peers.broker(md, 4) is None  # type: ignore[arg-type]
    assert peers.voter(Voter(2, "127.0.0.1:19092", "127.0.0.1:9092")) == "http://127.0.0.1:29012"
    assert peers.voter(Voter(3, "127.0.0.1:19093", "127.0.0.1:9093")) == "http://127.0.0.1:9093"


def test_the_controller_client_dials_voters_at_their_http_dial_addresses():
    cfg = parse_config(_config({"dial": {"2": "127.0.0.1:29012", "3": "127.0.0.1:29013"}}))
    calls = PeerClient(cluster_secret="s", peers=PeerUrls(cfg.http.dial))
    client = ControllerClient(cfg, calls, None, leader_id=lambda: 3)
    # The leader first, never this node itself, every voter through its dial entry.
    assert client._candidates(None) == ["http://127.0.0.1:29013", "http://127.0.0.1:29012"]


def test_controller_calls_go_to_the_controller_listener_when_a_voter_has_one():
    voters = [
        {**VOTERS[0], "controller": "127.0.0.1:19191"},
        {**VOTERS[1], "controller": "127.0.0.1:19192"},
        VOTERS[2],  # no controller listener: its HTTP API
    ]
    cfg = parse_config(
        {
            "node_id": 1,
            "data_dir": "d",
            "voters": voters,
            "http": {"dial": {"1": "127.0.0.1:29011", "3": "127.0.0.1:29013"}},
            "controller_listener": {"dial": {"2": "127.0.0.1:29192"}},
        }
    )
    urls = PeerUrls(cfg.http.dial, "https", cfg.controller_listener.dial)
    v1, v2, v3 = cfg.voters
    # [http.dial] is for the HTTP API; [controller_listener.dial] for the listener.
    assert urls.controller(v1) == "https://127.0.0.1:19191"
    assert urls.controller(v2) == "https://127.0.0.1:29192"
    assert urls.controller(v3) == "https://127.0.0.1:29013"
    assert urls.voter(v1) == "https://127.0.0.1:29011"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"voters": [{**VOTERS[0], "controller": "nope"}]}, "controller"),
        ({"voters": [{**VOTERS[0], "controller": VOTERS[0]["http"]}]}, "port of its own"),
        ({"controller_listener": {"dial": {"2": "x"}}}, "dial.2"),
        ({"controller_listener": {"request_bytes_max": 2048, "request_bytes_inflight_max": 1}}, ""),
        ({"controller_listener": {"connections_max": 2, "connections_per_ip_max": 3}}, ""),
    ],
)
def test_controller_listener_settings_are_checked(raw: dict[str, object], key: str):
    with pytest.raises(InvalidConfigError) as info:
        parse_config({"node_id": 1, "data_dir": "d", "voters": VOTERS, **raw})
    assert key in str(info.value)
