"""The security metadata records behind tests/fixtures/golden/security_records.jsonl.

The fixture was written once by the codec that introduced these record types
(issue 12); a codec change that stops reading it, or writes these records
differently, fails test_security_records.py. Never regenerate it: a Raft log
or snapshot on disk holds these bytes.
"""

from __future__ import annotations

from lograft.quorum.records import (
    AccessControlEntry,
    ClientQuota,
    QuotaEntityPart,
    QuotaEntityType,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
)
from lograft.security.acls import AclOperation, AclPermission, PatternType, ResourceType
from lograft.security.passwords import ScramMechanism
from lograft.security.quotas import QuotaKey

ACL = AccessControlEntry(
    resource_type=ResourceType.TOPIC,
    resource_name="orders-",
    pattern_type=PatternType.PREFIXED,
    principal="User:alice",
    host="*",
    operation=AclOperation.READ,
    permission=AclPermission.ALLOW,
)
DENY = AccessControlEntry(
    resource_type=ResourceType.CLUSTER,
    resource_name="kafka-cluster",
    pattern_type=PatternType.LITERAL,
    principal="User:bob",
    host="10.0.0.7",
    operation=AclOperation.ALTER_CONFIGS,
    permission=AclPermission.DENY,
)
CREDENTIAL = UserScramCredential(
    name="alice",
    mechanism=ScramMechanism.SCRAM_SHA_256,
    salt=bytes(range(32)),
    iterations=4096,
    stored_key=bytes(range(32, 64)),
    server_key=bytes(range(64, 96)),
)
USER_QUOTA = ClientQuota(
    entity=(QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name="alice"),),
    key=QuotaKey.PRODUCER_BYTE_RATE,
    value=1048576.0,
)
DEFAULT_QUOTA = ClientQuota(
    entity=(
        QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name=None),
        QuotaEntityPart(entity_type=QuotaEntityType.CLIENT_ID, entity_name="etl"),
    ),
    key=QuotaKey.REQUEST_PERCENTAGE,
    value=12.5,
)

# One batch of every security record type; replayable from the empty image.
EVERY_SECURITY_TYPE = [
    ACL,
    DENY,
    CREDENTIAL,
    USER_QUOTA,
    DEFAULT_QUOTA,
    RemoveAccessControlEntry(
        resource_type=DENY.resource_type,
        resource_name=DENY.resource_name,
        pattern_type=DENY.pattern_type,
        principal=DENY.principal,
        host=DENY.host,
        operation=DENY.operation,
        permission=DENY.permission,
    ),
    ClientQuota(entity=USER_QUOTA.entity, key=USER_QUOTA.key, value=0.0, remove=True),
    UserScramCredential(
        name="bob",
        mechanism=ScramMechanism.SCRAM_SHA_512,
        salt=bytes(16),
        iterations=16384,
        stored_key=bytes(64),
        server_key=bytes(range(64)),
    ),
    RemoveUserScramCredential(name="bob", mechanism=ScramMechanism.SCRAM_SHA_512),
]
