"""`lograft produce` against a real broker (ReplicaManager + DataRoutes) in-process."""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import pytest

from lograft.cli.common import Streams
from lograft.cli.main import main
from lograft.cli.produce import InputError, _line_ranges, parse_line
from lograft.protocol.partitioner import partition_for_key
from tests.unit.api.conftest import PARTITIONS
from tests.unit.cli.cli_support import DEADLINE_S, dead_urls, http_json, run_cli


def records_of(url: str, topic: str, partition: int) -> list[dict[str, Any]]:
    query = "offset=0&max_records=10000&format=string"
    status, doc = http_json(
        "GET", f"{url}/v1/topics/{topic}/partitions/{partition}/records?{query}"
    )
    assert status == 200, doc
    return doc["records"]


def test_keyed_lines_land_on_their_murmur2_partition_in_order(srv):
    keys = [f"user-{i}" for i in range(40)]
    lines = "".join(f"{k}:{i}\n" for i, k in enumerate(keys))
    r = srv.cli("produce", "orders", "--key-separator", ":", stdin=lines.encode())
    assert r.code == 0, r.err
    assert "40 records acknowledged by orders" in r.err
    seen = {}
    for p in range(PARTITIONS):
        values = []
        for rec in records_of(srv.url, "orders", p):
            assert partition_for_key(rec["key"].encode(), PARTITIONS) == p, rec
            seen[rec["key"]] = rec["value"]
            values.append(int(rec["value"]))
        assert values == sorted(values)  # input order kept within a partition
    assert seen == {k: str(i) for i, k in enumerate(keys)}
    assert len({partition_for_key(k.encode(), PARTITIONS) for k in keys}) == PARTITIONS


def test_a_line_without_the_separator_is_a_value_with_no_key(srv):
    r = srv.cli(
        "produce", "orders", "--partition", "2", "--key-separator", "=", stdin=b"a=1\nplain\n"
    )
    assert r.code == 0, r.err
    got = [(rec["key"], rec["value"]) for rec in records_of(srv.url, "orders", 2)]
    assert got == [("a", "1"), (None, "plain")]


def test_json_values_are_parsed_and_blank_lines_skipped(srv):
    stdin = b'{"n": 1}\n\n[1, 2]\r\n"text"\n'
    r = srv.cli("produce", "orders", "--partition", "0", "--value-format", "json", stdin=stdin)
    assert r.code == 0, r.err
    assert [rec["value"] for rec in records_of(srv.url, "orders", 0)] == [
        '{"n":1}',
        "[1,2]",
        '"text"',
    ]


def test_string_values_are_sent_as_they_are(srv):
    r = srv.cli("produce", "orders", "--partition", "0", stdin='{"n": 1}\nhé llo\n'.encode())
    assert r.code == 0, r.err
    assert [rec["value"] for rec in records_of(srv.url, "orders", 0)] == ['{"n": 1}', "hé llo"]


def test_a_file_is_read_in_batches(srv, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(1234)))
    r = srv.cli(
        "produce", "orders", "--file", str(path), "--partition", "1", "--batch-records", "100"
    )
    assert r.code == 0, r.err
    assert "1,234 records acknowledged" in r.err
    values = [rec["value"] for rec in records_of(srv.url, "orders", 1)]
    assert values == [str(i) for i in range(1234)]


def test_a_missing_file_is_a_failure_that_names_it(srv, tmp_path):
    r = srv.cli("produce", "orders", "--file", str(tmp_path / "nope.txt"))
    assert r.code == 1
    assert "nope.txt" in r.err


def test_acks_zero_counts_records_as_sent_not_acknowledged(srv):
    r = srv.cli("produce", "orders", "--partition", "0", "--acks", "0", stdin=b"a\nb\n")
    assert r.code == 0, r.err
    assert "2 records sent to orders (acks=0" in r.err
    assert len(records_of(srv.url, "orders", 0)) == 2


def test_failed_records_stop_the_run_and_say_how_many_were_acknowledged(srv):
    # strict needs 2 in-sync replicas for acks=all and has 1; the producer retries
    # that (it is retriable) until --timeout-ms runs out. (Two lines, one batch: a
    # third line's batch, queued behind it, could expire at the same instant and
    # count as failed too; that the run stops is test_abort_... in the client's
    # tests and the idle-input test below.)
    r = srv.cli("produce", "strict", "--timeout-ms", "1000", stdin=b"a\nb\n")
    assert r.code == 1
    assert "NOT_ENOUGH_REPLICAS" in r.err
    assert "2 records failed" in r.err and "input line(s) 1-2" in r.err
    assert "rest of the input was not sent" in r.err
    assert "0 records acknowledged by strict (acks=all), 2 failed" in r.err
    # acks=1 does not need the ISR: the same input goes through.
    ok = srv.cli("produce", "strict", "--acks", "1", stdin=b"a\nb\nc\n")
    assert ok.code == 0, ok.err


def test_a_failure_ends_the_run_while_the_input_is_idle(srv):
    """`tail -f app.log | lograft produce`: a failed record ends the run at once,
    not when the next line comes."""
    read_fd, write_fd = os.pipe()
    err = io.StringIO()
    done: dict[str, int] = {}
    argv = ["produce", "strict", "--timeout-ms", "500", "--bootstrap", srv.url]
    with os.fdopen(read_fd, "rb") as stdin, os.fdopen(write_fd, "wb") as writer:
        writer.write(b"a\nb\n")
        writer.flush()  # and the pipe stays open: no more input, no EOF
        t = threading.Thread(
            target=lambda: done.update(code=main(argv, Streams(stdin, io.StringIO(), err))),
            daemon=True,
        )
        t.start()
        t.join(DEADLINE_S)
        assert not t.is_alive(), "the run waited for more input after a failure"
    assert done["code"] == 1
    assert "NOT_ENOUGH_REPLICAS" in err.getvalue() and "2 failed" in err.getvalue()


def test_a_bad_line_stops_after_sending_what_came_before_it(srv):
    stdin = b'{"ok": 1}\n{"ok": 2}\n{"ok": 3}\nnot json\n{"ok": 5}\n'
    r = srv.cli(
        "produce",
        "orders",
        "--partition",
        "0",
        "--value-format",
        "json",
        "--batch-records",
        "2",
        stdin=stdin,
    )
    assert r.code == 1
    assert "line 4 is not JSON" in r.err
    assert "3 records acknowledged" in r.err
    assert len(records_of(srv.url, "orders", 0)) == 3


def test_unknown_topic_fails_with_the_servers_message(srv):
    r = srv.cli("produce", "nope", stdin=b"x\n")
    assert r.code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION: topic 'nope' does not exist" in r.err


def test_unreachable_cluster_names_every_url_tried():
    urls = dead_urls(2)
    r = run_cli(["produce", "orders", "--bootstrap", ",".join(urls)], stdin=b"x\n")
    assert r.code == 1
    for url in urls:
        assert url in r.err
    assert "could not reach" in r.err


def test_progress_bar_is_drawn_on_request_and_the_summary_always(srv):
    stdin = "".join(f"{i}\n" for i in range(50)).encode()
    shown = srv.cli("produce", "orders", "--progress", "--batch-records", "10", stdin=stdin)
    assert shown.code == 0, shown.err
    assert "\r" in shown.err and "records sent" in shown.err
    plain = srv.cli("produce", "orders", "--batch-records", "10", stdin=stdin)
    assert "\r" not in plain.err  # stderr is not a terminal
    assert plain.err.count("\n") == 1 and "50 records acknowledged" in plain.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--acks", "2"],
        ["--batch-records", "0"],
        ["--batch-records", "10001"],
        ["--partition", "-1"],
        ["--value-format", "xml"],
    ],
)
def test_bad_options_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(["produce", "orders", *argv])
    assert exc.value.code == 2


# -- pure pieces ------------------------------------------------------------------------------


def test_parse_line_splits_at_the_first_separator_only():
    rec = parse_line(7, b"k=v=w", "=", "string")
    assert (rec.line_no, rec.key, rec.value) == (7, b"k", b"v=w")
    assert parse_line(8, b'{"a": [1, 2]}', None, "json").value == b'{"a":[1,2]}'


def test_parse_line_refuses_bad_utf8_and_bad_json_naming_the_line():
    with pytest.raises(InputError, match="line 3 is not UTF-8"):
        parse_line(3, b"\xff\xfe", None, "string")
    with pytest.raises(InputError, match="line 4 is not JSON"):
        parse_line(4, b"{oops", None, "json")


def test_line_ranges_compacts_runs():
    assert _line_ranges([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8"
