"""schemathesis against `/openapi.json` of a real node: nothing it sends is a
500, and every answer, success or error, has a documented status, content
type and body schema.

A one-node cluster (a `lograft node` process, cluster_harness) serves a topic
`orders` with records, and `__consumer_offsets` exists (a coordinator lookup
created it), so that the document's examples reach the success paths. Every
operation is fuzzed (schemathesis' examples, coverage and fuzzing phases,
`FUZZ_EXAMPLES` generated cases each), then the stateful phase follows the
document's links (a created topic is described, produced to, deleted; a
joined member heartbeats and leaves).

Checks: not_a_server_error, status_code_conformance, content_type_conformance,
response_schema_conformance, response_headers_conformance, and for methods a
path does not have unsupported_method and allow_header_conformance (405 with
an Allow header). No operation is excluded: the document's
example for those that change or delete a topic names `scratch`, not
`orders`, so reads and produces keep reaching a topic with data; generated
names mostly name no topic (404), and what the stateful phase creates it may
alter and delete.

Bounded for the default suite (about a minute on a loaded 2-core machine).
A longer run, e.g. before a release:

    LOGRAFT_FUZZ_EXAMPLES=200 LOGRAFT_FUZZ_STATEFUL=100 \\
        python -m pytest -p no:cacheprovider tests/integration/test_openapi_fuzz.py

Failures print the request as a curl command; each fixed one gets a
regression unit test next to the code it broke.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from lograft.api.openapi import document
from lograft.api.routes_data import BATCH_CONTENT_TYPE
from lograft.protocol.batch import RecordInput, build_batch
from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.integration.data_plane import start_cluster

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

# Generated cases per operation (fuzzing phase) and stateful scenarios.
FUZZ_EXAMPLES = int(os.environ.get("LOGRAFT_FUZZ_EXAMPLES", "25"))
FUZZ_STATEFUL = int(os.environ.get("LOGRAFT_FUZZ_STATEFUL", "100"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    # An undocumented method is 405 with an Allow header naming the right ones.
    unsupported_method,
    allow_header_conformance,
]
# One request's timeout, s. A stream never ends by itself: schemathesis reads
# its events until the timeout (or max-stream-events) and checks those.
REQUEST_TIMEOUT_S = 15.0
STREAM_TIMEOUT_S = 0.5
STREAM_PATH = "/v1/topics/{topic}/stream"
# Wall time the stateful phase may take, s (it stops sooner at FUZZ_STATEFUL).
STATEFUL_BUDGET_S = float(os.environ.get("LOGRAFT_FUZZ_STATEFUL_BUDGET_S", "30"))
HYPOTHESIS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNode]:
    def make(attempt: int) -> LograftCluster:
        return LograftCluster(
            tmp_path_factory.mktemp(f"fuzz-{attempt}"),
            1,
            # Few partitions per created topic and short long-polls keep
            # each generated request cheap; larger values are 400s.
            controller={"partitions_per_topic_max": 4},
            broker={"fetch_wait_max_ms": 100},
            overrides={1: {"groups": {"offsets_topic_num_partitions": 2}}},
        )

    cluster = start_cluster(make)
    try:
        node = cluster[1]
        cluster.create_topic("orders", partitions=2, replication_factor=1)
        # What the document's examples change or delete.
        cluster.create_topic("scratch", partitions=1, replication_factor=1)
        records = [{"key": f"k{i}", "value": {"n": i}, "partition": i % 2} for i in range(6)]
        node.ok("POST", "/v1/topics/orders/records", {"records": records})
        node.ok("GET", "/v1/groups/billing/coordinator")
        assert node.ok("GET", "/openapi.json") == json.loads(json.dumps(document()))
        yield node
    finally:
        print(cluster.logs(lines=80))
        cluster.close()
        assert "Traceback" not in cluster[1].log_text(), "the node logged a traceback"


# The document as the code defines it, loaded at collection so that each
# operation is its own test (schemathesis' from_fixture loader does not work
# with pytest 9). The `node` fixture checks that the node serves this document.
schema = schemathesis.openapi.from_dict(
    document(),
    # An explicit config: no schemathesis.toml of the machine applies.
    config=SchemathesisConfig.from_dict(
        {
            "max-stream-events": 5,
            # The examples phase completes a case whose parameters lack an
            # example (the fetch offset) instead of skipping the operation.
            "phases": {"examples": {"fill-missing": True}, "stateful": {"max-steps": 6}},
        }
    ),
)


def _call_kwargs(path: str) -> dict[str, Any]:
    return {"timeout": STREAM_TIMEOUT_S if path == STREAM_PATH else REQUEST_TIMEOUT_S}


# Raw batches: schemathesis makes random bytes of `format: binary` (refused as
# CORRUPT_MESSAGE); half the cases are valid batches instead, so that the
# success answer is checked too.
schemathesis.serializer.alias(BATCH_CONTENT_TYPE, "application/octet-stream")

# Generated names almost never name a topic, partition or group that exists,
# so every case would stop at 404 before its query and body are read. Half
# the cases name existing ones instead: `orders` (2 partitions) for reads and
# produce, `scratch` for what changes or deletes a topic, `billing`.
_CHANGES_TOPIC = {
    "DELETE /v1/topics/{topic}",
    "PATCH /v1/topics/{topic}/configs",
    "POST /v1/topics/{topic}/partitions",
}


@schemathesis.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    if not path_parameters:
        return st.just(path_parameters)
    known = dict(path_parameters)
    if "topic" in known:
        changes = context.operation.label in _CHANGES_TOPIC
        known["topic"] = "scratch" if changes else "orders"
    if "partition" in known:
        known["partition"] = known["partition"] % 2 if isinstance(known["partition"], int) else 0
    if "group" in known:
        known["group"] = "billing"
    return st.sampled_from([path_parameters, known])


_VALID_BATCHES = st.builds(
    lambda values: build_batch(
        [RecordInput(v) for v in values], timestamp_ms=int(time.time() * 1000)
    ),
    st.lists(st.binary(max_size=64), min_size=1, max_size=5),
)


@schemathesis.hook.apply_to(path="/v1/topics/{topic}/partitions/{partition}/batches")
def flatmap_body(_context: Any, body: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(body), _VALID_BATCHES)


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_conforms(case: Any, node: ClusterNode) -> None:
    case.call_and_validate(base_url=node.url, checks=CHECKS, **_call_kwargs(case.path))


def test_stateful_links_conform(node: ClusterNode) -> None:
    """Scenarios of up to 6 linked calls. The server's state decides which
    links can be followed (a bundle fills only with a success), so Hypothesis
    may find that replaying a choice sequence draws differently and stop
    with Flaky; the run then goes on with new scenarios (as schemathesis'
    own runner does) until FUZZ_STATEFUL ran or the time budget is spent. A
    check that failed in any scenario fails the test."""
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    scenarios = 0
    base = schema.as_state_machine()

    class Machine(base):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            nonlocal scenarios
            scenarios += 1

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": node.url, **_call_kwargs(case.path)}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)
            except Exception as exc:
                failures.append(f"{case.method} {case.formatted_path}: {exc}")
                raise

    deadline = time.monotonic() + STATEFUL_BUDGET_S
    while scenarios < FUZZ_STATEFUL and time.monotonic() < deadline:
        try:
            Machine.run(
                settings=settings(
                    max_examples=FUZZ_STATEFUL - scenarios,
                    stateful_step_count=6,
                    phases=[Phase.generate],
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
            )
            break
        except Flaky:
            if failures:
                raise
    print(
        f"stateful: {scenarios} scenarios, {sum(statuses.values())} calls, by status "
        f"{sorted(statuses.items())}"
    )
    assert not failures, failures
