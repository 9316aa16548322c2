"""Producer and consumer settings: names, defaults, units, and the rules
between them, checked once at construction (`InvalidConfigError` names the
setting at fault, in its `setting` detail).

Each is a typed Record (`lograft.typed`): bounds in the field types, rules
between settings in `__post_init__`, which also checks every field
(`check_fields`), so a config a program constructs is checked as much as one
`make_config` builds from keyword settings.

Every limit is named with its unit last (`linger_ms`, `batch_bytes`).
Defaults follow Kafka's where the meaning is the same; where lograft's
transport differs, the default differs and the reason is given beside it.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from msgspec import Meta

from lograft.client.credentials import Credentials, tls_context
from lograft.errors import InvalidConfigError
from lograft.protocol.compression import Compression
from lograft.typed import NonNegative, Positive, Record, build, check_fields

C = TypeVar("C", bound="CommonConfig")

AcksValue = Literal["0", "1", "all"]
EventLoopName = Literal["uvloop", "asyncio"]
OffsetReset = Literal["earliest", "latest", "none"]
COMPRESSIONS = ("none", "gzip", "lz4", "zstd")
# Produce requests in flight per partition with idempotence, at most: the
# broker's duplicate window (NUM_BATCHES_TO_RETAIN, 5 batches per producer per
# partition), as Kafka's limit for max.in.flight.requests.per.connection.
IDEMPOTENT_IN_FLIGHT_MAX = 5
# Settings that hold a secret: never in a repr or an error message.
_SECRET_SETTINGS = ("bearer_token", "password")


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


# Longest client_id, characters: what a node accepts in X-Lograft-Client-Id
# (lograft/api/authentication.py CLIENT_ID_CHARS_MAX).
CLIENT_ID_CHARS_MAX = 255


def _check_client_id(client_id: str) -> None:
    """The node answers 400 to a client id it cannot take: refuse it here, once."""
    if len(client_id) > CLIENT_ID_CHARS_MAX or not client_id.isprintable():
        raise InvalidConfigError(
            f"client_id must be at most {CLIENT_ID_CHARS_MAX} printable characters "
            f"(it is sent in X-Lograft-Client-Id), got {len(client_id)} characters",
            setting="client_id",
        )


def parse_acks(acks: object) -> AcksValue:
    text = str(acks).lower()
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return "0" if text == "0" else "1"
    raise InvalidConfigError(f"acks={acks!r}; use 0, 1 or 'all'", setting="acks")


class CommonConfig(Record):
    bootstrap_servers: str | Sequence[str] = "http://127.0.0.1:9091"
    client_id: str = "lograft-python"
    # One HTTP exchange, ms. Above the broker's produce_timeout_ms (30 s), so an
    # acks=all produce that the broker times out comes back as its typed error.
    request_timeout_ms: Positive = 35_000
    connect_timeout_ms: Positive = 10_000
    retry_backoff_ms: Positive = 100
    retry_backoff_max_ms: Positive = 1_000
    # Cached topic layouts older than this are refreshed in the background.
    metadata_max_age_ms: Positive = 300_000
    # Open HTTP connections, all nodes together.
    connections_max: Positive = 100
    # Largest answer body accepted from a node, bytes (metadata, offsets,
    # group and produce answers; a fetch has its own bound, see
    # ConsumerConfig.max_fetch_batch_bytes): read as it arrives and refused
    # past this, so a node cannot make the client buffer without bound.
    response_max_bytes: Positive = 16 * 1024 * 1024
    # TLS (https:// URLs): the CA bundle (PEM) nodes' certificates must chain
    # to; None: the system's trust store.
    ssl_cafile: str | None = None
    # A client certificate chain and its key (PEM), shown to nodes that ask
    # ([tls] client_certificate; the "certificate" way in).
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # One way in, at most (credentials.py): a bearer token, a file holding
    # one (read again whenever it changes), or a user name and password
    # (HTTP Basic). Typed Any so that a wrong type is reported without
    # quoting the value; checked in __post_init__. Never in the repr.
    bearer_token: Any = None
    bearer_token_file: str | None = None
    username: str | None = None
    password: Any = None
    # The event loop of the synchronous clients' background thread
    # (loop_thread.py): uvloop's costs less CPU per HTTP exchange and per
    # hand-off between the caller's thread and the loop's (docs/benchmarks.md
    # "Client CPU per exchange"); "asyncio" is the standard library's. The
    # async clients run on whatever loop the program runs them on.
    event_loop: EventLoopName = "uvloop"

    def urls(self) -> tuple[str, ...]:
        return parse_bootstrap(self.bootstrap_servers)

    def credentials(self) -> Credentials:
        """The Authorization each request carries."""
        return Credentials(
            bearer_token=self.bearer_token,
            bearer_token_file=self.bearer_token_file,
            username=self.username,
            password=self.password,
        )

    def tls_context(self) -> ssl.SSLContext | None:
        """The context of https requests; None when no TLS setting is given
        (https URLs then use aiohttp's default: the system's trust store)."""
        if self.ssl_cafile is None and self.ssl_certfile is None and self.ssl_keyfile is None:
            return None
        return tls_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)

    def __repr__(self) -> str:
        # msgspec's repr would show a token or password.
        shown = ", ".join(f"{name}={value!r}" for name, value in self.__rich_repr__())
        return f"{type(self).__name__}({shown})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        # What rich and msgspec's own printing show: no secret.
        shown = [
            (name, getattr(self, name))
            for name in self.__struct_fields__
            if name not in _SECRET_SETTINGS
        ]
        return [*shown, ("credentials", self.credentials().kind)]

    def __post_init__(self) -> None:
        check_fields(self, error=InvalidConfigError, detail="setting")
        for name in _SECRET_SETTINGS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidConfigError(
                    f"{name} must be a string, got {type(value).__name__}", setting=name
                )
        self.urls()
        _check_client_id(self.client_id)
        credentials = self.credentials()
        self.tls_context()  # files read now: a bad path fails here, not at the first request
        if credentials.kind == "basic":
            plain = [u for u in self.urls() if u.startswith("http://")]
            if plain:
                raise InvalidConfigError(
                    f"username/password would travel unencrypted to {plain[0]}: use https:// "
                    "bootstrap URLs (a node takes passwords only with [tls])",
                    setting="bootstrap_servers",
                )
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise InvalidConfigError(
                f"retry_backoff_max_ms={self.retry_backoff_max_ms} is below "
                f"retry_backoff_ms={self.retry_backoff_ms}",
                setting="retry_backoff_max_ms",
            )


class ProducerConfig(CommonConfig, kw_only=True):
    """Producer settings. See docs/client.md for the reasoning behind each default."""

    acks: int | str = "all"
    # None: on when acks=all (Kafka's default since 3.0), off otherwise.
    enable_idempotence: bool | None = None
    compression_type: str = "none"
    # Bytes of records (before compression) per batch: librdkafka's default
    # (batch.size 1,000,000; Java's is 16 KiB, but a Kafka request carries
    # batches of many partitions while a lograft request carries one batch,
    # so the per-request cost is paid per batch). With one request in flight
    # per partition, a partition's throughput is at most batch_bytes per round
    # trip, and round trips grow with the machine's load: on the shared 2-vCPU
    # VM at load 12, 1 MiB gave 3-3.5x the records/s of 64 KiB for 100 B
    # values and 4-6x for 1 KiB (docs/benchmarks.md, "Python client"). A
    # batch is sent as soon as no request to its leader is in flight, so a
    # bigger bound does not add latency at low rates.
    batch_bytes: Positive = 1024 * 1024
    # Records per batch, at most; None: only batch_bytes bounds a batch. (Not a
    # Kafka setting: the `lograft produce` command's --batch-records.)
    batch_records: Positive | None = None
    linger_ms: NonNegative = 5
    # False (adaptive): a batch lingers only while a produce request to its
    # leader is in flight, else it goes at once. True: Kafka's rule, every
    # batch that is not full waits linger_ms.
    linger_strict: bool = False
    # Requests in flight per partition. Without idempotence only 1 keeps order
    # under retries; with it up to IDEMPOTENT_IN_FLIGHT_MAX keep order and
    # exactness (client/sequence_lanes.py: the leader's sequence check refuses
    # a batch that overtakes, and the client sends it again).
    max_in_flight_per_partition: Positive = 1
    delivery_timeout_ms: Positive = 120_000
    buffer_memory_bytes: Positive = 32 * 1024 * 1024
    # How long send() may wait for metadata and buffer room before raising.
    max_block_ms: NonNegative = 60_000
    # Largest batch (and so largest record) sent; below the broker's default
    # max_message_bytes (1048588).
    max_request_bytes: Positive = 1024 * 1024
    # Callables (`lograft.client.serde.Serializer`): code, not data, so typed Any.
    key_serializer: Any = None
    value_serializer: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        acks = self.acks_value
        if self.enable_idempotence and acks != "all":
            raise InvalidConfigError(
                f"enable_idempotence=True needs acks='all' (got acks={self.acks!r}): with "
                "fewer acks a leader change can lose what was acknowledged",
                setting="enable_idempotence",
            )
        if str(self.compression_type).lower() not in COMPRESSIONS:
            raise InvalidConfigError(
                f"compression_type={self.compression_type!r}; use one of {', '.join(COMPRESSIONS)}",
                setting="compression_type",
            )
        if self.idempotent and self.max_in_flight_per_partition > IDEMPOTENT_IN_FLIGHT_MAX:
            raise InvalidConfigError(
                f"max_in_flight_per_partition must be at most {IDEMPOTENT_IN_FLIGHT_MAX} with "
                f"idempotence (got {self.max_in_flight_per_partition}): the broker recognises "
                f"a retry as a duplicate only among a producer's last {IDEMPOTENT_IN_FLIGHT_MAX} "
                "batches of a partition",
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

    @property
    def acks_value(self) -> AcksValue:
        """`acks` in its one form: "0", "1" or "all"."""
        return parse_acks(self.acks)

    @property
    def idempotent(self) -> bool:
        """`enable_idempotence`, or (None) whether acks is all."""
        if self.enable_idempotence is None:
            return self.acks_value == "all"
        return self.enable_idempotence

    @property
    def compression(self) -> Compression:
        return Compression.from_name(str(self.compression_type).lower())


ASSIGNORS = ("uniform", "range")


class ConsumerConfig(CommonConfig, kw_only=True):
    """Consumer settings. With `group_id` the consumer may `subscribe()` and
    commit; without one it reads what it `assign()`s (see docs/client.md)."""

    # The consumer group (Kafka's group.id); None: assign() only, nothing committed.
    group_id: Annotated[str, Meta(min_length=1)] | None = None
    # Where a partition without a position (and, in a group, without a
    # committed offset) starts: Kafka's auto.offset.reset.
    auto_offset_reset: OffsetReset = "latest"
    # Commit consumed positions from poll() every auto_commit_interval_ms, and on
    # revocation and close (Kafka's enable.auto.commit). Only with a group_id.
    enable_auto_commit: bool = True
    auto_commit_interval_ms: Positive = 5_000
    # How long this member may go without an answered heartbeat before it
    # drops its partitions itself (the coordinator removes a member silent for
    # its own session_timeout_ms and hands them on), ms. None: the
    # coordinator's value from the last heartbeat answer; a value above it is
    # capped at it. The session itself is a broker setting (KIP-848).
    session_timeout_ms: Positive | None = None
    # How long the member may take to give up revoked partitions (poll must run
    # its callbacks) before the coordinator removes it, ms; None: the broker's
    # default (60 s). Kafka's new protocol sends max.poll.interval.ms here.
    rebalance_timeout_ms: Positive | None = None
    # Longest the application may go without calling poll() before the
    # member leaves the group so its partitions can be consumed by others, ms
    # (Kafka's max.poll.interval.ms). Time waiting for records inside poll
    # does not count; nothing is committed on that leave; the next poll joins
    # again and calls on_lost for what was held.
    max_poll_interval_ms: Positive = 300_000
    # Server-side assignor to ask for: "uniform" (sticky) or "range"; None:
    # the group's choice (uniform by default).
    group_assignor: Literal["uniform", "range"] | None = None
    # Long-poll of one fetch, ms (Kafka's fetch.max.wait.ms).
    fetch_max_wait_ms: NonNegative = 500
    fetch_min_bytes: NonNegative = 1
    # Bytes asked for per partition per fetch (a larger first batch still comes whole).
    max_partition_fetch_bytes: Positive = 1024 * 1024
    # Bytes the compressed batches of one fetch response may inflate to; the
    # rest of the response is fetched again later. The first batch always
    # inflates (up to 64 MiB, the bound of one batch): a server cannot make
    # the client allocate more than this plus one batch per partition.
    max_partition_fetch_decompressed_bytes: Positive = 64 * 1024 * 1024
    # Largest record batch a fetch answer may bring past max_partition_fetch_bytes
    # (a first batch larger than that comes whole), bytes: a fetch answer
    # over the sum is refused as it arrives. The default is the largest
    # records section the client inflates; raise it for topics whose
    # max_message_bytes is larger.
    max_fetch_batch_bytes: Positive = 64 * 1024 * 1024
    max_poll_records: Positive = 500
    # Check every fetched batch's CRC-32C (Kafka's check.crcs).
    check_crcs: bool = True
    # Iteration stops after this long without a record; None: never.
    consumer_timeout_ms: NonNegative | None = None
    # Bound of position()/seek_to_*/offset lookups/commit()/committed() that
    # retry, and of close() by default, ms.
    default_api_timeout_ms: Positive = 60_000
    # Callables (`lograft.client.serde.Deserializer`): code, not data, so typed Any.
    key_deserializer: Any = None
    value_deserializer: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
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


def make_config(cls: type[C], bootstrap_servers: Any, settings: dict[str, Any]) -> C:
    """A `cls` from keyword settings (and the bootstrap servers, if given);
    a setting `cls` does not have, or a bad value, is an InvalidConfigError
    naming it (detail `setting`)."""
    if bootstrap_servers is not None:
        settings = {**settings, "bootstrap_servers": bootstrap_servers}
    return build(settings, cls, error=InvalidConfigError, detail="setting")
