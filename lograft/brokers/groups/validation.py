"""Checks of names and ids a group request carries, against the configured limits.

Every string that ends up in a `__consumer_offsets` record is checked here
before a handler builds a record: it must fit its limit (and so an int16
length on the wire).
"""

from __future__ import annotations

from lograft.brokers.groups.config import TOPIC_NAME_CHARS_MAX, GroupCoordinatorConfig
from lograft.errors import (
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidTopicError,
    LograftError,
)
from lograft.protocol.topic_partition import TopicPartition


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def check_group_id(group_id: str, config: GroupCoordinatorConfig) -> None:
    if not group_id:
        raise InvalidGroupIdError("the group id must not be empty")
    if _utf8_len(group_id) > config.group_id_bytes_max:
        raise InvalidGroupIdError(
            f"group id longer than {config.group_id_bytes_max} bytes",
            group_id_bytes_max=config.group_id_bytes_max,
        )
    _check_encodable(group_id, "group id", InvalidGroupIdError)


def check_member_id(member_id: str, config: GroupCoordinatorConfig) -> None:
    if not member_id:
        raise InvalidRequestError("the member id must not be empty")
    if _utf8_len(member_id) > config.member_id_bytes_max:
        raise InvalidRequestError(
            f"member id longer than {config.member_id_bytes_max} bytes",
            member_id_bytes_max=config.member_id_bytes_max,
        )
    _check_encodable(member_id, "member id", InvalidRequestError)


def check_client_string(value: str, what: str, config: GroupCoordinatorConfig) -> None:
    if _utf8_len(value) > config.client_id_bytes_max:
        raise InvalidRequestError(
            f"{what} longer than {config.client_id_bytes_max} bytes",
            client_id_bytes_max=config.client_id_bytes_max,
        )
    _check_encodable(value, what, InvalidRequestError)


def check_topic(topic: str) -> None:
    if not topic or len(topic) > TOPIC_NAME_CHARS_MAX:
        raise InvalidTopicError(
            f"topic name must be 1 to {TOPIC_NAME_CHARS_MAX} characters", topic=topic
        )
    _check_encodable(topic, "topic name", InvalidTopicError)


def check_topic_partition(tp: TopicPartition) -> None:
    check_topic(tp.topic)
    if tp.partition < 0 or tp.partition >= 2**31:
        raise InvalidRequestError(f"invalid partition number {tp.partition}", topic=tp.topic)


def _check_encodable(value: str, what: str, error: type[LograftError]) -> None:
    # A lone surrogate has no UTF-8 form: it could never be written to a record.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} is not valid Unicode") from None
