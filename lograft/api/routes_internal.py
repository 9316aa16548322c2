"""Internal endpoints (`/internal/v1/...`, cluster secret required).

Controller RPCs (`POST /internal/v1/controller/<name>`, JSON in and out: the
broker's calls are declared in lograft/protocol/controller_wire.py) are
served by the active controller; any other node answers NOT_CONTROLLER naming
the one that is. The same `ControllerRpc` methods serve a node's own calls
when it is the active controller, so both paths give the same answers. They
run on the controller's own loop (lograft/node/controller_thread.py): the
controller listener (api/controller_listener.py) serves them there, and the
main listener's route hands each call over to that loop (`ControllerCalls`).

Replica fetch (`POST /internal/v1/replica-fetch`) is the follower-pull data
path; see lograft/protocol/fetch_wire.py for its format.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from lograft.api.http_errors import error_dict
from lograft.api.internal_paths import REPLICA_FETCH_PATH
from lograft.api.topic_configs import validate_topic_configs
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import InvalidRequestError, LograftError
from lograft.protocol import controller_wire as w
from lograft.protocol.fetch_wire import CONTENT_TYPE, ReplicaFetchRequest, encode_answer
from lograft.quorum import controller as c
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.internal_topics import check_topic_config_changes
from lograft.quorum.records import ConfigResourceType, endpoints_from
from lograft.quorum.unclean_recovery import (
    ReplicaLogEnd,
    ReportLogEndsRequest,
    report_log_ends,
)
from lograft.typed import decode_json, encode_json

Rpc = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
CONTROLLER_PREFIX = "/internal/v1/controller"


class ControllerCalls(Protocol):
    """What serves the controller route: the RPCs by name."""

    def knows(self, name: str) -> bool: ...

    async def call(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


class ControllerRpc:
    def __init__(self, runtime: ControllerRuntime) -> None:
        self.runtime = runtime
        self.config = runtime.config
        plain: dict[str, Rpc] = {
            "register": self.register,
            "heartbeat": self.heartbeat,
            "report-log-ends": self.report_log_ends,
            "alter-partitions": self.alter_partitions,
            "producer-ids": self.producer_ids,
            "create-topic": self.create_topic,
            "delete-topic": self.delete_topic,
            "create-partitions": self.create_partitions,
            "alter-configs": self.alter_configs,
            "create-acls": self.create_acls,
            "delete-acls": self.delete_acls,
            "upsert-scram-credential": self.upsert_scram_credential,
            "delete-scram-credential": self.delete_scram_credential,
            "alter-client-quotas": self.alter_client_quotas,
        }
        self.methods: dict[str, Rpc] = {name: self._with_offset(m) for name, m in plain.items()}

    def knows(self, name: str) -> bool:
        return name in self.methods

    async def call(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """On the runtime's own loop."""
        return await self.methods[name](body)

    def _with_offset(self, method: Rpc) -> Rpc:
        """Every answer carries the metadata offset that includes its change,
        so the caller can wait until its own image has caught up."""

        async def call(body: dict[str, Any]) -> dict[str, Any]:
            result = await method(body)
            result["metadata_offset"] = self.runtime.store.image.offset
            return result

        return call

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.RegisterBrokerRequest)
        req = c.RegisterBrokerRequest(
            broker_id=wire.broker_id,
            incarnation_id=wire.incarnation_id,
            endpoints=endpoints_from(wire.endpoints),
            rack=wire.rack,
            previous_broker_epoch=wire.previous_broker_epoch,
        )
        res = await self.runtime.run(
            lambda img, s, now: c.register_broker(img, s, req, now, self.config)
        )
        return w.body_of(
            w.RegisterBrokerResponse(broker_epoch=res.broker_epoch, metadata_offset=self._offset())
        )

    async def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.HeartbeatRequest)
        req = c.HeartbeatRequest(
            broker_id=wire.broker_id,
            broker_epoch=wire.broker_epoch,
            metadata_offset=wire.metadata_offset,
            want_shutdown=wire.want_shutdown,
        )
        self.runtime.touch(req.broker_id, req.broker_epoch)
        res = await self.runtime.run(
            lambda img, s, now: c.broker_heartbeat(img, s, req, now, self.config)
        )
        return w.body_of(
            w.HeartbeatResponse(
                fenced=res.fenced,
                in_controlled_shutdown=res.in_controlled_shutdown,
                should_shut_down=res.should_shut_down,
                metadata_offset=self._offset(),
            )
        )

    async def report_log_ends(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.ReportLogEndsRequest)
        req = ReportLogEndsRequest(
            broker_id=wire.broker_id,
            broker_epoch=wire.broker_epoch,
            log_ends=tuple(
                ReplicaLogEnd(e.topic_id, e.partition, e.last_epoch, e.end_offset)
                for e in wire.log_ends
            ),
        )
        elected = await self.runtime.run(
            lambda img, s, now: report_log_ends(img, s, req, now, self.config)
        )
        return w.body_of(w.ReportLogEndsResponse(elected=elected, metadata_offset=self._offset()))

    async def alter_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        """Many partitions' ISR changes in one request and one metadata commit.
        Answers per partition, in request order: the partition after the
        change, or `{"error": {...}}` (the same form as an HTTP error body)."""
        wire = w.request_of(body, w.AlterPartitionsRequest)
        req = c.AlterPartitionsRequest(
            broker_id=wire.broker_id,
            broker_epoch=wire.broker_epoch,
            items=tuple(
                c.AlterPartitionItem(
                    topic_id=item.topic_id,
                    partition=item.partition,
                    leader_epoch=item.leader_epoch,
                    partition_epoch=item.partition_epoch,
                    new_isr=tuple(item.new_isr),
                )
                for item in wire.partitions
            ),
        )
        answers = await self.runtime.run(lambda img, _s, _n: c.alter_partitions(img, req))
        out: list[w.AlterPartitionAnswer] = []
        for item, answer in zip(req.items, answers, strict=True):
            if isinstance(answer, LograftError):
                out.append(
                    w.AlterPartitionAnswer(
                        topic_id=item.topic_id, partition=item.partition, error=error_dict(answer)
                    )
                )
            else:
                out.append(
                    w.AlterPartitionAnswer(
                        topic_id=item.topic_id,
                        partition=item.partition,
                        leader=answer.leader,
                        leader_epoch=answer.leader_epoch,
                        partition_epoch=answer.partition_epoch,
                        isr=list(answer.isr),
                    )
                )
        return w.body_of(w.AlterPartitionsResponse(partitions=out, metadata_offset=self._offset()))

    async def producer_ids(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.ProducerIdsRequest)
        res = await self.runtime.run(
            lambda img, _s, _n: c.allocate_producer_ids(
                img, wire.broker_id, wire.broker_epoch, self.config
            )
        )
        return w.body_of(
            w.ProducerIdsResponse(
                first_producer_id=res.first_producer_id,
                size=res.size,
                metadata_offset=self._offset(),
            )
        )

    def _offset(self) -> int:
        return self.runtime.store.image.offset

    async def create_topic(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.CreateTopicRequest)
        req = c.CreateTopicRequest(
            name=wire.name,
            partitions=wire.partitions,
            replication_factor=wire.replication_factor,
            configs={
                k: v
                for k, v in validate_topic_configs(
                    wire.configs or {}, wire.replication_factor
                ).items()
                if v is not None
            },
        )
        topic_id = str(uuid.uuid4())
        res = await self.runtime.run(
            lambda img, _s, _n: c.create_topic(img, req, topic_id, self.config)
        )
        return w.body_of(
            w.CreateTopicResponse(
                name=res.name,
                topic_id=res.topic_id,
                partitions=[
                    w.TopicAssignment(partition=i, replicas=list(r))
                    for i, r in enumerate(res.assignments)
                ],
                metadata_offset=self._offset(),
            )
        )

    async def delete_topic(self, body: dict[str, Any]) -> dict[str, Any]:
        name = w.request_of(body, w.DeleteTopicRequest).name
        topic_id = await self.runtime.run(lambda img, _s, _n: c.delete_topic(img, name))
        return w.body_of(
            w.DeleteTopicResponse(name=name, topic_id=topic_id, metadata_offset=self._offset())
        )

    async def create_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.CreatePartitionsRequest)
        res = await self.runtime.run(
            lambda img, _s, _n: c.create_partitions(img, wire.name, wire.partitions, self.config)
        )
        return w.body_of(
            w.CreatePartitionsResponse(
                name=res.name, partitions=wire.partitions, metadata_offset=self._offset()
            )
        )

    async def alter_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.AlterConfigsRequest)
        resource_type = ConfigResourceType(wire.resource_type)
        name = wire.resource_name
        changes: Mapping[str, w.ConfigValue] = wire.configs
        if resource_type is ConfigResourceType.TOPIC:
            topic = self.runtime.store.image.topic(name)
            rf = len(topic.partitions[0].replicas) if topic and topic.partitions else None
            changes = validate_topic_configs(changes, rf)
            # Each key commits on its own below: refuse the whole request first.
            check_topic_config_changes(name, changes)
        for key, value in changes.items():
            req = c.AlterConfigRequest(
                resource_type, name, str(key), None if value is None else str(value)
            )
            await self._alter_config(req)
        return w.body_of(
            w.AlterConfigsResponse(
                resource_type=wire.resource_type,
                resource_name=name,
                configs=dict(changes),
                metadata_offset=self._offset(),
            )
        )

    async def _alter_config(self, req: c.AlterConfigRequest) -> None:
        await self.runtime.run(lambda img, _s, _n: c.alter_config(img, req, self.config))

    # -- security metadata: the request is checked whole before anything commits --

    async def create_acls(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.CreateAclsRequest)
        res = await self.runtime.run(lambda img, _s, _n: c.create_acls(img, wire.acls, self.config))
        return w.body_of(
            w.CreateAclsResponse(
                created=list(res.created),
                existing=list(res.existing),
                metadata_offset=self._offset(),
            )
        )

    async def delete_acls(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.DeleteAclsRequest)
        deleted = await self.runtime.run(
            lambda img, _s, _n: c.delete_acls(img, wire.filter, self.config)
        )
        return w.body_of(
            w.DeleteAclsResponse(deleted=list(deleted), metadata_offset=self._offset())
        )

    async def upsert_scram_credential(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            credential = w.request_of(body, w.UpsertScramCredentialRequest).credential
        except InvalidRequestError as exc:
            # The message would show the bad value: a salt or key is never echoed.
            field = exc.details.get("field", "credential")
            raise InvalidRequestError(f"{field}: not a valid credential", field=field) from None
        await self.runtime.run(
            lambda img, _s, _n: c.upsert_scram_credential(img, credential, self.config)
        )
        return w.body_of(
            w.UpsertScramCredentialResponse(
                name=credential.name,
                mechanism=credential.mechanism,
                iterations=credential.iterations,
                metadata_offset=self._offset(),
            )
        )

    async def delete_scram_credential(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.DeleteScramCredentialRequest)
        removed = await self.runtime.run(
            lambda img, _s, _n: c.delete_scram_credential(img, wire.name, wire.mechanism)
        )
        return w.body_of(
            w.DeleteScramCredentialResponse(
                name=wire.name, mechanisms=list(removed), metadata_offset=self._offset()
            )
        )

    async def alter_client_quotas(self, body: dict[str, Any]) -> dict[str, Any]:
        wire = w.request_of(body, w.AlterClientQuotasRequest)
        after = await self.runtime.run(
            lambda img, _s, _n: c.alter_client_quotas(
                img, wire.entity, wire.values, wire.remove, self.config
            )
        )
        return w.body_of(
            w.AlterClientQuotasResponse(
                entity=wire.entity, values=dict(after), metadata_offset=self._offset()
            )
        )


def add_controller_routes(app: web.Application, rpc: ControllerCalls | None) -> None:
    async def handle(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if rpc is None:
            from lograft.errors import NotControllerError

            raise NotControllerError("this node has no controller role")
        if not rpc.knows(name):
            raise InvalidRequestError(f"unknown controller call {name!r}")
        # An object here; its fields are the method's request Record's to judge.
        body = decode_json(
            await request.read(), dict[str, Any], error=InvalidRequestError, where="request body"
        )
        result = await rpc.call(name, body)
        return web.Response(body=encode_json(result), content_type="application/json")

    app.router.add_post(CONTROLLER_PREFIX + "/{name}", handle)


def add_replica_fetch_route(app: web.Application, replicas: ReplicaManager) -> None:
    async def handle(request: web.Request) -> web.Response:
        req = ReplicaFetchRequest.from_json(await request.read())
        answer = await replicas.replica_fetch(req)
        return web.Response(body=encode_answer(answer), content_type=CONTENT_TYPE)

    app.router.add_post(REPLICA_FETCH_PATH, handle)
