"""Enrichment: a stream-static join of orders with a customer table, written back to a topic.

    .venv/bin/python -m lograft.pipelines.examples.enrich_orders [--orders 200]

against the local cluster of `scripts/cluster.sh start`. The one command:

1. creates `shop-orders` and `shop-orders-enriched` if they are missing;
2. starts a streaming query from the current end of `shop-orders`: each
   order (JSON `{"order_id", "customer_id", "amount"}`) is joined with the
   customer table (a static DataFrame: `--customers FILE.csv` with columns
   customer_id,name,country,tier, else the built-in one) on customer_id, a
   left outer join, so an order of an unknown customer goes through with
   null customer fields; the result goes through the lograft sink to
   `shop-orders-enriched`, keyed by customer_id (JSON with the order's and
   the customer's fields);
3. produces `--orders` orders (a few for customers not in the table);
4. waits until every order is in `shop-orders-enriched`, stops the query,
   prints the first rows and compares all of them with the same join done in
   plain Python. It exits 1 if they differ.

(The topics are not `orders`, which the README's curl walk-through fills with
records of another shape.)
"""

from __future__ import annotations

import csv
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lograft.client import Producer, serializers
from lograft.pipelines.examples import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ORDERS_TOPIC = "shop-orders"
ENRICHED_TOPIC = "shop-orders-enriched"
ORDER_SCHEMA = "order_id STRING, customer_id STRING, amount DOUBLE"
CUSTOMER_SCHEMA = "customer_id STRING, name STRING, country STRING, tier STRING"
CUSTOMERS: list[tuple[str, str, str, str]] = [
    ("c-001", "Ada Lovelace", "GB", "gold"),
    ("c-002", "Grace Hopper", "US", "gold"),
    ("c-003", "Edsger Dijkstra", "NL", "silver"),
    ("c-004", "Barbara Liskov", "US", "silver"),
    ("c-005", "Donald Knuth", "US", "bronze"),
    ("c-006", "Margaret Hamilton", "US", "gold"),
    ("c-007", "Tim Berners-Lee", "GB", "bronze"),
    ("c-008", "Frances Allen", "US", "silver"),
]
UNKNOWN_CUSTOMERS = ("c-404", "c-999")
ENRICHED_FIELDS = ("order_id", "customer_id", "amount", "name", "country", "tier")


def make_orders(count: int, seed: int = 1) -> list[dict[str, Any]]:
    """`count` orders; about one in twenty is for a customer the table does not have."""
    rng = random.Random(seed)
    known = [c[0] for c in CUSTOMERS]
    orders = []
    for i in range(count):
        customer = rng.choice(UNKNOWN_CUSTOMERS) if rng.random() < 0.05 else rng.choice(known)
        orders.append(
            {
                "order_id": f"o-{seed}-{i:05d}",
                "customer_id": customer,
                "amount": round(rng.uniform(5, 500), 2),
            }
        )
    return orders


def load_customers(path: Path | None) -> list[tuple[str, str, str, str]]:
    if path is None:
        return list(CUSTOMERS)
    with path.open(newline="") as f:
        return [(r["customer_id"], r["name"], r["country"], r["tier"]) for r in csv.DictReader(f)]


def enrich_in_python(
    orders: list[dict[str, Any]], customers: list[tuple[str, str, str, str]]
) -> dict[str, dict[str, Any]]:
    """The join the query does, in plain Python: order_id -> enriched record."""
    by_id = {c[0]: c for c in customers}
    out = {}
    for order in orders:
        c = by_id.get(order["customer_id"])
        out[order["order_id"]] = {
            **order,
            "name": c[1] if c else None,
            "country": c[2] if c else None,
            "tier": c[3] if c else None,
        }
    return out


def produce(bootstrap: str, orders: list[dict[str, Any]]) -> None:
    with Producer(
        bootstrap, key_serializer=serializers.str, value_serializer=serializers.json
    ) as producer:
        for order in orders:
            producer.send(ORDERS_TOPIC, order, key=order["customer_id"])
        producer.flush()


def enriched_orders(
    spark: SparkSession,
    bootstrap: str,
    starting_offsets: str,
    customers: list[tuple[str, str, str, str]],
) -> DataFrame:
    """The streaming DataFrame the sink writes: key (customer_id) and value (JSON)."""
    from pyspark.sql import functions as F

    table = spark.createDataFrame(customers, CUSTOMER_SCHEMA)
    orders = (
        spark.readStream.format("lograft")
        .option("bootstrap", bootstrap)
        .option("subscribe", ORDERS_TOPIC)
        .option("startingOffsets", starting_offsets)
        .load()
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
        .select("o.*")
        .where(F.col("order_id").isNotNull())
    )
    joined = orders.join(F.broadcast(table), "customer_id", "left_outer")
    return joined.select(
        F.col("customer_id").alias("key"),
        F.to_json(F.struct(*ENRICHED_FIELDS), {"ignoreNullFields": "false"}).alias("value"),
    )


def written(bootstrap: str, start: dict[int, int]) -> dict[str, dict[str, Any]]:
    until = common.end_offsets(bootstrap, ENRICHED_TOPIC)
    return {
        r.value["order_id"]: r.value
        for r in common.read_records(bootstrap, ENRICHED_TOPIC, start, until)
    }


def run_demo(
    spark: SparkSession,
    bootstrap: str,
    orders: list[dict[str, Any]],
    customers: list[tuple[str, str, str, str]],
    checkpoint: Path,
    *,
    timeout_s: float = 300.0,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(what the query wrote for these orders, the plain-Python join)."""
    common.ensure_topic(bootstrap, ORDERS_TOPIC)
    common.ensure_topic(bootstrap, ENRICHED_TOPIC)
    orders_start = common.offsets_json(ORDERS_TOPIC, common.end_offsets(bootstrap, ORDERS_TOPIC))
    enriched_start = common.end_offsets(bootstrap, ENRICHED_TOPIC)
    query = (
        enriched_orders(spark, bootstrap, orders_start, customers)
        .writeStream.format("lograft")
        .option("bootstrap", bootstrap)
        .option("topic", ENRICHED_TOPIC)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        produce(bootstrap, orders)
        wanted = {o["order_id"] for o in orders}
        deadline = time.monotonic() + timeout_s
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            got = written(bootstrap, enriched_start)
            if wanted <= got.keys():
                query.processAllAvailable()  # so stop() interrupts no batch midway
                return got, enrich_in_python(orders, customers)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"after {timeout_s:.0f} s {ENRICHED_TOPIC} has {len(got)} of "
                    f"{len(wanted)} orders"
                )
            time.sleep(1.0)
    finally:
        query.stop()


def report(got: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]], rows: int) -> bool:
    print()
    common.print_table(
        ([got[k][f] for f in ENRICHED_FIELDS] for k in sorted(got)[:rows]), ENRICHED_FIELDS
    )
    same = got == expected
    unknown = sum(1 for v in got.values() if v["name"] is None)
    print(
        f"\n{len(got)} orders enriched ({unknown} of unknown customers): "
        + ("the same as the plain-Python join" if same else "DIFFERENT from the plain-Python join")
    )
    return same


def main(argv: list[str] | None = None) -> int:
    parser = common.example_parser(__doc__)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--customers", type=Path, default=None, help="a CSV customer table")
    parser.add_argument("--show", type=int, default=10, help="rows to print")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    customers = load_customers(args.customers)
    spark = common.spark_session("enrich-orders", args.master)
    with tempfile.TemporaryDirectory(prefix="enrich-orders-") as tmp:
        got, expected = run_demo(
            spark,
            args.bootstrap,
            make_orders(args.orders, args.seed),
            customers,
            Path(tmp) / "checkpoint",
            timeout_s=args.timeout,
        )
    return 0 if report(got, expected, args.show) else 1


if __name__ == "__main__":
    sys.exit(main())
