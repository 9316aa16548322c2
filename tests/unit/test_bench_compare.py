"""scripts/bench_compare.py's pure parts (scripts/compare_stats.py): percentiles from
scheduled send times, failover timing, medians with min-max, ratios, the table.

Nothing here starts a server or downloads anything; the harness itself is run by
hand (docs/benchmarks.md, "Side by side with Kafka and NATS JetStream").
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from compare_stats import (
    Spread,
    failover_seconds,
    latencies_from_schedule,
    percentile,
    ratio,
    render_table,
)


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.9) == 100.0
    assert percentile([], 50) is None


def test_latency_counts_from_the_scheduled_time_not_the_send():
    # Record 1 was due at 1.0 + 1/10 but the sender stalled; it arrived at 1.5:
    # its latency is 0.4 s from its schedule, not the few ms after its late send.
    received = {0: 1.01, 1: 1.5, 2: 1.21}
    lat = latencies_from_schedule(1.0, 10.0, 3, received)
    assert [round(v, 3) for v in lat] == [0.01, 0.4, 0.01]


def test_a_lost_record_makes_its_percentile_infinite():
    lat = latencies_from_schedule(0.0, 1.0, 4, {0: 0.1, 1: 1.1, 2: 2.1})
    assert math.isinf(lat[3])
    assert percentile(lat, 50) is not None and percentile(lat, 50) < 1
    assert math.isinf(percentile(lat, 99) or 0)


def test_failover_is_the_first_ack_of_a_record_sent_after_the_kill():
    pairs = [(9.0, 9.01), (9.9, 10.2), (10.1, 12.5), (10.2, 12.4), (12.6, 12.61)]
    # (9.9, 10.2) was in flight at the kill (10.0): it does not count.
    assert failover_seconds(pairs, 10.0) == 12.4 - 10.0
    assert failover_seconds([(9.0, 9.1)], 10.0) is None


def test_failover_counts_only_the_killed_nodes_partitions():
    # (sent, acked, partition): partition 1 was not led by the killed node.
    triples = [(10.1, 10.15, 1), (10.2, 11.3, 0), (10.3, 11.2, 2), (11.4, 11.5, 1)]
    assert failover_seconds(triples, 10.0, {0, 2}) == 11.2 - 10.0
    assert failover_seconds(triples, 10.0, {0}) == 11.3 - 10.0
    assert failover_seconds(triples, 10.0) == 10.15 - 10.0


def test_spread_and_ratio():
    s = Spread.of([3.0, 1.0, 2.0])
    assert s == Spread(2.0, 1.0, 3.0)
    assert Spread.of([]) is None
    assert ratio(Spread(50.0, 40.0, 60.0), Spread(200.0, 100.0, 300.0)) == 0.25
    assert ratio(Spread(1.0, 1.0, 1.0), None) is None
    assert ratio(Spread(1.0, 1.0, 1.0), Spread(0.0, 0.0, 0.0)) is None
    assert ratio(Spread(math.inf, 1.0, math.inf), Spread(1.0, 1.0, 1.0)) is None


def test_table_has_medians_ranges_and_ratios():
    cells = {
        ("produce, records/s", "Kafka"): Spread(200_000.0, 150_000.0, 250_000.0),
        ("produce, records/s", "lograft"): Spread(50_000.0, 50_000.0, 50_000.0),
        ("latency p99 ms", "Kafka"): Spread(12.0, 10.0, 300.0),
        ("latency p99 ms", "lograft"): Spread(math.inf, 6.0, math.inf),
    }
    table = render_table(
        ["produce, records/s", "latency p99 ms"],
        ["Kafka", "NATS", "lograft"],
        cells,
        [("lograft ÷ Kafka", "lograft", "Kafka")],
    )
    lines = table.splitlines()
    assert lines[0] == "| figure | Kafka | NATS | lograft | lograft ÷ Kafka |"
    assert lines[2] == "| produce, records/s | 200k (150k-250k) | — | 50k | 0.25 |"
    assert lines[3] == "| latency p99 ms | 12 (10-300) | — | lost (6-lost) | — |"


def test_a_cell_is_not_started_on_a_nearly_full_disk(tmp_path):
    import pytest
    from bench_compare import check_free_space

    check_free_space(tmp_path, 0.0)  # any disk has room for nothing more
    with pytest.raises(SystemExit, match="GiB free under"):
        check_free_space(tmp_path, 1e9)  # no disk here has an exbibyte free


def test_a_kafka_cluster_id_never_reads_as_an_option():
    from kafka_local import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # about 31 would start with "-" unfiltered
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_run_goes_on_top_of_the_section_and_keeps_what_is_there(tmp_path):
    from bench_compare import DOCS_HEADING, write_docs

    docs = tmp_path / "benchmarks.md"
    before = (
        "# Benchmarks\n\n"
        f"{DOCS_HEADING}\n\n"
        "### An earlier run\n\nits table\n\n"
        "### A note written by hand\n\nkept\n\n"
        "## The next section\n\nuntouched\n"
    )
    docs.write_text(before)
    write_docs("### A run of scripts/bench_compare.py (now)\n\nthe new table\n", docs)
    after = docs.read_text()
    assert after == (
        "# Benchmarks\n\n"
        f"{DOCS_HEADING}\n\n"
        "### A run of scripts/bench_compare.py (now)\n\nthe new table\n\n"
        "### An earlier run\n\nits table\n\n"
        "### A note written by hand\n\nkept\n\n"
        "## The next section\n\nuntouched\n"
    )


def test_a_file_without_the_section_gets_it_at_its_end(tmp_path):
    from bench_compare import DOCS_HEADING, write_docs

    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Other\n\ntext\n")
    write_docs("### A run\n\nthe table\n", docs)
    assert docs.read_text() == (
        f"# Benchmarks\n\n## Other\n\ntext\n\n{DOCS_HEADING}\n\n### A run\n\nthe table\n"
    )
