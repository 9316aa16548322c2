"""Failed authentications, logged without letting a caller flood the log.

Every refused credential (a bad token, a wrong password, no cluster secret on
an internal endpoint) is one event of a (reason, peer address) pair. The
first event of a pair is logged at WARNING with the principal when it is
known (a Basic user name; never from an unverified token), the reason, the
peer address, the client id and the refusal's message (which never holds a
secret: `lograft.security.failures`); further events of the same pair within
`[security] auth_failure_log_interval_ms` are only counted, and the count is
reported on the pair's next line (or on a line of its own when the pair is
dropped from the table).

The table of pairs is bounded (`AUTH_FAILURE_PEERS_MAX`): a caller rotating
its address cannot grow it. Once full, pairs whose interval has passed are
dropped first; a new pair that still finds no room is counted under
(reason, "other peers"), one entry per reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from lograft.api.client_faults import quote

__all__ = ["AUTH_FAILURE_PEERS_MAX", "OTHER_PEERS", "AuthFailureLog", "auth_logger"]

# Most (reason, peer) pairs whose interval is tracked at once.
AUTH_FAILURE_PEERS_MAX = 1024
# The peer of events counted together once the table is full.
OTHER_PEERS = "other peers"

auth_logger = logging.getLogger("lograft.api.authentication")


@dataclass(slots=True)
class _Pair:
    logged_at: float
    suppressed: int = 0


class AuthFailureLog:
    """One WARNING line per (reason, peer) per interval, counting the rest."""

    def __init__(
        self,
        interval_ms: int = 10_000,
        *,
        peers_max: int = AUTH_FAILURE_PEERS_MAX,
        logger: logging.Logger = auth_logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_ms / 1000
        self.peers_max = peers_max
        self.logger = logger
        self._clock = clock
        self._pairs: dict[tuple[str, str], _Pair] = {}
        # Every failure seen, per reason, logged or not (tests and metrics).
        self.counts: dict[str, int] = {}

    def failure(
        self,
        reason: str,
        peer: str,
        message: str,
        *,
        principal: str | None = None,
        client_id: str = "",
        where: str = "",
    ) -> None:
        """One refused credential from `peer` for `reason`; `message` is the
        refusal's safe text, `where` the method and path."""
        self.counts[reason] = self.counts.get(reason, 0) + 1
        now = self._clock()
        key = (reason, peer)
        pair = self._pairs.get(key)
        if pair is None and len(self._pairs) >= self.peers_max:
            self._expire(now)
            if len(self._pairs) >= self.peers_max:
                key = (reason, OTHER_PEERS)
                pair = self._pairs.get(key)
        if pair is not None and now - pair.logged_at < self.interval_s:
            pair.suppressed += 1
            return
        suppressed = 0 if pair is None else pair.suppressed
        self._pairs[key] = _Pair(now)
        self.logger.warning(
            "authentication failed: reason=%s principal=%s peer=%s client_id=%s %s: %s%s",
            reason,
            quote(principal) if principal else "-",
            key[1],
            quote(client_id) if client_id else "-",
            quote(where) if where else "-",
            quote(message),
            f" (and {suppressed} more since the last such line)" if suppressed else "",
        )

    def _expire(self, now: float) -> None:
        """Drop the pairs whose interval has passed, reporting what they counted."""
        for key, pair in list(self._pairs.items()):
            if now - pair.logged_at < self.interval_s:
                continue
            del self._pairs[key]
            if pair.suppressed:
                self.logger.warning(
                    "authentication failed: reason=%s peer=%s: %d more since the last such line",
                    key[0],
                    key[1],
                    pair.suppressed,
                )
