"""Client values echoed in errors are cut short (issue 9: a refused config
echoed all 5,000 digits of its value)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from lograft.api.group_json import parse_body
from lograft.api.request_shapes import AddPartitions
from lograft.api.topic_configs import validate_topic_configs
from lograft.echo import ECHO_CHARS_MAX, clip, shown
from lograft.errors import InvalidConfigError, InvalidRequestError
from lograft.quorum.configs import validate_config_entry
from lograft.quorum.controller_config import ControllerConfig
from lograft.storage.config import log_config

# An error answer's message and details stay this short whatever was sent.
ANSWER_CHARS_MAX = 600
HUGE = "9" * 5000


def _size(exc: Any) -> int:
    return len(exc.message) + len(repr(exc.details))


def test_shown_and_clip_cut_long_values() -> None:
    assert shown("ab") == "'ab'"
    assert shown(HUGE).endswith("… (5000 characters)") and len(shown(HUGE)) < 100
    assert shown(10**5000) == "<an integer of 16610 bits>"
    assert len(shown(["x" * 1000] * 1000)) < 200
    assert clip("k" * 10) == "k" * 10
    assert clip("k" * 1000) == "k" * ECHO_CHARS_MAX + "…"


@pytest.mark.parametrize(
    "configs",
    [
        {"retention_ms": HUGE},
        {"retention_ms": "x" + HUGE},
        {"cleanup_policy": HUGE},
        {"min_insync_replicas": HUGE},
        {"unclean_leader_election": HUGE},
        {"k" * 5000: "1"},
    ],
)
def test_a_refused_topic_config_does_not_echo_its_value_whole(configs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError) as refused:
        validate_topic_configs(configs, 3)
    assert _size(refused.value) < ANSWER_CHARS_MAX


def test_log_and_controller_config_errors_are_short() -> None:
    with pytest.raises(InvalidConfigError) as refused:
        log_config({"x" * 5000: 1})
    assert _size(refused.value) < ANSWER_CHARS_MAX
    with pytest.raises(InvalidConfigError) as refused:
        validate_config_entry("bad key " * 1000, "1", ControllerConfig())
    assert _size(refused.value) < ANSWER_CHARS_MAX


class _Request:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def read(self) -> bytes:
        return self.body


async def test_unknown_fields_are_not_all_listed() -> None:
    body = orjson.dumps({f"field{i}": 1 for i in range(100_000)})
    with pytest.raises(InvalidRequestError) as refused:
        await parse_body(_Request(body), AddPartitions)  # type: ignore[arg-type]
    assert _size(refused.value) < ANSWER_CHARS_MAX
