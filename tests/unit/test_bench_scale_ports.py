"""scripts/bench_scale.py's default ports (and so scripts/soak_quorum.py's
clusters' when it is given none): free, and below the ephemeral range.
Nothing here starts a node."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_scale
from loopback_ports import PORT_RANGE, ephemeral_range


def test_the_default_ports_of_every_run_are_below_the_ephemeral_range():
    runs = 3
    base = bench_scale.base_port_for(None, runs)
    ports = [base + offset for offset in bench_scale.port_offsets(runs)]
    # HTTP, Raft and controller ports of three nodes per run, none shared
    assert len(set(ports)) == 9 * runs
    low, _high = ephemeral_range()
    assert all(PORT_RANGE[0] <= p < min(PORT_RANGE[1], low) for p in ports), ports


def test_the_offsets_are_the_ports_local_cluster_writes():
    base = 21_000
    cluster = bench_scale.local_cluster
    expected = {
        port(base, n)
        for n in bench_scale.NODES
        for port in (cluster.http_port, cluster.raft_port, cluster.controller_port)
    }
    assert {base + o for o in bench_scale.port_offsets(1)} == expected


def test_an_explicit_base_port_is_kept():
    assert bench_scale.base_port_for(29_090, 2) == 29_090
