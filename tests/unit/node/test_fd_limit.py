"""The node raises its open-files soft limit to what its settings need, up to the hard limit."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from lograft.node.fd_limit import ensure_fd_limit


@pytest.fixture
def low_soft_limit() -> Iterator[tuple[int, int]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-files limit ({hard}) leaves no room to test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        yield 1024, hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_raises_the_soft_limit_to_what_is_needed(low_soft_limit: tuple[int, int]) -> None:
    assert ensure_fd_limit(2000) == 2000
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (2000, low_soft_limit[1])
    assert ensure_fd_limit(1500) == 2000  # never lowered


def test_warns_when_the_hard_limit_is_too_low(
    low_soft_limit: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, hard = low_soft_limit
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard open-files limit")
    assert ensure_fd_limit(hard + 1) == hard
    assert any(
        r.levelno == logging.WARNING and "connections_max" in r.getMessage() for r in caplog.records
    )
