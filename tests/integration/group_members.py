"""A consumer group member driven over the HTTP API, for integration tests.

It follows the protocol of docs/api.md ("Consumer groups") the way a client
must: it looks the coordinator up (any node), follows NOT_COORDINATOR and
retries retriable errors on the next round, sends a strictly increasing
`sequence`, gives up revoked partitions at once (its next heartbeat lists only
its latest assignment), and joins again after UNKNOWN_MEMBER_ID or
FENCED_MEMBER_EPOCH.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from tests.integration.cluster_harness import LograftCluster, Response, http_request

Owned = frozenset[tuple[str, int]]

REJOIN_CODES = {"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"}


def owned_json(owned: Owned) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(owned):
        out.setdefault(topic, []).append(partition)
    return out


def owned_from(assignment: dict[str, list[int]]) -> Owned:
    return frozenset((t, p) for t, ps in assignment.items() for p in ps)


def group_path(group: str, suffix: str = "") -> str:
    return f"/v1/groups/{urllib.parse.quote(group, safe='')}{suffix}"


def coordinator_url(cluster: LograftCluster, group: str) -> str:
    """Ask any running node; raises AssertionError while none can say."""
    errors = []
    for node in cluster.running():
        try:
            resp = node.get(group_path(group, "/coordinator"))
        except OSError as exc:
            errors.append(repr(exc))
            continue
        if resp.status == 200:
            return str(resp.json()["coordinator_url"])
        errors.append(repr(resp))
    raise AssertionError(f"no coordinator for {group}: {errors}")


@dataclass
class Member:
    cluster: LograftCluster
    group: str
    member_id: str
    topics: tuple[str, ...]
    epoch: int = 0
    owned: Owned = frozenset()
    sequence: int = 0
    url: str | None = None
    # time.monotonic() when the last answered join or heartbeat was sent: the
    # coordinator renewed the session no earlier than this.
    last_answered_sent_at: float = 0.0
    # Error codes seen, for a failing test's message.
    errors: list[str] = field(default_factory=list)

    def _request(self, method: str, suffix: str, body: Any = None) -> Response | None:
        """One request to the coordinator; None when it must be looked up again."""
        if self.url is None:
            try:
                self.url = coordinator_url(self.cluster, self.group)
            except AssertionError as exc:
                self.errors.append(str(exc))
                return None
        try:
            resp = http_request(method, self.url + group_path(self.group, suffix), body)
        except OSError as exc:  # the coordinator's node is down
            self.errors.append(repr(exc))
            self.url = None
            return None
        if resp.status >= 400:
            code = resp.json()["error"]["code"]
            self.errors.append(code)
            if code == "NOT_COORDINATOR":
                self.url = resp.json()["error"]["details"]["coordinator_url"]
                return None
            if resp.json()["error"]["retriable"]:
                return None
        return resp

    def _next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def heartbeat(self) -> bool:
        """Join or heartbeat once; True when the coordinator answered."""
        sent_at = time.monotonic()
        if self.epoch == 0:
            body: dict[str, Any] = {
                "member_id": self.member_id,
                "subscribed_topics": list(self.topics),
                "sequence": self._next_sequence(),
            }
            resp = self._request("POST", "/members", body)
        else:
            body = {
                "member_epoch": self.epoch,
                "owned_partitions": owned_json(self.owned),
                "sequence": self._next_sequence(),
            }
            resp = self._request(
                "POST", f"/members/{urllib.parse.quote(self.member_id, safe='')}/heartbeat", body
            )
        if resp is None:
            return False
        if resp.status >= 400:
            code = resp.json()["error"]["code"]
            if code in REJOIN_CODES:
                self.owned, self.epoch = frozenset(), 0
                return False
            raise AssertionError(f"{self.member_id}: heartbeat refused: {resp}")
        doc = resp.json()
        self.last_answered_sent_at = sent_at
        self.epoch = doc["member_epoch"]
        # Give up what is no longer assigned at once; take up what is.
        self.owned = owned_from(doc["assignment"])
        return True

    def commit(self, offsets: dict[tuple[str, int], int]) -> Response | None:
        body = {
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "offsets": [
                {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())
            ],
        }
        return self._request("POST", "/offsets", body)

    def leave(self) -> Response | None:
        suffix = f"/members/{urllib.parse.quote(self.member_id, safe='')}"
        return self._request("DELETE", f"{suffix}?sequence={self._next_sequence()}")


def assert_disjoint(members: list[Member]) -> None:
    """No partition is held by two members at once."""
    seen: dict[tuple[str, int], str] = {}
    for m in members:
        for tp in m.owned:
            assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id
