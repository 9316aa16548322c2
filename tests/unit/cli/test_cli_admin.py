"""`lograft cluster status` and `lograft topics ...` against one real node process
(controller + broker, the only voter), plus one produce/consume round trip
through it. Each test uses its own topic names; the node is shared by the module."""

from __future__ import annotations

import io
from collections.abc import Iterator

import orjson
import pytest

from lograft.cli.cluster import render_status
from lograft.cli.common import bootstrap_urls
from lograft.cli.dump_log import cmd_dump_log
from lograft.cli.main import build_parser
from lograft.cli.output import grid, render_text
from lograft.client import Admin
from lograft.errors import InvalidConfigError
from lograft.protocol.partitioner import partition_for_key
from tests.unit.cli.cli_support import RealNode, Result, dead_urls, run_cli


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[RealNode]:
    n = RealNode(tmp_path_factory.mktemp("cli-node"))
    try:
        yield n
    finally:
        n.stop()


def cli(node: RealNode, *argv: str, stdin: bytes = b"") -> Result:
    return run_cli([*argv, "--bootstrap", node.url], stdin=stdin)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def test_cluster_status_table_and_json(node):
    r = cli(node, "cluster", "status")
    assert r.code == 0, r.err
    assert "cluster id         cli-test" in r.out
    assert "active controller  1" in r.out
    broker_rows = r.out.split("brokers:\n")[1].splitlines()
    assert broker_rows[0].split() == ["ID", "STATE", "FENCED", "EPOCH", "RACK", "ENDPOINT"]
    assert broker_rows[1].split()[:3] == ["1", "unfenced", "no"]
    doc = orjson.loads(cli(node, "cluster", "status", "--json").out)
    assert doc["cluster_id"] == "cli-test" and doc["raft"]["voters"][0]["node_id"] == "1"


def test_create_list_describe_alter_delete(node):
    r = cli(
        node,
        "topics",
        "create",
        "t-life",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention_ms=60000",
        "--config",
        "min_insync_replicas=1",
    )
    assert r.code == 0, r.err
    assert r.out.startswith("created topic t-life: 3 partitions, replication factor 1")

    listed = cli(node, "topics", "list")
    assert ["t-life", "3", "1", "min_insync_replicas=1,", "retention_ms=60000"] in rows(listed.out)

    described = cli(node, "topics", "describe", "t-life")
    assert described.code == 0, described.err
    table_rows = rows(described.out.split("\n\n")[1])
    assert table_rows[0] == [
        "PARTITION",
        "LEADER",
        "EPOCH",
        "REPLICAS",
        "ISR",
        "LOG-START",
        "LOG-END",
        "HW",
        "STATUS",
    ]
    assert [row[:5] + row[-1:] for row in table_rows[1:]] == [
        [str(p), "1", "0", "1", "1", "ok"] for p in range(3)
    ]

    altered = cli(
        node,
        "topics",
        "alter",
        "t-life",
        "--partitions",
        "5",
        "--config",
        "retention_ms=1000",
        "--delete-config",
        "min_insync_replicas",
    )
    assert altered.code == 0, altered.err
    doc = orjson.loads(cli(node, "topics", "describe", "t-life", "--json").out)
    assert len(doc["partitions"]) == 5
    assert doc["configs"] == {"retention_ms": "1000"}

    assert cli(node, "topics", "delete", "t-life").out == "deleted topic t-life\n"
    names = [t["name"] for t in orjson.loads(cli(node, "topics", "list", "--json").out)["topics"]]
    assert "t-life" not in names


def test_admin_errors_carry_the_servers_code_and_message(node):
    assert cli(node, "topics", "create", "t-dup", "--replication-factor", "1").code == 0
    again = cli(node, "topics", "create", "t-dup", "--replication-factor", "1")
    assert again.code == 1
    assert again.err.startswith("lograft topics create: TOPIC_ALREADY_EXISTS:")
    missing = cli(node, "topics", "describe", "t-missing")
    assert missing.code == 1 and "t-missing" in missing.err
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.err
    too_many = cli(node, "topics", "create", "t-rf", "--replication-factor", "3")
    assert too_many.code == 1 and "INVALID_REPLICATION_FACTOR" in too_many.err
    lower = cli(node, "topics", "alter", "t-dup", "--partitions", "1")
    assert lower.code == 1 and "INVALID_PARTITIONS" in lower.err


def test_a_refused_config_leaves_the_partition_count_alone(node):
    assert cli(node, "topics", "create", "t-cfg", "--replication-factor", "1").code == 0
    r = cli(node, "topics", "alter", "t-cfg", "--partitions", "4", "--config", "no_such=1")
    assert r.code == 1 and "INVALID_CONFIG" in r.err
    doc = orjson.loads(cli(node, "topics", "describe", "t-cfg", "--json").out)
    assert len(doc["partitions"]) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "alter", "x"],  # no change given
        ["topics", "alter", "x", "--config", "a=1", "--delete-config", "a"],
        ["topics", "create", "x", "--partitions", "0"],
        ["topics", "create", "x", "--config", "novalue"],
        ["topics"],
        ["cluster", "status", "--bootstrap", "ftp://host:1"],
    ],
)
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(argv)
    assert exc.value.code == 2


def test_bad_bootstrap_environment_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "gopher://x")
    with pytest.raises(SystemExit) as exc:
        run_cli(["topics", "list"])
    assert exc.value.code == 2


def test_bootstrap_comes_from_the_environment(node, monkeypatch):
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", f"{dead_urls(1)[0]},{node.url}")
    r = run_cli(["cluster", "status"])
    assert r.code == 0, r.err


def test_unreachable_cluster_names_every_url_tried():
    urls = dead_urls(3)
    r = run_cli(["topics", "list", "--bootstrap", ",".join(urls)])
    assert r.code == 1
    assert all(url in r.err for url in urls)


def test_produce_and_consume_through_a_real_node(node):
    assert (
        cli(
            node, "topics", "create", "t-data", "--partitions", "4", "--replication-factor", "1"
        ).code
        == 0
    )
    lines = [f"key-{i % 9}={i}" for i in range(200)]
    p = cli(node, "produce", "t-data", "--key-separator", "=", stdin="\n".join(lines).encode())
    assert p.code == 0, p.err
    c = cli(node, "consume", "t-data", "--format", "json")
    recs = [orjson.loads(line) for line in c.out.splitlines()]
    assert sorted(int(r["value"]) for r in recs) == list(range(200))
    assert all(r["partition"] == partition_for_key(r["key"].encode(), 4) for r in recs)
    described = orjson.loads(cli(node, "topics", "describe", "t-data", "--json").out)
    ends = {p["partition"]: p["high_watermark"] for p in described["partitions"]}
    assert ends == {q: sum(1 for r in recs if r["partition"] == q) for q in range(4)}


# -- pure pieces ------------------------------------------------------------------------------


def test_bootstrap_urls_normalise_and_refuse():
    assert bootstrap_urls(" a:1, http://b:2/ ,a:1") == ["http://a:1", "http://b:2"]
    for bad in ("", ",", "ftp://a:1", "http://:1", "a:notaport"):
        with pytest.raises(InvalidConfigError):
            bootstrap_urls(bad)


def test_table_aligns_columns():
    text = render_text([grid(["A", "LONGER"], [(1, None), ("xyz", [1, 2])])], width=40)
    assert [line.rstrip() for line in text.splitlines()] == [
        "A    LONGER",
        "1    -",
        "xyz  1,2",
    ]


def test_render_status_counts_fenced_brokers():
    doc = {
        "cluster_id": "c",
        "node_id": 2,
        "active_controller": 1,
        "raft": {
            "role": "follower",
            "term": 4,
            "commit_index": 9,
            "voters": [],
            "observers": ["5"],
        },
        "brokers": [{"id": 1, "fenced": False}, {"id": 2, "fenced": True}],
    }
    text = render_text(render_status(doc), width=100)
    assert "2 (1 unfenced, 1 fenced)" in text and "observers: 5" in text
    assert "node 2 (Raft follower)" in text


def test_admin_prefers_the_url_that_answered_last(node):
    with Admin([dead_urls(1)[0], node.url]) as admin:
        admin.list_topics()
        assert admin._async.metadata.candidates()[0] == node.url


# -- --output json: one JSON document of the documented shape (docs/cli.md) -----------------


def as_json(node: RealNode, *argv: str, stdin: bytes = b"") -> object:
    r = cli(node, *argv, "--output", "json", stdin=stdin)
    assert r.code == 0, r.err
    return orjson.loads(r.out)


def test_topic_commands_print_json(node):
    created = as_json(node, "topics", "create", "t-json", "--partitions", "2")
    assert created["name"] == "t-json" and len(created["partitions"]) == 2
    assert {"name", "topic_id", "partitions"} <= created.keys()
    altered = as_json(
        node, "topics", "alter", "t-json", "--partitions", "3", "--config", "retention_ms=60000"
    )
    assert altered == {"topic": "t-json", "configs": {"retention_ms": "60000"}, "partitions": 3}
    listed = as_json(node, "topics", "list")
    assert {"name", "partitions", "replication_factor", "configs"} <= next(
        t for t in listed["topics"] if t["name"] == "t-json"
    ).keys()
    described = as_json(node, "topics", "describe", "t-json")
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert {"leader", "replicas", "isr", "log_start_offset", "high_watermark"} <= set(
        described["partitions"][0]
    )
    status = as_json(node, "cluster", "status")
    assert {"cluster_id", "node_id", "active_controller", "raft", "brokers"} <= status.keys()
    # -o is --output; --json is its older spelling.
    assert orjson.loads(cli(node, "topics", "list", "-o", "json").out) == listed
    assert as_json(node, "topics", "delete", "t-json") == {"topic": "t-json", "deleted": True}


def test_produce_consume_and_dump_log_print_json(node):
    assert cli(node, "topics", "create", "t-jsonl", "--replication-factor", "1").code == 0
    summary = as_json(node, "produce", "t-jsonl", stdin=b"a\nb\nc\n")
    assert {k: summary[k] for k in ("topic", "acks", "sent", "acknowledged", "failed")} == {
        "topic": "t-jsonl",
        "acks": "all",
        "sent": 3,
        "acknowledged": 3,
        "failed": 0,
    }
    assert summary["interrupted"] is False and summary["records_per_s"] >= 0
    consumed = cli(node, "consume", "t-jsonl", "--output", "json")
    recs = [orjson.loads(line) for line in consumed.out.splitlines()]
    assert [(r["topic"], r["offset"], r["value"]) for r in recs] == [
        ("t-jsonl", 0, "a"),
        ("t-jsonl", 1, "b"),
        ("t-jsonl", 2, "c"),
    ]
    (segment,) = (node.log_path.parent / "data").glob("**/t-jsonl-0/*.log")
    out, err = io.StringIO(), io.StringIO()
    argv = ["dump-log", str(segment), "--records", "--output", "json"]
    code = cmd_dump_log(build_parser().parse_args(argv), out, err)
    assert (code, err.getvalue()) == (0, "")
    entries = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [e["type"] for e in entries[:2]] == ["file", "log_start"]
    batches = [e for e in entries if e["type"] == "batch"]
    assert batches and all(b["valid"] for b in batches)
    assert {"base_offset", "last_offset", "count", "position", "size", "crc"} <= batches[0].keys()
    records = [e for e in entries if e["type"] == "record"]
    assert [(r["offset"], r["value"], r["key"]) for r in records] == [
        (0, "a", None),
        (1, "b", None),
        (2, "c", None),
    ]
