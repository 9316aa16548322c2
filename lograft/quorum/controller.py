"""The active controller's decisions, in one import: pure handlers over the image.

Contract for the runtime that drives these (the Raft leader's event loop):

- Call a handler with the current image (every batch this controller proposed
  already applied), the soft state, and `now_ms` from a monotonic clock.
- Append `result.records` as one batch, wait until it is committed and applied
  to the image, then answer with `result.response`.
- Handle one request at a time per image: a handler decides against the image
  it is given, so a second decision taken before the first one's batch has
  applied could contradict it (replay would then refuse the batch, on every
  node). Serialising handler + append + apply is what makes the records valid.
- Keep `result.sessions` when it is not None; on becoming the active controller
  start from `sessions_after_failover(image, now_ms, last_contact_ms)` (the
  former Raft leader's broker dated from its last Raft message).
- Periodically: `fence_expired_brokers` and `elect_after_report_wait` every
  `fence_check_interval_ms`, `balance_preferred_leaders` every
  `leader_imbalance_check_interval_ms` and when `BalanceSchedule` says a
  metadata change brought it forward.
"""

from __future__ import annotations

from lograft.quorum.alter_partition import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    alter_partition,
    alter_partitions,
)
from lograft.quorum.broker_lifecycle import (
    HeartbeatRequest,
    HeartbeatResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    broker_heartbeat,
    fence_expired_brokers,
    register_broker,
    unregister_broker,
)
from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.leader_balance import balance_preferred_leaders
from lograft.quorum.producer_ids import ProducerIdBlock, allocate_producer_ids
from lograft.quorum.result import ControllerResult
from lograft.quorum.security_changes import (
    CreatedAcls,
    alter_client_quotas,
    create_acls,
    delete_acls,
    delete_scram_credential,
    upsert_scram_credential,
)
from lograft.quorum.sessions import BrokerSessions, sessions_after_failover
from lograft.quorum.topics import (
    CreatePartitionsResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    create_partitions,
    create_topic,
    delete_topic,
)
from lograft.quorum.unclean_recovery import elect_after_report_wait

__all__ = [
    "AlterConfigRequest",
    "AlterPartitionItem",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterPartitionsRequest",
    "AlterPartitionsResponse",
    "BrokerSessions",
    "ControllerConfig",
    "ControllerResult",
    "CreatePartitionsResponse",
    "CreateTopicRequest",
    "CreateTopicResponse",
    "CreatedAcls",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "ProducerIdBlock",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "allocate_producer_ids",
    "alter_client_quotas",
    "alter_config",
    "alter_partition",
    "alter_partitions",
    "balance_preferred_leaders",
    "broker_heartbeat",
    "create_acls",
    "create_partitions",
    "create_topic",
    "delete_acls",
    "delete_scram_credential",
    "delete_topic",
    "elect_after_report_wait",
    "fence_expired_brokers",
    "register_broker",
    "sessions_after_failover",
    "unregister_broker",
    "upsert_scram_credential",
]
