"""Topic configs checked at the edge: anything a client sends is a 400, never a 500,
and no value reaches the metadata that a replica could not use."""

from __future__ import annotations

import pytest

from lograft.api.topic_configs import validate_topic_configs
from lograft.errors import InvalidConfigError
from lograft.storage.config import INT32_MAX, INT64_MAX


@pytest.mark.parametrize(
    "value",
    # '²' and Arabic-Indic one pass str.isdigit(); int('²') raised ValueError (a 500), and
    # int() of 5,000 digits raises past Python's int-string limit.
    ["²", "\u0661", "9" * 5000, "0", "-1", "1e3", " 1", "", "1.0"],
)
def test_min_insync_replicas_that_is_not_a_plain_count_is_refused(value):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({"min_insync_replicas": value}, 3)
    assert info.value.details["key"] == "min_insync_replicas"


def test_min_insync_replicas_plain_count_is_taken():
    assert validate_topic_configs({"min_insync_replicas": 2}, 3) == {"min_insync_replicas": "2"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Every replica created its index files at this size: EFBIG on each, the
        # partition out of service and /readyz false on every node.
        ("segment_index_bytes", 2**62),
        ("segment_index_bytes", INT32_MAX + 1),
        ("max_message_bytes", INT32_MAX + 1),
        ("index_interval_bytes", INT32_MAX + 1),
        ("retention_ms", INT64_MAX + 1),
        ("segment_ms", str(10**30)),
        ("retention_bytes", str(10**30)),
    ],
)
def test_integer_configs_beyond_kafkas_types_are_refused(key, value):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({key: str(value)})
    assert info.value.details["key"] == key


def test_the_largest_values_of_kafkas_types_are_taken():
    assert validate_topic_configs(
        {"segment_index_bytes": INT32_MAX, "retention_ms": INT64_MAX}
    ) == {"segment_index_bytes": str(INT32_MAX), "retention_ms": str(INT64_MAX)}


@pytest.mark.parametrize(
    "value",
    # int() took each of these as a number (1000, 3, 1): a stored config must
    # be what the client meant, in the one form every broker reads the same.
    ["1_000", " 1000", "1000 ", "+1000", "\u0663", "\uff11", 1.5, True, "1.0", ""],
)
def test_integer_log_configs_are_ascii_digits_only(value):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({"retention_ms": value})
    assert info.value.details["key"] == "retention_ms"


@pytest.mark.parametrize(("key", "value"), [("retention_ms", "-1"), ("retention_ms", 7)])
def test_integer_log_configs_as_digits_or_json_integers_are_taken(key, value):
    assert validate_topic_configs({key: value}) == {key: str(value)}


@pytest.mark.parametrize(
    ("kafka", "ours", "value"),
    [
        ("min.insync.replicas", "min_insync_replicas", "2"),
        ("retention.ms", "retention_ms", "3600000"),
        ("cleanup.policy", "cleanup_policy", "compact"),
        ("message.timestamp.type", "message_timestamp_type", "LogAppendTime"),
        ("unclean.leader.election.enable", "unclean_leader_election", "true"),
    ],
)
def test_kafkas_dotted_names_are_taken_as_ours(kafka, ours, value):
    assert validate_topic_configs({kafka: value}, 3) == {ours: value}


def test_a_kafka_name_is_checked_like_ours():
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({"min.insync.replicas": "4"}, 3)
    assert info.value.details["key"] == "min_insync_replicas"


def test_a_kafka_name_removes_like_ours():
    assert validate_topic_configs({"retention.ms": None}) == {"retention_ms": None}


def test_a_config_in_both_spellings_is_refused():
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({"retention_ms": "1000", "retention.ms": "2000"})
    assert info.value.details["key"] == "retention_ms"
    assert "twice" in str(info.value)


@pytest.mark.parametrize("key", ["retention.mss", "no.such.key", "unclean.leader.election.enabled"])
def test_an_unknown_dotted_key_is_refused_under_its_own_name(key):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({key: "1"})
    assert info.value.details["key"] == key
