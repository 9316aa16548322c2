"""`lograft groups ...` against one real node process (controller + broker, the
only voter), the admin API's refusals for `__consumer_offsets` on the same
node, and the coordinator-following client against scripted answers. Each test
uses its own group and topic names; the node is shared by the module."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from lograft.cli import groups as cli_groups
from lograft.cli.groups import incomplete_list_text, partitions_text
from tests.unit.cli.cli_support import DEADLINE_S, RealNode, Result, http_json, run_cli

OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[RealNode]:
    n = RealNode(tmp_path_factory.mktemp("cli-groups-node"))
    try:
        yield n
    finally:
        n.stop()


def cli(node: RealNode, *argv: str, stdin: bytes = b"") -> Result:
    return run_cli([*argv, "--bootstrap", node.url], stdin=stdin)


def rows(lines: list[str]) -> list[list[str]]:
    return [line.split() for line in lines]


def make_topic(node: RealNode, name: str, partitions: int, records_per_partition: int) -> None:
    created = cli(
        node, "topics", "create", name, "--partitions", str(partitions), "--replication-factor", "1"
    )
    assert created.code == 0, created.err
    for p in range(partitions):
        produce(node, name, p, records_per_partition)


def produce(node: RealNode, topic: str, partition: int, n: int) -> None:
    lines = "\n".join(f"v{i}" for i in range(n)).encode()
    r = cli(node, "produce", topic, "--partition", str(partition), stdin=lines)
    assert r.code == 0, r.err


def describe(node: RealNode, group: str) -> dict[str, Any]:
    r = cli(node, "groups", "describe", group, "--json")
    assert r.code == 0, r.err
    return orjson.loads(r.out)


def committed(doc: dict[str, Any]) -> dict[int, int | None]:
    return {o["partition"]: o["committed_offset"] for o in doc["offsets"]}


def group_call(node: RealNode, group: str, method: str, suffix: str = "", body: Any = None) -> Any:
    """A request to the group's coordinator (the one node), retried while the
    coordinator loads (the first lookup of a cluster creates __consumer_offsets)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        status, doc = http_json(method, f"{node.url}/v1/groups/{group}{suffix}", body)
        if status < 400:
            return doc
        assert doc["error"]["retriable"] and time.monotonic() < deadline, doc
        time.sleep(0.05)  # polling a condition with a deadline


class Member:
    """One group member over the HTTP API, joined until it holds `partitions`."""

    def __init__(self, node: RealNode, group: str, topic: str, partitions: int) -> None:
        self.node = node
        self.group = group
        self.sequence = 1
        doc = group_call(
            node,
            group,
            "POST",
            "/members",
            {"subscribed_topics": [topic], "client_id": "tester", "sequence": 1},
        )
        self.member_id = doc["member_id"]
        deadline = time.monotonic() + DEADLINE_S
        while len(doc["assignment"].get(topic, [])) < partitions:
            assert time.monotonic() < deadline, doc
            self.sequence += 1
            doc = group_call(
                node,
                group,
                "POST",
                f"/members/{self.member_id}/heartbeat",
                {"member_epoch": doc["member_epoch"], "sequence": self.sequence},
            )

    def leave(self) -> None:
        group_call(
            self.node,
            self.group,
            "DELETE",
            f"/members/{self.member_id}?sequence={self.sequence + 1}",
        )


# -- the commands against a real node ----------------------------------------------------------


def test_reset_describe_list_delete(node):
    make_topic(node, "t-life", 3, 5)
    reset = cli(node, "groups", "reset-offsets", "g-life", "--topic", "t-life", "--to-offset", "2")
    assert reset.code == 0, reset.err
    assert rows(reset.lines) == [
        ["TOPIC", "PARTITION", "NEW-OFFSET"],
        *[["t-life", str(p), "2"] for p in range(3)],
        ["reset", "3", "partitions", "of", "group", "g-life", "(offset)"],
    ]

    described = cli(node, "groups", "describe", "g-life")
    assert described.code == 0, described.err
    head, offsets = described.out.split("\n\n")
    assert head.startswith("group g-life  state empty")
    assert "members 0  total lag 9" in head
    assert rows(offsets.splitlines()) == [
        ["TOPIC", "PARTITION", "COMMITTED", "HIGH-WATERMARK", "LAG", "OWNER", "CLIENT-ID"],
        *[["t-life", str(p), "2", "5", "3", "-", "-"] for p in range(3)],
    ]

    listed = cli(node, "groups", "list")
    assert listed.code == 0, listed.err
    assert ["g-life", "empty", "0", "1"] in rows(listed.lines)
    as_json = orjson.loads(cli(node, "groups", "list", "--json").out)
    assert {"group_id": "g-life", "state": "empty", "members": 0, "coordinator_id": 1} in as_json[
        "groups"
    ]

    deleted = cli(node, "groups", "delete", "g-life")
    assert (deleted.code, deleted.out) == (0, "deleted group g-life\n")
    gone = cli(node, "groups", "describe", "g-life")
    assert gone.code == 1
    assert gone.err.startswith("lograft groups describe: GROUP_ID_NOT_FOUND: group 'g-life'")
    assert "g-life" not in cli(node, "groups", "list").out
    again = cli(node, "groups", "delete", "g-life")
    assert again.code == 1 and "GROUP_ID_NOT_FOUND" in again.err


def test_a_group_with_members_is_described_and_cannot_be_reset_or_deleted(node):
    make_topic(node, "t-busy", 2, 4)
    assert (
        cli(node, "groups", "reset-offsets", "g-busy", "--topic", "t-busy", "--to-latest").code == 0
    )
    member = Member(node, "g-busy", "t-busy", 2)
    try:
        described = cli(node, "groups", "describe", "g-busy")
        assert described.code == 0, described.err
        _head, offsets, members = described.out.split("\n\n")
        assert [r[5:] for r in rows(offsets.splitlines())[1:]] == [[member.member_id, "tester"]] * 2
        member_rows = rows(members.splitlines())
        assert member_rows[0] == [
            "MEMBER", "CLIENT-ID", "HOST", "EPOCH", "STATE", "SUBSCRIBED", "ASSIGNED", "REVOKING"
        ]  # fmt: skip
        assert member_rows[1][0:2] == [member.member_id, "tester"]
        assert member_rows[1][5:] == ["t-busy", "t-busy:0,1", "-"]

        for extra in ([], ["--dry-run"]):
            r = cli(
                node,
                "groups",
                "reset-offsets",
                "g-busy",
                "--topic",
                "t-busy",
                "--to-earliest",
                *extra,
            )
            assert r.code == 1 and "NON_EMPTY_GROUP" in r.err, (extra, r.err)
        r = cli(node, "groups", "delete", "g-busy")
        assert r.code == 1 and "NON_EMPTY_GROUP" in r.err
        assert committed(describe(node, "g-busy")) == {0: 4, 1: 4}
    finally:
        member.leave()
    assert cli(node, "groups", "delete", "g-busy").code == 0


def test_dry_run_prints_new_offsets_and_changes_nothing(node):
    make_topic(node, "t-dry", 2, 6)
    assert (
        cli(node, "groups", "reset-offsets", "g-dry", "--topic", "t-dry", "--to-latest").code == 0
    )
    dry = cli(
        node,
        "groups",
        "reset-offsets",
        "g-dry",
        "--topic",
        "t-dry",
        "--to-offset",
        "4",
        "--dry-run",
    )
    assert dry.code == 0, dry.err
    assert rows(dry.lines[:3]) == [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        ["t-dry", "0", "6", "4"],
        ["t-dry", "1", "6", "4"],
    ]
    assert dry.lines[3].startswith("dry run: group g-dry unchanged")
    assert committed(describe(node, "g-dry")) == {0: 6, 1: 6}
    # A group that does not exist yet: no current offsets, and still not created.
    fresh = cli(
        node, "groups", "reset-offsets", "g-new", "--topic", "t-dry", "--partitions", "1",
        "--to-earliest", "--dry-run",
    )  # fmt: skip
    assert fresh.code == 0, fresh.err
    assert rows(fresh.lines[1:2]) == [["t-dry", "1", "-", "0"]]
    assert cli(node, "groups", "describe", "g-new").code == 1


def test_reset_to_timestamp_offset_and_partitions(node):
    make_topic(node, "t-time", 2, 5)
    boundary_ms = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= boundary_ms:
        pass  # records from now on carry a timestamp after boundary_ms
    produce(node, "t-time", 0, 3)
    base = ["groups", "reset-offsets", "g-time", "--topic", "t-time"]
    for to, expected in (
        (["--to-timestamp", str(boundary_ms)], {0: 5, 1: 5}),  # 1 has nothing that recent: HW
        (["--to-timestamp", "0"], {0: 0, 1: 0}),
        (["--to-offset", "100"], {0: 8, 1: 5}),  # clamped to the HW
    ):
        for dry in (True, False):
            r = cli(node, *base, *to, *(["--dry-run"] if dry else []))
            assert r.code == 0, r.err
            table = {int(row[1]): int(row[-1]) for row in rows(r.lines[1:3])}
            assert table == expected, (to, dry, r.out)
        assert committed(describe(node, "g-time")) == expected
    only = cli(node, *base, "--partitions", "1", "--to-offset", "3")
    assert only.code == 0, only.err
    assert committed(describe(node, "g-time")) == {0: 8, 1: 3}


def test_unknown_topic_or_partition(node):
    make_topic(node, "t-small", 2, 1)
    for extra in ([], ["--dry-run"]):
        r = cli(
            node, "groups", "reset-offsets", "g-small", "--topic", "t-small", "--partitions", "1,7",
            "--to-earliest", *extra,
        )  # fmt: skip
        assert r.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.err, (extra, r.err)
        r = cli(
            node, "groups", "reset-offsets", "g-small", "--topic", "t-nope", "--to-earliest", *extra
        )
        assert r.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.err, (extra, r.err)
    assert cli(node, "groups", "describe", "g-small").code == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["groups"],
        ["groups", "describe"],
        ["groups", "reset-offsets", "g", "--topic", "t"],  # no --to-*
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["groups", "reset-offsets", "g", "--to-earliest"],  # no --topic
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-1"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--partitions", "a"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--partitions", "-1"],
    ],
)
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(argv)
    assert exc.value.code == 2


def test_a_recreated_topic_does_not_inherit_the_deleted_ones_offsets(node):
    make_topic(node, "t-gone", 1, 5)
    make_topic(node, "t-kept", 1, 5)
    for topic in ("t-gone", "t-kept"):
        r = cli(node, "groups", "reset-offsets", "g-gone", "--topic", topic, "--to-offset", "3")
        assert r.code == 0, r.err
    assert cli(node, "topics", "delete", "t-gone").code == 0
    # The coordinator deletes them once its metadata has applied the deletion.
    deadline = time.monotonic() + DEADLINE_S
    while [o["topic"] for o in describe(node, "g-gone")["offsets"]] != ["t-kept"]:
        assert time.monotonic() < deadline, describe(node, "g-gone")
        time.sleep(0.05)  # polling a condition with a deadline
    make_topic(node, "t-gone", 1, 10)
    fetched = group_call(node, "g-gone", "GET", "/offsets?topics=t-gone&auto_offset_reset=earliest")
    # Nothing committed: a consumer starts by auto_offset_reset, not at the old 3.
    assert [(o["offset"], o["start_offset"]) for o in fetched["offsets"]] == [(None, 0)]
    assert committed(describe(node, "g-gone")) == {0: 3}


# -- the internal topic is guarded -------------------------------------------------------------


def test_the_offsets_topic_cannot_be_deleted_grown_or_uncompacted(node):
    make_topic(node, "t-guard", 1, 1)
    assert (
        cli(node, "groups", "reset-offsets", "g-guard", "--topic", "t-guard", "--to-latest").code
        == 0
    )
    before = orjson.loads(cli(node, "topics", "describe", OFFSETS_TOPIC, "--json").out)
    for argv in (
        ["topics", "delete", OFFSETS_TOPIC],
        ["topics", "alter", OFFSETS_TOPIC, "--partitions", str(len(before["partitions"]) + 1)],
        ["topics", "alter", OFFSETS_TOPIC, "--config", "cleanup_policy=delete"],
        # The refused key comes with an allowed one: neither is applied.
        ["topics", "alter", OFFSETS_TOPIC, "--config", "retention_ms=1", "--config",
         "cleanup_policy=compact,delete"],
        ["topics", "alter", OFFSETS_TOPIC, "--delete-config", "cleanup_policy"],
    ):  # fmt: skip
        r = cli(node, *argv)
        assert r.code == 1, argv
        assert ": INTERNAL_TOPIC_PROTECTED: " in r.err, (argv, r.err)
    after = orjson.loads(cli(node, "topics", "describe", OFFSETS_TOPIC, "--json").out)
    assert after["topic_id"] == before["topic_id"]
    assert len(after["partitions"]) == len(before["partitions"])
    assert after["configs"] == before["configs"] == {"cleanup_policy": "compact"}
    assert committed(describe(node, "g-guard")) == {0: 1}

    status, body = http_json("DELETE", f"{node.url}/v1/topics/{OFFSETS_TOPIC}")
    assert status == 403
    error = body["error"]
    assert (error["code"], error["retriable"]) == ("INTERNAL_TOPIC_PROTECTED", False)
    assert error["details"] == {"topic": OFFSETS_TOPIC, "operation": "delete_topic"}
    status, grow = http_json(
        "POST", f"{node.url}/v1/topics/{OFFSETS_TOPIC}/partitions", {"partitions": 50}
    )
    assert status == 403 and "coordinator" in grow["error"]["message"]


def test_an_incomplete_group_list_says_why_and_exits_1(monkeypatch):
    doc = {"groups": [], "unreachable_brokers": [2, 3], "loading_partitions": [4]}

    class ListingAdmin:
        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def list_groups(self) -> Any:
            return doc

    def client_for(_args: argparse.Namespace) -> Any:
        return ListingAdmin()

    monkeypatch.setattr(cli_groups, "client_for", client_for)
    r = run_cli(["groups", "list", "--bootstrap", "http://127.0.0.1:1"])
    assert (r.code, r.out) == (1, "no groups\n")
    assert "broker(s) 2, 3 did not answer" in r.err and "partition(s) 4" in r.err
    assert (
        incomplete_list_text({"groups": [], "unreachable_brokers": [], "loading_partitions": []})
        is None
    )


def test_partitions_text():
    assert partitions_text({"orders": [1, 0], "audit": [2]}) == "audit:2;orders:0,1"
    assert partitions_text({}) is None


def test_group_commands_print_json(node):
    make_topic(node, "t-json", 2, 4)

    def as_json(*argv: str) -> dict:
        r = cli(node, *argv, "--output", "json")
        assert r.code == 0, r.err
        return orjson.loads(r.out)

    reset = ["groups", "reset-offsets", "g-json", "--topic", "t-json", "--to-offset", "1"]
    dry = as_json(*reset, "--dry-run")
    assert dry == {
        "group": "g-json",
        "strategy": "offset",
        "dry_run": True,
        "offsets": [
            {"topic": "t-json", "partition": p, "current_offset": None, "new_offset": 1}
            for p in range(2)
        ],
    }
    shown = cli(node, *reset, "--output", "json", "--progress")
    assert shown.code == 0, shown.err
    assert "resetting the offsets of every partition of t-json" in shown.err  # the spinner
    done = orjson.loads(shown.out)
    assert done["dry_run"] is False and sorted(
        (o["partition"], o["new_offset"]) for o in done["offsets"]
    ) == [(0, 1), (1, 1)]
    described = as_json("groups", "describe", "g-json")
    assert described["group_id"] == "g-json" and described["state"] == "empty"
    assert sorted(o["lag"] for o in described["offsets"]) == [3, 3]
    listed = as_json("groups", "list")
    assert any(g["group_id"] == "g-json" for g in listed["groups"])
    assert as_json("groups", "delete", "g-json") == {"group": "g-json", "deleted": True}
