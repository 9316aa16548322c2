"""The public HTTP API of a real three-node cluster: bad input and the OpenAPI document.

Bad input: every request below is wrong in one way. Each must get the status
and error code docs/api.md gives for it, in the one error body shape, and
must change nothing: the topics and every partition's log end offset and
high watermark are compared before and after each request.

OpenAPI: the routes a node's aiohttp app really registers (built by the
node's own `_serve`, in-process) are exactly the paths and methods of the
document (internal endpoints aside), and a running node serves that same
document and answers every documented route.

The cluster runs with `request_bytes_max` = 256 KiB, and topic `bad` with
`max_message_bytes` = 4096, so that oversized input is cheap to send.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lograft.api.openapi import PATHS, document
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.node import server as node_module
from lograft.node.config import parse_config
from lograft.node.controller_client import ControllerClient
from lograft.node.peer_client import PeerClient
from lograft.node.server import Node
from lograft.protocol.batch import CRC_POS, HEADER, RecordInput, build_batch
from lograft.protocol.batch import compute_crc as batch_crc
from lograft.quorum.controller_runtime import ControllerRuntime
from tests.batch_forge import forge
from tests.integration.cluster_harness import (
    ClusterNode,
    LograftCluster,
    NodeSpec,
    node_config_toml,
)
from tests.integration.data_plane import BATCH_TYPE, batch_of, describe, raw_request, start_cluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

REQUEST_BYTES_MAX = 256 * 1024
MAX_MESSAGE_BYTES = 4096
TOPIC = "bad"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    def make(attempt: int) -> LograftCluster:
        return LograftCluster(
            tmp_path_factory.mktemp(f"http-api-{attempt}"),
            3,
            http={"request_bytes_max": REQUEST_BYTES_MAX},
        )

    c = start_cluster(make)
    try:
        c.create_topic(TOPIC, partitions=2, configs={"max_message_bytes": MAX_MESSAGE_BYTES})
        yield c
    finally:
        print(c.logs(lines=80))
        c.close()


@dataclass(frozen=True)
class Ctx:
    cluster: LograftCluster
    leader: ClusterNode  # leads bad-0
    router: ClusterNode  # does not lead bad-0

    def url(self, node: str, path: str) -> str:
        return (self.leader if node == "leader" else self.router).url + path


@pytest.fixture(scope="module")
def ctx(cluster: LograftCluster) -> Ctx:
    def settled() -> dict[int, dict[str, Any]] | None:
        parts = describe(cluster[1], TOPIC)
        ok = all(len(p["isr"]) == 3 and p["log_end_offset"] is not None for p in parts.values())
        return parts if ok else None

    parts = cluster.eventually(settled, 30, f"{TOPIC} in sync")
    leader = cluster[parts[0]["leader"]]
    router = next(n for n in cluster if n is not leader)
    # Some data, so that "unchanged" is about non-trivial offsets.
    resp = router.post(
        f"/v1/topics/{TOPIC}/records", {"records": [{"value": i, "partition": 0} for i in range(3)]}
    )
    assert resp.status == 200, resp
    return Ctx(cluster, leader, router)


def snapshot(cluster: LograftCluster) -> dict[str, Any]:
    """Topics, and every partition's leader, LEO and HW, as node 1 describes them."""
    node = cluster[1]
    out: dict[str, Any] = {}
    # A group coordinator lookup creates the internal offsets topic on first
    # use (as Kafka's FindCoordinator does): not a change a probe made to data.
    for name in sorted(set(node.topics()) - {"__consumer_offsets"}):
        doc = node.topic(name)
        assert doc is not None
        out[name] = [
            (p["partition"], p["leader"], p["log_end_offset"], p["high_watermark"])
            for p in doc["partitions"]
        ]
    return out


# -- building bad input -----------------------------------------------------------------------


def good_batch(n: int = 1, size: int = 10) -> bytes:
    return batch_of([b"x" * size for _ in range(n)])


def bad_crc(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF  # a record byte: inside the CRC
    return bytes(out)


def with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_POS, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def magic_1() -> bytes:
    buf = bytearray(good_batch())
    buf[16] = 1
    return with_crc(buf)


def snappy_attribute() -> bytes:
    """A batch claiming snappy compression, with a correct CRC."""
    buf = bytearray(good_batch())
    struct.pack_into(">h", buf, 21, 2)
    return with_crc(buf)


def lying_record_count() -> bytes:
    """Structurally sound, CRC correct, but it claims one record more than it holds."""
    buf = bytearray(build_batch([RecordInput(b"a"), RecordInput(b"b")], timestamp_ms=1))
    fields = list(HEADER.unpack_from(buf, 0))
    fields[-1] = 1  # recordsCount 1, lastOffsetDelta 1, two records present
    HEADER.pack_into(buf, 0, *fields)
    return with_crc(buf)


def oversized_request() -> bytes:
    return b'{"records": [{"value": "' + b"x" * REQUEST_BYTES_MAX + b'"}]}'


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    node: str  # "leader" or "router"
    path: str
    body: bytes | Callable[[], bytes] | None
    content_type: str | None
    status: int
    code: str

    def payload(self) -> bytes | None:
        return self.body() if callable(self.body) else self.body


def json_case(
    id: str, body: Any, status: int, code: str, *, path: str = "", query: str = ""
) -> Case:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Case(
        id,
        "POST",
        "router",
        path or f"/v1/topics/{TOPIC}/records{query}",
        raw,
        "application/json",
        status,
        code,
    )


def batch_case(
    id: str, body: bytes | Callable[[], bytes], status: int, code: str, **kw: Any
) -> Case:
    return Case(
        id,
        "POST",
        kw.get("node", "leader"),
        kw.get("path", f"/v1/topics/{TOPIC}/partitions/0/batches"),
        body,
        kw.get("content_type", BATCH_TYPE),
        status,
        code,
    )


def get_case(id: str, path: str, status: int, code: str, node: str = "leader") -> Case:
    return Case(id, "GET", node, path, None, None, status, code)


FETCH = f"/v1/topics/{TOPIC}/partitions/0/records"
B64 = {"value_format": "base64"}
ONE = [{"value": 1, "partition": 0}]

CASES = [
    # JSON produce, sent to a node that does not lead the partition (it routes).
    json_case("json-malformed", b'{"records": [', 400, "INVALID_REQUEST"),
    json_case("json-not-object", [1, 2], 400, "INVALID_REQUEST"),
    json_case("json-empty-records", {"records": []}, 400, "INVALID_REQUEST"),
    json_case("json-unknown-field", {"records": ONE, "nope": 1}, 400, "INVALID_REQUEST"),
    json_case("json-record-unknown-field", {"records": [{"valu": 1}]}, 400, "INVALID_REQUEST"),
    json_case("json-bad-acks", {"records": ONE}, 400, "INVALID_REQUEST", query="?acks=2"),
    json_case(
        "json-invalid-base64-value",
        {**B64, "records": [{"value": "aGVsbG8=", "partition": 0}, {"value": "not base64!"}]},
        400,
        "INVALID_REQUEST",
    ),
    json_case(
        "json-invalid-base64-key",
        {"key_format": "base64", "records": [{"key": "%%%", "value": 1}]},
        400,
        "INVALID_REQUEST",
    ),
    json_case(
        "json-too-many-records",
        {"records": [{"value": 0}] * 10_001},
        400,
        "INVALID_REQUEST",
    ),
    json_case(
        "json-negative-partition",
        {"records": [{"value": 1, "partition": -1}]},
        400,
        "INVALID_REQUEST",
    ),
    json_case(
        "json-unknown-partition",
        {"records": [{"value": 1, "partition": 0}, {"value": 2, "partition": 2}]},
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    json_case(
        "json-unknown-topic",
        {"records": ONE},
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
        path="/v1/topics/no-such-topic/records",
    ),
    json_case(
        "json-oversized-record",
        {"records": [{"value": "x" * (MAX_MESSAGE_BYTES + 1), "partition": 0}]},
        413,
        "MESSAGE_TOO_LARGE",
    ),
    json_case("json-oversized-request", oversized_request(), 413, "MESSAGE_TOO_LARGE"),
    # Raw batches, sent to the leader.
    batch_case(
        "batch-wrong-content-type",
        good_batch,
        400,
        "INVALID_REQUEST",
        content_type="application/json",
    ),
    batch_case("batch-no-content-type", good_batch, 400, "INVALID_REQUEST", content_type=None),
    batch_case("batch-empty", b"", 400, "INVALID_RECORD"),
    batch_case("batch-bad-crc", lambda: bad_crc(good_batch()), 400, "CORRUPT_MESSAGE"),
    batch_case(
        "batch-good-then-bad-crc",
        lambda: good_batch() + bad_crc(good_batch()),
        400,
        "CORRUPT_MESSAGE",
    ),
    batch_case(
        "batch-good-then-lying-count",
        lambda: good_batch() + lying_record_count(),
        400,
        "INVALID_RECORD",
    ),
    batch_case("batch-truncated", lambda: good_batch()[:-3], 400, "CORRUPT_MESSAGE"),
    batch_case("batch-garbage", b"\x00" * 10 + b"not a batch" * 10, 400, "CORRUPT_MESSAGE"),
    batch_case("batch-magic-1", magic_1, 400, "CORRUPT_MESSAGE"),
    batch_case("batch-snappy", snappy_attribute, 400, "UNSUPPORTED_COMPRESSION_TYPE"),
    # Headers no producer may send (issue 9: a producer id of -5 poisoned followers).
    batch_case(
        "batch-producer-id--5",
        lambda: forge(good_batch(), producer_id=-5, producer_epoch=0, base_sequence=0),
        400,
        "INVALID_RECORD",
    ),
    batch_case(
        "batch-good-then-producer-id--5",
        lambda: good_batch() + forge(good_batch(), producer_id=-5),
        400,
        "INVALID_RECORD",
    ),
    batch_case(
        "batch-control", lambda: forge(good_batch(), attributes=0x20), 400, "INVALID_RECORD"
    ),
    batch_case(
        "batch-transactional",
        lambda: forge(
            good_batch(), attributes=0x10, producer_id=0, producer_epoch=0, base_sequence=0
        ),
        400,
        "INVALID_RECORD",
    ),
    batch_case(
        "batch-log-append-time",
        lambda: forge(good_batch(), attributes=0x08),
        400,
        "INVALID_TIMESTAMP",
    ),
    batch_case(
        "batch-far-future",
        lambda: batch_of([b"x"], timestamp_ms=int(time.time() * 1000) + 7_200_000),
        400,
        "INVALID_TIMESTAMP",
    ),
    batch_case(
        "batch-oversized", lambda: good_batch(1, MAX_MESSAGE_BYTES), 413, "MESSAGE_TOO_LARGE"
    ),
    batch_case(
        "batch-good-then-oversized",
        lambda: good_batch() + good_batch(1, MAX_MESSAGE_BYTES),
        413,
        "MESSAGE_TOO_LARGE",
    ),
    batch_case(
        "batch-oversized-request",
        lambda: good_batch(REQUEST_BYTES_MAX // 1000 + 1, 1000),
        413,
        "MESSAGE_TOO_LARGE",
    ),
    batch_case(
        "batch-bad-acks",
        good_batch,
        400,
        "INVALID_REQUEST",
        path=f"/v1/topics/{TOPIC}/partitions/0/batches?acks=two",
    ),
    batch_case(
        "batch-unknown-topic",
        good_batch,
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
        path="/v1/topics/no-such-topic/partitions/0/batches",
    ),
    batch_case(
        "batch-unknown-partition",
        good_batch,
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
        path=f"/v1/topics/{TOPIC}/partitions/2/batches",
    ),
    batch_case(
        "batch-negative-partition",
        good_batch,
        400,
        "INVALID_REQUEST",
        path=f"/v1/topics/{TOPIC}/partitions/-1/batches",
    ),
    batch_case("batch-not-leader", good_batch, 421, "NOT_LEADER_OR_FOLLOWER", node="router"),
    # Fetch.
    get_case("fetch-negative-offset", f"{FETCH}?offset=-1", 400, "INVALID_REQUEST"),
    get_case("fetch-huge-offset", f"{FETCH}?offset=1000000000000", 416, "OFFSET_OUT_OF_RANGE"),
    get_case("fetch-offset-past-int64", f"{FETCH}?offset={2**70}", 400, "INVALID_REQUEST"),
    get_case("fetch-no-offset", FETCH, 400, "INVALID_REQUEST"),
    get_case("fetch-offset-not-a-number", f"{FETCH}?offset=abc", 400, "INVALID_REQUEST"),
    get_case(
        "fetch-max-bytes-over-limit", f"{FETCH}?offset=0&max_bytes={2**30}", 400, "INVALID_REQUEST"
    ),
    get_case("fetch-max-records-zero", f"{FETCH}?offset=0&max_records=0", 400, "INVALID_REQUEST"),
    get_case("fetch-unknown-format", f"{FETCH}?offset=0&format=xml", 400, "INVALID_REQUEST"),
    get_case(
        "fetch-unknown-topic",
        "/v1/topics/no-such-topic/partitions/0/records?offset=0",
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    get_case(
        "fetch-unknown-partition",
        f"/v1/topics/{TOPIC}/partitions/9/records?offset=0",
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    get_case("fetch-not-leader", f"{FETCH}?offset=0", 421, "NOT_LEADER_OR_FOLLOWER", "router"),
    get_case(
        "offsets-negative-timestamp",
        f"/v1/topics/{TOPIC}/partitions/0/offsets?timestamp=-5",
        400,
        "INVALID_REQUEST",
    ),
    # Topics.
    json_case("topic-malformed", b"{", 400, "INVALID_REQUEST", path="/v1/topics"),
    json_case(
        "topic-bad-name",
        {"name": "no/slash", "partitions": 1},
        400,
        "INVALID_TOPIC_EXCEPTION",
        path="/v1/topics",
    ),
    json_case("topic-exists", {"name": TOPIC}, 409, "TOPIC_ALREADY_EXISTS", path="/v1/topics"),
    json_case(
        "topic-zero-partitions",
        {"name": "t0", "partitions": 0},
        400,
        "INVALID_PARTITIONS",
        path="/v1/topics",
    ),
    json_case(
        "topic-rf-too-large",
        {"name": "t4", "replication_factor": 4},
        400,
        "INVALID_REPLICATION_FACTOR",
        path="/v1/topics",
    ),
    json_case(
        "topic-unknown-config",
        {"name": "tc", "configs": {"retention_hours": 1}},
        400,
        "INVALID_CONFIG",
        path="/v1/topics",
    ),
    # Routing.
    get_case("no-such-route", "/v1/nothing-here", 404, "NOT_FOUND"),
    Case(
        "wrong-method",
        "PUT",
        "router",
        "/v1/topics",
        b"{}",
        "application/json",
        405,
        "METHOD_NOT_ALLOWED",
    ),
    Case(
        "internal-without-secret",
        "POST",
        "router",
        "/internal/v1/replica-fetch",
        b"{}",
        "application/json",
        401,
        "SASL_AUTHENTICATION_FAILED",
    ),
]


def error_of(body: dict[str, Any]) -> dict[str, Any]:
    """The error body; a JSON produce in which every record failed carries
    the per-record outcomes in details.offsets, each with an error."""
    error = dict(body["error"])
    for outcome in error.get("details", {}).get("offsets", []):
        assert outcome["error"]["code"] == error["code"], body
    return error


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_its_documented_error_and_changes_nothing(ctx: Ctx, case: Case) -> None:
    before = snapshot(ctx.cluster)
    headers = {"Content-Type": case.content_type} if case.content_type else {}
    try:
        resp = raw_request(
            case.method, ctx.url(case.node, case.path), case.payload(), headers=headers
        )
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise AssertionError(
            f"the node dropped the connection instead of answering: {exc!r}"
        ) from exc
    assert (resp.status, resp.headers.get("Content-Type", "").split(";")[0]) == (
        case.status,
        "application/json",
    ), resp
    error = error_of(resp.json())
    assert error["code"] == case.code, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["retriable"], bool)
    if case.code == "OFFSET_OUT_OF_RANGE":
        assert error["details"]["log_start_offset"] == 0
        assert error["details"]["log_end_offset"] == before[TOPIC][0][2]
    if case.code == "NOT_LEADER_OR_FOLLOWER":
        assert error["details"]["leader_url"] == ctx.leader.url
    assert snapshot(ctx.cluster) == before
    # The node is still fine after it (the connection was not poisoned).
    assert ctx.cluster[1].get("/healthz").status == 200


def test_good_input_still_works_after_the_bad(ctx: Ctx) -> None:
    """The counterpart of the cases above: the same shapes, made right, succeed,
    so the refusals were about the flaw and not about the shape."""
    leader, router = ctx.leader, ctx.router
    before = snapshot(ctx.cluster)[TOPIC][0][2]
    resp = router.post(
        f"/v1/topics/{TOPIC}/records",
        {**B64, "records": [{"value": base64.b64encode(b"ok").decode(), "partition": 0}]},
    )
    assert resp.status == 200, resp
    resp = raw_request(
        "POST",
        leader.url + f"/v1/topics/{TOPIC}/partitions/0/batches",
        good_batch() + good_batch(1, MAX_MESSAGE_BYTES - 200),
        headers={"Content-Type": BATCH_TYPE},
    )
    assert resp.status == 200, resp
    assert snapshot(ctx.cluster)[TOPIC][0][2] == before + 3  # one JSON record, two batches of one
    assert raw_request("GET", leader.url + f"{FETCH}?offset={before + 3}").status == 200


# -- OpenAPI --------------------------------------------------------------------------------------

IGNORED_METHODS = {"HEAD", "OPTIONS"}


async def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(path, METHOD) of every route the node's own `_serve` registers, for a
    node with both roles, without starting Raft or binding a port."""
    spec = NodeSpec(node_id=1, http_port=1, raft_port=2, data_dir=tmp_path / "node")
    config = parse_config(tomllib.loads(node_config_toml(spec, [spec])))
    node = Node(config)
    captured: list[web.Application] = []

    class Server:
        def __init__(self, app: web.Application, *_a: Any, **_kw: Any) -> None:
            captured.append(app)

        async def start(self) -> None:
            return None

    mp = pytest.MonkeyPatch()
    mp.setattr(node_module, "HttpServer", Server)
    node.forward_calls = PeerClient(cluster_secret=config.cluster_secret)
    try:
        node.client = ControllerClient(config, node.forward_calls, None, node._leader_id)
        node.replicas = ReplicaManager(1, tmp_path / "node", BrokerSettings())
        # Built as `start` builds it for a controller, but not started.
        node.runtime = ControllerRuntime(node.raft, node.store, node.controller_config)
        await node._serve()
    finally:
        mp.undo()
        await node.stop_calls()
    (app,) = captured
    routes = set()
    for resource in app.router.resources():
        info = resource.get_info()
        path = info.get("path") or info.get("formatter")
        for route in resource:
            if route.method not in IGNORED_METHODS:
                routes.add((path, route.method))
    return routes


# What each path parameter of the document is filled with when probing: a
# value that names nothing that exists. A parameter missing here fails the
# probe (its route answers NOT_FOUND), so a new one must be added.
PATH_PARAMETERS = {
    "{topic}": "no-such-topic",
    "{partition}": "0",
    "{group}": "no-such-group",
    "{member}": "no-such-member",
    "{user}": "no-such-user",
    # A file the console ships (an unknown one is NOT_FOUND, which the walk refuses).
    "{asset}": "console.js",
}


def fill_path_parameters(path: str) -> str:
    for name, value in PATH_PARAMETERS.items():
        path = path.replace(name, value)
    assert "{" not in path, f"{path}: add its parameter to PATH_PARAMETERS"
    return path


async def test_openapi_document_matches_the_routes(tmp_path: Path, ctx: Ctx) -> None:
    routes = await served_routes(tmp_path)
    public = {(p, m) for p, m in routes if not p.startswith("/internal/")}
    assert any(p.startswith("/internal/") for p, _m in routes)  # the filter filters something
    documented = {(p, m.upper()) for p, ops in PATHS.items() for m in ops}
    assert public - documented == set(), "served but not in /openapi.json"
    assert documented - public == set(), "in /openapi.json but not served"

    # A running node serves that same document...
    resp = ctx.router.get("/openapi.json")
    assert resp.status == 200
    assert resp.body == json.loads(json.dumps(document()))
    # ... and answers every documented route: not NOT_FOUND, not METHOD_NOT_ALLOWED.
    # Path parameters name nothing that exists and bodies are malformed, so
    # the probes change nothing.
    before = snapshot(ctx.cluster)
    for path, method in sorted(documented):
        url = ctx.router.url + fill_path_parameters(path)
        body = b"{" if method in ("POST", "PATCH", "PUT") else None
        if path == "/v1/producers":
            body = None
        got = raw_request(method, url, body, headers={"Content-Type": "application/json"})
        if got.status >= 400:
            code = got.json()["error"]["code"]
            assert code not in ("NOT_FOUND", "METHOD_NOT_ALLOWED"), (method, path, got)
    assert snapshot(ctx.cluster) == before
