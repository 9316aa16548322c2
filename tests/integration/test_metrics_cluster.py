"""GET /metrics on a real three-node cluster (issue 15): the counters follow a
produce and a fetch, exactly one node is the active controller, a killed
broker shows as under-replicated partitions on the leaders and as a fenced
broker on the controller; every exposition parses with prometheus-client's
parser and passes `promtool check metrics`; the Grafana dashboard's queries
name only metrics a node exposes, and parse as PromQL (`promtool check
rules`); the Prometheus config is valid (`promtool check config`).

promtool comes from Debian's `prometheus` package, which scripts/setup.sh
installs; the checks that need it are skipped without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.integration.data_plane import (
    fetch_all,
    pick_partition,
    produce_ok,
    running_cluster,
    wait_in_sync,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "lograft-dashboard.json"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROMTOOL = shutil.which("promtool")
TOPIC = "metered"
RECORDS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    with running_cluster(
        tmp_path_factory,
        "metrics",
        log_lines=80,
        # A dead follower leaves the ISRs within seconds.
        broker={"replica_lag_time_max_ms": 2_000, "isr_check_interval_ms": 200},
    ) as c:
        yield c


def scrape(node: ClusterNode) -> str:
    resp = node.get("/metrics")
    assert resp.status == 200, resp
    body = resp.body
    return body.decode() if isinstance(body, bytes) else str(body)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def total(cluster: LograftCluster, name: str, **labels: str) -> float:
    return sum(value(scrape(n), name, **labels) for n in cluster.running())


def exposed_names(text: str) -> set[str]:
    """Every series name a family of this exposition may have, whether or not
    it has samples now (a histogram's _bucket, _sum, _count; a counter's _total)."""
    names = set()
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        elif family.type == "counter":
            names.add(family.name + "_total")
        else:
            names.add(family.name)
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"].replace("label_values(", "").split(",")[0])
    return exprs


# PromQL functions and keywords, not metric names.
_WORDS = {"sum", "max", "min", "rate", "increase", "by", "histogram_quantile", "label_values"}


def metric_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "", without_strings)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_labels)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_ranges))
    grouping = set()
    for clause in re.findall(r"by \(([^)]*)\)", without_ranges):
        grouping |= {w.strip() for w in clause.split(",")}
    return words - _WORDS - grouping


def test_the_dashboard_names_only_metrics_a_node_exposes(cluster: LograftCluster):
    text = scrape(cluster[1])
    exposed = exposed_names(text)
    used = set().union(*(metric_names(e) for e in dashboard_queries()))
    assert used, "the dashboard has no queries"
    assert used - exposed == set(), (
        f"the dashboard queries metrics no node exposes: {used - exposed}"
    )


def test_the_dashboard_loads_as_grafana_dashboard_json():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["schemaVersion"] >= 36 and doc["uid"] and doc["title"]
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in doc["panels"]:
        assert set(p["gridPos"]) == {"h", "w", "x", "y"}
        assert p["gridPos"]["x"] >= 0 and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus) not installed")
def test_promtool_accepts_the_config_the_queries_and_a_scrape(
    cluster: LograftCluster, tmp_path: Path
):
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "config", "--syntax-only", str(PROMETHEUS_CONFIG)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The dashboard's queries as recording rules: promtool parses each one.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"lograft:dashboard_{i}", "expr": _concrete(e)}
                    for i, e in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The exposition itself: Prometheus' own lint of names and units.
    checked = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=scrape(cluster[1]),
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _concrete(expr: str) -> str:
    """A dashboard query with Grafana's variables given values."""
    return expr.replace("$__rate_interval", "1m").replace("$job", "lograft")


def test_counters_follow_traffic_and_a_killed_broker_shows(cluster: LograftCluster):
    node = cluster[1]
    node.ok("POST", "/v1/topics", {"name": TOPIC, "partitions": 3, "replication_factor": 3}, 201)
    parts = wait_in_sync(cluster, TOPIC)
    records = [{"value": f"r{i}", "partition": i % 3} for i in range(RECORDS)]
    produce_ok(cluster, node, TOPIC, records)
    fetched = 0
    for p, doc in parts.items():
        fetched += len(fetch_all(cluster[doc["leader"]], TOPIC, p))
    assert fetched == RECORDS

    texts = [scrape(n) for n in cluster.running()]

    def summed(name: str, **labels: str) -> float:
        return sum(value(t, name, **labels) for t in texts)

    assert summed("lograft_topic_records_in_total", topic=TOPIC) == RECORDS
    assert summed("lograft_topic_records_out_total", topic=TOPIC) == RECORDS
    assert summed("lograft_controller_active") == 1
    assert summed("lograft_broker_leader_partitions") >= 3
    # Followers copied every record: replication bytes in on two nodes per partition.
    cluster.eventually(
        lambda: total(cluster, "lograft_topic_replication_bytes_in_total", topic=TOPIC) > 0,
        20,
        "replication bytes counted",
    )
    for t in texts:
        assert value(t, "lograft_broker_under_replicated_partitions") == 0
        assert value(t, "process_resident_memory_bytes") > 0

    victim = cluster[3]
    assert pick_partition(parts, 1) >= 0  # node 1 leads one of the partitions
    victim.kill()
    try:
        cluster.eventually(
            lambda: total(cluster, "lograft_broker_under_replicated_partitions") > 0,
            30,
            "under-replicated partitions after killing node 3",
        )
        cluster.eventually(
            lambda: total(cluster, "lograft_controller_fenced_brokers") == 1,
            30,
            "node 3 fenced on the active controller",
        )
        assert total(cluster, "lograft_broker_isr_shrinks_total") > 0
    finally:
        victim.start()
        cluster.wait_ready()
    cluster.eventually(
        lambda: total(cluster, "lograft_broker_under_replicated_partitions") == 0,
        45,
        "every ISR whole again after node 3 came back",
    )
