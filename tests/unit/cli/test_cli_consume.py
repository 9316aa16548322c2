"""`lograft consume` against real brokers (ReplicaManager + DataRoutes) in-process."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from typing import Any

import orjson
import pytest
from aiohttp import web

from lograft.cli.consume import StartAt, render_line, start_at
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.partitioner import partition_for_key
from tests.unit.api.conftest import PARTITIONS
from tests.unit.cli.cli_support import (
    DEADLINE_S,
    Broker,
    LineWatch,
    LoopThread,
    dead_urls,
    http_json,
    run_cli,
)


def seed(srv, lines: list[str], *extra: str) -> None:
    r = srv.cli("produce", "orders", *extra, stdin="".join(f"{x}\n" for x in lines).encode())
    assert r.code == 0, r.err


def produce_at(url: str, partition: int, value: str, timestamp: int) -> None:
    status, doc = http_json(
        "POST",
        f"{url}/v1/topics/orders/records",
        {
            "value_format": "string",
            "records": [{"value": value, "partition": partition, "timestamp": timestamp}],
        },
    )
    assert status == 200, doc


def json_lines(out: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.splitlines()]


def test_from_earliest_returns_one_partition_in_order(srv):
    seed(srv, [f"v{i}" for i in range(700)], "--partition", "1")
    r = srv.cli("consume", "orders", "--partition", "1")
    assert r.code == 0, r.err
    assert r.lines == [f"v{i}" for i in range(700)]  # more than one fetch (500 per turn)


def test_all_partitions_keep_per_partition_order_and_murmur2_placement(srv):
    keys = [f"k{i % 7}" for i in range(60)]
    seed(srv, [f"{k}\t{i}" for i, k in enumerate(keys)], "--key-separator", "\t")
    r = srv.cli("consume", "orders", "--format", "json")
    assert r.code == 0, r.err
    recs = json_lines(r.out)
    assert sorted(int(x["value"]) for x in recs) == list(range(60))
    for rec in recs:
        assert rec["topic"] == "orders"
        assert rec["partition"] == partition_for_key(rec["key"].encode(), PARTITIONS)
    for p in range(PARTITIONS):
        offsets = [x["offset"] for x in recs if x["partition"] == p]
        assert offsets == list(range(len(offsets)))


def test_max_records_stops_there(srv):
    seed(srv, [str(i) for i in range(20)], "--partition", "0")
    r = srv.cli("consume", "orders", "--max-records", "7")
    assert r.code == 0, r.err
    assert r.lines == [str(i) for i in range(7)]


def test_from_latest_prints_nothing_and_exits(srv):
    seed(srv, ["a", "b"])
    r = srv.cli("consume", "orders", "--from", "latest")
    assert (r.code, r.out) == (0, "")


def test_from_an_offset_and_the_out_of_range_error(srv):
    seed(srv, [str(i) for i in range(10)], "--partition", "2")
    r = srv.cli("consume", "orders", "--partition", "2", "--from", "6")
    assert r.lines == ["6", "7", "8", "9"]
    bad = srv.cli("consume", "orders", "--partition", "2", "--from", "11")
    assert bad.code == 1
    assert "OFFSET_OUT_OF_RANGE" in bad.err and "[0, 10]" in bad.err


def test_from_a_timestamp_starts_at_the_first_record_at_or_after_it(srv):
    for value, ts in (("old", 1_000), ("mid", 2_000), ("new", 3_000)):
        produce_at(srv.url, 0, value, ts)
    assert srv.cli("consume", "orders", "--partition", "0", "--from", "@2000").lines == [
        "mid",
        "new",
    ]
    assert srv.cli("consume", "orders", "--partition", "0", "--from", "@1500").lines == [
        "mid",
        "new",
    ]
    assert srv.cli("consume", "orders", "--partition", "0", "--from", "@9000").out == ""


def test_kv_and_json_formats_and_server_side_value_format(srv):
    seed(srv, ['k1|{"n": 1}', "plain"], "--partition", "0", "--key-separator", "|")
    kv = srv.cli("consume", "orders", "--format", "kv")
    assert kv.lines == ['k1\t{"n":1}', "null\tplain"]
    as_json = json_lines(srv.cli("consume", "orders", "--format", "json").out)
    assert as_json[0]["value"] == {"n": 1} and as_json[0]["key"] == "k1"
    b64 = srv.cli("consume", "orders", "--value-format", "base64", "--max-records", "1")
    assert b64.lines == ["eyJuIjogMX0="]  # base64 of '{"n": 1}' as stored


def test_follow_picks_up_a_record_produced_after_it_started(srv):
    seed(srv, ["before"], "--partition", "1")
    out = LineWatch()
    done: dict[str, Any] = {}

    def consume() -> None:
        argv = ["consume", "orders", "--follow", "--max-records", "2", "--bootstrap", srv.url]
        done["result"] = run_cli(argv, stdout=out)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert out.wait_lines(1) == ["before"]  # it is running and caught up
    seed(srv, ["after"])
    t.join(DEADLINE_S)
    assert not t.is_alive(), "the follower never saw the new record"
    assert done["result"].code == 0, done["result"].err
    assert out.lines() == ["before", "after"]


def test_follow_ends_with_exit_0_on_ctrl_c(srv):
    seed(srv, ["first"])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lograft.cli.main",
            "consume",
            "orders",
            "--follow",
            "--bootstrap",
            srv.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        assert lines.get(timeout=DEADLINE_S) == "first\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(DEADLINE_S) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_unknown_topic_fails_with_the_servers_message(srv):
    r = srv.cli("consume", "nope")
    assert r.code == 1
    assert r.err.startswith("lograft consume: UNKNOWN_TOPIC_OR_PARTITION:")
    assert "topic 'nope' does not exist" in r.err


def test_unknown_partition_fails_naming_the_range(srv):
    r = srv.cli("consume", "orders", "--partition", "5")
    assert r.code == 1
    assert "has no partition 5" in r.err and "0..2" in r.err


def test_unreachable_cluster_names_every_url_tried():
    urls = dead_urls(2)
    r = run_cli(["consume", "orders", "--bootstrap", ",".join(urls)])
    assert r.code == 1
    for url in urls:
        assert url in r.err
    assert "--bootstrap" in r.err


def test_a_dead_bootstrap_url_is_skipped(srv):
    seed(srv, ["x"])
    r = run_cli(["consume", "orders", "--bootstrap", f"{dead_urls(1)[0]},{srv.url}"])
    assert (r.code, r.lines) == (0, ["x"])


@pytest.mark.parametrize("value", ["bad", "-3", "@", "@soon", "1.5", ""])
def test_bad_from_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli(["consume", "orders", "--from", value])
    assert exc.value.code == 2
    assert "--from" in capsys.readouterr().err


def test_requests_follow_not_leader_to_the_leader(srv, tmp_path):
    """Broker 2 leads nothing; every partition request it gets answers 421 naming broker 1."""
    seed(srv, [f"r{i}" for i in range(5)], "--partition", "0")
    other = Broker(srv.loop, srv.cluster, 2, tmp_path / "broker-2")
    try:
        status, _ = http_json("GET", f"{other.url}/v1/topics/orders/partitions/0/offsets")
        assert status == 421  # the setup does what the test needs
        r = run_cli(["consume", "orders", "--partition", "0", "--bootstrap", other.url])
        assert r.code == 0, r.err
        assert r.lines == [f"r{i}" for i in range(5)]
    finally:
        other.stop()


def test_a_position_inside_a_compacted_batch_is_stepped_over():
    """A batch whose last records were compacted away ends past its last record;
    the consumer moves on to X-Lograft-Next-Offset instead of asking again."""
    batch = build_batch(
        [RecordInput(f"v{o}".encode(), None, (), 1_000) for o in range(6)],
        timestamp_ms=1_000,
        last_offset_delta=9,
    )
    fetched_at: list[int] = []

    async def brokers(_request: web.Request) -> web.Response:
        return web.json_response({"brokers": [{"id": 1, "endpoints": {"http": url}}]})

    async def describe(_request: web.Request) -> web.Response:
        return web.json_response({"name": "t", "partitions": [{"partition": 0, "leader": 1}]})

    async def offsets(_request: web.Request) -> web.Response:
        return web.json_response({"earliest": 0, "latest": 10, "log_end_offset": 10})

    async def records(request: web.Request) -> web.Response:
        offset = int(request.query["offset"])
        fetched_at.append(offset)
        assert "vnd.lograft.batch" in request.headers.get("Accept", "")
        body = batch if offset < 10 else b""
        return web.Response(body=body, headers={"X-Lograft-Next-Offset": "10"})

    app = web.Application()
    app.router.add_get("/v1/brokers", brokers)
    app.router.add_get("/v1/topics/t", describe)
    app.router.add_get("/v1/topics/t/partitions/0/offsets", offsets)
    app.router.add_get("/v1/topics/t/partitions/0/records", records)
    loop = LoopThread()
    runner = web.AppRunner(app)
    loop.run(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run(site.start())
    url = "http://{}:{}".format(*runner.addresses[0][:2])
    done: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: done.update(r=run_cli(["consume", "t", "--bootstrap", url])), daemon=True
    )
    try:
        t.start()
        t.join(DEADLINE_S)
        assert not t.is_alive(), "consume never got past offset 6"
        assert done["r"].code == 0, done["r"].err
        assert done["r"].lines == [f"v{o}" for o in range(6)]
        assert fetched_at[0] == 0 and set(fetched_at) <= {0, 10}  # never from 6
    finally:
        loop.run(runner.cleanup())
        loop.close()


# -- pure pieces ------------------------------------------------------------------------------


def test_start_at_parses_every_form():
    assert start_at("earliest") == StartAt("earliest")
    assert start_at("LATEST") == StartAt("latest")
    assert start_at("42") == StartAt("offset", 42)
    assert start_at("@1700000000000") == StartAt("timestamp", 1_700_000_000_000)


def test_render_formats():
    rec = {"partition": 1, "offset": 5, "key": "k", "value": {"a": [1, 2]}}
    assert render_line(rec, "value", "t") == '{"a":[1,2]}'
    assert render_line(rec, "kv", "t") == 'k\t{"a":[1,2]}'
    assert orjson.loads(render_line(rec, "json", "t")) == {"topic": "t", **rec}
    assert render_line({"key": None, "value": "text"}, "kv", "t") == "null\ttext"


def test_a_partition_without_a_reachable_leader_fails_after_timeout_ms(srv):
    """Broker 7 leads `orphan` but has no address: the consumer retries (as
    kafka-console-consumer does) and, without --follow, gives up after --timeout-ms."""
    srv.cluster.add_topic("orphan", 1, leader=7)
    r = srv.cli("consume", "orphan", "--timeout-ms", "500")
    assert r.code == 1
    assert r.err.startswith("lograft consume: ")
    assert "LEADER_NOT_AVAILABLE" in r.err or "NO_PROGRESS" in r.err, r.err
