"""A model of a group's clients against the coordinator, for property tests.

Each simulated client keeps what a real consumer keeps: its member id and
epoch, the partitions it HOLDS (is consuming), and the partitions the
coordinator asked it to give up that it has not given up yet. The adversarial
parts are generated: when clients heartbeat, how long they take to give up
revoked partitions (bounded by `release_delay_ms_max`, as a consumer finishes
its current batch), lost heartbeat responses, heartbeats delayed in flight and delivered
later (after newer ones: delayed duplicates), crashes, leaves, clock jumps
past session timeouts, topics growing, subscriptions changing, and
coordinator failovers (with and without compaction of the log).

Client rules, as the lograft client will follow them:

- it adds the partitions of a response's assignment at once, and gives up the
  ones the response no longer lists within `release_delay_ms_max`; its
  heartbeats report the partitions it holds;
- on UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH it drops everything and joins
  again with epoch 0;
- when its last successful heartbeat is older than the session timeout it
  drops everything (the coordinator has removed it, or will now) and joins
  again;
- every request carries the next value of its sequence counter
  (`use_sequence`), so the coordinator can refuse delayed duplicates.

`check_safety` is the property: no partition is held by two live clients, and
every partition a client holds is owned by that member in the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.state import GroupState
from lograft.errors import (
    FencedMemberEpochError,
    OutOfOrderHeartbeatError,
    UnknownMemberIdError,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.group_harness import Coordinator

GROUP = "g"


@dataclass
class Client:
    member_id: str
    subscription: tuple[str, ...]
    assignor: str | None = None
    epoch: int = 0
    alive: bool = True
    held: set[TopicPartition] = field(default_factory=set)
    # partition -> when this client learned it must give it up, ms
    revoking: dict[TopicPartition, int] = field(default_factory=dict)
    last_ok_ms: int = 0
    subscription_changed: bool = False
    # The assignment of the last response received.
    assignment: frozenset[TopicPartition] = frozenset()
    sequence: int = 0

    def drop_all(self) -> None:
        self.held.clear()
        self.revoking.clear()
        self.assignment = frozenset()
        self.epoch = 0


class Simulation:
    def __init__(
        self,
        topics: dict[str, int],
        config: GroupCoordinatorConfig | None = None,
        release_delay_ms_max: int = 3_000,
        use_sequence: bool = True,
    ) -> None:
        self.config = config or GroupCoordinatorConfig()
        # Safety needs a member that never gives up revoked partitions to be
        # fenced only after it has fenced itself: see check in __init__.
        assert self.config.rebalance_timeout_ms > (
            2 * self.config.session_timeout_ms + release_delay_ms_max
        )
        self.coordinator = Coordinator(self.config, topics)
        self.release_delay_ms_max = release_delay_ms_max
        self.clients: list[Client] = []
        self.now_ms = 0
        self.next_id = 0
        self.use_sequence = use_sequence
        # Requests sent but not delivered yet; the client gave up on them.
        self.in_flight: list[tuple[Client, dict[str, Any]]] = []

    # --- operations ---------------------------------------------------------------

    def add_client(self, subscription: tuple[str, ...], assignor: str | None = None) -> Client:
        client = Client(f"m{self.next_id}", subscription, assignor, last_ok_ms=self.now_ms)
        self.next_id += 1
        self.clients.append(client)
        return client

    def live(self) -> list[Client]:
        return [c for c in self.clients if c.alive]

    def _request(self, client: Client) -> dict[str, Any]:
        client.sequence += 1
        request: dict[str, Any] = {
            "group_id": GROUP,
            "member_id": client.member_id,
            "member_epoch": client.epoch,
            "now_ms": self.now_ms,
            "sequence": client.sequence if self.use_sequence else None,
        }
        if client.epoch == 0:
            assert not client.held
            request["subscribed_topics"] = client.subscription
            request["assignor"] = client.assignor
        else:
            request["owned"] = frozenset(client.held)
            if client.subscription_changed:
                request["subscribed_topics"] = client.subscription
        return request

    def heartbeat(self, client: Client, lose_response: bool = False) -> None:
        if not client.alive:
            return
        try:
            response = self.coordinator.heartbeat(**self._request(client))
        except (UnknownMemberIdError, FencedMemberEpochError):
            if not lose_response:
                client.drop_all()
            return
        if lose_response:
            return
        client.subscription_changed = False
        client.epoch = response.member_epoch
        client.last_ok_ms = self.now_ms
        client.assignment = response.assignment
        for tp in client.held - response.assignment:
            client.revoking.setdefault(tp, self.now_ms)
        for tp in response.assignment:
            client.held.add(tp)
            client.revoking.pop(tp, None)

    def delay(self, client: Client) -> None:
        """The client sends a heartbeat that gets stuck in flight; it times out
        and the client carries on as if it was lost."""
        if client.alive:
            self.in_flight.append((client, self._request(client)))

    def deliver(self, index: int) -> str | None:
        """A stuck request reaches the coordinator now; nobody reads the answer.
        Returns the error code it got, if any."""
        if not self.in_flight:
            return None
        _, request = self.in_flight.pop(index % len(self.in_flight))
        request["now_ms"] = self.now_ms
        try:
            self.coordinator.heartbeat(**request)
        except (UnknownMemberIdError, FencedMemberEpochError, OutOfOrderHeartbeatError) as e:
            return e.code
        return None

    def release(self, client: Client, count: int) -> None:
        for tp in sorted(client.revoking, key=lambda t: (t.topic, t.partition))[:count]:
            del client.revoking[tp]
            client.held.discard(tp)

    def leave(self, client: Client) -> None:
        if not client.alive:
            return
        client.drop_all()
        client.alive = False
        self.coordinator.leave(GROUP, client.member_id, self.now_ms)

    def crash(self, client: Client) -> None:
        client.drop_all()
        client.alive = False

    def change_subscription(self, client: Client, subscription: tuple[str, ...]) -> None:
        if client.alive and subscription != client.subscription:
            client.subscription = subscription
            client.subscription_changed = client.epoch != 0

    def grow(self, topic: str) -> None:
        self.coordinator.topics[topic] = self.coordinator.topics.get(topic, 0) + 1

    def tick(self, ms: int) -> None:
        self.now_ms += ms
        for client in self.live():
            for tp, since in list(client.revoking.items()):
                if self.now_ms - since >= self.release_delay_ms_max:
                    del client.revoking[tp]
                    client.held.discard(tp)
            if (
                client.epoch != 0
                and self.now_ms > client.last_ok_ms + self.config.session_timeout_ms
            ):
                client.drop_all()
        self.coordinator.expire(GROUP, self.now_ms)

    def failover(self, compacted: bool, drop_tombstones: bool) -> None:
        # Requests in flight to the old coordinator are refused there
        # (NOT_COORDINATOR); they never reach the new one.
        self.in_flight.clear()
        self.coordinator.failover(self.now_ms, compacted=compacted, drop_tombstones=drop_tombstones)

    # --- properties ---------------------------------------------------------------

    def check_safety(self) -> None:
        holder: dict[TopicPartition, str] = {}
        group = self.coordinator.state.group(GROUP)
        for client in self.live():
            assert client.assignment <= client.held
            for tp in client.held:
                assert tp not in holder, f"{tp} held by {holder[tp]} and {client.member_id}"
                holder[tp] = client.member_id
                assert group is not None
                assert group.owner_of(tp) == client.member_id, (
                    f"{client.member_id} holds {tp}, coordinator says {group.owner_of(tp)}"
                )

    def settle(self, rounds: int = 20) -> None:
        """No more faults: every live client heartbeats each second and gives up
        revoked partitions at once, long enough for dead members to expire."""
        for _ in range(rounds):
            self.tick(self.config.group_heartbeat_interval_ms)
            for client in self.live():
                self.release(client, len(client.revoking))
                self.heartbeat(client)
                self.check_safety()

    def check_converged(self) -> None:
        """Every partition of a subscribed topic is held by exactly one live
        client subscribed to it, which is what the coordinator says."""
        group = self.coordinator.state.group(GROUP)
        live = self.live()
        if not live:
            assert group is None or not group.members
            return
        assert group is not None
        assert set(group.members) == {c.member_id for c in live}
        assert group.state() is GroupState.STABLE, group.state()
        held_by: dict[TopicPartition, Client] = {}
        for client in live:
            assert not client.revoking
            assert client.held == set(group.current_of(client.member_id).assigned)
            for tp in client.held:
                held_by[tp] = client
        topics = self.coordinator.topics
        subscribed = {t for c in live for t in c.subscription if topics.get(t, 0) > 0}
        expected = {TopicPartition(t, p) for t in subscribed for p in range(topics[t])}
        assert set(held_by) == expected
        for tp, client in held_by.items():
            assert tp.topic in client.subscription
