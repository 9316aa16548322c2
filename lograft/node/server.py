"""A lograft node: the process `lograft node --config FILE` runs.

Wiring, in start order:

1. the metadata quorum: a `RaftAdapter` (voter if the node has the
   controller role, observer otherwise) replicating into a `MetadataStore`;
2. the `ControllerRuntime` (controller role), active while this node leads Raft;
3. the `ReplicaManager` (broker role), which follows the image: every applied
   metadata batch is turned into the set of local replicas and their roles,
   but only once the metadata has caught up with the quorum as of the
   broker's registration (`MetadataCatchUp`: a restarted broker never acts on
   its journal's possibly stale image; until then the data routes refuse);
   with it the `GroupCoordinatorRuntime`, which hears of every leadership of
   `__consumer_offsets` through the replica manager's role listener;
4. the HTTP server: public `/v1`, health, and `/internal/v1` (cluster secret);
5. the `BrokerAgent` (broker role): registration and heartbeats.

Stopping runs in reverse; a broker first asks for a controlled shutdown so its
leaderships move before it goes (bounded by `controlled_shutdown_timeout_ms`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from lograft.api.access import AccessControl
from lograft.api.app import create_app
from lograft.api.authentication import Authenticator
from lograft.api.console.assets import add_console_routes
from lograft.api.console.cors import origins_of
from lograft.api.controller_listener import controller_app, listener_http_config
from lograft.api.http_server import HttpServer
from lograft.api.metrics.broker_collector import BrokerCollector
from lograft.api.metrics.exposition import NodeMetrics, add_metrics_route
from lograft.api.metrics.group_collector import GroupCollector
from lograft.api.metrics.node_collector import LOOP_LAG_BOUNDS_S, NodeCollector
from lograft.api.metrics.quorum_collector import QuorumCollector
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.partition_offsets import PartitionOffsets, add_partition_offsets_route
from lograft.api.quota_gate import QuotaGate
from lograft.api.record_work import RecordWork
from lograft.api.records_json import RenderLimits
from lograft.api.replica_stream import ReplicaStreams
from lograft.api.routes_admin import AdminRoutes
from lograft.api.routes_data import DataLimits, DataRoutes
from lograft.api.routes_groups import GroupRoutes
from lograft.api.routes_internal import (
    REPLICA_FETCH_PATH,
    ControllerRpc,
    add_controller_routes,
    add_replica_fetch_route,
)
from lograft.api.routes_security import PasswordHasher, SecurityRoutes
from lograft.api.stream.routes import StreamRoutes
from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.groups.topic_deletion import deleted_topics
from lograft.brokers.metadata_sync import ImageView, TopicView, hosted_partitions
from lograft.brokers.partition import Assignment, IsrProposal
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    LograftError,
    RequestTimedOutError,
)
from lograft.histogram import Buckets
from lograft.node.broker_agent import BrokerAgent
from lograft.node.clean_shutdown import record_clean_shutdown, take_previous_epoch
from lograft.node.config import NodeConfig, fetches_within_requests
from lograft.node.controller_client import ControllerClient, LocalController
from lograft.node.controller_thread import ControllerThread, ListenerFactory
from lograft.node.event_loop import run_on, running_loop_name
from lograft.node.fd_limit import OTHER_DESCRIPTORS, ensure_fd_limit
from lograft.node.log_end_reporter import LogEndReporter
from lograft.node.loop_lag import LoopLagProbe
from lograft.node.malloc_tuning import tune_malloc
from lograft.node.metadata_catch_up import MetadataCatchUp
from lograft.node.offsets_topic import create_offsets_topic, offsets_topic_request
from lograft.node.peer_client import PeerClient
from lograft.node.peer_urls import PeerUrls
from lograft.node.producer_ids import ProducerIdManager, add_producer_routes
from lograft.node.raft_password import raft_password_for
from lograft.protocol import controller_wire as w
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.adapter import RaftAdapter, RaftConfig
from lograft.security.tls import client_context, server_context
from lograft.typed import build

log = logging.getLogger(__name__)

# Rounds of "newer metadata arrived while logs were opening" before applying anyway.
APPLY_REFRESH_ROUNDS_MAX = 10
# A broker asking to shut down waits this long for its leaderships to move, ms.
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 10_000
# /readyz names at most this many failed replicas (and counts them all).
READY_FAILED_REPLICAS_SHOWN = 20
# The node process's exit status when its metadata quorum (Raft) halted.
EXIT_QUORUM_HALTED = 3


def broker_unready(failed: dict[str, str], apply_error: str | None) -> dict[str, Any]:
    """What /readyz reports about a broker's replicas when they are not all
    well (empty when they are): replicas it should host that are out of
    service, and a metadata apply that failed as a whole."""
    out: dict[str, Any] = {}
    if failed:
        shown = sorted(failed)[:READY_FAILED_REPLICAS_SHOWN]
        out["failed_replicas"] = {tp: failed[tp] for tp in shown}
        out["failed_replicas_count"] = len(failed)
    if apply_error is not None:
        out["metadata_apply_error"] = apply_error
    return out


def raft_config_for(config: NodeConfig) -> RaftConfig:
    me = config.voter(config.node_id)
    peers = {
        str(v.node_id): config.raft.dial.get(v.node_id, v.raft)
        for v in config.voters
        if v.node_id != config.node_id
    }
    return build(
        {
            "node_id": str(config.node_id),
            "data_dir": config.data_dir / "metadata",
            "peers": peers,
            "listen_address": me.raft if (config.is_controller and me) else None,
            "voter": config.is_controller,
            "password": raft_password_for(config),
            **config.raft.tuning(),
        },
        RaftConfig,
        error=InvalidConfigError,
        where="raft",
        detail="key",
    )


def check_config(config: NodeConfig) -> None:
    """What parsing a config cannot check on its own, before anything starts:
    the Raft password (derived from cluster_secret) and the Raft identity
    derived from node_id, data_dir and voters. Every section's settings were
    checked when the config was built."""
    # First: its errors name top-level settings (cluster_secret), not [raft] ones.
    raft_password_for(config)
    raft_config_for(config)


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.store = MetadataStore()
        self.raft = RaftAdapter(raft_config_for(config), self.store)
        self.controller_config = config.controller
        # The one place node-to-node HTTP calls get a peer's URL ([http.dial]).
        self.peers = PeerUrls(config.http.dial, config.http_scheme, config.controller_listener.dial)
        # [tls]: the listener's context and the one node-to-node calls use
        # (built now, so a bad file fails the start, not the first call).
        self.tls_server = server_context(config.tls) if config.tls is not None else None
        self.tls_client = client_context(config.tls) if config.tls is not None else None
        # The controller role: its thread (runtime and listener) and runtime.
        self.controller: ControllerThread | None = None
        self.runtime: ControllerRuntime | None = None
        self.replicas: ReplicaManager | None = None
        self.groups: GroupCoordinatorRuntime | None = None
        self.agent: BrokerAgent | None = None
        # Node-to-node calls, one PeerClient (one pool) each: see start().
        self.forward_calls: PeerClient | None = None
        self.replication_calls: PeerClient | None = None
        self.control_calls: PeerClient | None = None
        self.stream_calls: PeerClient | None = None
        self.stream_poll_calls: PeerClient | None = None
        self.client: ControllerClient | None = None
        self._http: HttpServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # The image the replica manager has applied (broker role); the data
        # path routes by it, so its answers agree with the local replicas.
        self._broker_image = self.store.image
        self._console_origins_cache: tuple[object, frozenset[str]] | None = None
        self._applied_offset = -2
        self._applied_changed = asyncio.Event()
        # The metadata offset whose apply failed as a whole, and why (None:
        # the last apply did not fail).
        self._apply_error: tuple[int, str] | None = None
        # Brokers: no replica roles and no data served before this is reached.
        self.catch_up = MetadataCatchUp(config.node_id)
        # Threads for record work of requests (decompress, validate, render).
        self.record_work = RecordWork(config.http.record_threads_max)
        # [metrics]: what the hot paths count, read by GET /metrics (None: off).
        metrics_on = config.metrics.enabled
        self.broker_stats = BrokerStats(config.metrics.topic_series_max) if metrics_on else None
        self.request_metrics = RequestMetrics() if metrics_on else None
        self.loop_lag = LoopLagProbe(Buckets(LOOP_LAG_BOUNDS_S) if metrics_on else None)
        # How many SSE streams the node serves (set with its stream routes).
        self._streams_open: Callable[[], int] | None = None
        # Who is calling ([security]); passwords against the newest image's
        # credentials, so a new or changed password counts once it arrives.
        self.authenticator = Authenticator(
            config.security,
            config.tls,
            lambda: self.store.image.scram_credentials,
        )
        # Client quotas, from the image (api/quota_gate.py; [quotas]).
        self.quota_gate = QuotaGate(config.quotas, lambda: self.store.image.client_quotas)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        broker_settings = fetches_within_requests(cfg.broker, cfg.http.request_bytes_max)
        ensure_fd_limit(
            cfg.http.connections_max
            + (broker_settings.max_open_files if cfg.is_broker else 0)
            + OTHER_DESCRIPTORS
        )
        self._tasks.append(asyncio.create_task(self.loop_lag.run(), name="loop-lag"))
        await self.raft.start()
        await self.authenticator.start()
        # Three connection pools, so that no call waits behind one it depends
        # on. A produce forwarded to a leader holds its connection until the
        # followers have fetched the records (acks=all): were replica fetches
        # queued on the same full pool, the two would wait on each other until
        # the leader dropped this node from the ISR.
        self.forward_calls = self._peer_client(cfg.http.forward_connections_max)
        self.replication_calls = self._peer_client(0)  # one fetch per leader
        self.control_calls = self._peer_client(0)  # controller calls
        if cfg.is_controller:
            # The runtime (and the controller listener) on a thread and loop
            # of their own: node/controller_thread.py.
            self.controller = ControllerThread(
                lambda: ControllerRuntime(self.raft, self.store, self.controller_config),
                self._controller_listener(),
                name=f"controller-{cfg.node_id}",
            )
            await self.controller.start()
            self.runtime = self.controller.runtime
        self.client = ControllerClient(
            cfg, self.control_calls, self._local_controller(), self._leader_id
        )
        if cfg.is_broker:
            # Before any log opens: from here on only a clean stop may say
            # the logs are whole (node/clean_shutdown.py).
            previous_broker_epoch = take_previous_epoch(cfg.data_dir)
            self.replicas = ReplicaManager(
                cfg.node_id,
                cfg.data_dir,
                broker_settings,
                log_defaults=cfg.log_defaults,
                alter_partitions=self._alter_partitions,
                fetch_transport=self._fetch_transport,
                ineligible_replicas=self._ineligible_replicas,
                # The newest image: an id handed out a moment ago is known
                # here as soon as the metadata reaches this node.
                producer_id_end=lambda: self.store.image.next_producer_id,
                metadata_changed=lambda: self._applied_changed.wait(),
                # A node process: keep its thousands of replica objects out of
                # full GC passes, which stalled the loop and Raft for ~1 s.
                gc_freeze=True,
                stats=self.broker_stats,
            )
            await self.replicas.start()
            # Before the first metadata apply: it hears of every leadership.
            self._group_runtime()
            self._tasks.append(asyncio.create_task(self._follow_metadata(), name="metadata"))
        await self._serve()
        if cfg.is_broker:
            self.agent = BrokerAgent(
                cfg.node_id,
                {"http": cfg.http_url},  # http.advertised_url, else http(s)://host:port
                cfg.rack,
                self.client,
                # Caught up means the replicas follow the metadata, not just the
                # image: only then may the controller unfence (and elect) us.
                lambda: self._applied_offset,
                heartbeat_interval_ms=self.controller_config.broker_heartbeat_interval_ms,
                # The heartbeat thread's own client: its own pool, the same
                # resolver; local calls run on the controller's own loop.
                client_factory=lambda: ControllerClient(
                    cfg, self._peer_client(0), self._local_controller(), self._leader_id
                ),
                on_registered=self.catch_up.registered,
                previous_broker_epoch=previous_broker_epoch,
            )
            await self.agent.start()
            assert self.replicas is not None
            reporter = LogEndReporter(
                cfg.node_id,
                lambda: self.store.image,
                self.agent,
                self.replicas,
                self.client,
                self.controller_config.broker_heartbeat_interval_ms,
            )
            self._tasks.append(asyncio.create_task(reporter.run(), name="log-end-reports"))
        me = cfg.voter(cfg.node_id)
        log.info(
            "node %d started: roles %s, http listening on %s:%d, advertised as %s%s",
            cfg.node_id,
            ",".join(cfg.roles),
            cfg.http.host,
            cfg.http.port,
            cfg.http_url,
            f", controller listener on {me.controller}" if me and me.controller else "",
        )

    def _peer_client(self, connections_max: int, connections_per_peer_max: int = 0) -> PeerClient:
        """A client (a pool) for node-to-node calls; 0: no limit. Brokers'
        addresses come from the newest metadata."""
        return PeerClient(
            cluster_secret=self.config.cluster_secret,
            peers=self.peers,
            metadata=_NewestImageView(self),
            connections_max=connections_max,
            connections_per_peer_max=connections_per_peer_max,
            answer_bytes_max=self.config.http.peer_answer_bytes_max,
            tls=self.tls_client,
        )

    def _local_controller(self) -> LocalController | None:
        """This node's controller runtime for in-process calls, run on its own
        loop whoever calls (None: no controller role)."""
        return None if self.controller is None else LocalController(self.controller)

    def _controller_health(self) -> dict[str, Any]:
        """/healthz: how late the controller's own loop runs (controller role)."""
        if self.controller is None:
            return {}
        return {"controller_loop_lag_ms": self.controller.loop_lag()}

    def _controller_listener(self) -> ListenerFactory | None:
        """What builds the controller listener on the controller's loop (None:
        this voter's `[[voters]]` entry names no `controller` address)."""
        cfg = self.config
        me = cfg.voter(cfg.node_id)
        if me is None or me.controller is None:
            return None
        http = listener_http_config(cfg.http, cfg.controller_listener, me.controller)

        def build(runtime: ControllerRuntime) -> HttpServer:
            app = controller_app(
                ControllerRpc(runtime),
                cluster_secret=cfg.cluster_secret,
                request_bytes_max=http.request_bytes_max,
                active=lambda: runtime.active,
            )
            return HttpServer(app, http, self.tls_server)

        return build

    def _access_control(self) -> AccessControl | None:
        """What decides each request with `[security] authorization` on: the
        ACLs of this node's newest image (the store's, not the one the
        replica manager applied: an ACL change applies as soon as it arrives)."""
        if not self.config.security.authorization:
            return None
        return AccessControl(self.config.security, lambda: self.store.image.acls)

    async def _serve(self) -> None:
        cfg = self.config
        assert self.forward_calls is not None and self.client is not None
        loop_name = running_loop_name()
        app = create_app(
            cluster_secret=cfg.cluster_secret,
            request_bytes_max=cfg.http.request_bytes_max,
            ready=self.ready,
            health=lambda: {
                "event_loop": loop_name,
                "loop_lag_ms": self.loop_lag.snapshot(),
                **self._controller_health(),
                **self.raft.health(),
            },
            serving=self.catch_up.refusal if self.replicas is not None else None,
            authenticator=self.authenticator,
            access=self._access_control(),
            quotas=self.quota_gate,
            request_metrics=self.request_metrics,
            cors_origins=self._console_origins,
        )
        add_console_routes(app, self._console_origins)
        metrics = self._metrics() if self.request_metrics is not None else None
        # Controller calls that reach the main listener (a voter without a
        # controller listener, or an older broker) still run on the controller's loop.
        add_controller_routes(app, self._local_controller())
        AdminRoutes(
            node_id=cfg.node_id,
            cluster_id=cfg.cluster_id,
            store=self.store,
            raft=self.raft,
            controller=self.client,
            replicas=self.replicas,
            calls=self.forward_calls,
            replicas_caught_up=self.wait_broker_applied,
        ).add_to(app)
        SecurityRoutes(
            store=self.store,
            raft=self.raft,
            controller=self.client,
            hasher=PasswordHasher(cfg.http.password_hashes_inflight_max),
        ).add_to(app)
        if self.replicas is not None:
            render = RenderLimits(
                record_render_bytes_max=cfg.http.record_render_bytes_max,
                fetch_decompressed_bytes_max=cfg.http.fetch_decompressed_bytes_max,
            )
            DataRoutes(
                self.replicas,
                _BrokerImageView(self),
                self.forward_calls,
                DataLimits(
                    forward_request_bytes_max=cfg.http.request_bytes_max,
                    produce_decompressed_bytes_max=cfg.http.produce_decompressed_bytes_max,
                    keyless_partitions=cfg.http.keyless_partitions,
                    render=render,
                ),
                work=self.record_work,
            ).add_to(app)
            stream_limits = self.config.stream
            # The streams' own pools: short calls (start offsets, group calls),
            # which no long-poll holds, and the long-polls, a few per leader.
            self.stream_calls = self._peer_client(stream_limits.remote_connections_max)
            self.stream_poll_calls = self._peer_client(0, stream_limits.remote_polls_per_leader_max)
            streams = StreamRoutes(
                self.replicas,
                _BrokerImageView(self),
                limits=stream_limits,
                calls=self.stream_calls,
                poll_calls=self.stream_poll_calls,
                work=self.record_work,
                render=render,
            )
            streams.add_to(app)
            offsets = PartitionOffsets(_BrokerImageView(self), self.forward_calls)
            GroupRoutes(
                self._group_runtime(),
                _BrokerImageView(self),
                self.forward_calls,
                self._create_offsets_topic,
                offsets,
            ).add_to(app)
            if metrics is not None:
                self._broker_metrics(metrics, offsets, lambda: len(streams.sessions))
            add_replica_fetch_route(app, self.replicas)
            ReplicaStreams(
                self.replicas,
                message_bytes_max=self.config.http.request_bytes_max,
                idle_timeout_s=self.config.http.keepalive_timeout_ms / 1000,
                stats=self.broker_stats,
            ).add_to(app)
            # Also this node's own asks, in process, through forward_calls.
            add_partition_offsets_route(
                app, self.replicas, _BrokerImageView(self), self.forward_calls
            )
            add_producer_routes(
                app,
                ProducerIdManager(self._producer_id_block),
                lambda: self.agent is not None and self.agent.broker_epoch >= 0,
            )
        from lograft.api.openapi import add_openapi_route

        add_openapi_route(app)
        if metrics is not None:
            self._node_metrics(metrics)
            add_metrics_route(app, metrics)
        self._http = HttpServer(app, cfg.http, self.tls_server)
        await self._http.start()

    def _console_origins(self) -> frozenset[str]:
        """The origins of the cluster's nodes (their brokers' endpoints), for
        the web console's CSP and CORS; computed once per metadata image."""
        image = self.store.image
        cached = self._console_origins_cache
        if cached is None or cached[0] is not image:
            urls = (url for b in image.brokers.values() for url in b.endpoints.values())
            cached = self._console_origins_cache = (image, origins_of(urls))
        return cached[1]

    # -- metrics (GET /metrics, docs/metrics.md) ---------------------------------------

    def _metrics(self) -> NodeMetrics:
        """The node's registry: request times, then the quorum's metrics."""
        assert self.request_metrics is not None
        metrics = NodeMetrics(self.record_work)
        metrics.add(self.request_metrics)
        metrics.add(QuorumCollector(self.raft, self.runtime, lambda: self.store.image))
        return metrics

    def _broker_metrics(
        self, metrics: NodeMetrics, offsets: PartitionOffsets, streams_open: Callable[[], int]
    ) -> None:
        """The broker's and its groups' collectors (broker role)."""
        assert self.replicas is not None and self.broker_stats is not None
        settings = self.config.metrics
        broker = BrokerCollector(
            self.replicas,
            self.broker_stats,
            settings,
            lambda: frozenset(self._broker_image.topic_ids),
            metrics.dropped,
        )
        metrics.add(broker)
        metrics.before_scrape(broker.refresh)
        groups = GroupCollector(self._group_runtime(), offsets, settings, metrics.dropped)
        metrics.add(groups)
        metrics.before_scrape(groups.refresh)
        self._streams_open = streams_open

    def _node_metrics(self, metrics: NodeMetrics) -> None:
        """Last: event-loop lag, streams, and the tally of series the caps left out."""
        assert self.loop_lag.histogram is not None
        node = NodeCollector(
            self.config.node_id,
            tuple(self.config.roles),
            self.loop_lag.histogram,
            self._streams_open,
            metrics.dropped,
        )
        metrics.add(node)
        metrics.add(node.collect_dropped)

    async def stop(self) -> None:
        try:
            if self.agent is not None:
                started = time.monotonic()
                agreed = await self.agent.shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_MS)
                log.info(
                    "node %d: controlled shutdown %s after %.1f s",
                    self.config.node_id,
                    "agreed" if agreed else "not agreed",
                    time.monotonic() - started,
                )
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._http is not None:
                await self._http.stop()
            if self.groups is not None:
                await self.groups.stop()
            if self.replicas is not None:
                await self.replicas.stop()
                # Every log flushed and closed: vouch for them at the next start.
                if self.agent is not None:
                    record_clean_shutdown(self.config.data_dir, self.agent.broker_epoch)
            if self.controller is not None and not await self.controller.stop():
                log.warning("node %d: the controller thread did not end", self.config.node_id)
            await self.raft.stop()
            await self.stop_calls()
            await self.authenticator.close()
        finally:
            # Its threads are not daemons: left open, they outlive the node.
            self.record_work.close()
        log.info("node %d stopped", self.config.node_id)

    async def stop_calls(self) -> None:
        """Close the node's pools for node-to-node calls."""
        for calls in (
            self.forward_calls,
            self.replication_calls,
            self.control_calls,
            self.stream_calls,
            self.stream_poll_calls,
        ):
            if calls is not None:
                await calls.close()

    # -- state -------------------------------------------------------------------------------

    def _leader_id(self) -> int | None:
        raw = self.raft.leader_id
        try:
            return None if raw is None else int(raw)
        except ValueError:
            return None

    def ready(self) -> tuple[bool, dict[str, Any]]:
        detail: dict[str, Any] = {
            "controller_elected": self._leader_id() is not None,
            "metadata_offset": self.store.image.offset,
        }
        ok = detail["controller_elected"] and self.store.image.offset >= 0
        if self.agent is not None:
            detail["broker_state"] = self.agent.state.value
            ok = ok and self.agent.unfenced
        if self.replicas is not None:
            detail.update(self.catch_up.ready_detail())
            ok = ok and self.catch_up.caught_up
            # A node that cannot serve some of its replicas is not ready,
            # even though it heartbeats: an orchestrator should see it.
            apply_error = None
            if self._apply_error is not None:
                offset, why = self._apply_error
                apply_error = f"applying metadata at offset {offset} failed: {why}"
            unready = broker_unready(self.replicas.failed_replicas(), apply_error)
            detail.update(unready)
            ok = ok and not unready
        return ok, detail

    async def _follow_metadata(self) -> None:
        assert self.replicas is not None
        # Subscribe before the first apply, which may take a while (log opens):
        # whatever is applied meanwhile must wake the next round.
        subscription = self.raft.subscribe()
        # The local journal's image may be stale (a partition led before the
        # restart may have a new leader): act on none of it until the image
        # includes what the quorum had committed when we registered.
        offset = await self.catch_up.wait(lambda: self.store.image.offset, subscription)
        await self._apply_image()
        self.catch_up.done()
        log.info(
            "broker %d caught up with the metadata quorum (offset %d, reached %d): serving",
            self.config.node_id,
            self._applied_offset,
            offset,
        )
        async for _applied in subscription:
            await self._apply_image()

    async def _apply_image(self) -> None:
        assert self.replicas is not None
        image = self.store.image
        if image.offset == self._applied_offset:
            return
        try:
            wanted = hosted_partitions(image, self.config.node_id)
            # Log files are opened in a thread: hundreds of them on the event
            # loop would stop this broker's heartbeats until it is fenced.
            await self.replicas.open_logs(wanted)
            # Newer metadata may have arrived meanwhile (seconds, for a wide
            # topic): apply the newest, never a view that is already stale.
            for _ in range(APPLY_REFRESH_ROUNDS_MAX):
                if self.store.image is image:
                    break
                image = self.store.image
                wanted = hosted_partitions(image, self.config.node_id)
                await self.replicas.open_logs(wanted)
            self.replicas.apply_metadata(wanted)
        except Exception as exc:
            # Logged with its traceback once, not again for every commit that
            # fails the same way; /readyz shows it meanwhile.
            if self._apply_error is None or self._apply_error[1] != repr(exc):
                log.exception("applying metadata at offset %d failed", image.offset)
            self._apply_error = (image.offset, repr(exc))
        else:
            if self._apply_error is not None:
                log.info("applying metadata works again (offset %d)", image.offset)
            self._apply_error = None
        if self.groups is not None:
            # Offsets are keyed by name: a re-created topic must not inherit them.
            gone = deleted_topics(self._broker_image.topic_ids, image.topic_ids)
            self.groups.on_topics_deleted(gone)
        self._broker_image = image
        self._applied_offset = image.offset
        self._applied_changed.set()
        self._applied_changed = asyncio.Event()

    async def wait_broker_applied(self, offset: int, timeout_ms: int) -> None:
        """Wait until the replicas follow metadata at or past `offset` (brokers only)."""
        if self.replicas is None:
            return
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                while self._applied_offset < offset:
                    await self._applied_changed.wait()
        except TimeoutError:
            raise RequestTimedOutError(
                f"the replicas of node {self.config.node_id} did not apply metadata offset "
                f"{offset} within {timeout_ms} ms (at {self._applied_offset})",
                offset=offset,
                timeout_ms=timeout_ms,
            ) from None

    # -- broker -> controller and broker -> broker --------------------------------------

    def _ineligible_replicas(self) -> frozenset[int]:
        """Brokers that may not join an ISR: fenced or shutting down."""
        brokers = self._broker_image.brokers
        return frozenset(b for b, reg in brokers.items() if not reg.usable)

    async def _alter_partitions(
        self, changes: Sequence[tuple[TopicPartition, IsrProposal]]
    ) -> dict[TopicPartition, Assignment | LograftError]:
        """One AlterPartition for many partitions (one metadata commit)."""
        assert self.client is not None and self.agent is not None
        image = self.store.image
        sent: dict[tuple[str, int], tuple[TopicPartition, tuple[int, ...]]] = {}
        items = []
        for tp, proposal in changes:
            topic = image.topic(tp.topic)
            if topic is None or tp.partition >= len(topic.partitions):
                continue  # deleted meanwhile: no answer, the change is dropped
            sent[(topic.topic_id, tp.partition)] = (tp, topic.partitions[tp.partition].replicas)
            items.append(
                w.AlterPartitionItem(
                    topic_id=topic.topic_id,
                    partition=tp.partition,
                    leader_epoch=proposal.leader_epoch,
                    partition_epoch=proposal.partition_epoch,
                    new_isr=list(proposal.isr),
                )
            )
        request = w.AlterPartitionsRequest(
            broker_id=self.config.node_id,
            broker_epoch=self.agent.broker_epoch,
            partitions=items,
        )
        res = await self.client.send("alter-partitions", request, w.AlterPartitionsResponse)
        out: dict[TopicPartition, Assignment | LograftError] = {}
        for answer in res.partitions:
            tp, replicas = sent[(answer.topic_id, answer.partition)]
            if answer.error is not None:
                out[tp] = LograftError.from_dict(answer.error)
            elif (
                answer.isr is None
                or answer.leader is None
                or answer.leader_epoch is None
                or answer.partition_epoch is None
            ):
                out[tp] = BrokerNotAvailableError(
                    f"the controller's AlterPartition answer for {tp} has neither an error "
                    "nor the partition's new state"
                )
            else:
                out[tp] = Assignment(
                    replicas,
                    tuple(answer.isr),
                    answer.leader,
                    answer.leader_epoch,
                    answer.partition_epoch,
                )
        return out

    def _group_runtime(self) -> GroupCoordinatorRuntime:
        assert self.replicas is not None
        if self.groups is None:
            self.groups = GroupCoordinatorRuntime(
                self.replicas,
                _BrokerImageView(self),
                self.config.groups,
            )
        return self.groups

    async def _create_offsets_topic(self) -> None:
        assert self.client is not None and self.groups is not None
        request = offsets_topic_request(
            self.groups.settings, len(ImageView(self.store.image).live_brokers())
        )
        await create_offsets_topic(request, self.client, self.raft, self.wait_broker_applied)

    async def _producer_id_block(self) -> dict[str, Any]:
        assert self.client is not None and self.agent is not None
        request = w.ProducerIdsRequest(
            broker_id=self.config.node_id, broker_epoch=self.agent.broker_epoch
        )
        return w.body_of(await self.client.send("producer-ids", request, w.ProducerIdsResponse))

    async def _fetch_transport(self, leader_id: int, body: bytes, timeout_s: float) -> bytes:
        assert self.replication_calls is not None
        if self.config.broker.replica_fetch_transport == "websocket":
            return await self.replication_calls.stream_exchange(
                leader_id, REPLICA_FETCH_PATH, body, timeout_ms=int(timeout_s * 1000)
            )
        return await self.replication_calls.exchange(
            leader_id,
            REPLICA_FETCH_PATH,
            body,  # JSON (ReplicaFetchRequest.to_json)
            timeout_ms=int(timeout_s * 1000),
        )


class _NewestImageView:
    """A MetadataView of the newest image the node has (brokers' addresses)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def __getattr__(self, name: str) -> Any:
        return getattr(ImageView(self.node.store.image), name)


class _BrokerImageView:
    """A MetadataView of the image the node's replica manager has applied."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def topic(self, name: str) -> TopicView | None:
        # Every data request looks its topic up: named here, not through
        # __getattr__ (a failed attribute lookup and a new ImageView per call).
        return ImageView(self.node._broker_image).topic(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(ImageView(self.node._broker_image), name)


async def run_node(config: NodeConfig) -> int:
    node = Node(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await node.start()
    except Exception:
        log.exception("node %d failed to start", config.node_id)
        await node.stop()
        return 1
    halted = await until_stopped(stop, node.raft)
    if halted is not None:
        log.critical(
            "node %d: the metadata quorum halted (%r): stopping the node, exit status %d; "
            "restart it once the cause is fixed (a full disk: free space first)",
            config.node_id,
            halted,
            EXIT_QUORUM_HALTED,
        )
    else:
        log.info("node %d stopping", config.node_id)
    await node.stop()
    return 0 if halted is None else EXIT_QUORUM_HALTED


async def until_stopped(stop: asyncio.Event, raft: RaftAdapter) -> BaseException | None:
    """Wait for a stop signal or for the node's Raft to halt, whichever comes first:
    None for the signal, the quorum's failure for a halt.

    A node whose Raft halted (its journal unwritable, say, on a full disk) can
    no longer follow the metadata; serving on would answer from a stale image
    and keep a voter's place in the quorum unusable. Kafka halts the process on
    a metadata log write failure too. Exiting lets a supervisor restart it."""
    stopping = asyncio.ensure_future(stop.wait())
    halting = asyncio.ensure_future(raft.wait_halted())
    try:
        await asyncio.wait({stopping, halting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        halting.cancel()
    if halting.done() and not halting.cancelled():
        return halting.result()
    return None


def run_node_process(config: NodeConfig) -> int:
    """`run_node` on a new event loop of the kind `config.event_loop`, with
    glibc's malloc keeping large buffers for reuse (node/malloc_tuning.py)."""
    tune_malloc()
    return run_on(config.event_loop, run_node(config))


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # pysyncobj and aiohttp are chatty at INFO.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


__all__ = ["Node", "raft_config_for", "replace", "run_node", "run_node_process"]
