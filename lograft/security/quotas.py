"""Kafka-style client quotas: who a quota applies to, how fast a client goes,
and how long it must wait. Pure: time comes from an injected clock.

Followed from Apache Kafka at commit 1eb7644349cb07139d6a3c1ad1986979647cac99
(our own code):

- Entities and precedence: `core/src/main/scala/kafka/server/ClientQuotaManager.scala`
  (`DefaultQuotaCallback.quotaMetricTags` / `quotaLimit`). A quota is set on
  an entity made of a user and/or a client id, each either a name or the
  default. For a request by (user, client id) the first configured entity of
  these eight applies:

      1. user + client id          5. default user + default client id
      2. user + default client id  6. default user
      3. user                      7. client id
      4. default user + client id  8. default client id

  The usage measured against it is shared by the requests its named (or
  defaulted) parts match: a quota on `user=alice` is one budget for all of
  alice's clients; a quota on the default user is one budget per user. The
  user is the principal's name without its type (`alice` for `User:alice`),
  as Kafka's quota user is `KafkaPrincipal.getName`.
- The rate: `clients/.../metrics/stats/Rate.java` over `SampledStat.java`.
  `window_samples` (Kafka's `quota.window.num`, 11) samples of
  `window_size_ms` (`quota.window.size.seconds`, 1 s) each; the rate is the
  total of the retained samples divided by the time since the oldest one
  started; a sample with no event for `window_samples` windows is reset.
  One deliberate difference: while fewer than `rate_span_min_windows` whole
  windows have passed, Kafka counts the span as that many windows plus the
  part of the current one, with `window_samples - 1` (10) of them, so a
  client's first second is not read as an enormous rate. That is a credit of
  ten windows at the quota: a producer at 10x a quota sends ten seconds' worth
  in its first second and again each time that sample leaves the window (a
  simulation of Kafka's rule: 1.10 to 1.27x the quota over 30 s, in bursts).
  lograft counts at least one window (`rate_span_min_windows` = 1): the
  credit is one window and the same producer is held at the quota second by
  second (1.00x over 30 s); the long-run average is the quota either way.
  Set `rate_span_min_windows = window_samples - 1` for Kafka's behaviour.
- The throttle time: `server-common/.../quota/QuotaUtils.throttleTime`: after
  recording a request, if the measured rate is over the quota,
  `(rate - quota) / quota * window`, the time after which the average is back
  at the quota, rounded to milliseconds. Request-percentage quotas are bounded
  by one window (`ClientRequestQuotaManager.maxThrottleTimeMs`). Kafka leaves
  byte-rate throttles unbounded; lograft bounds them by `throttle_max_ms` and
  says when it had to (`Throttle.capped`), so a caller can refuse such a
  request (HTTP 429 with Retry-After) instead of holding it.
- Values: `ClientQuotaControlManager.validateQuotaKeyValue`: a quota is > 0;
  the byte rates are whole numbers (Kafka's LONG), `request_percentage` any
  number (a DOUBLE, where 100 is one thread's worth of time per second).

Not thread-safe: record and configure on one thread (the node's event loop).
Memory is bounded: at most `sensors_max` usage sensors, the least recently used
evicted first, and a sensor idle for `sensor_idle_expiry_ms` is dropped (Kafka
expires idle quota sensors after an hour).
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from lograft import typed
from lograft.errors import InvalidConfigError, InvalidRequestError
from lograft.security.acls import PRINCIPAL_CHARS_MAX, check_printable

__all__ = [
    "CLIENT_ID_CHARS_MAX",
    "PRECEDENCE",
    "QUOTA_VALUE_MAX",
    "USER_CHARS_MAX",
    "ClientQuotas",
    "Part",
    "QuotaConfig",
    "QuotaEntity",
    "QuotaKey",
    "QuotaSetting",
    "Rate",
    "Throttle",
    "parse_quota",
    "parse_quota_config",
    "throttle_time_ms",
]

# A client id is at most 255 bytes in lograft (the group coordinator's
# client_id_bytes_max), so 255 characters bound every real one.
CLIENT_ID_CHARS_MAX = 255
USER_CHARS_MAX = PRINCIPAL_CHARS_MAX
# The largest quota value: Kafka's byte rates are a LONG (2**63 - 1).
QUOTA_VALUE_MAX = float(2**63 - 1)


class QuotaKey(enum.StrEnum):
    """What a quota limits (Kafka's quota config names)."""

    PRODUCER_BYTE_RATE = "producer_byte_rate"  # bytes/s produced
    CONSUMER_BYTE_RATE = "consumer_byte_rate"  # bytes/s fetched
    REQUEST_PERCENTAGE = "request_percentage"  # % of one thread's time per second


_Name = str | None | UnsetType
_User = Annotated[str, msgspec.Meta(min_length=1, max_length=USER_CHARS_MAX)]
_ClientId = Annotated[str, msgspec.Meta(min_length=1, max_length=CLIENT_ID_CHARS_MAX)]


class QuotaEntity(typed.Record):
    """Who a quota is for: a user and/or a client id. A name, None for the
    default (Kafka's null entity name), or absent (not part of the entity).
    JSON: `{"user": "alice"}`, `{"user": null, "client_id": "etl"}`."""

    user: _User | UnsetType | None = UNSET
    client_id: _ClientId | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        if self.user is UNSET and self.client_id is UNSET:
            raise typed.FieldError("user", "an entity names a user, a client_id or both")
        for field in ("user", "client_id"):
            value = getattr(self, field)
            if isinstance(value, str):
                if not value:
                    raise typed.FieldError(field, "must not be empty (null is the default)")
                check_printable(field, value)

    def describe(self) -> str:
        """`user=alice, client_id=<default>` (for messages and logs)."""
        parts = []
        for field in ("user", "client_id"):
            value = getattr(self, field)
            if value is not UNSET:
                parts.append(f"{field}={'<default>' if value is None else value}")
        return ", ".join(parts)


class Part(enum.Enum):
    """One side of an entity shape: the request's own name, the default, or
    not part of the entity."""

    NAME = "name"
    DEFAULT = "default"
    ABSENT = "absent"


# The eight entity shapes, (user part, client id part), in Kafka's precedence.
PRECEDENCE: tuple[tuple[Part, Part], ...] = (
    (Part.NAME, Part.NAME),
    (Part.NAME, Part.DEFAULT),
    (Part.NAME, Part.ABSENT),
    (Part.DEFAULT, Part.NAME),
    (Part.DEFAULT, Part.DEFAULT),
    (Part.DEFAULT, Part.ABSENT),
    (Part.ABSENT, Part.NAME),
    (Part.ABSENT, Part.DEFAULT),
)


def _fill(part: Part, name: str) -> _Name:
    if part is Part.NAME:
        return name
    return None if part is Part.DEFAULT else UNSET


class QuotaSetting(typed.Record):
    """One quota: `entity` may use `value` of `key` (Kafka's ClientQuotaRecord)."""

    entity: QuotaEntity
    key: QuotaKey
    value: Annotated[float, msgspec.Meta(gt=0, le=QUOTA_VALUE_MAX)]

    def __post_init__(self) -> None:
        if not 0 < self.value <= QUOTA_VALUE_MAX:  # also refuses NaN
            raise typed.FieldError("value", f"must be greater than 0, at most {QUOTA_VALUE_MAX}")
        if self.key is not QuotaKey.REQUEST_PERCENTAGE and self.value != int(self.value):
            raise typed.FieldError("value", f"{self.key} is a whole number of bytes per second")


def parse_quota(value: Any, *, where: str = "") -> QuotaSetting:
    """A `QuotaSetting` from decoded JSON, or `InvalidRequestError` naming the
    bad field (message and `field` detail), as Kafka answers INVALID_REQUEST."""
    return typed.build(value, QuotaSetting, error=InvalidRequestError, where=where, detail="field")


class QuotaConfig(typed.Record):
    """How quotas are measured and enforced: the `[quotas]` section."""

    # Kafka's quota.window.num: samples retained.
    window_samples: Annotated[int, msgspec.Meta(ge=2, le=1000)] = 11
    # Kafka's quota.window.size.seconds, in milliseconds: one sample's span.
    window_size_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 1000
    # Whole windows a rate is measured over at least (Kafka: window_samples - 1;
    # see the module doc for why lograft counts one).
    rate_span_min_windows: Annotated[int, msgspec.Meta(ge=1)] = 1
    # The longest byte-rate throttle; a longer one is capped and flagged.
    throttle_max_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 10_000
    # Usage sensors kept at most (one per budget: per user, client id or pair).
    sensors_max: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    # A sensor with no request for this long is dropped (Kafka: one hour).
    sensor_idle_expiry_ms: Annotated[int, msgspec.Meta(ge=1)] = 3_600_000

    def __post_init__(self) -> None:
        if self.rate_span_min_windows >= self.window_samples:
            raise typed.FieldError("rate_span_min_windows", "must be less than window_samples")


def parse_quota_config(value: Any, *, where: str = "quotas") -> QuotaConfig:
    return typed.build(value, QuotaConfig, error=InvalidConfigError, where=where, detail="key")


class Rate:
    """A rate per second over `samples` windows of `window_ms` (Kafka's Rate
    over a SampledTotal; see the module doc). Times are milliseconds."""

    __slots__ = ("_current", "_samples", "min_windows", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: float, min_windows: int = 1) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.min_windows = min_windows
        # [start_ms, last_event_ms, total]; one more than `samples`, as Kafka
        # keeps an extra one for the sample overlapping the window's start.
        self._samples: list[list[float]] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._samples:
            self._samples.append([now_ms, now_ms, 0.0])
        sample = self._samples[self._current]
        if now_ms - sample[0] >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                self._samples.append([now_ms, now_ms, 0.0])
            sample = self._samples[self._current]
            sample[0], sample[1], sample[2] = now_ms, now_ms, 0.0
        sample[1] = now_ms
        sample[2] += value

    def measure(self, now_ms: float) -> float:
        """Units per second now."""
        self._purge(now_ms)
        total = sum(sample[2] for sample in self._samples)
        return total / (self.window(now_ms) / 1000.0)

    def window(self, now_ms: float) -> float:
        """The span, in ms, the rate is measured over now (Rate.windowSize)."""
        self._purge(now_ms)
        oldest = min((sample[0] for sample in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.min_windows:
            elapsed += (self.min_windows - full) * self.window_ms
        return max(elapsed, 1.0)

    def last_event_ms(self) -> float:
        return max((sample[1] for sample in self._samples), default=float("-inf"))

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample[1] >= expire:
                sample[0], sample[1], sample[2] = now_ms, now_ms, 0.0


def throttle_time_ms(rate: float, quota: float, window_ms: float) -> int:
    """How long a client measured at `rate` over `window_ms` must wait for its
    average to come back to `quota` (QuotaUtils.throttleTime); 0 when within."""
    if rate <= quota:
        return 0
    return round((rate - quota) / quota * window_ms)


class Throttle(NamedTuple):
    """The answer to one recorded request."""

    ms: int  # how long to delay the response (and the client its next request)
    capped: bool = False  # the throttle was longer than the maximum (cut to it)
    quota: float | None = None  # the quota that applied, None when none did
    entity: QuotaEntity | None = None  # the entity whose quota applied
    wanted_ms: int = 0  # the throttle before the cap (ms when not capped)


_NO_THROTTLE = Throttle(0)


class ClientQuotas:
    """The quotas of one kind (`key`) and the usage measured against them."""

    def __init__(
        self,
        key: QuotaKey,
        config: QuotaConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key
        self.config = config if config is not None else QuotaConfig()
        self._clock = clock  # seconds, monotonic
        # Keyed by the entity's parts, so a lookup builds no entity (a
        # request's names need not be valid entity names).
        self._quotas: dict[tuple[_Name, _Name], tuple[QuotaEntity, float]] = {}
        self._sensors: OrderedDict[tuple[_Name, _Name], Rate] = OrderedDict()
        window = self.config.window_size_ms
        # Kafka bounds request-time throttles by one window, and lograft byte
        # rates by throttle_max_ms.
        self._throttle_max_ms = (
            min(window, self.config.throttle_max_ms)
            if key is QuotaKey.REQUEST_PERCENTAGE
            else self.config.throttle_max_ms
        )

    # --- configuration ---------------------------------------------------------

    def set(self, entity: QuotaEntity, value: float | None) -> None:
        """Set `entity`'s quota to `value`, or remove it (None)."""
        parts = (entity.user, entity.client_id)
        if value is None:
            self._quotas.pop(parts, None)
        else:
            self._quotas[parts] = (entity, float(value))

    def apply(self, setting: QuotaSetting) -> None:
        if setting.key is self.key:
            self.set(setting.entity, setting.value)

    def quotas(self) -> dict[QuotaEntity, float]:
        return dict(self._quotas.values())

    def resolve(self, user: str, client_id: str) -> tuple[QuotaEntity, float] | None:
        """The entity whose quota applies to (user, client id), with the quota,
        by Kafka's precedence; None when no quota applies. The names are the
        request's, unvalidated (an empty client id is a client id)."""
        if not self._quotas:
            return None
        for user_part, client_part in PRECEDENCE:
            found = self._quotas.get((_fill(user_part, user), _fill(client_part, client_id)))
            if found is not None:
                return found
        return None

    # --- measuring -------------------------------------------------------------

    def record(self, user: str, client_id: str, value: float) -> Throttle:
        """Record `value` (bytes, or for request_percentage see
        `record_request_time`) for a request by (user, client id) and say how
        long to throttle it (Kafka's recordAndGetThrottleTimeMs: the value
        counts even when the request is throttled)."""
        found = self.resolve(user, client_id)
        if found is None:
            return _NO_THROTTLE
        entity, quota = found
        now_ms = self._clock() * 1000.0
        rate = self._sensor(entity, user, client_id, now_ms)
        rate.record(value, now_ms)
        wait = throttle_time_ms(rate.measure(now_ms), quota, rate.window(now_ms))
        if wait > self._throttle_max_ms:
            return Throttle(self._throttle_max_ms, True, quota, entity, wait)
        return Throttle(wait, False, quota, entity, wait)

    def record_request_time(self, user: str, client_id: str, seconds: float) -> Throttle:
        """Record `seconds` of handling time as a request percentage (Kafka's
        nanosToPercentage: 1 s of time per second is 100 %)."""
        return self.record(user, client_id, seconds * 100.0)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded `value` (Kafka's unrecordQuotaSensor), for a
        request refused after all (e.g. answered 429)."""
        found = self.resolve(user, client_id)
        if found is None:
            return
        now_ms = self._clock() * 1000.0
        self._sensor(found[0], user, client_id, now_ms).record(-value, now_ms)

    def rate(self, user: str, client_id: str) -> float:
        """The rate measured now against the quota that applies (0 if none)."""
        found = self.resolve(user, client_id)
        if found is None:
            return 0.0
        key = _sensor_key(found[0], user, client_id)
        sensor = self._sensors.get(key)
        return sensor.measure(self._clock() * 1000.0) if sensor is not None else 0.0

    def sensor_count(self) -> int:
        return len(self._sensors)

    def _sensor(self, entity: QuotaEntity, user: str, client_id: str, now_ms: float) -> Rate:
        key = _sensor_key(entity, user, client_id)
        sensor = self._sensors.get(key)
        if sensor is not None:
            self._sensors.move_to_end(key)
            return sensor
        self._expire(now_ms)
        config = self.config
        sensor = Rate(config.window_samples, config.window_size_ms, config.rate_span_min_windows)
        self._sensors[key] = sensor
        while len(self._sensors) > self.config.sensors_max:
            self._sensors.popitem(last=False)
        return sensor

    def _expire(self, now_ms: float) -> None:
        """Drop sensors idle for sensor_idle_expiry_ms, oldest use first (the
        order is least recently used first, so stop at the first live one)."""
        idle = self.config.sensor_idle_expiry_ms
        while self._sensors:
            key, sensor = next(iter(self._sensors.items()))
            if now_ms - sensor.last_event_ms() < idle:
                return
            del self._sensors[key]


def _sensor_key(entity: QuotaEntity, user: str, client_id: str) -> tuple[_Name, _Name]:
    """The budget a request's usage counts against (Kafka's quota metric
    tags): the request's user when the entity has a user part (named or
    default), its client id when the entity has a client part. An absent part
    is UNSET, not '' as in Kafka, so an empty user or client id (a client
    that sent none) is not confused with "not part of the budget"."""
    return (
        user if entity.user is not UNSET else UNSET,
        client_id if entity.client_id is not UNSET else UNSET,
    )
