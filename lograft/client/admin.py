"""`Admin` / `AsyncAdmin`: the admin API (topics, cluster, consumer groups,
ACLs, users and client quotas).

    with Admin("http://127.0.0.1:9091") as admin:
        admin.create_topic("orders", partitions=3, configs={"retention_ms": "86400000"})
        doc = admin.describe_topic("orders")          # the API's JSON, unchanged
        admin.reset_offsets("billing", {"strategy": "earliest", "topics": ["orders"]})

Every method is one call of the HTTP admin API (docs/api.md) and returns its
JSON answer as it came (a dict), or raises the typed error of an error answer.
This is what `lograft topics|groups|cluster|acls|users|quotas` are built on.

Where a call goes:
- topic, cluster, ACL, user and quota calls and the group list go to any node (the last that
  answered first, then the bootstrap URLs, then known brokers); a node that
  cannot be reached is skipped, and none reachable is ClusterUnreachableError
  naming every URL tried. Changes are forwarded to the active controller by
  the node and answered once committed.
- the other group calls go to the group's coordinator (`coordinator.py`):
  looked up on any node, followed through NOT_COORDINATOR, looked up again
  with backoff while it moves or loads, for at most `default_api_timeout_ms`.
  Other errors (an unknown topic, a group with members) are raised at once.

Changes are never sent twice: a change whose connection broke after it was
sent raises OutcomeUnknownError (it may have taken effect), and a group
change answered REQUEST_TIMED_OUT raises that (look with a describe).

Settings (`AdminConfig`): the common client settings (`request_timeout_ms`
per exchange, `retry_backoff_ms` / `retry_backoff_max_ms`, ...) and
`default_api_timeout_ms` (30 s), the bound of a group call's retries.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from lograft.client.config import CommonConfig, make_config
from lograft.client.coordinator import CoordinatorClient
from lograft.client.errors import ClusterUnreachableError, NetworkError
from lograft.client.loop_thread import LoopThread
from lograft.client.metadata import connect
from lograft.client.transport import Transport
from lograft.errors import LograftError, RequestTimedOutError
from lograft.protocol.group_wire import COORDINATOR_ERRORS, group_path
from lograft.typed import Positive

JSON_HEADERS = {"Content-Type": "application/json"}
# What a group call retries: the coordinator moving or loading, a node out of
# reach, a read that timed out. Any other error (an unknown topic, a group with
# members) is the answer: an admin command should say so at once.
ADMIN_RETRIABLE: tuple[type[LograftError], ...] = (
    *COORDINATOR_ERRORS,
    NetworkError,
    ClusterUnreachableError,
    RequestTimedOutError,
)


class AdminConfig(CommonConfig, kw_only=True):
    # How long a group call keeps retrying while the coordinator moves or loads, ms.
    default_api_timeout_ms: Positive = 30_000


def topic_path(name: str, suffix: str = "") -> str:
    return f"/v1/topics/{urllib.parse.quote(name, safe='')}{suffix}"


def user_path(name: str) -> str:
    return f"/v1/users/{urllib.parse.quote(name, safe='')}"


def acl_path(acl_filter: Mapping[str, str]) -> str:
    return "/v1/acls" + _query_string(acl_filter)


def _query_string(params: Mapping[str, str]) -> str:
    return "?" + urllib.parse.urlencode(dict(params)) if params else ""


class AsyncAdmin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        **settings: Any,
    ) -> None:
        self.config: AdminConfig = make_config(AdminConfig, bootstrap_servers, settings)
        self._transport, self.metadata = connect(self.config, transport)
        self._coordinators: dict[str, CoordinatorClient] = {}

    async def close(self) -> None:
        await self.metadata.close()
        await self._transport.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- any node ---------------------------------------------------------------------------

    async def _any(self, method: str, path: str, body: Any = None) -> Any:
        resp = await self.metadata.request_any(
            method,
            path,
            data=None if body is None else orjson.dumps(body),
            headers=JSON_HEADERS if body is not None else None,
            idempotent=method == "GET",
        )
        return resp.ok_json()

    async def cluster(self) -> Any:
        """`GET /v1/cluster`: the answering node's view of the cluster."""
        return await self._any("GET", "/v1/cluster")

    async def list_topics(self) -> Any:
        return await self._any("GET", "/v1/topics")

    async def describe_topic(self, name: str) -> Any:
        return await self._any("GET", topic_path(name))

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> Any:
        """Server defaults for what is None (1 partition, min(3, brokers) replicas)."""
        body: dict[str, Any] = {"name": name}
        if partitions is not None:
            body["partitions"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = dict(configs)
        return await self._any("POST", "/v1/topics", body)

    async def delete_topic(self, name: str) -> Any:
        return await self._any("DELETE", topic_path(name))

    async def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> Any:
        """Set configs; a None value removes one (back to the cluster default)."""
        return await self._any("PATCH", topic_path(name, "/configs"), {"configs": dict(changes)})

    async def create_partitions(self, name: str, count: int) -> Any:
        """Raise the partition count to `count` (it can only grow)."""
        return await self._any("POST", topic_path(name, "/partitions"), {"partitions": count})

    async def list_groups(self) -> Any:
        """`GET /v1/groups` (the node asks every live broker; see
        `unreachable_brokers` and `loading_partitions` in the answer)."""
        return await self._any("GET", "/v1/groups")

    # -- security metadata: ACLs, users, quotas (any node) ------------------------------------

    async def list_acls(self, **acl_filter: str) -> Any:
        """`GET /v1/acls`: the ACL bindings matching the filter (keyword
        arguments: principal, host, resource_type, resource_name,
        pattern_type literal|prefixed|any|match, operation, permission;
        absent ones match anything)."""
        return await self._any("GET", acl_path(acl_filter))

    async def create_acls(self, acls: Sequence[Mapping[str, str]]) -> Any:
        """`POST /v1/acls`: add bindings (`created` and `existing` in the answer)."""
        return await self._any("POST", "/v1/acls", {"acls": [dict(a) for a in acls]})

    async def delete_acls(self, **acl_filter: str) -> Any:
        """`DELETE /v1/acls`: remove every binding the filter matches (no
        filter: every binding)."""
        return await self._any("DELETE", acl_path(acl_filter))

    async def list_users(self) -> Any:
        """`GET /v1/users`: users and their mechanisms (never a password or key)."""
        return await self._any("GET", "/v1/users")

    async def set_user_password(
        self,
        user: str,
        password: str,
        *,
        mechanism: str | None = None,
        iterations: int | None = None,
    ) -> Any:
        """`PUT /v1/users/{user}`: the node hashes the password (send it over TLS)."""
        body: dict[str, Any] = {"password": password}
        if mechanism is not None:
            body["mechanism"] = mechanism
        if iterations is not None:
            body["iterations"] = iterations
        return await self._any("PUT", user_path(user), body)

    async def delete_user(self, user: str, *, mechanism: str | None = None) -> Any:
        """`DELETE /v1/users/{user}`: one mechanism's credential, or all."""
        query = "" if mechanism is None else "?" + urllib.parse.urlencode({"mechanism": mechanism})
        return await self._any("DELETE", user_path(user) + query)

    async def describe_quotas(
        self, *, user: str | None = None, client_id: str | None = None
    ) -> Any:
        """`GET /v1/quotas`: every entity's quotas, or those naming `user` / `client_id`."""
        query = {k: v for k, v in (("user", user), ("client_id", client_id)) if v is not None}
        return await self._any("GET", "/v1/quotas" + _query_string(query))

    async def alter_quotas(
        self,
        entity: Mapping[str, str | None],
        *,
        values: Mapping[str, float] | None = None,
        remove: Sequence[str] = (),
    ) -> Any:
        """`POST /v1/quotas`: set and remove quotas of one entity
        (`{"user": "alice"}`; a None name is the default user / client id).
        `values` is the body's `set`: {quota key: value}."""
        body = {"entity": dict(entity), "set": dict(values or {}), "remove": list(remove)}
        return await self._any("POST", "/v1/quotas", body)

    # -- a group's coordinator -----------------------------------------------------------------

    def coordinator_url(self, group_id: str) -> str | None:
        """The coordinator the last call for the group went to (None before one)."""
        c = self._coordinators.get(group_id)
        return c.url if c is not None else None

    async def _group(self, group_id: str, method: str, suffix: str = "", body: Any = None) -> Any:
        c = self._coordinators.get(group_id)
        if c is None:
            c = self._coordinators[group_id] = CoordinatorClient(
                group_id, self.config, self.metadata, self._transport
            )
        if c.url is None:
            try:
                await c.lookup()
            except ClusterUnreachableError:
                raise  # no node answers at all: say so now, not after the retries
            except LograftError as exc:
                if not exc.retriable:
                    raise
        return await c.call(
            method,
            group_path(group_id, suffix),
            deadline=asyncio.get_running_loop().time() + self.config.default_api_timeout_ms / 1000,
            body=body,
            idempotent=method == "GET",
            retry_on=ADMIN_RETRIABLE,
        )

    async def describe_group(self, group_id: str) -> Any:
        """State, members, committed offsets and lag (`state: dead` if unknown)."""
        return await self._group(group_id, "GET")

    async def delete_group(self, group_id: str) -> Any:
        """Delete a group without members and its committed offsets."""
        return await self._group(group_id, "DELETE")

    async def reset_offsets(self, group_id: str, request: Mapping[str, Any]) -> Any:
        """`POST /v1/groups/{group}/offsets/reset` with `request` as its body
        (`strategy`, `timestamp` / `offset`, `topics` or `partitions`)."""
        return await self._group(group_id, "POST", "/offsets/reset", dict(request))


class Admin:
    """The synchronous admin client: an `AsyncAdmin` on a loop in a background
    thread; every method runs there and returns its result."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        transport: Transport | None = None,
        **settings: Any,
    ) -> None:
        self._async = AsyncAdmin(bootstrap_servers, transport=transport, **settings)
        self.config = self._async.config
        self._thread = LoopThread("lograft-admin", self.config.event_loop)
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._async.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cluster(self) -> Any:
        return self._thread.run(self._async.cluster())

    def list_topics(self) -> Any:
        return self._thread.run(self._async.list_topics())

    def describe_topic(self, name: str) -> Any:
        return self._thread.run(self._async.describe_topic(name))

    def create_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> Any:
        return self._thread.run(
            self._async.create_topic(
                name, partitions=partitions, replication_factor=replication_factor, configs=configs
            )
        )

    def delete_topic(self, name: str) -> Any:
        return self._thread.run(self._async.delete_topic(name))

    def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> Any:
        return self._thread.run(self._async.alter_topic_configs(name, changes))

    def create_partitions(self, name: str, count: int) -> Any:
        return self._thread.run(self._async.create_partitions(name, count))

    def list_groups(self) -> Any:
        return self._thread.run(self._async.list_groups())

    def list_acls(self, **acl_filter: str) -> Any:
        return self._thread.run(self._async.list_acls(**acl_filter))

    def create_acls(self, acls: Sequence[Mapping[str, str]]) -> Any:
        return self._thread.run(self._async.create_acls(acls))

    def delete_acls(self, **acl_filter: str) -> Any:
        return self._thread.run(self._async.delete_acls(**acl_filter))

    def list_users(self) -> Any:
        return self._thread.run(self._async.list_users())

    def set_user_password(
        self,
        user: str,
        password: str,
        *,
        mechanism: str | None = None,
        iterations: int | None = None,
    ) -> Any:
        return self._thread.run(
            self._async.set_user_password(
                user, password, mechanism=mechanism, iterations=iterations
            )
        )

    def delete_user(self, user: str, *, mechanism: str | None = None) -> Any:
        return self._thread.run(self._async.delete_user(user, mechanism=mechanism))

    def describe_quotas(self, *, user: str | None = None, client_id: str | None = None) -> Any:
        return self._thread.run(self._async.describe_quotas(user=user, client_id=client_id))

    def alter_quotas(
        self,
        entity: Mapping[str, str | None],
        *,
        values: Mapping[str, float] | None = None,
        remove: Sequence[str] = (),
    ) -> Any:
        return self._thread.run(self._async.alter_quotas(entity, values=values, remove=remove))

    def coordinator_url(self, group_id: str) -> str | None:
        return self._async.coordinator_url(group_id)

    def describe_group(self, group_id: str) -> Any:
        return self._thread.run(self._async.describe_group(group_id))

    def delete_group(self, group_id: str) -> Any:
        return self._thread.run(self._async.delete_group(group_id))

    def reset_offsets(self, group_id: str, request: Mapping[str, Any]) -> Any:
        return self._thread.run(self._async.reset_offsets(group_id, request))
