"""Producer and consumer settings: names, defaults, units, and the rules
between them, checked once at construction (`InvalidConfigError` names the
setting at fault).

Every limit is named with its unit last (`linger_ms`, `batch_bytes`).
Defaults follow Kafka's where the meaning is the same; where lograft's
transport differs, the default differs and the reason is given beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from lograft.client.serde import Deserializer, Serializer
from lograft.errors import InvalidConfigError, UnsupportedCompressionError
from lograft.protocol.compression import Compression

AcksValue = Literal["0", "1", "all"]
OffsetReset = Literal["earliest", "latest", "none"]
COMPRESSIONS = ("none", "gzip", "lz4", "zstd")


def parse_bootstrap(servers: str | Sequence[str]) -> tuple[str, ...]:
    """`"http://h:1,h:2"` or `["http://h:1", "h:2"]` -> `("http://h:1", "http://h:2")`.

    A missing scheme means http; trailing slashes go; duplicates are dropped
    keeping the first. Raises InvalidConfigError for an empty list or a URL
    that is not http(s)://host:port.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    urls: list[str] = []
    for raw in items:
        item = str(raw).strip().rstrip("/")
        if not item:
            continue
        if "://" not in item:
            item = "http://" + item
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            raise InvalidConfigError(
                f"bootstrap_servers: {raw!r} is not http://host:port", setting="bootstrap_servers"
            )
        try:
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            raise InvalidConfigError(
                f"bootstrap_servers: {raw!r} has a bad port", setting="bootstrap_servers"
            ) from None
        if item not in urls:
            urls.append(item)
    if not urls:
        raise InvalidConfigError(
            "bootstrap_servers is empty; give one or more node URLs", setting="bootstrap_servers"
        )
    return tuple(urls)


def parse_acks(acks: object) -> AcksValue:
    text = str(acks).lower()
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return "0" if text == "0" else "1"
    raise InvalidConfigError(f"acks={acks!r}; use 0, 1 or 'all'", setting="acks")


def _positive(name: str, value: object, *, zero_ok: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero_ok else 1):
        least = 0 if zero_ok else 1
        raise InvalidConfigError(f"{name} must be an int >= {least}, got {value!r}", setting=name)


@dataclass(frozen=True, slots=True)
class CommonConfig:
    bootstrap_servers: str | Sequence[str] = "http://127.0.0.1:9091"
    client_id: str = "lograft-python"
    # One HTTP exchange, ms. Above the broker's produce_timeout_ms (30 s), so an
    # acks=all produce that the broker times out comes back as its typed error.
    request_timeout_ms: int = 35_000
    connect_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Cached topic layouts older than this are refreshed in the background.
    metadata_max_age_ms: int = 300_000
    # Open HTTP connections, all nodes together.
    connections_max: int = 100
    # Largest answer body accepted from a node, bytes (metadata, offsets,
    # group and produce answers; a fetch has its own bound, see
    # ConsumerConfig.max_fetch_batch_bytes): read as it arrives and refused
    # past this, so a node cannot make the client buffer without bound.
    response_max_bytes: int = 16 * 1024 * 1024

    def urls(self) -> tuple[str, ...]:
        return parse_bootstrap(self.bootstrap_servers)

    def _check_common(self) -> None:
        self.urls()
        for name in (
            "request_timeout_ms",
            "connect_timeout_ms",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "metadata_max_age_ms",
            "connections_max",
            "response_max_bytes",
        ):
            _positive(name, getattr(self, name))
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise InvalidConfigError(
                f"retry_backoff_max_ms={self.retry_backoff_max_ms} is below "
                f"retry_backoff_ms={self.retry_backoff_ms}",
                setting="retry_backoff_max_ms",
            )


@dataclass(frozen=True, slots=True)
class ProducerConfig(CommonConfig):
    """Producer settings. See docs/client.md for the reasoning behind each default."""

    acks: int | str = "all"
    # None: on when acks=all (Kafka's default since 3.0), off otherwise.
    enable_idempotence: bool | None = None
    compression_type: str = "none"
    # Bytes of records (before compression) per batch. Kafka's default is
    # 16 KiB, but a Kafka request carries batches of many partitions while a
    # lograft request carries one batch: the per-request cost (HTTP, one
    # event-loop turn on the broker) is paid per batch. 64 KiB took a quarter
    # of the requests of 16 KiB and was as fast or faster; 256 KiB and 1 MiB
    # were not faster (docs/benchmarks.md, "Python client").
    batch_bytes: int = 64 * 1024
    # Records per batch, at most; None: only batch_bytes bounds a batch. (Not a
    # Kafka setting: the `lograft produce` command's --batch-records.)
    batch_records: int | None = None
    linger_ms: int = 5
    # Requests in flight per partition. 1 keeps order under retries; with
    # idempotence it must be 1 (a retry is always the partition's newest batch,
    # so the broker's five-batch duplicate window always holds it).
    max_in_flight_per_partition: int = 1
    delivery_timeout_ms: int = 120_000
    buffer_memory_bytes: int = 32 * 1024 * 1024
    # How long send() may wait for metadata and buffer room before raising.
    max_block_ms: int = 60_000
    # Largest batch (and so largest record) sent; below the broker's default
    # max_message_bytes (1048588).
    max_request_bytes: int = 1024 * 1024
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None

    # Derived, set in __post_init__.
    acks_value: AcksValue = field(default="all", init=False)
    idempotent: bool = field(default=True, init=False)
    compression: Compression = field(default=Compression.NONE, init=False)

    def __post_init__(self) -> None:
        self._check_common()
        set_ = object.__setattr__
        acks = parse_acks(self.acks)
        set_(self, "acks_value", acks)
        if self.enable_idempotence is None:
            idempotent = acks == "all"
        else:
            idempotent = bool(self.enable_idempotence)
            if idempotent and acks != "all":
                raise InvalidConfigError(
                    f"enable_idempotence=True needs acks='all' (got acks={self.acks!r}): with "
                    "fewer acks a leader change can lose what was acknowledged",
                    setting="enable_idempotence",
                )
        set_(self, "idempotent", idempotent)
        name = str(self.compression_type).lower()
        if name not in COMPRESSIONS:
            raise InvalidConfigError(
                f"compression_type={self.compression_type!r}; use one of {', '.join(COMPRESSIONS)}",
                setting="compression_type",
            )
        try:
            set_(self, "compression", Compression.from_name(name))
        except UnsupportedCompressionError as exc:  # pragma: no cover - names checked above
            raise InvalidConfigError(str(exc), setting="compression_type") from None
        for n in (
            "batch_bytes",
            "max_in_flight_per_partition",
            "delivery_timeout_ms",
            "buffer_memory_bytes",
            "max_request_bytes",
        ):
            _positive(n, getattr(self, n))
        _positive("linger_ms", self.linger_ms, zero_ok=True)
        _positive("max_block_ms", self.max_block_ms, zero_ok=True)
        if self.batch_records is not None:
            _positive("batch_records", self.batch_records)
        if idempotent and self.max_in_flight_per_partition != 1:
            raise InvalidConfigError(
                "max_in_flight_per_partition must be 1 with idempotence (got "
                f"{self.max_in_flight_per_partition})",
                setting="max_in_flight_per_partition",
            )
        if self.batch_bytes > self.max_request_bytes:
            raise InvalidConfigError(
                f"batch_bytes={self.batch_bytes} exceeds max_request_bytes="
                f"{self.max_request_bytes}",
                setting="batch_bytes",
            )
        if self.max_request_bytes > self.buffer_memory_bytes:
            raise InvalidConfigError(
                f"max_request_bytes={self.max_request_bytes} exceeds buffer_memory_bytes="
                f"{self.buffer_memory_bytes}",
                setting="max_request_bytes",
            )
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise InvalidConfigError(
                f"delivery_timeout_ms={self.delivery_timeout_ms} must be at least linger_ms + "
                f"request_timeout_ms ({self.linger_ms + self.request_timeout_ms})",
                setting="delivery_timeout_ms",
            )


ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class ConsumerConfig(CommonConfig):
    """Consumer settings. With `group_id` the consumer may `subscribe()` and
    commit; without one it reads what it `assign()`s (see docs/client.md)."""

    # The consumer group (Kafka's group.id); None: assign() only, nothing committed.
    group_id: str | None = None
    # Where a partition without a position (and, in a group, without a
    # committed offset) starts: Kafka's auto.offset.reset.
    auto_offset_reset: OffsetReset = "latest"
    # Commit consumed positions from poll() every auto_commit_interval_ms, and on
    # revocation and close (Kafka's enable.auto.commit). Only with a group_id.
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    # How long this member may go without an answered heartbeat before it
    # drops its partitions itself (the coordinator removes a member silent for
    # its own session_timeout_ms and hands them on), ms. None: the
    # coordinator's value from the last heartbeat answer; a value above it is
    # capped at it. The session itself is a broker setting (KIP-848).
    session_timeout_ms: int | None = None
    # How long the member may take to give up revoked partitions (poll must run
    # its callbacks) before the coordinator removes it, ms; None: the broker's
    # default (60 s). Kafka's new protocol sends max.poll.interval.ms here.
    rebalance_timeout_ms: int | None = None
    # Longest the application may go without calling poll() before the
    # member leaves the group so its partitions can be consumed by others, ms
    # (Kafka's max.poll.interval.ms). Time waiting for records inside poll
    # does not count; nothing is committed on that leave; the next poll joins
    # again and calls on_lost for what was held.
    max_poll_interval_ms: int = 300_000
    # Server-side assignor to ask for: "uniform" (sticky) or "range"; None:
    # the group's choice (uniform by default).
    group_assignor: str | None = None
    # Long-poll of one fetch, ms (Kafka's fetch.max.wait.ms).
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    # Bytes asked for per partition per fetch (a larger first batch still comes whole).
    max_partition_fetch_bytes: int = 1024 * 1024
    # Bytes the compressed batches of one fetch response may inflate to; the
    # rest of the response is fetched again later. The first batch always
    # inflates (up to 64 MiB, the bound of one batch): a server cannot make
    # the client allocate more than this plus one batch per partition.
    max_partition_fetch_decompressed_bytes: int = 64 * 1024 * 1024
    # Largest record batch a fetch answer may bring past max_partition_fetch_bytes
    # (a first batch larger than that comes whole), bytes: a fetch answer
    # over the sum is refused as it arrives. The default is the largest
    # records section the client inflates; raise it for topics whose
    # max_message_bytes is larger.
    max_fetch_batch_bytes: int = 64 * 1024 * 1024
    max_poll_records: int = 500
    # Check every fetched batch's CRC-32C (Kafka's check.crcs).
    check_crcs: bool = True
    # Iteration stops after this long without a record; None: never.
    consumer_timeout_ms: int | None = None
    # Bound of position()/seek_to_*/offset lookups/commit()/committed() that
    # retry, and of close() by default, ms.
    default_api_timeout_ms: int = 60_000
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def __post_init__(self) -> None:
        self._check_common()
        if self.group_id is not None and (not isinstance(self.group_id, str) or not self.group_id):
            raise InvalidConfigError(
                f"group_id must be a non-empty string, got {self.group_id!r}", setting="group_id"
            )
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigError(
                f"auto_offset_reset={self.auto_offset_reset!r}; use earliest, latest or none",
                setting="auto_offset_reset",
            )
        if self.group_assignor is not None and self.group_assignor not in ASSIGNORS:
            raise InvalidConfigError(
                f"group_assignor={self.group_assignor!r}; use one of {', '.join(ASSIGNORS)}",
                setting="group_assignor",
            )
        for n in (
            "max_partition_fetch_bytes",
            "max_partition_fetch_decompressed_bytes",
            "max_fetch_batch_bytes",
            "max_poll_records",
            "default_api_timeout_ms",
            "auto_commit_interval_ms",
            "max_poll_interval_ms",
        ):
            _positive(n, getattr(self, n))
        for n in ("session_timeout_ms", "rebalance_timeout_ms"):
            if getattr(self, n) is not None:
                _positive(n, getattr(self, n))
        _positive("fetch_max_wait_ms", self.fetch_max_wait_ms, zero_ok=True)
        _positive("fetch_min_bytes", self.fetch_min_bytes, zero_ok=True)
        if self.consumer_timeout_ms is not None:
            _positive("consumer_timeout_ms", self.consumer_timeout_ms, zero_ok=True)
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise InvalidConfigError(
                f"request_timeout_ms={self.request_timeout_ms} must exceed "
                f"fetch_max_wait_ms={self.fetch_max_wait_ms} (a long-poll must not time out "
                "the request)",
                setting="request_timeout_ms",
            )

    @property
    def fetch_response_max_bytes(self) -> int:
        """The bound of one fetch answer's body, bytes."""
        return self.max_partition_fetch_bytes + self.max_fetch_batch_bytes

    @property
    def auto_commit(self) -> bool:
        """Whether positions are committed automatically (needs a group)."""
        return self.group_id is not None and self.enable_auto_commit


def make_config(cls: type[Any], bootstrap_servers: Any, kwargs: dict[str, Any]) -> Any:
    """`cls(bootstrap_servers=..., **kwargs)`, with unknown names as InvalidConfigError."""
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise InvalidConfigError(
            f"unknown setting(s) {', '.join(unknown)} for {cls.__name__}", settings=unknown
        )
    if bootstrap_servers is not None:
        kwargs = {**kwargs, "bootstrap_servers": bootstrap_servers}
    return cls(**kwargs)
