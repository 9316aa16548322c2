"""The integration harness itself: generated configs parse into what was asked
for, and process control (SIGSTOP/SIGCONT, SIGTERM, restart) and teardown do
what they say on a one-node cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lograft.node.config import load_config
from lograft.node.server import check_config
from lograft.quorum.raft.config import RaftTuning
from tests.integration.cluster_harness import (
    LograftCluster,
    NodeSpec,
    node_config_toml,
    port_is_free,
)

pytestmark = [pytest.mark.timeout(120)]


def test_generated_config_carries_overrides_and_dial_addresses(tmp_path: Path) -> None:
    cluster = LograftCluster(
        tmp_path,
        3,
        raft={"election_timeout_min_ms": 500},
        controller={"broker_session_timeout_ms": 3000},
        overrides={
            2: {
                "dial": {1: "127.0.0.1:1111", 3: "127.0.0.1:3333"},
                "raft": {"log_compaction_min_entries": 7},
                "broker": {"replica_lag_time_max_ms": 1234},
                "rack": "r2",
            }
        },
    )
    path = cluster[2].write_config()
    config = load_config(path, env={})
    check_config(config)
    spec = cluster[2].spec
    assert config.node_id == 2 and config.rack == "r2"
    assert config.http.port == spec.http_port and config.data_dir == spec.data_dir
    assert [(v.node_id, v.raft, v.http, v.controller) for v in config.voters] == [
        (n.node_id, n.spec.raft_address, n.spec.http_address, n.spec.controller_address)
        for n in cluster
    ]
    assert dict(config.raft.dial) == {1: "127.0.0.1:1111", 3: "127.0.0.1:3333"}
    raft = config.raft
    assert (raft.election_timeout_min_ms, raft.log_compaction_min_entries) == (500, 7)
    assert config.controller.broker_session_timeout_ms == 3000
    assert config.broker.replica_lag_time_max_ms == 1234
    # Node 1 got only the cluster-wide settings.
    other = load_config(cluster[1].write_config(), env={})
    assert dict(other.raft.dial) == {} and other.raft.election_timeout_min_ms == 500
    assert other.raft.log_compaction_min_entries == RaftTuning().log_compaction_min_entries
    # Every port is distinct (HTTP, Raft, controller listener per node).
    assert len(cluster.ports) == 9


def test_config_generation_is_usable_alone(tmp_path: Path) -> None:
    spec = NodeSpec(
        node_id=7, http_port=9, raft_port=10, data_dir=tmp_path / "d", roles=("broker",)
    )
    voter = NodeSpec(node_id=1, http_port=11, raft_port=12, data_dir=tmp_path / "v")
    path = tmp_path / "n.toml"
    path.write_text(node_config_toml(spec, [voter]))
    config = load_config(path, env={})
    assert config.roles == ("broker",) and [v.node_id for v in config.voters] == [1]


def test_process_control_and_clean_teardown(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = lograft_cluster(1)
    cluster.start()
    node = cluster[1]
    assert node.get("/healthz").status == 200

    node.pause()
    with pytest.raises(OSError):
        node.get("/healthz", timeout_s=0.5)
    node.resume()
    assert node.get("/healthz").status == 200

    first_pid = node.pid
    node.restart()
    assert node.pid != first_pid and node.get("/readyz").status == 200
    assert node.terminate() == 0
    assert not node.running

    node.start()
    node.wait_ready()
    node.pause()  # teardown must also end a stopped process
    cluster.close()
    assert not node.running
    assert all(port_is_free(p) for p in cluster.ports)
