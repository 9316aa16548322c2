"""The public API's JSON request bodies as typed Records (request_shapes): one
declaration is both the validator and the OpenAPI schema, and every bad body
is INVALID_REQUEST naming the field."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
import pytest

from lograft.api import request_shapes as shapes
from lograft.api.openapi import document
from lograft.api.records_json import parse_produce_body
from lograft.api.request_ints import INT32_MAX, INT64_MAX
from lograft.errors import InvalidRequestError

REF = "#/components/schemas/{name}"


def _refused(body: Any, into: type, raw: bytes | None = None) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        shapes.decode_body(orjson.dumps(body) if raw is None else raw, into)
    return info.value


def test_the_document_holds_the_schemas_the_validator_uses() -> None:
    components = document()["components"]["schemas"]
    _, generated = msgspec.json.schema_components(shapes.BODIES, ref_template=REF)
    for name, schema in generated.items():
        assert components[name] == schema, name
    # Every body is some operation's request body.
    bodies = {
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        for path in document()["paths"].values()
        for op in path.values()
        if isinstance(op, dict)
        and "application/json" in op.get("requestBody", {}).get("content", {})
    }
    assert {REF.format(name=b.__name__) for b in shapes.BODIES} <= bodies


@pytest.mark.parametrize(
    ("body", "into", "field"),
    [
        ({"records": [{"value": 1}], "colour": 1}, shapes.ProduceBody, "colour"),
        ({"records": [{"value": 1, "colour": 1}]}, shapes.ProduceBody, "records[0].colour"),
        ({"subscribed_topics": [], "colour": 1}, shapes.Join, "colour"),
        ({"member_epoch": 1, "colour": 1}, shapes.Heartbeat, "colour"),
        ({"offsets": [{"topic": "t", "partition": 0, "offset": 0, "x": 1}]}, shapes.Commit,
         "offsets[0].x"),
        ({"strategy": "earliest", "topics": [], "x": 1}, shapes.ResetOffsets, "x"),
        ({"name": "t", "colour": 1}, shapes.CreateTopic, "colour"),
        ({"partitions": 2, "colour": 1}, shapes.AddPartitions, "colour"),
        ({"configs": {"a": "b"}, "colour": 1}, shapes.AlterConfigs, "colour"),
    ],
)  # fmt: skip
def test_unknown_fields_are_refused_by_name(body: Any, into: type, field: str) -> None:
    error = _refused(body, into)
    assert error.details["field"] == field
    assert error.message.startswith(f"{field}: unknown field; known: ")


@pytest.mark.parametrize(
    ("body", "into", "field", "shown"),
    [
        ({"records": []}, shapes.ProduceBody, "records", "[]"),
        ({"records": [{"partition": INT32_MAX + 1}]}, shapes.ProduceBody, "records[0].partition",
         str(INT32_MAX + 1)),
        ({"records": [{"timestamp": -1}]}, shapes.ProduceBody, "records[0].timestamp", "-1"),
        ({"records": [{"timestamp": True}]}, shapes.ProduceBody, "records[0].timestamp", "bool"),
        ({"records": [{"headers": {"h": 1}}]}, shapes.ProduceBody, "records[0].headers", "int"),
        ({"records": [{}], "value_format": "xml"}, shapes.ProduceBody, "value_format", "xml"),
        ({"records": [{}], "acks": 1.5}, shapes.ProduceBody, "acks", "float"),
        ({"member_epoch": 0}, shapes.Heartbeat, "member_epoch", "0"),
        ({"member_epoch": 1.0}, shapes.Heartbeat, "member_epoch", "float"),
        ({"member_epoch": 1, "owned_partitions": {"t": [-1]}}, shapes.Heartbeat,
         "owned_partitions", ">= 0"),  # msgspec names no dict key: [...]
        ({}, shapes.Join, "subscribed_topics", "required"),
        ({"subscribed_topics": "t"}, shapes.Join, "subscribed_topics", "str"),
        ({"offsets": [{"topic": "t", "partition": 0, "offset": INT64_MAX + 1}]}, shapes.Commit,
         "offsets[0].offset", str(INT64_MAX + 1)),
        ({"offsets": [], "member_epoch": -2}, shapes.Commit, "member_epoch", "-2"),
        ({"strategy": "sideways"}, shapes.ResetOffsets, "strategy", "sideways"),
        ({"name": 5}, shapes.CreateTopic, "name", "int"),
        ({"name": "t", "configs": {"a": [1]}}, shapes.CreateTopic, "configs", "array"),
        ({}, shapes.AddPartitions, "partitions", "required"),
        ({"configs": {}}, shapes.AlterConfigs, "configs", "{}"),
    ],
)  # fmt: skip
def test_wrong_types_and_bounds_name_the_field(
    body: Any, into: type, field: str, shown: str
) -> None:
    error = _refused(body, into)
    assert error.code == "INVALID_REQUEST"
    assert error.details["field"].startswith(field), error.message
    assert error.message.startswith(field) and shown in error.message, error.message


@pytest.mark.parametrize("raw", [b"[]", b"not json", b'"x"', b"{", b"[" * 100_000])
def test_a_body_that_is_no_object_says_so(raw: bytes) -> None:
    error = _refused(None, shapes.Heartbeat, raw)
    assert error.message.startswith("request body: ")


def test_an_empty_body_is_an_empty_object_except_for_produce() -> None:
    assert _refused(None, shapes.Heartbeat, b"").details["field"] == "member_epoch"
    with pytest.raises(InvalidRequestError, match="request body: not valid JSON"):
        parse_produce_body(b"", records_max=10)


def test_produce_limits_and_formats_are_checked_after_the_shape() -> None:
    with pytest.raises(InvalidRequestError, match="the limit is 2"):
        parse_produce_body(orjson.dumps({"records": [{}, {}, {}]}), records_max=2)
    with pytest.raises(InvalidRequestError, match=r"records\[0\].key must be a string") as info:
        parse_produce_body(orjson.dumps({"records": [{"key": 1}]}), records_max=2)
    assert info.value.details["field"] == "records[0].key"
    body = {"records": [{"value": "x"}], "value_format": "base64"}
    with pytest.raises(InvalidRequestError, match="not valid base64"):
        parse_produce_body(orjson.dumps(body), records_max=2)


def test_produce_keeps_json_values_exact() -> None:
    # orjson read integers past 64 bits as floats; the value is kept as sent.
    body = b'{"records": [{"value": {"n": 123456789012345678901234567890, "s": "\\u00e9"}}]}'
    parsed = parse_produce_body(body, records_max=1)
    assert parsed.records[0].record.value == '{"n":123456789012345678901234567890,"s":"é"}'.encode()
    with pytest.raises(InvalidRequestError):
        parse_produce_body(b'{"records": [{"value": 1e400}]}', records_max=1)


def test_produce_headers_both_shapes_and_acks_as_given() -> None:
    body = {
        "records": [
            {"value": 1, "headers": {"a": "1", "b": None}},
            {"value": 2, "headers": [{"key": "a", "value": "1"}, {"key": "b"}]},
        ],
        "acks": "ALL",
    }
    parsed = parse_produce_body(orjson.dumps(body), records_max=2)
    assert [r.record.headers for r in parsed.records] == [(("a", b"1"), ("b", None))] * 2
    assert parsed.acks == "ALL"  # Acks.parse judges it, case-blind as for the query
