#!/usr/bin/env python3
"""Decision speed of `lograft.security.authorizer.Authorizer` with many ACL bindings.

No node, no network: the authorizer alone, on bindings and requests built
before the clock starts (fixed seed). `--bindings` (10,000) bindings shaped
like a multi-tenant cluster: per tenant a prefixed topic pattern
(`tenant-17.`) and a prefixed group pattern for its own principal, literal
topic bindings for other principals (READ, WRITE, DESCRIBE, some DENY),
host-restricted bindings, and a few `User:*` and literal `*` bindings.

Cases (each `--decisions` (200,000) requests, best of `--repeat` (5)):

1. **allowed**: a tenant reads its own topic (prefixed match plus literal
   bindings on the name).
2. **denied**: a principal asks for a topic of another tenant (patterns
   apply, none matches).
3. **no acl**: a topic no binding applies to (the default rule).
4. **mixed**: the three above interleaved, with DESCRIBE and WRITE.

    .venv/bin/python scripts/bench_authorizer.py [--bindings 10000] [--decisions 200000] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine  # a sibling script

from lograft.security.acls import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from lograft.security.authorizer import Authorizer

Request = tuple[str, str, AclOperation, ResourceType, str]


def binding(
    resource_type: ResourceType,
    name: str,
    pattern: PatternType,
    principal: str,
    operation: AclOperation,
    permission: AclPermission = AclPermission.ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission=permission,
    )


def make_bindings(count: int, rng: random.Random) -> tuple[list[AclBinding], int]:
    """About `count` bindings, and the number of tenants they describe."""
    topic, group = ResourceType.TOPIC, ResourceType.GROUP
    literal, prefixed = PatternType.LITERAL, PatternType.PREFIXED
    op = AclOperation
    tenants = max(1, count // 10)
    acls: list[AclBinding] = [
        binding(topic, "*", literal, "User:monitor", op.DESCRIBE),
        binding(topic, "public.", prefixed, "User:*", op.READ),
        binding(group, "*", literal, "User:*", op.DESCRIBE),
    ]
    for t in range(tenants):
        me = f"User:tenant-{t}"
        acls.append(binding(topic, f"tenant-{t}.", prefixed, me, op.ALL))
        acls.append(binding(group, f"tenant-{t}.", prefixed, me, op.READ))
        for k in range(2):
            name = f"tenant-{t}.topic-{k}"
            other = f"User:tenant-{rng.randrange(tenants)}"
            acls.append(binding(topic, name, literal, other, op.READ))
            acls.append(binding(topic, name, literal, other, op.DESCRIBE))
        name = f"tenant-{t}.topic-0"
        acls.append(binding(topic, name, literal, f"User:app-{t}", op.WRITE))
        acls.append(binding(topic, name, literal, f"User:app-{t}", op.DELETE, AclPermission.DENY))
        acls.append(binding(topic, name, literal, me, op.READ, host=f"10.0.{t % 250}.{t % 200}"))
        acls.append(
            binding(topic, f"tenant-{t}.secret", literal, "User:*", op.ALL, AclPermission.DENY)
        )
    return acls[:count], tenants


def make_requests(case: str, n: int, tenants: int, rng: random.Random) -> list[Request]:
    topic = ResourceType.TOPIC
    out: list[Request] = []
    for i in range(n):
        t = rng.randrange(tenants)
        kind = case if case != "mixed" else ("allowed", "denied", "no acl")[i % 3]
        operation = (
            AclOperation.READ
            if case != "mixed"
            else rng.choice([AclOperation.READ, AclOperation.DESCRIBE, AclOperation.WRITE])
        )
        if kind == "allowed":
            out.append((f"User:tenant-{t}", "10.1.2.3", operation, topic, f"tenant-{t}.topic-1"))
        elif kind == "denied":
            victim = (t + 1) % tenants
            out.append(
                (f"User:tenant-{t}", "10.1.2.3", operation, topic, f"tenant-{victim}.topic-1")
            )
        else:
            out.append((f"User:tenant-{t}", "10.1.2.3", operation, topic, f"scratch-{i % 997}"))
    return out


def run(count: int, decisions: int, repeat: int) -> dict[str, float]:
    rng = random.Random(12)
    acls, tenants = make_bindings(count, rng)
    started = time.perf_counter()
    authorizer = Authorizer(acls)
    build_seconds = time.perf_counter() - started
    figures = {"build (bindings/s)": len(acls) / build_seconds}
    for case in ("allowed", "denied", "no acl", "mixed"):
        requests = make_requests(case, decisions, tenants, rng)
        authorize = authorizer.authorize
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            for request in requests:
                authorize(*request)
            best = min(best, time.perf_counter() - started)
        figures[case] = decisions / best
    figures["bindings"] = float(len(authorizer))
    return figures


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bindings", type=int, default=10_000)
    ap.add_argument("--decisions", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    figures = run(args.bindings, args.decisions, args.repeat)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"# {machine()}")
    print(f"# {int(figures.pop('bindings')):,} bindings, {args.decisions:,} decisions per case")
    print(f"{'case':<20} {'per second':>12} {'us each':>9}")
    for name, rate in figures.items():
        print(f"{name:<20} {rate:>12,.0f} {1e6 / rate:>9.2f}")


if __name__ == "__main__":
    main()
