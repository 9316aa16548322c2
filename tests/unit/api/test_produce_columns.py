"""The JSON produce path's plain records as columns (produce_columns) against
the per-record path it replaces for them (records_json.parse_produce_body,
then a batch per partition with batch.build_batch): for any body, the same
batches of the same records per partition, or the same refusal (class, code,
message, details); and each column-built batch's account of its records
(`BuiltBatch.summary`, what the leader judges it by) is what a record scan
of its bytes reports."""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lograft.api.routes_data as routes_data
from lograft.api.produce_columns import plain_columns
from lograft.api.records_json import decode_produce_body, parse_produce_body
from lograft.api.routes_data import DataLimits, DataRoutes
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.errors import LograftError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from lograft.protocol.batch import build_batch
from lograft.protocol.partitioner import KeylessPartitioner, partition_for_key
from lograft.protocol.plain_batch import BuiltBatch
from lograft.protocol.produce_wire import AppendResult
from tests.batch_scan import scanned

PARTITIONS = 3
RECORDS_MAX = 6
NOW_MS = 1_700_000_000_123
VIEW = TopicView("orders", "id-1", {p: Assignment((1,), (1,), 1, 1, 0) for p in range(PARTITIONS)})


def old_prepare(body: bytes) -> tuple[Any, ...]:
    """What the node did for every body before produce_columns."""
    parsed = parse_produce_body(body, records_max=RECORDS_MAX)
    keyless = KeylessPartitioner(1)
    sticky: int | None = None
    groups: dict[int, list[int]] = defaultdict(list)
    for rec in parsed.records:
        if rec.partition is not None:
            if rec.partition >= PARTITIONS:
                raise UnknownTopicOrPartitionError(
                    f"records[{rec.index}].partition={rec.partition} but topic "
                    f"{VIEW.name!r} has {PARTITIONS} partitions",
                    topic=VIEW.name,
                    partition=rec.partition,
                )
            p = rec.partition
        elif rec.record.key is not None:
            p = partition_for_key(rec.record.key, PARTITIONS)
        else:
            if sticky is None:
                sticky = keyless.next_request_partition(PARTITIONS)
            p = sticky
        groups[p].append(rec.index)
    batches = {
        p: build_batch([parsed.records[i].record for i in idx], timestamp_ms=NOW_MS)
        for p, idx in groups.items()
    }
    return parsed.acks, len(parsed.records), dict(groups), batches


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> DataRoutes:
    rm = ReplicaManager(1, Path(tmp_path_factory.mktemp("rm")), BrokerSettings())
    metadata = SimpleNamespace(broker_url=lambda _id: None)
    return DataRoutes(rm, metadata, limits=DataLimits(produce_records_max=RECORDS_MAX))  # type: ignore[arg-type]


def new_prepare(routes: DataRoutes, body: bytes) -> tuple[Any, ...]:
    routes.keyless = KeylessPartitioner(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(routes_data, "time", SimpleNamespace(time=lambda: NOW_MS / 1000))
        got = routes._prepare_json(VIEW, body)
    groups = {p: list(idx) for p, idx in got.groups.items()}
    batches: dict[int, bytes] = {}
    for p, batch in got.batches.items():
        if isinstance(batch, BuiltBatch):
            assert batch.summary == scanned(batch.data)
            batch = batch.data
        batches[p] = batch
    return got.acks, got.count, groups, batches


def outcome(prepare: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", *prepare(*args))
    except LograftError as exc:
        return ("refused", type(exc), exc.code, exc.message, exc.details)


def assert_same(routes: DataRoutes, body: bytes) -> tuple[Any, ...]:
    old = outcome(old_prepare, body)
    assert outcome(new_prepare, routes, body) == old
    return old


texts = st.text(max_size=12)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(1 << 70), max_value=1 << 70),
        st.floats(allow_nan=False, allow_infinity=False),
        texts,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)
base64_texts = st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
fields = st.one_of(st.none(), texts, base64_texts, json_values)
headers = st.one_of(
    st.none(),
    st.just({}),
    st.just([]),
    st.dictionaries(texts, st.one_of(st.none(), texts, base64_texts), max_size=2),
)
records = st.fixed_dictionaries(
    {},
    optional={
        "key": fields,
        "value": fields,
        "partition": st.one_of(st.none(), st.integers(min_value=0, max_value=PARTITIONS + 1)),
        "timestamp": st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 42)),
        "headers": headers,
    },
)
formats = st.sampled_from(["json", "string", "base64"])
bodies = st.fixed_dictionaries(
    {"records": st.lists(records, min_size=1, max_size=RECORDS_MAX + 1)},
    optional={
        "value_format": formats,
        "key_format": formats,
        "header_format": st.sampled_from(["string", "base64"]),
        "acks": st.sampled_from(["all", 1, "0", -1]),
    },
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_any_body_gives_the_same_batches_or_the_same_refusal(routes, doc) -> None:
    assert_same(routes, json.dumps(doc).encode())


def _body(records: list[dict[str, Any]], **formats: str) -> bytes:
    return json.dumps({"records": records, **formats}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # the first bad record wins, and in a record the key before the value
        (_body([{"value": "a"}, {"value": 1, "key": 2}], value_format="string"), "records[1].key"),
        (_body([{"value": 1}, {"key": 2}], value_format="string"), "records[0].value"),
        (_body([{"value": "!!"}], value_format="base64"), "records[0].value is not valid base64"),
        (_body([{"value": "é"}], value_format="base64"), "records[0].value is not valid base64"),
        (_body([{"key": {"a": 1}}]), "records[0].key must be a string with format string"),
        (_body([{"value": "x", "partition": 7}]), "records[0].partition=7 but topic"),
        # a bad value is found before a bad partition, as before
        (_body([{"partition": 9}, {"value": 1}], value_format="string"), "records[1].value"),
        (_body([{"value": "x"}] * (RECORDS_MAX + 1)), f"the limit is {RECORDS_MAX}"),
        (_body([{"value": "x", "headers": {"h": 1}}]), "records[0].headers.h"),
    ],
)
def test_refusals_name_the_same_record(routes, body: bytes, message: str) -> None:
    old = assert_same(routes, body)
    assert old[0] == "refused" and message in old[3], old


BASE64 = {"value_format": "base64", "key_format": "base64"}


@pytest.mark.parametrize(
    ("records", "formats", "plain"),
    [
        ([{"value": "x" * 100}] * 500, {"value_format": "string"}, True),
        ([{"value": {"n": 1}, "key": "k", "partition": 1, "timestamp": 5}], {}, True),
        (
            [{"value": "eA==", "key": "aw=="}],
            {"value_format": "base64", "key_format": "base64"},
            True,
        ),
        ([{"value": 1, "headers": {}}, {"value": 2, "headers": []}], {}, True),
        ([{"value": 1, "headers": {"h": "v"}}], {}, False),
        ([{"value": 1}], {"value_format": "string"}, False),  # refused by the per-record path
    ],
)
def test_plain_bodies_go_as_columns(routes, records, formats, plain: bool) -> None:
    body = _body(records, **formats)
    doc = decode_produce_body(body, records_max=1000)
    assert (plain_columns(doc) is not None) == plain
    if plain and len(records) <= RECORDS_MAX:
        assert assert_same(routes, body)[0] == "ok"


def test_the_benchmark_body_is_one_batch_of_its_records(routes) -> None:
    body = _body([{"value": "x" * 100}] * RECORDS_MAX, value_format="string")
    old = assert_same(routes, body)
    (groups,) = [old[3]]
    assert list(groups.values()) == [list(range(RECORDS_MAX))]


@pytest.mark.parametrize("duplicate", [False, True])
@pytest.mark.parametrize("count", [1, 2, 500])
def test_a_one_partition_answer_is_rendered_as_orjson_would(duplicate: bool, count: int) -> None:
    prepared = routes_data.PreparedProduce(None, count, {2: range(count)}, {2: b""})
    outcomes: dict[int, Any] = {2: AppendResult(1_000, 1_000 + count - 1, -1, duplicate)}
    offsets, failed = routes_data._record_offsets(prepared, outcomes)
    assert failed == 0
    assert routes_data._in_order_answer(prepared, outcomes) == orjson.dumps({"offsets": offsets})


def test_answers_of_several_partitions_or_a_failure_are_not_rendered_in_order() -> None:
    two = routes_data.PreparedProduce(None, 2, {0: [0], 1: [1]}, {0: b"", 1: b""})
    ok = AppendResult(0, 0, -1)
    assert routes_data._in_order_answer(two, {0: ok, 1: ok}) is None
    one = routes_data.PreparedProduce(None, 1, {0: range(1)}, {0: b""})
    assert routes_data._in_order_answer(one, {0: NotLeaderOrFollowerError("no")}) is None
