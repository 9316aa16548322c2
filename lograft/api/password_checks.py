"""HTTP Basic passwords checked against the SCRAM credentials in the metadata.

One check is one PBKDF2 (~3 ms for 4096 rounds, `scripts/bench_auth.py`), so
it runs in a thread (`asyncio.to_thread`), at most
`[security] password_checks_inflight_max` at once; the rest wait for a slot.
A request that gives up while its check runs (the client went away) leaves
the check to finish in its slot, so abandoned requests cannot make more
threads hash at once than the bound.

A Basic client sends its password with every request. So that it does not
pay a PBKDF2 each time, a password that verified is remembered in a bounded
LRU table (`[security] password_cache_entries_max`): the key is an HMAC of
user name and password under a random key made when the node starts (never
the password, nor a plain hash of it that could be cracked offline if the
process memory leaked), the value the credential record it verified against.
A hit counts only while the user's current record is still that record: a
changed password (new salt, new keys) or a deleted user misses and is
checked, and so refused, again. Failures are never remembered: an unknown
user and a wrong password cost a full check each time (the same work, so
the timing does not tell which user names exist).

Failures are bounded per peer address instead (api/password_failures.py):
after the cache, before hashing, a check spends one of its address's
`[security] password_failures_per_address_max` tokens, given back when the
password is right; an address with none left is refused at once
(`too_many_failures`) without a PBKDF2. A cached password never reaches the
budget, so a flood from a shared address does not refuse a user who has
logged in.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping

from lograft.api.password_failures import PasswordFailureBudget
from lograft.security.passwords import (
    BasicCredentials,
    ScramCredential,
    ScramMechanism,
    check_password,
)
from lograft.security.principals import user_principal

__all__ = ["CredentialSource", "PasswordChecks", "credential_for"]

# The node's current credentials: user name -> mechanism -> record (the
# metadata image's `scram_credentials`).
CredentialSource = Callable[[], Mapping[str, Mapping[ScramMechanism, ScramCredential]]]

# With records of both mechanisms, the stronger one is checked.
_PREFERENCE = (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)


def credential_for(
    records: Mapping[ScramMechanism, ScramCredential] | None,
) -> ScramCredential | None:
    """The record a password is checked against: SCRAM-SHA-512's when the user has one."""
    if not records:
        return None
    for mechanism in _PREFERENCE:
        found = records.get(mechanism)
        if found is not None:
            return found
    return None


class PasswordChecks:
    """Checks Basic credentials off the event loop, with a verified cache."""

    def __init__(
        self,
        credentials: CredentialSource,
        *,
        inflight_max: int,
        cache_entries_max: int,
        budget: PasswordFailureBudget | None = None,
    ) -> None:
        """`budget`: the per-address failure budget (None: every check hashes)."""
        self._credentials = credentials
        self._budget = budget
        self._inflight_max = inflight_max
        self._slots: asyncio.Semaphore | None = None
        self._cache_entries_max = cache_entries_max
        self._cache: OrderedDict[bytes, ScramCredential] = OrderedDict()
        self._key = os.urandom(32)
        # PBKDF2 checks started and cache hits (tests and metrics).
        self.checks = 0
        self.hits = 0

    @property
    def cached(self) -> int:
        return len(self._cache)

    async def principal(self, basic: BasicCredentials, host: str = "") -> str:
        """`User:<name>` when the password is the user's; else
        `AuthenticationFailed` (BAD_CREDENTIALS, MALFORMED/TOO_LARGE, or
        TOO_MANY_FAILURES when the peer address `host` is over its budget)."""
        credential = credential_for(self._credentials().get(basic.user))
        key = self._cache_key(basic)
        if credential is not None and self._cache.get(key) == credential:
            self._cache.move_to_end(key)
            self.hits += 1
            return user_principal(basic.user, "the Basic user name")
        if self._budget is not None:
            self._budget.take(host)  # raises, before any hashing, when none is left
        await self._check(credential, basic.password, host)
        if credential is not None:  # the check passed: check_password raised otherwise
            self._remember(key, credential)
        return user_principal(basic.user, "the Basic user name")

    def still_current(self, user: str, checked: ScramCredential | None) -> bool:
        """Whether `user`'s credential is still the record a password was
        checked against (False once it changed or the user was removed)."""
        return checked is not None and credential_for(self._credentials().get(user)) == checked

    def checked_against(self, user: str) -> ScramCredential | None:
        """The record a password of `user` is checked against now."""
        return credential_for(self._credentials().get(user))

    def _cache_key(self, basic: BasicCredentials) -> bytes:
        # The user name cannot hold ":" (HTTP Basic), so "user:password" is unambiguous.
        text = f"{basic.user}:{basic.password}".encode("utf-8", "surrogatepass")
        return hmac.digest(self._key, text, hashlib.sha256)

    def _remember(self, key: bytes, credential: ScramCredential) -> None:
        self._cache[key] = credential
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_entries_max:
            self._cache.popitem(last=False)

    async def _check(self, credential: ScramCredential | None, password: str, host: str) -> None:
        if self._slots is None:  # made on the loop that uses it
            self._slots = asyncio.Semaphore(self._inflight_max)
        slots = self._slots
        try:
            await slots.acquire()
        except BaseException:
            # Given up while waiting for a slot (the client went away):
            # nothing was hashed, so nothing failed.
            if self._budget is not None:
                self._budget.give_back(host)
            raise
        self.checks += 1
        try:
            check = asyncio.ensure_future(asyncio.to_thread(check_password, credential, password))
        except BaseException:
            slots.release()
            if self._budget is not None:
                self._budget.give_back(host)
            raise
        # The slot is freed, and the budget settled, when the hashing ends,
        # not when the request does (its client may have gone away).
        check.add_done_callback(lambda done: self._settle(slots, done, host))
        await asyncio.shield(check)

    def _settle(self, slots: asyncio.Semaphore, done: asyncio.Future[None], host: str) -> None:
        slots.release()
        # Retrieved: an abandoned check's refusal is not an error.
        failed = done.cancelled() or done.exception() is not None
        if not failed and self._budget is not None:
            self._budget.give_back(host)  # a right password is no failure
