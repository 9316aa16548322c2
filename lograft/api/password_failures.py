"""Failed password checks per peer address: a budget spent before hashing.

Every uncached HTTP Basic check costs the node a PBKDF2 (api/password_checks.py),
and a wrong password costs the same as a right one. Without a bound on
failures, one address could guess passwords as fast as the node hashes
(~100-200 tries a second measured, half a core) and make every uncached
password user wait in the same queue.

Each peer address (`Caller.host`: the TCP peer, never a forwarded-for
header) has a token bucket of `[security] password_failures_per_address_max`
failures, refilled at that many per `password_failure_window_ms`. A check
about to hash takes one token first (so concurrent checks from one address
cannot overrun the budget while they wait for the hasher) and gets it back
when the password turns out right; a wrong password or an unknown user keeps
it. An address with no token left is refused at once, without hashing:
`AuthenticationFailed(TOO_MANY_FAILURES)` with the milliseconds until a token
is back. A refused attempt takes nothing, so an address that stops is free
again after the time it is told.

What the budget never blocks: a password in the verified cache (checked
before the budget), bearer tokens and client certificates (never hashed), so
an attacker sharing an address (a NAT, a proxy) cannot lock out a user who
has already logged in. There is no per-user budget on purpose: anyone could
spend a user's budget from anywhere and lock that user out, which this one
must not allow (Kafka has neither).

The table is bounded (`password_failure_addresses_max`): beyond it the
address that failed least recently is forgotten (LRU), so a caller rotating
addresses cannot grow it; forgetting only ever frees an address early.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from lograft.security.failures import AuthenticationFailed, AuthFailure

__all__ = ["PasswordFailureBudget"]

# Float slack, so a caller that waited exactly the time it was told is let in.
_ROUNDING = 1e-9


@dataclass(slots=True)
class _Spent:
    """Tokens an address has spent (failures and checks still running) as of `at`."""

    tokens: float
    at: float


class PasswordFailureBudget:
    """Per-address failed-password budgets; see the module's doc."""

    def __init__(
        self,
        failures_max: int,
        window_ms: int,
        addresses_max: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`failures_max` 0: no budget (every check hashes)."""
        self.failures_max = failures_max
        # Tokens back per second.
        self._refill_per_s = failures_max / (window_ms / 1000)
        self.addresses_max = addresses_max
        self._clock = clock
        self._spent: OrderedDict[str, _Spent] = OrderedDict()
        # Checks refused without hashing (tests and metrics).
        self.refused = 0

    def __len__(self) -> int:
        return len(self._spent)

    def take(self, host: str) -> None:
        """Spend one of `host`'s tokens for a check about to hash, or raise
        `AuthenticationFailed(TOO_MANY_FAILURES)` when it has none left."""
        if self.failures_max == 0:
            return
        now = self._clock()
        spent = self._current(host, now)
        if spent + 1 > self.failures_max + _ROUNDING:
            self.refused += 1
            wait_ms = max(1, math.ceil((spent + 1 - self.failures_max) / self._refill_per_s * 1000))
            raise AuthenticationFailed(
                AuthFailure.TOO_MANY_FAILURES,
                "too many failed password checks from this address; try again in "
                f"{math.ceil(wait_ms / 1000)} s",
                retry_after_ms=wait_ms,
            )
        self._spent[host] = _Spent(spent + 1, now)
        self._spent.move_to_end(host)
        while len(self._spent) > self.addresses_max:
            self._spent.popitem(last=False)

    def give_back(self, host: str) -> None:
        """The check `take` was for passed: its token is `host`'s again."""
        if self.failures_max == 0 or host not in self._spent:
            return  # forgotten meanwhile: nothing to give back
        now = self._clock()
        self._spent[host] = _Spent(max(0.0, self._current(host, now) - 1), now)

    def spent(self, host: str) -> float:
        """`host`'s tokens spent now (failures not yet forgotten and checks running)."""
        return self._current(host, self._clock())

    def _current(self, host: str, now: float) -> float:
        entry = self._spent.get(host)
        if entry is None:
            return 0.0
        return max(0.0, entry.tokens - (now - entry.at) * self._refill_per_s)
