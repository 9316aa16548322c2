"""Exponential backoff with jitter, as Kafka's `ExponentialBackoff`.

`backoff_ms(attempt)` for attempt 1, 2, 3, ... is `base_ms * 2**(attempt-1)`,
capped at `max_ms`, then scaled by a random factor in [1 - jitter, 1 + jitter]
so that many clients retrying at once spread out. Pure: the random source is
passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_ms(
    attempt: int,
    base_ms: float,
    max_ms: float,
    *,
    jitter: float = 0.2,
    rand: Callable[[], float] = random.random,
) -> float:
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    # min() before the power would overflow for very large attempt numbers.
    exp = min(attempt - 1, 62)
    raw = min(float(max_ms), float(base_ms) * (2**exp))
    return raw * (1.0 - jitter + 2.0 * jitter * rand())
