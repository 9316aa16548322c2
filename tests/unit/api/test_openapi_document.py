"""The OpenAPI document declares every success answer and request body, and
every reference in it resolves (schemathesis checks answers against it:
tests/integration/test_openapi_fuzz.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lograft.api.openapi import document

# Answers that have no body: acks=0 produces.
NO_BODY = {"202"}


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield path, method, op


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_every_success_answer_has_a_content_type_and_schema() -> None:
    for path, method, op in operations(document()):
        where = f"{method.upper()} {path}"
        successes = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert successes, f"{where} declares no success answer"
        for status, response in successes.items():
            if status in NO_BODY:
                assert "content" not in response, where
                continue
            assert response["content"], f"{where} {status} has no content type"
            for media_type, media in response["content"].items():
                assert "schema" in media, f"{where} {status} {media_type} has no schema"
        assert op["responses"]["default"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }


def test_every_request_body_has_a_schema() -> None:
    bodies = 0
    for path, method, op in operations(document()):
        for media_type, media in op.get("requestBody", {}).get("content", {}).items():
            assert "schema" in media, f"{method.upper()} {path} {media_type}"
            bodies += 1
    assert bodies == 12  # every POST, PUT and PATCH but POST /v1/producers


def test_raw_batches_and_streams_have_their_media_types() -> None:
    paths = document()["paths"]
    produce = paths["/v1/topics/{topic}/partitions/{partition}/batches"]["post"]
    assert produce["requestBody"]["content"] == {
        "application/vnd.lograft.batch": {"schema": {"type": "string", "format": "binary"}}
    }
    fetch = paths["/v1/topics/{topic}/partitions/{partition}/records"]["get"]
    assert set(fetch["responses"]["200"]["content"]) == {
        "application/json",
        "application/vnd.lograft.batch",
    }
    stream = paths["/v1/topics/{topic}/stream"]["get"]
    assert set(stream["responses"]["200"]["content"]) == {"text/event-stream"}


def test_every_reference_resolves_and_operation_ids_are_unique() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in schemas, ref
    ids = [op["operationId"] for _p, _m, op in operations(doc)]
    assert len(ids) == len(set(ids))
    for _p, _m, op in operations(doc):
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in ids


def test_each_call_gets_its_own_copy() -> None:
    """A schema loader changed the shared dicts in place once, and the node
    then served a document other than its own."""
    doc = document()
    doc["paths"].clear()
    doc["components"]["schemas"]["Error"]["x"] = 1
    again = document()
    assert again["paths"] and "x" not in again["components"]["schemas"]["Error"]
