"""The data-plane routes against a real one-broker ReplicaManager."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kafka.record import MemoryRecords

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataLimits, DataRoutes
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import LograftError
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.partitioner import partition_for_key
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import (
    Acks,
    AppendResult,
    PartitionBatch,
    ProduceRequest,
    decode_response,
    encode_request,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.batch_forge import forge, records_batch

PARTITIONS = 3


class FakeMetadata:
    def __init__(self) -> None:
        a = Assignment((1,), (1,), 1, 1, 0)
        self.view = TopicView("orders", "id-1", {p: a for p in range(PARTITIONS)})

    def topic(self, name: str) -> TopicView | None:
        if name == "offline":
            return TopicView("offline", "id-2", {0: Assignment((1,), (1,), -1, 1, 0)})
        if name == "__consumer_offsets":
            return TopicView(name, "id-3", {0: Assignment((1,), (1,), 1, 1, 0)})
        return self.view if name == "orders" else None

    def topics(self) -> list[TopicView]:
        return [self.view]

    def broker_url(self, broker_id: int) -> str | None:
        return None

    def live_brokers(self) -> list[int]:
        return [1]


@pytest.fixture
async def client(tmp_path) -> AsyncIterator[TestClient]:
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    md = FakeMetadata()
    rm.apply_metadata(
        {
            TopicPartition("orders", p): PartitionMeta("id-1", a)
            for p, a in md.view.partitions.items()
        }
    )
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    DataRoutes(rm, md, limits=DataLimits(produce_records_max=100)).add_to(app)
    async with TestClient(TestServer(app)) as c:
        yield c
    await rm.stop()


async def _error(resp, status: int, code: str) -> dict:
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]


async def test_json_produce_and_fetch_round_trip(client):
    resp = await client.post(
        "/v1/topics/orders/records",
        json={
            "records": [
                {"key": "alice", "value": {"n": i}, "headers": {"h": "x"}} for i in range(3)
            ]
        },
    )
    assert resp.status == 200, await resp.text()
    offsets = (await resp.json())["offsets"]
    p = partition_for_key(b"alice", PARTITIONS)
    assert [o["partition"] for o in offsets] == [p, p, p]
    assert [o["offset"] for o in offsets] == [0, 1, 2]
    resp = await client.get(f"/v1/topics/orders/partitions/{p}/records", params={"offset": "1"})
    body = await resp.json()
    assert [r["value"] for r in body["records"]] == [{"n": 1}, {"n": 2}]
    assert body["records"][0]["headers"] == [{"key": "h", "value": "x"}]
    assert body["next_offset"] == 3 and body["high_watermark"] == 3


async def test_keyless_records_of_one_request_share_a_partition(client):
    resp = await client.post(
        "/v1/topics/orders/records",
        json={"value_format": "string", "records": [{"value": "a"}, {"value": "b"}]},
    )
    offsets = (await resp.json())["offsets"]
    assert offsets[0]["partition"] == offsets[1]["partition"]


async def test_raw_batches_in_and_out_parse_with_kafka_python(client):
    batch = build_batch([RecordInput(b"raw-1", b"k"), RecordInput(b"raw-2")], timestamp_ms=5)
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=batch,
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["base_offset"] == 0
    resp = await client.get(
        "/v1/topics/orders/partitions/0/records",
        params={"offset": "0"},
        headers={"Accept": BATCH_CONTENT_TYPE},
    )
    raw = await resp.read()
    assert resp.headers["X-Lograft-Next-Offset"] == "2"
    mr = MemoryRecords(raw)
    b = mr.next_batch()
    assert b.validate_crc()
    assert [r.value for r in b] == [b"raw-1", b"raw-2"]


async def test_acks_zero_answers_202_without_a_body(client):
    resp = await client.post("/v1/topics/orders/records?acks=0", json={"records": [{"value": 1}]})
    assert resp.status == 202
    assert await resp.read() == b""


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "INVALID_REQUEST"),
        (b"[]", "INVALID_REQUEST"),
        (b'{"records": []}', "INVALID_REQUEST"),
        (b'{"records": [{"value": "!!", }]}', "INVALID_REQUEST"),
        (b'{"value_format": "base64", "records": [{"value": "not base64!"}]}', "INVALID_REQUEST"),
        (b'{"records": [{"value": 1, "colour": 2}]}', "INVALID_REQUEST"),
        (b'{"records": [{"value": 1, "partition": -1}]}', "INVALID_REQUEST"),
    ],
)
async def test_bad_produce_bodies_are_refused_and_write_nothing(client, body, code):
    resp = await client.post(
        "/v1/topics/orders/records", data=body, headers={"Content-Type": "application/json"}
    )
    await _error(resp, 400, code)
    for p in range(PARTITIONS):
        got = await client.get(f"/v1/topics/orders/partitions/{p}/offsets")
        assert (await got.json())["log_end_offset"] == 0


async def test_unknown_topic_partition_and_offsets(client):
    await _error(
        await client.post("/v1/topics/nope/records", json={"records": [{"value": 1}]}),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    await _error(
        await client.get("/v1/topics/orders/partitions/9/records?offset=0"),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    await _error(
        await client.post(
            "/v1/topics/orders/records", json={"records": [{"value": 1, "partition": 7}]}
        ),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    err = await _error(
        await client.get("/v1/topics/orders/partitions/0/records?offset=99"),
        416,
        "OFFSET_OUT_OF_RANGE",
    )
    assert err["details"]["log_end_offset"] == 0
    await _error(
        await client.get("/v1/topics/orders/partitions/0/records?offset=-1"), 400, "INVALID_REQUEST"
    )
    await _error(
        await client.get(f"/v1/topics/orders/partitions/0/records?offset={1 << 70}"),
        400,
        "INVALID_REQUEST",
    )
    await _error(await client.get("/v1/topics/orders/partitions/0/records"), 400, "INVALID_REQUEST")


# Each is a number to Python's int() or passes str.isdigit(); none is an
# integer in this API (docs/api.md, "Integers").
NOT_INTEGERS = ["0_0", "+0", "%200", "%D9%A3", "%C2%B2", "", "1.0"]


@pytest.mark.parametrize("text", NOT_INTEGERS)
@pytest.mark.parametrize(
    "query",
    ["offset={}", "offset=0&max_bytes={}", "offset=0&max_records={}", "offset=0&max_wait_ms={}"],
)
async def test_fetch_query_integers_are_strict(client, query, text):
    resp = await client.get("/v1/topics/orders/partitions/0/records?" + query.format(text))
    await _error(resp, 400, "INVALID_REQUEST")


@pytest.mark.parametrize("text", ["%C2%B2", "%D9%A3", "0_0", "+0", "1.0", "x", "-1"])
async def test_a_partition_path_segment_that_is_not_a_number_is_400(client, text):
    """`²` passed isdigit() and then failed int(): 500 on every partition route."""
    path = f"/v1/topics/orders/partitions/{text}"
    await _error(await client.get(path + "/records?offset=0"), 400, "INVALID_REQUEST")
    await _error(await client.get(path + "/offsets"), 400, "INVALID_REQUEST")
    resp = await client.post(
        path + "/batches",
        data=build_batch([RecordInput(b"v")], timestamp_ms=1),
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    await _error(resp, 400, "INVALID_REQUEST")


async def test_a_partition_number_the_topic_lacks_is_404_with_the_number(client):
    err = await _error(
        await client.get(f"/v1/topics/orders/partitions/{2**31 - 1}/offsets"),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    assert err["details"] == {"topic": "orders", "partition": 2**31 - 1}
    await _error(
        await client.get(f"/v1/topics/orders/partitions/{2**31}/offsets"), 400, "INVALID_REQUEST"
    )


@pytest.mark.parametrize("text", [*NOT_INTEGERS, "-1", str(2**63)])
async def test_offsets_timestamp_is_strict(client, text):
    resp = await client.get(f"/v1/topics/orders/partitions/0/offsets?timestamp={text}")
    await _error(resp, 400, "INVALID_REQUEST")


async def test_offsets_timestamp_may_be_any_int64(client):
    resp = await client.get(f"/v1/topics/orders/partitions/0/offsets?timestamp={2**63 - 1}")
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["offset_for_timestamp"] is None


@pytest.mark.parametrize(
    "record",
    [
        {"value": 1, "timestamp": 2**63},  # was struct.error: 500
        {"value": 1, "timestamp": 2**64 - 1},
        {"value": 1, "timestamp": -1},
        {"value": 1, "timestamp": 1.5},
        {"value": 1, "timestamp": True},
        {"value": 1, "partition": 2**31},
        {"value": 1, "partition": 2**64 - 1},
        {"value": 1, "partition": 0.0},
        {"value": 1, "partition": False},
    ],
)
async def test_produce_record_integers_are_range_checked(client, record):
    resp = await client.post("/v1/topics/orders/records", json={"records": [record]})
    err = await _error(resp, 400, "INVALID_REQUEST")
    assert err["details"]["field"] in ("records[0].timestamp", "records[0].partition")


async def test_the_largest_timestamp_parses_and_the_broker_judges_it(client):
    """2^63-1 fits the batch; the leader's timestamp rule (at most
    message_timestamp_after_max_ms ahead of its clock) then refuses it."""
    resp = await client.post(
        "/v1/topics/orders/records",
        json={"records": [{"value": 1, "partition": 0, "timestamp": 2**63 - 1}]},
    )
    await _error(resp, 400, "INVALID_TIMESTAMP")
    got = await client.get("/v1/topics/orders/partitions/0/offsets")
    assert (await got.json())["log_end_offset"] == 0


@pytest.mark.parametrize("headers", [None, {"h": "x"}], ids=["columns", "per-record"])
async def test_timestamps_as_far_apart_as_json_allows_are_judged_not_a_500(client, headers):
    """0 and 2^63-1 in one batch: the largest timestampDelta a JSON request
    can make (its timestamps are 0..2^63-1), in both encoders' paths."""
    extra = {} if headers is None else {"headers": headers}
    records = [
        {"value": 1, "partition": 0, "timestamp": 2**63 - 1, **extra},
        {"value": 2, "partition": 0, "timestamp": 0, **extra},
    ]
    resp = await client.post("/v1/topics/orders/records", json={"records": records})
    err = await _error(resp, 400, "INVALID_TIMESTAMP")
    assert err["details"]["timestamp_delta"] == 0  # the first record's is the largest
    got = await client.get("/v1/topics/orders/partitions/0/offsets")
    assert (await got.json())["log_end_offset"] == 0


@pytest.mark.parametrize(
    ("stamps", "base"),
    [([0, 2**63 - 1], 2**63 - 1), ([2**63 - 1, 0], -(2**63))],
    ids=["sum-past-int64-max", "sum-below-int64-min"],
)
async def test_a_raw_batch_whose_timestamps_overflow_int64_is_judged_not_a_500(
    client, stamps, base
):
    """baseTimestamp + timestampDelta is no int64: refused with the leader's
    timestamp rule, its details (the two int64 fields) valid JSON."""
    batch = forge(records_batch(timestamps=stamps), base_timestamp=base, max_timestamp=0)
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=batch,
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    err = await _error(resp, 400, "INVALID_TIMESTAMP")
    assert err["details"]["reason"] == "timestamp_out_of_range"
    assert err["details"]["base_timestamp"] == base
    assert -(2**63) <= err["details"]["timestamp_delta"] <= 2**63 - 1


async def test_acks_in_the_body_is_checked_even_when_the_query_wins(client):
    """schemathesis found a body acks that is no acks value accepted."""
    resp = await client.post(
        "/v1/topics/orders/records?acks=1", json={"acks": "sometimes", "records": [{"value": 1}]}
    )
    await _error(resp, 400, "INVALID_REQUEST")
    resp = await client.post(
        "/v1/topics/orders/records?acks=0", json={"acks": "all", "records": [{"value": 1}]}
    )
    assert resp.status == 202


async def test_bad_batches_and_content_types(client):
    good = bytearray(build_batch([RecordInput(b"v")], timestamp_ms=1))
    good[-1] ^= 0xFF  # breaks the CRC
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=bytes(good),
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    await _error(resp, 400, "CORRUPT_MESSAGE")
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches", data=b"x", headers={"Content-Type": "text/plain"}
    )
    await _error(resp, 400, "INVALID_REQUEST")
    too_many = {"records": [{"value": i} for i in range(101)]}
    await _error(
        await client.post("/v1/topics/orders/records", json=too_many), 400, "INVALID_REQUEST"
    )
    huge = {"records": [{"value": "x" * (2 << 20)}]}
    await _error(
        await client.post("/v1/topics/orders/records", json=huge), 413, "MESSAGE_TOO_LARGE"
    )


async def test_internal_endpoints_need_the_secret_and_unknown_routes_are_json(client):
    await _error(await client.get("/internal/v1/anything"), 401, "SASL_AUTHENTICATION_FAILED")
    resp = await client.get("/internal/v1/anything", headers={SECRET_HEADER: "s"})
    await _error(resp, 404, "NOT_FOUND")
    await _error(await client.delete("/v1/topics/orders/records"), 405, "METHOD_NOT_ALLOWED")


async def test_base64_values_round_trip(client):
    raw = bytes(range(256))
    resp = await client.post(
        "/v1/topics/orders/records",
        json={
            "value_format": "base64",
            "records": [{"value": base64.b64encode(raw).decode(), "partition": 1}],
        },
    )
    assert resp.status == 200
    got = await client.get("/v1/topics/orders/partitions/1/records?offset=0&format=base64")
    body = await got.json()
    assert base64.b64decode(body["records"][0]["value"]) == raw


async def test_a_produce_where_every_record_fails_answers_with_an_error_body(client):
    resp = await client.post("/v1/topics/offline/records", json={"records": [{"value": 1}]})
    err = await _error(resp, 503, "LEADER_NOT_AVAILABLE")
    assert err["details"]["offsets"][0]["partition"] == 0


def test_json_fetch_steps_over_offsets_compaction_removed():
    import orjson

    from lograft.api.fetch_json import PageRequest, render_page
    from lograft.api.records_json import RenderLimits

    def page(offset: int, max_records: int) -> tuple[list[int], int]:
        got = render_page(
            data, PageRequest(0, offset, max_records, 1 << 20, "auto", "auto"), RenderLimits()
        )
        return [orjson.loads(r)["offset"] for r in got.records], got.next_offset

    # A compacted batch: offsets 10..13, records left only at 10 and 12.
    data = build_batch(
        [RecordInput(b"a"), RecordInput(b"c")],
        timestamp_ms=1,
        base_offset=10,
        offset_deltas=[0, 2],
        last_offset_delta=3,
    )
    assert page(13, 100) == ([], 14), "a consumer must not loop inside the batch"
    assert page(11, 100) == ([12], 14)
    assert page(10, 1) == ([10], 11), "cut by max_records"


def test_a_header_key_that_is_not_utf8_renders_as_json():
    import orjson

    from lograft.api.records_json import render_record
    from lograft.protocol.batch import iter_records

    raw = build_batch(
        [RecordInput(b"v", None, [(b"k\xff".decode("utf-8", "surrogateescape"), b"x")])],
        timestamp_ms=1,
    )
    rec = next(iter_records(raw))
    body = orjson.dumps(render_record(rec, 0, "auto", "auto"))
    assert b"k\xef\xbf\xbd" in body


async def test_forwarded_produce_appends_each_partition_and_answers_per_partition(client):
    req = ProduceRequest(
        "orders",
        Acks.ALL,
        [
            PartitionBatch(2, build_batch([RecordInput(b"a"), RecordInput(b"b")], timestamp_ms=1)),
            PartitionBatch(9, build_batch([RecordInput(b"lost")], timestamp_ms=1)),
            PartitionBatch(0, build_batch([RecordInput(b"c")], timestamp_ms=1)),
        ],
    )
    headers = {SECRET_HEADER: "s", "Content-Type": FORWARD_CONTENT_TYPE}
    resp = await client.post("/internal/v1/produce", data=encode_request(req), headers=headers)
    assert resp.status == 200, await resp.text()
    got = decode_response(await resp.read(), [2, 9, 0])
    assert got[0] == AppendResult(0, 1, -1) and got[2] == AppendResult(0, 0, -1)
    # The same error the raw produce gives for that partition in its URL.
    raw = await client.post(
        "/v1/topics/orders/partitions/9/batches",
        data=req.partitions[1].data,
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert isinstance(got[1], LograftError)
    assert {"error": got[1].to_dict()} == await raw.json()


async def test_forwarded_produce_refusals(client):
    headers = {SECRET_HEADER: "s", "Content-Type": FORWARD_CONTENT_TYPE}
    body = encode_request(ProduceRequest("orders", Acks.ALL, []))
    await _error(
        await client.post("/internal/v1/produce", data=body), 401, "SASL_AUTHENTICATION_FAILED"
    )
    plain = {SECRET_HEADER: "s", "Content-Type": "application/json"}
    await _error(
        await client.post("/internal/v1/produce", data=body, headers=plain), 400, "INVALID_REQUEST"
    )
    await _error(
        await client.post("/internal/v1/produce", data=body[:-1], headers=headers),
        400,
        "INVALID_REQUEST",
    )
    # Refused as a whole, as the raw produce refuses them.
    for topic, code in (
        ("nope", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("__consumer_offsets", "INVALID_TOPIC_EXCEPTION"),
    ):
        body = encode_request(ProduceRequest(topic, Acks.ALL, [PartitionBatch(0, b"")]))
        resp = await client.post("/internal/v1/produce", data=body, headers=headers)
        assert (await resp.json())["error"]["code"] == code


async def test_a_raw_produce_of_more_batches_than_produce_batches_max_is_refused(client):
    """Each batch costs the event loop its validation and write whatever its
    size: 50,000 one-record batches (3.6 MB) held a leader's loop for 17 s.
    Over the cap, the request is refused before any batch is validated."""
    one = build_batch([RecordInput(b"v")], timestamp_ms=5)
    cap = BrokerSettings().produce_batches_max
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=one * (cap + 1),
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    error = await _error(resp, 400, "INVALID_RECORD")
    assert error["details"] == {"produce_batches_max": cap}
    assert "produce_batches_max" in error["message"]
    resp = await client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=one * cap,
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["base_offset"] == 0  # nothing of the refused one was written


@pytest.mark.parametrize("value_chars", [60, 3_000])
async def test_a_large_json_produce_is_decoded_and_built_off_the_event_loop(
    client, monkeypatch, value_chars: int
) -> None:
    """Issue 9: 10,000 small JSON records took ~0.2 s of Python work on the loop."""
    import threading

    import lograft.api.routes_data as routes_data

    threads: list[str] = []
    for name in ("decode_produce_body", "plain_columns"):
        real = getattr(routes_data, name)

        def spy(*args, _real=real, **kwargs):
            threads.append(threading.current_thread().name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(routes_data, name, spy)
    body = {"records": [{"value": "x" * value_chars, "partition": 0}] * 100}
    resp = await client.post("/v1/topics/orders/records", json=body)
    assert resp.status == 200, await resp.text()
    large = len(orjson.dumps(body)) >= routes_data.JSON_OFF_LOOP_BYTES_MIN
    assert large == (value_chars > 60)
    main = threading.main_thread().name
    assert threads and all((t != main) == large for t in threads), threads


@pytest.mark.parametrize("headers", [None, {"h": "x"}], ids=["columns", "per-record"])
async def test_a_column_built_batch_is_judged_from_its_encoder_not_walked_again(
    client, monkeypatch, headers
) -> None:
    """The batch the column encoder built from the request's checked fields
    is judged by the topic's rules from the encoder's account of its records
    (`Partition.check_built`); a per-record batch is walked as ever."""
    from lograft.brokers.partition import Partition

    calls: list[str] = []
    for name in ("check_built", "check_records"):
        real = getattr(Partition, name)

        def spy(self, *args, _real=real, _name=name):
            calls.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(Partition, name, spy)
    extra = {} if headers is None else {"headers": headers}
    records = [{"value": "a", "partition": 1, **extra}, {"value": "b", "partition": 1, **extra}]
    resp = await client.post(
        "/v1/topics/orders/records", json={"value_format": "string", "records": records}
    )
    assert resp.status == 200, await resp.text()
    assert calls == ["check_built" if headers is None else "check_records"]
    got = await client.get("/v1/topics/orders/partitions/1/records", params={"offset": "0"})
    assert [r["value"] for r in (await got.json())["records"]] == ["a", "b"]
