from __future__ import annotations

from pathlib import Path

import pytest

from lograft.api.stream.routes import StreamLimits
from lograft.errors import InvalidConfigError
from lograft.node.config import parse_config
from lograft.typed import build


def stream_limits_from_config(raw: object) -> StreamLimits:
    return build(raw, StreamLimits, error=InvalidConfigError, where="stream", detail="key")


def test_empty_section_gives_the_defaults() -> None:
    assert stream_limits_from_config({}) == StreamLimits()


def test_top_level_and_nested_keys_are_applied() -> None:
    limits = stream_limits_from_config(
        {"streams_max": 7, "source": {"fetch_wait_ms": 250}, "group": {"retry_backoff_ms": 50}}
    )
    assert limits.streams_max == 7
    assert limits.source.fetch_wait_ms == 250
    assert limits.group.retry_backoff_ms == 50
    # Untouched keys keep their defaults.
    assert limits.chunk_bytes_max == StreamLimits().chunk_bytes_max
    assert limits.source.retry_timeout_ms == StreamLimits().source.retry_timeout_ms


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"streams_maxx": 1}, "stream.streams_maxx"),
        ({"streams_max": 0}, "stream.streams_max"),
        ({"streams_max": "10"}, "stream.streams_max"),
        ({"streams_max": True}, "stream.streams_max"),
        ({"source": {"nope": 1}}, "stream.source.nope"),
        ({"source": 5}, "stream.source"),
    ],
)
def test_bad_values_name_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(InvalidConfigError) as err:
        stream_limits_from_config(raw)
    assert err.value.details["key"] == key
    assert key in err.value.message


def test_node_config_refuses_a_bad_stream_key(tmp_path: Path) -> None:
    raw = {
        "node_id": 1,
        "data_dir": str(tmp_path),
        "cluster_secret": "unit-test-cluster-secret",
        "voters": [{"id": 1, "raft": "127.0.0.1:19091", "http": "127.0.0.1:9091"}],
        "stream": {"streams_max": -1},
    }
    with pytest.raises(InvalidConfigError) as err:
        parse_config(raw)
    assert err.value.details["key"] == "stream.streams_max"
    assert "stream.streams_max" in err.value.message
    raw["stream"] = {"streams_max": 7, "source": {"fetch_wait_ms": 250}}
    config = parse_config(raw)
    assert (config.stream.streams_max, config.stream.source.fetch_wait_ms) == (7, 250)
