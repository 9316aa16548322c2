"""The ports test servers listen on (tests/raft_support.py `free_port`): below
this machine's ephemeral range, bindable, and never handed out twice in a run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from loopback_ports import ephemeral_range

from tests.raft_support import TEST_PORT_RANGE, free_port


def test_test_ports_are_below_the_ephemeral_range_and_never_repeat():
    low, _high = ephemeral_range()
    assert TEST_PORT_RANGE[1] <= low
    ports = [free_port() for _ in range(200)]
    assert all(TEST_PORT_RANGE[0] <= p < TEST_PORT_RANGE[1] for p in ports)
    assert len(set(ports)) == len(ports)
