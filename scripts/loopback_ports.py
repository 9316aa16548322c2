"""Ports on 127.0.0.1 for servers the scripts start (Kafka, a Spark standalone cluster).

They are taken below Linux's ephemeral range (32768-60999 by default), so an
outgoing connection of any process cannot take one between our check and the
server's bind, which a port from bind(0) (inside the range) does not promise.
"""

from __future__ import annotations

import random
import socket

# Below the ephemeral range, clear of the well-known ports.
PORT_RANGE = (21000, 32000)


def free_ports(count: int) -> list[int]:
    """`count` consecutive free 127.0.0.1 ports in PORT_RANGE, chosen at random."""
    for _ in range(500):
        base = random.randrange(PORT_RANGE[0], PORT_RANGE[1] - count)
        ports = list(range(base, base + count))
        if all(_bindable(p) for p in ports):
            return ports
    raise RuntimeError(f"no {count} free ports in {PORT_RANGE}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_range() -> tuple[int, int]:
    """This machine's ephemeral port range (Linux), or Linux's default."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        return (32768, 60999)
    return (low, high)


def free_base(offsets: list[int]) -> int:
    """A base port such that base + every offset is a free 127.0.0.1 port in
    PORT_RANGE (for scripts whose nodes' ports are fixed offsets of one base,
    as scripts/local_cluster.py's HTTP and Raft ports are)."""
    low, high = min(offsets), max(offsets)
    if high - low >= PORT_RANGE[1] - PORT_RANGE[0]:
        raise ValueError(f"offsets span {high - low} ports, more than {PORT_RANGE} holds")
    for _ in range(500):
        base = random.randrange(PORT_RANGE[0] - low, PORT_RANGE[1] - high)
        if all(_bindable(base + o) for o in offsets):
            return base
    raise RuntimeError(f"no free ports at offsets {offsets} in {PORT_RANGE}")
