"""The options of the lograft Spark source and sink: names, meanings, checks.

The source takes the options of Spark's Kafka source with the same names and
meanings (`subscribe`, `startingOffsets`, `maxOffsetsPerTrigger`, ...), so a
pipeline moves between the two by changing the format name and replacing
`kafka.bootstrap.servers` with `bootstrap`. The rules between them are
Kafka's too: exactly one of subscribe / subscribePattern / assign, a
timestamp option wins over the offsets option of the same end, and so on
(docs/pipelines.md lists them all).

Everything here is pure: parsing a dict of strings into frozen dataclasses,
raising `InvalidConfigError` whose message names the option at fault.
Options are matched case-insensitively, as Spark does; messages use the
documented spelling. An option this module does not know is an error, not
silently ignored: a misspelt `startingOffset` would otherwise read from the
wrong place without a word.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lograft.client.config import parse_bootstrap
from lograft.errors import InvalidConfigError
from lograft.protocol.topic_partition import TopicPartition

# Spark's Kafka source special offsets in per-partition JSON.
LATEST = -1
EARLIEST = -2

# Defaults, with units.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's "15m"
# How long an executor keeps trying to read the next records of its range
# (leader moving, high watermark catching up) before failing the task, ms.
# Kafka's kafkaConsumer.pollTimeoutMs falls back to spark.network.timeout (120 s).
DEFAULT_POLL_TIMEOUT_MS = 120_000
# Bytes one fetch asks of a partition leader (a larger first batch still comes whole).
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
# Bytes the compressed batches of one fetch response may inflate to on an
# executor (the first batch always inflates, up to 64 MiB); the rest of the
# response is fetched again. The consumer's max_partition_fetch_decompressed_bytes.
DEFAULT_FETCH_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# One HTTP exchange, ms (the client's default).
DEFAULT_REQUEST_TIMEOUT_MS = 35_000
# How long the driver keeps retrying an offset or metadata lookup while a
# leader moves before the trigger fails, ms (the client's default_api_timeout_ms).
DEFAULT_OFFSET_LOOKUP_TIMEOUT_MS = 60_000

_BOOTSTRAP_HELP = "the URLs of one or more lograft nodes, e.g. http://127.0.0.1:9091"

# TLS and credentials of the source's and the sink's clients (docs/client.md,
# "Secure clusters"): documented spelling -> the client setting it sets. Files
# must exist on the driver and on every executor. Spark redacts the values of
# options whose names match spark.redaction.regex (password, token) in its UI
# and plans; lograft never shows them either.
CLIENT_SECURITY_OPTIONS: dict[str, str] = {
    "sslCaFile": "ssl_cafile",
    "sslCertFile": "ssl_certfile",
    "sslKeyFile": "ssl_keyfile",
    "bearerToken": "bearer_token",
    "bearerTokenFile": "bearer_token_file",
    "username": "username",
    "password": "password",
}

# Source options: lower-case key -> documented spelling.
SOURCE_OPTIONS: dict[str, str] = {
    name.lower(): name
    for name in (
        "bootstrap",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
        "minPartitions",
        "maxRecordsPerPartition",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchMaxBytes",
        "fetchMaxDecompressedBytes",
        "requestTimeoutMs",
        "offsetLookupTimeoutMs",
        *CLIENT_SECURITY_OPTIONS,
    )
}

# Sink options: documented spelling -> the Producer setting it sets.
SINK_PRODUCER_OPTIONS: dict[str, str] = {
    "acks": "acks",
    "compressionType": "compression_type",
    "lingerMs": "linger_ms",
    "batchBytes": "batch_bytes",
    "bufferMemoryBytes": "buffer_memory_bytes",
    "maxRequestBytes": "max_request_bytes",
    "deliveryTimeoutMs": "delivery_timeout_ms",
    "requestTimeoutMs": "request_timeout_ms",
}
SINK_OPTIONS: dict[str, str] = {
    name.lower(): name
    for name in ("bootstrap", "topic", *SINK_PRODUCER_OPTIONS, *CLIENT_SECURITY_OPTIONS)
}
# Spark itself passes these to a streaming sink (`queryName` when the query has
# one: writeStream.queryName(...)); they mean nothing to lograft.
_SPARK_SINK_OPTIONS = frozenset({"checkpointlocation", "queryname"})

# Kafka source options lograft has no use for, and what to do instead.
_KAFKA_ONLY_HINTS: dict[str, str] = {
    "kafka.bootstrap.servers": "lograft takes the node URLs in 'bootstrap'",
    "groupidprefix": "the lograft source reads without a consumer group",
    "fetchoffset.numretries": "offset lookups retry for 'offsetLookupTimeoutMs' instead",
    "fetchoffset.retryintervalms": "offset lookups retry for 'offsetLookupTimeoutMs' instead",
}

Strategy = Literal["subscribe", "subscribePattern", "assign"]


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: Kafka's subscribe / subscribePattern / assign."""

    kind: Strategy
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern (matched against the whole name)
    assigned: tuple[TopicPartition, ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assigned)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    kind "earliest" / "latest"; "offsets": `offsets` per partition (-2
    earliest, -1 latest); "timestamp": one `timestamp` (ms) for every
    partition; "timestamps": `offsets` holds a timestamp (ms) per partition.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None
    option: str = ""  # the option it came from, for messages

    def per_partition(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec | None  # None: the mode's default (batch earliest, stream latest)
    ending: OffsetSpec | None  # batch only; None: latest
    # What to do when the timestamp of startingOffsetsByTimestamp/startingTimestamp
    # matches no record: "error" or "latest" (Kafka's strategy option).
    timestamp_no_match: Literal["error", "latest"]
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    include_headers: bool
    poll_timeout_ms: int
    fetch_max_bytes: int
    fetch_max_decompressed_bytes: int
    request_timeout_ms: int
    offset_lookup_timeout_ms: int
    given: frozenset[str]  # lower-case names of the options set, for warnings
    # Client settings from CLIENT_SECURITY_OPTIONS; never in the repr.
    security: tuple[tuple[str, Any], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: tuple[str, ...]
    topic: str | None  # overrides a `topic` column, as in Kafka's sink
    producer_settings: tuple[tuple[str, Any], ...]  # Producer(**dict(...))
    # Client settings from CLIENT_SECURITY_OPTIONS; never in the repr.
    security: tuple[tuple[str, Any], ...] = field(default=(), repr=False)


# -- parsing helpers -----------------------------------------------------------------------


def _fail(option: str, message: str) -> InvalidConfigError:
    return InvalidConfigError(message, setting=option)


def parse_bool(option: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _fail(option, f"option '{option}' must be true or false, got {value!r}")


def parse_long(option: str, value: str, *, minimum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise _fail(option, f"option '{option}' must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise _fail(option, f"{option} must be {what}, got {number}")
    return number


_DURATION = re.compile(r"\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def parse_duration_ms(option: str, value: str) -> int:
    """Spark's time strings: "15m", "30s", "500ms", "2h"; a bare number is ms."""
    found = _DURATION.fullmatch(value)
    if found is None:
        raise _fail(
            option, f"option '{option}' must be a duration such as 30s, 15m or 500ms, got {value!r}"
        )
    unit = (found.group(2) or "ms").lower()
    return int(int(found.group(1)) * _UNIT_MS[unit])


def _json(option: str, value: str, example: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise _fail(option, f"option '{option}': expected e.g. {example}, got {value}") from None


def _partition_number(option: str, text: Any, example: str, value: str) -> int:
    try:
        number = int(text)
    except (TypeError, ValueError):
        raise _fail(option, f"option '{option}': expected e.g. {example}, got {value}") from None
    if number < 0 or str(number) != str(text).strip():
        raise _fail(option, f"option '{option}': {text!r} is not a partition number")
    return number


ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'
OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'


def parse_assign(option: str, value: str) -> tuple[TopicPartition, ...]:
    """`{"topicA":[0,1],"topicB":[2,4]}` -> the partitions, in order."""
    if not value.strip().startswith("{"):
        raise _fail(
            option,
            f"No topicpartitions to assign as specified value for option '{option}' is "
            f"'{value}'; expected e.g. {ASSIGN_EXAMPLE}",
        )
    doc = _json(option, value, ASSIGN_EXAMPLE)
    if not isinstance(doc, dict) or not doc:
        raise _fail(option, f"option '{option}': expected e.g. {ASSIGN_EXAMPLE}, got {value}")
    out: list[TopicPartition] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not parts:
            raise _fail(option, f"option '{option}': expected e.g. {ASSIGN_EXAMPLE}, got {value}")
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise _fail(option, f"option '{option}': {p!r} is not a partition number")
            tp = TopicPartition(topic, p)
            if tp not in out:
                out.append(tp)
    return tuple(out)


def parse_partition_values(
    option: str, value: str, example: str, *, minimum: int
) -> tuple[tuple[TopicPartition, int], ...]:
    """`{"topicA":{"0":23,"1":-1}}` -> ((tp, 23), (tp, -1)); values >= minimum."""
    doc = _json(option, value, example)
    if not isinstance(doc, dict) or not doc:
        raise _fail(option, f"option '{option}': expected e.g. {example}, got {value}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise _fail(option, f"option '{option}': expected e.g. {example}, got {value}")
        for p, v in parts.items():
            number = _partition_number(option, p, example, value)
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise _fail(
                    option,
                    f"option '{option}': the value for {topic}-{number} must be an integer "
                    f">= {minimum}, got {v!r}",
                )
            out[TopicPartition(topic, number)] = v
    return tuple(sorted(out.items()))


def _offset_spec(
    options: Mapping[str, str], timestamp_key: str, by_timestamp_key: str, offsets_key: str
) -> OffsetSpec | None:
    """Kafka's precedence: one global timestamp, else per-partition
    timestamps, else earliest / latest / per-partition offsets."""
    if timestamp_key.lower() in options:
        return OffsetSpec(
            "timestamp",
            timestamp=parse_long(timestamp_key, options[timestamp_key.lower()], minimum=0),
            option=timestamp_key,
        )
    if by_timestamp_key.lower() in options:
        values = parse_partition_values(
            by_timestamp_key, options[by_timestamp_key.lower()], TIMESTAMPS_EXAMPLE, minimum=0
        )
        return OffsetSpec("timestamps", offsets=values, option=by_timestamp_key)
    if offsets_key.lower() in options:
        text = options[offsets_key.lower()].strip()
        if text.lower() in ("earliest", "latest"):
            return OffsetSpec(
                "earliest" if text.lower() == "earliest" else "latest", option=offsets_key
            )
        values = parse_partition_values(offsets_key, text, OFFSETS_EXAMPLE, minimum=EARLIEST)
        return OffsetSpec("offsets", offsets=values, option=offsets_key)
    return None


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    names = "subscribe, subscribePattern, assign"
    if not given:
        raise _fail(
            "subscribe",
            f"One of the following options must be specified for the lograft source: {names}. "
            "See docs/pipelines.md.",
        )
    if len(given) > 1:
        spelt = ", ".join(SOURCE_OPTIONS[k] for k in given)
        raise _fail(
            SOURCE_OPTIONS[given[1]],
            f"Only one of the following options can be specified for the lograft source: "
            f"{names}; got {spelt}.",
        )
    key = given[0]
    value = options[key]
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise _fail(
                "subscribe",
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'",
            )
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        pattern = value.strip()
        if not pattern:
            raise _fail(
                "subscribePattern",
                "Pattern to subscribe is empty as specified value for option "
                f"'subscribePattern' is '{value}'",
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail(
                "subscribePattern",
                f"option 'subscribePattern': {pattern!r} is not a valid regular expression: {exc}",
            ) from None
        return Subscription("subscribePattern", pattern=pattern)
    return Subscription("assign", assigned=parse_assign("assign", value))


def _reject_unknown(options: Mapping[str, str], known: Mapping[str, str], what: str) -> None:
    for key in options:
        low = key.lower()
        if low in known:
            continue
        hint = _KAFKA_ONLY_HINTS.get(low)
        if hint is None and low.startswith("kafka."):
            hint = "lograft has no Kafka client settings (kafka.*)"
        known_list = ", ".join(sorted(known.values(), key=str.lower))
        raise _fail(
            key,
            f"unknown option '{key}' for the lograft {what}"
            + (f": {hint}" if hint else "")
            + f". Known options: {known_list}",
        )


def _bootstrap(options: Mapping[str, str]) -> tuple[str, ...]:
    if "bootstrap" not in options:
        raise _fail("bootstrap", f"Option 'bootstrap' must be specified: {_BOOTSTRAP_HELP}")
    try:
        return parse_bootstrap(options["bootstrap"])
    except InvalidConfigError as exc:
        raise _fail(
            "bootstrap", f"option 'bootstrap': {exc.message.removeprefix('bootstrap_servers: ')}"
        ) from None


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


# -- the source ------------------------------------------------------------------------------


def parse_source_options(raw: Mapping[str, str]) -> SourceOptions:
    """Every check that holds for batch and streaming reads alike (run at load())."""
    _reject_unknown(raw, SOURCE_OPTIONS, "source")
    options = lower_keys(raw)
    bootstrap = _bootstrap(options)
    subscription = _subscription(options)
    starting = _offset_spec(
        options, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets"
    )
    ending = _offset_spec(options, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _fail(
            "startingOffsetsByTimestampStrategy",
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got "
            f"{options['startingoffsetsbytimestampstrategy']!r}",
        )

    def optional_long(name: str, minimum: int) -> int | None:
        low = name.lower()
        return parse_long(name, options[low], minimum=minimum) if low in options else None

    min_offsets = optional_long("minOffsetsPerTrigger", 1)
    max_offsets = optional_long("maxOffsetsPerTrigger", 1)
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise _fail(
            "minOffsetsPerTrigger",
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
            f"maxOffsetsPerTrigger({max_offsets}).",
        )
    delay = DEFAULT_MAX_TRIGGER_DELAY_MS
    if "maxtriggerdelay" in options:
        delay = parse_duration_ms("maxTriggerDelay", options["maxtriggerdelay"])

    def long_or(name: str, default: int) -> int:
        value = optional_long(name, 1)
        return default if value is None else value

    return SourceOptions(
        bootstrap=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_no_match="latest" if strategy == "latest" else "error",
        fail_on_data_loss=parse_bool("failOnDataLoss", options.get("failondataloss", "true")),
        min_partitions=optional_long("minPartitions", 1),
        max_records_per_partition=optional_long("maxRecordsPerPartition", 1),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=delay,
        include_headers=parse_bool("includeHeaders", options.get("includeheaders", "false")),
        poll_timeout_ms=long_or("kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS),
        fetch_max_bytes=long_or("fetchMaxBytes", DEFAULT_FETCH_MAX_BYTES),
        fetch_max_decompressed_bytes=long_or(
            "fetchMaxDecompressedBytes", DEFAULT_FETCH_MAX_DECOMPRESSED_BYTES
        ),
        request_timeout_ms=long_or("requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS),
        offset_lookup_timeout_ms=long_or("offsetLookupTimeoutMs", DEFAULT_OFFSET_LOOKUP_TIMEOUT_MS),
        given=frozenset(options),
        security=client_security(options),
    )


def _refuse_in_batch(
    spec: OffsetSpec | None, refused: Literal["earliest", "latest"], what: str, what_tp: str
) -> None:
    """A batch read cannot start at latest or end at earliest, given by name or as -1 / -2
    in the JSON (Spark's messages, with lograft for Kafka)."""
    if spec is None:
        return
    if spec.kind == refused:
        raise _fail(spec.option, f"{what} can't be {refused} for batch queries on lograft")
    special = LATEST if refused == "latest" else EARLIEST
    if spec.kind == "offsets":
        for tp, off in spec.offsets:
            if off == special:
                raise _fail(
                    spec.option,
                    f"{what_tp.format(tp=tp)} can't be {refused} for batch queries on lograft",
                )


def check_batch_options(opts: SourceOptions) -> None:
    """The rules of a batch read (spark.read), Kafka's validateBatchOptions."""
    start, end = opts.starting, opts.ending
    _refuse_in_batch(start, "latest", "starting offset", "startingOffsets for {tp}")
    _refuse_in_batch(end, "earliest", "ending offset", "ending offset for {tp}")
    # Per-partition offsets (or timestamps) at both ends: Kafka's checkOffsetLimitValidity.
    if start is None or end is None or start.kind != end.kind:
        return
    if start.kind not in ("offsets", "timestamps"):
        return
    starts, ends = start.per_partition(), end.per_partition()
    if set(starts) != set(ends):
        raise _fail(
            end.option,
            f"{start.option} and {end.option} must name the same partitions: "
            f"{sorted(map(str, starts))} vs {sorted(map(str, ends))}",
        )
    for tp, s in starts.items():
        e = ends[tp]
        if s >= 0 and e >= 0 and s > e:
            raise _fail(
                end.option, f"{start.option} for {tp} ({s}) is after {end.option} for it ({e})"
            )


def check_stream_options(opts: SourceOptions) -> None:
    """The rules of a streaming read (spark.readStream), Kafka's validateStreamOptions."""
    if opts.ending is not None:
        kind = "timestamp" if opts.ending.kind in ("timestamp", "timestamps") else "offset"
        raise _fail(opts.ending.option, f"ending {kind} not valid in streaming queries")


# -- the sink --------------------------------------------------------------------------------


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Options of `df.write` / `writeStream`: bootstrap, topic, acks and the
    producer's batching limits. The producer checks the values themselves."""
    _reject_unknown(
        {k: v for k, v in raw.items() if k.lower() not in _SPARK_SINK_OPTIONS}, SINK_OPTIONS, "sink"
    )
    options = lower_keys(raw)
    bootstrap = _bootstrap(options)
    topic = options["topic"].strip() if "topic" in options else None
    if topic == "":
        raise _fail("topic", "option 'topic' is empty; give a topic name or leave it out")
    settings: list[tuple[str, Any]] = []
    for name, setting in SINK_PRODUCER_OPTIONS.items():
        if name.lower() not in options:
            continue
        value: Any = options[name.lower()].strip()
        if setting not in ("acks", "compression_type"):
            value = parse_long(name, value, minimum=0)
        settings.append((setting, value))
    return SinkOptions(bootstrap, topic, tuple(settings), client_security(options))


def client_security(options: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """The client settings of the TLS and credential options given (lower-case keys)."""
    return tuple(
        (setting, options[name.lower()])
        for name, setting in CLIENT_SECURITY_OPTIONS.items()
        if name.lower() in options
    )


def sink_option_name(setting: str) -> str:
    """The sink option that sets a Producer setting (for messages)."""
    for name, producer_setting in (
        *SINK_PRODUCER_OPTIONS.items(),
        *CLIENT_SECURITY_OPTIONS.items(),
    ):
        if producer_setting == setting:
            return name
    return setting
