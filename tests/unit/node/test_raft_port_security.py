"""Strangers on the Raft port: a node never unpickles what they send (issue 9, part 6).

pysyncobj unpickles every frame that reaches a Raft port. Without a password
that is remote code execution; with one, a frame must pass Fernet
authentication first. A node therefore never runs Raft without a password: it
uses `[raft] password`, else derives one from `cluster_secret`, else refuses
to start.

The attack frame is built the way pysyncobj's TcpConnection frames a message
(native int length, then zlib of a protocol-2 pickle). The first test sends it
to a stock pysyncobj node without a password and sees the file appear, so the
frame is known to be one that would run.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import pickle
import socket
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf

from lograft.errors import InvalidConfigError
from lograft.node.config import parse_config
from lograft.node.raft_password import SECRET_CHARS_MIN, derive_raft_password
from lograft.node.server import check_config, raft_config_for
from lograft.quorum.raft.adapter import RaftAdapter
from tests.raft_support import (
    FAST_TIMINGS,
    ListStateMachine,
    eventually,
    eventually_async,
    free_port,
)

pytestmark = pytest.mark.timeout(60)

SECRET = "a-cluster-secret-of-some-length"
# How long the node may take to read the frame and hang up on us.
_ANSWER_TIMEOUT_S = 15.0


class _TouchWhenUnpickled:
    """Unpickling this creates the file at `path` (and does nothing else)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def attack_frame(path: Path) -> bytes:
    """One message in pysyncobj's wire framing (TcpConnection.send without a password).

    The message is a tuple, not the payload alone: pysyncobj takes an
    unpickled None for "no complete message yet" and would never answer it.
    """
    message = ("stranger", _TouchWhenUnpickled(path))
    data = zlib.compress(pickle.dumps(message, protocol=2), 3)
    return struct.pack("i", len(data)) + data


def send_and_wait_for_hang_up(port: int, frame: bytes) -> None:
    """Send `frame` to 127.0.0.1:port and wait until the node closes the connection.

    Both a node without a password (the message names no known node) and one
    with a password (the frame fails authentication) hang up once they have
    processed the frame, so after this returns the frame has been handled.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=_ANSWER_TIMEOUT_S) as sock:
        sock.sendall(frame)
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(4096):
                pass  # a node never answers a stranger's first frame; read to EOF


def node_config_raw(tmp_path: Path, raft_port: int, **top: Any) -> dict[str, Any]:
    return {
        "node_id": 1,
        "data_dir": str(tmp_path / "data"),
        "cluster_id": "security-test",
        "voters": [{"id": 1, "raft": f"127.0.0.1:{raft_port}", "http": "127.0.0.1:1"}],
        "raft": dict(FAST_TIMINGS),
        **top,
    }


def accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


@contextlib.contextmanager
def stock_pysyncobj_without_password(port: int) -> Iterator[SyncObj]:
    node = SyncObj(f"127.0.0.1:{port}", [], conf=SyncObjConf(autoTick=True))
    try:
        yield node
    finally:
        node.destroy()


def test_the_attack_frame_runs_on_a_raft_port_without_a_password(tmp_path: Path) -> None:
    port = free_port()
    marker = tmp_path / "pwned-stock"
    with stock_pysyncobj_without_password(port):
        eventually(lambda: accepts(port), 10, "the stock node to listen")
        send_and_wait_for_hang_up(port, attack_frame(marker))
        eventually(marker.exists, 10, "the unpickled payload to create its file")


async def test_a_node_with_only_a_cluster_secret_never_unpickles_a_stranger_frame(
    tmp_path: Path,
) -> None:
    port = free_port()
    marker = tmp_path / "pwned-lograft"
    config = parse_config(node_config_raw(tmp_path, port, cluster_secret=SECRET))
    sm = ListStateMachine()
    adapter = RaftAdapter(raft_config_for(config), sm)
    await adapter.start()
    try:
        await eventually_async(lambda: adapter.is_leader, 10, "the node to elect itself")
        await asyncio.to_thread(send_and_wait_for_hang_up, port, attack_frame(marker))
        assert not marker.exists()
        # The node is unharmed: still the leader, and it still commits.
        assert adapter.is_leader
        offset = await adapter.append(b"after the attack")
        assert sm.items[-1] == (offset, b"after the attack")
    finally:
        await adapter.stop()
    assert not marker.exists()


async def test_raft_listens_on_the_configured_interface_only(tmp_path: Path) -> None:
    port = free_port()
    config = parse_config(node_config_raw(tmp_path, port, cluster_secret=SECRET))
    adapter = RaftAdapter(raft_config_for(config), ListStateMachine())
    await adapter.start()
    try:
        socket.create_connection(("127.0.0.1", port), 5).close()
        # Another loopback address reaches the same host: a listener on
        # 0.0.0.0 would accept there too.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), 5).close()
    finally:
        await adapter.stop()


def test_the_raft_password_is_derived_from_the_cluster_secret(tmp_path: Path) -> None:
    config = parse_config(node_config_raw(tmp_path, 1, cluster_secret=SECRET))
    password = raft_config_for(config).password
    assert password == derive_raft_password(SECRET, "security-test")
    assert password is not None and SECRET not in password
    # Another cluster id or secret gives another key.
    assert password != derive_raft_password(SECRET, "other-cluster")
    assert password != derive_raft_password(SECRET + "x", "security-test")
    # An explicit [raft] password wins.
    raw = node_config_raw(tmp_path, 1, cluster_secret=SECRET)
    raw["raft"]["password"] = "an-explicit-raft-password"
    assert raft_config_for(parse_config(raw)).password == "an-explicit-raft-password"


@pytest.mark.parametrize(
    ("top", "raft_password", "key"),
    [
        ({}, "", "cluster_secret"),
        ({"cluster_secret": "short"}, "", "cluster_secret"),
        ({"cluster_secret": SECRET}, "short", "raft.password"),
    ],
)
def test_a_node_without_a_strong_secret_refuses_to_start(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    top: dict[str, str],
    raft_password: str,
    key: str,
) -> None:
    from lograft.cli.main import main

    raw = node_config_raw(tmp_path, free_port(), **top)
    if raft_password:
        raw["raft"]["password"] = raft_password
    config = parse_config(raw)
    with pytest.raises(InvalidConfigError) as info:
        check_config(config)
    assert info.value.details["key"] == key

    path = tmp_path / "node.toml"
    path.write_text(toml_of(raw))
    assert main(["node", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key.split(".")[-1] in err
    assert str(SECRET_CHARS_MIN) in err
    assert not (tmp_path / "data").exists()


def toml_of(raw: dict[str, Any]) -> str:
    import json

    lines = []
    for key, value in raw.items():
        if key not in ("voters", "raft"):
            lines.append(f"{key} = {json.dumps(value)}")
    for voter in raw["voters"]:
        lines.append("[[voters]]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in voter.items())
    lines.append("[raft]")
    lines.extend(f"{k} = {json.dumps(v)}" for k, v in raw["raft"].items())
    return "\n".join(lines) + "\n"
