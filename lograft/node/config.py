"""Node configuration: a TOML file plus environment overrides, validated at start.

Example (`config/node-1.toml`)::

    node_id = 1
    roles = ["controller", "broker"]
    data_dir = "data/node-1"
    cluster_id = "lograft-local"
    cluster_secret = "..."            # required: `openssl rand -hex 16`, the same
                                      # on every node; authenticates the internal
                                      # endpoints and keys the Raft links
    event_loop = "uvloop"             # or "asyncio": the node's event loop (uvloop's
                                      # costs less CPU per request; docs/security.md);
                                      # /healthz tells which

    [http]
    host = "127.0.0.1"                # "0.0.0.0" in a container: then set
    port = 9091                       # advertised_url, the URL other brokers
    # advertised_url = "http://node-1:9091"   and clients dial
    header_read_timeout_ms = 10000    # connection caps and timeouts: docs/api.md
    [http.dial]                       # optional: for node-to-node calls, dial a
    2 = "127.0.0.1:29022"             # peer's HTTP API somewhere else (a proxy)

    [[voters]]                        # the controller quorum (KRaft's
    id = 1                            # controller.quorum.voters), the same
    raft = "127.0.0.1:19091"          # on every node
    http = "127.0.0.1:9091"
    controller = "127.0.0.1:19191"    # optional: the controller listener, where
    [[voters]]                        # brokers send controller calls (served
    id = 2                            # off the main loop); without it they go
    raft = "127.0.0.1:19092"          # to `http`
    http = "127.0.0.1:9092"
    controller = "127.0.0.1:19192"
    [[voters]]
    id = 3
    raft = "127.0.0.1:19093"
    http = "127.0.0.1:9093"
    controller = "127.0.0.1:19193"

    [raft]
    password = ""                     # default: derived from cluster_secret
    election_timeout_min_ms = 400     # any RaftConfig timing or limit
    [raft.dial]                       # optional: dial a peer somewhere else (a proxy)
    2 = "127.0.0.1:29012"

    [controller]                      # any ControllerConfig setting
    broker_session_timeout_ms = 1500
    [controller_listener]             # its caps (docs/quorum.md)
    connections_max = 512

    [groups]                          # group coordinator (docs/groups.md)
    session_timeout_ms = 10000

    [tls]                             # TLS on the HTTP listener and node-to-node
    certificate_file = "tls/node-1.pem"   # links (docs/security.md)
    key_file = "tls/node-1.key"
    ca_file = "tls/ca.pem"

    [security]                        # authentication and ACLs (docs/security.md)
    authentication = ["bearer", "password"]
    authorization = true
    super_users = ["User:admin"]

    [stream]                          # streaming consume limits (docs/api.md)
    streams_max = 100
    remote_polls_per_leader_max = 2   # reads of other leaders' partitions

    [metrics]                         # GET /metrics (docs/metrics.md)
    enabled = true
    partition_series_max = 1000

Environment overrides: `LOGRAFT_CFG_<KEY>` for a top-level key and
`LOGRAFT_CFG_<SECTION>__<KEY>` inside a section (`__` again for a nested
table), e.g. `LOGRAFT_CFG_HTTP__PORT=9092`,
`LOGRAFT_CFG_STREAM__SOURCE__FETCH_WAIT_MS=2000`. A value is typed by the
setting it overrides: a number or boolean setting takes its text
(`LOGRAFT_CFG_NODE_ID=3`), a string setting keeps the text as it is (a
digits-only secret stays a string), a list or table takes a TOML value
(`LOGRAFT_CFG_ROLES=["broker"]`; a list of strings may also be written
`broker,controller`). Other `LOGRAFT_*` variables (a harness's `LOGRAFT_SRC`,
`scripts/setup.sh`'s `LOGRAFT_EXTRAS`) are not settings and are ignored.

Each section is a typed Record (`lograft.typed`) that lives with the code that
uses it; this module composes them. Every error names the key at fault (and
the environment variable, when one set it).
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect
from msgspec import Meta
from msgspec.structs import force_setattr

from lograft.api.controller_listener_config import ControllerListenerConfig
from lograft.api.http_config import HttpConfig, is_host_port
from lograft.api.metrics.settings import MetricsSettings
from lograft.api.stream.limits import StreamLimits
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.replica_manager import BrokerSettings
from lograft.errors import InvalidConfigError
from lograft.node.event_loop import EventLoopName
from lograft.protocol.fetch_wire import partitions_within
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.raft.config import RaftTuning
from lograft.security.quotas import QuotaConfig
from lograft.security.settings import Authentication, SecuritySettings
from lograft.security.tls import ClientCertificate, TlsSettings
from lograft.storage.config import LogConfig
from lograft.typed import FieldError, NonNegative, Record, build, type_at

_log = logging.getLogger(__name__)

ENV_PREFIX = "LOGRAFT_CFG_"
ROLES: tuple[Role, ...] = ("controller", "broker")
Role = Literal["controller", "broker"]
# Listening on every interface: no address another node could dial.
_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


class Voter(Record):
    node_id: NonNegative = msgspec.field(name="id")
    raft: str  # host:port of its Raft listener
    http: str  # host:port of its HTTP listener
    # host:port of its controller listener (api/controller_listener.py), where
    # brokers send their controller calls; None: it has none, and they go to
    # its HTTP listener (served on the main loop).
    controller: str | None = None

    def __post_init__(self) -> None:
        for key in ("raft", "http", "controller"):
            address = getattr(self, key)
            if address is not None and not is_host_port(address):
                raise FieldError(key, f"{address!r}: write it as host:port")

    def http_url(self, scheme: str = "http") -> str:
        """Its HTTP API's base URL: `scheme` is "https" when the cluster runs [tls]."""
        return f"{scheme}://{self.http}"

    def controller_url(self, scheme: str = "http") -> str:
        """Where its controller RPCs are served: the controller listener, else the HTTP API."""
        return f"{scheme}://{self.controller}" if self.controller else self.http_url(scheme)


class RaftSection(RaftTuning, kw_only=True):
    """`[raft]`: the Raft timings and limits (`RaftTuning`), the password and
    `[raft.dial]`; identity and peers come from node_id, data_dir and voters."""

    # Default: derived from cluster_secret (raft_password.py).
    password: str = ""
    # Peer id -> host:port to dial instead of the voter's own address.
    dial: dict[NonNegative, str] = {}

    def __post_init__(self) -> None:
        super().__post_init__()
        for peer, address in self.dial.items():
            if not is_host_port(address):
                raise FieldError(f"dial.{peer}", f"{address!r}: write it as host:port")

    def tuning(self) -> dict[str, Any]:
        """The `RaftTuning` settings, by name."""
        return {name: getattr(self, name) for name in RaftTuning.__struct_fields__}


class NodeConfig(Record):
    node_id: NonNegative
    data_dir: Path
    roles: Annotated[tuple[Role, ...], Meta(min_length=1)] = ROLES
    cluster_id: str = "lograft"
    cluster_secret: str = ""
    rack: str | None = None
    voters: tuple[Voter, ...] = ()
    http: HttpConfig = HttpConfig()
    raft: RaftSection = RaftSection()
    controller: ControllerConfig = ControllerConfig()
    # The controller listener's sizes (a voter with a `controller` address).
    controller_listener: ControllerListenerConfig = ControllerListenerConfig()
    broker: BrokerSettings = BrokerSettings()
    groups: GroupRuntimeSettings = GroupRuntimeSettings()
    stream: StreamLimits = StreamLimits()
    # None: plain HTTP everywhere (the local quick start only); docs/security.md.
    tls: TlsSettings | None = None
    security: SecuritySettings = SecuritySettings()
    quotas: QuotaConfig = QuotaConfig()
    # GET /metrics and what it counts (docs/metrics.md).
    metrics: MetricsSettings = MetricsSettings()
    log_level: str = "INFO"
    # The node's event loop: "uvloop" (libuv's; 14-20 % less CPU per request
    # than asyncio's on the hot routes, docs/benchmarks.md "Nodes on uvloop:
    # CPU per request (issue 14)"; faster TLS, "Security") or "asyncio" (the
    # standard library's).
    event_loop: EventLoopName = "uvloop"
    # Topic-level log config defaults (segment_bytes, retention_ms, ...);
    # a topic's own configs override them.
    log_defaults: LogConfig = LogConfig()

    def __post_init__(self) -> None:
        force_setattr(self, "log_level", self.log_level.upper())
        _check_voters(self.node_id, self.roles, self.voters)
        _check_security(self.security, self.tls)
        _check_scheme(self.http.advertised_url, self.tls)
        if (
            "broker" in self.roles
            and self.http.advertised_url is None
            and self.http.host in _WILDCARD_HOSTS
        ):
            raise FieldError(
                "http.advertised_url",
                f"http.host={self.http.host!r} listens on every interface, which is no "
                'address to register: set http.advertised_url (e.g. "http://node-1:9091")',
            )

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def http_scheme(self) -> str:
        """Of every node's HTTP API: "https" with [tls] (the same on every node)."""
        return "http" if self.tls is None else "https"

    @property
    def http_url(self) -> str:
        """The URL other nodes and clients dial to reach this node's HTTP API."""
        if self.http.advertised_url is not None:
            return self.http.advertised_url
        return f"{self.http_scheme}://{self.http.host}:{self.http.port}"

    def voter(self, node_id: int) -> Voter | None:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        return None


def load_config(path: Path | str | None, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read the TOML file (if any), apply environment overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise InvalidConfigError(f"config file {p} does not exist", key="--config") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidConfigError(f"config file {p} is not valid TOML: {exc}") from None
    origins = apply_env(raw, os.environ if env is None else env)
    try:
        return parse_config(raw)
    except InvalidConfigError as exc:
        key = str(exc.details.get("key", ""))
        named = [
            name
            for where, name in origins.items()
            if key == where or key.startswith((f"{where}.", f"{where}["))
        ]
        if not named:
            raise
        raise InvalidConfigError(f"{exc.message} (set by {named[0]})", **exc.details) from None


def apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Put the `LOGRAFT_CFG_*` overrides into `raw`; returns the dotted key each
    variable set -> the variable's name."""
    origins: dict[str, str] = {}
    for name, text in env.items():
        if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        target = raw
        for i, part in enumerate(path[:-1]):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                key = ".".join(path[: i + 1])
                raise InvalidConfigError(f"{name} overrides {key}, which is not a section", key=key)
        target[path[-1]] = _env_value(text, type_at(NodeConfig, path))
        origins[".".join(path)] = name
    return origins


_CONTAINERS = (
    msgspec.inspect.StructType,
    msgspec.inspect.DictType,
    msgspec.inspect.ListType,
    msgspec.inspect.VarTupleType,
    msgspec.inspect.TupleType,
)
_SEQUENCES = (msgspec.inspect.ListType, msgspec.inspect.VarTupleType)


def _env_value(text: str, declared: msgspec.inspect.Type | None) -> Any:
    """The text of an override as the value for its setting: the text itself
    for a scalar (the Record types it: strings stand for numbers and booleans
    there, a string setting stays a string); a TOML value for a list or
    table, or comma-separated items for a list."""
    if not isinstance(declared, _CONTAINERS):
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if isinstance(declared, _SEQUENCES):
            return [part.strip() for part in text.split(",") if part.strip()]
        return text


def parse_config(raw: Mapping[str, Any]) -> NodeConfig:
    """The node config in `raw` (TOML tables and values, override strings)."""
    return build(dict(raw), NodeConfig, error=InvalidConfigError, detail="key", strict=False)


def _check_voters(node_id: int, roles: tuple[str, ...], voters: tuple[Voter, ...]) -> None:
    ids = {v.node_id for v in voters}
    if not voters:
        raise FieldError("voters", "at least one controller voter is required")
    if len(ids) != len(voters):
        raise FieldError("voters", "lists a node id twice")
    if "controller" in roles and node_id not in ids:
        raise FieldError("voters", f"node {node_id} has the controller role but is not in voters")
    if "controller" not in roles and node_id in ids:
        raise FieldError("roles", f"node {node_id} is in voters, so roles must include controller")
    for v in voters:
        if v.controller is not None and v.controller in (v.raft, v.http):
            raise FieldError(
                "voters",
                f"voter {v.node_id}: controller {v.controller!r} is also its raft or http "
                "address; the controller listener needs a port of its own",
            )


def _check_scheme(advertised_url: str | None, tls: TlsSettings | None) -> None:
    if advertised_url is None:
        return
    scheme = advertised_url.partition("://")[0]
    wanted = "http" if tls is None else "https"
    if scheme != wanted:
        raise FieldError(
            "http.advertised_url",
            f"{advertised_url!r}: the listener speaks {wanted} "
            f"({'no [tls] section' if tls is None else 'with [tls]'}), so write {wanted}://",
        )


def _check_security(security: SecuritySettings, tls: TlsSettings | None) -> None:
    ways = security.authentication
    if Authentication.PASSWORD in ways and tls is None:
        raise FieldError(
            "security.authentication",
            '"password" sends passwords in every request: it needs [tls] so they are encrypted',
        )
    if Authentication.CERTIFICATE in ways and (
        tls is None or tls.client_certificate is ClientCertificate.NONE
    ):
        raise FieldError(
            "security.authentication",
            '"certificate" needs [tls] with client_certificate = "optional" or "required"',
        )


def fetches_within_requests(broker: BrokerSettings, request_bytes_max: int) -> BrokerSettings:
    """`broker` with `replica_fetch_request_partitions_max` lowered, where
    needed, so that this node's fetches as a follower stay within the
    request bound its peers share ([http] request_bytes_max): a larger one
    would be refused (413, close code 1009) and replication would stop."""
    fits = partitions_within(request_bytes_max)
    if broker.replica_fetch_request_partitions_max <= fits:
        return broker
    _log.info(
        "replica fetches name at most %d partitions, what http.request_bytes_max=%d holds "
        "(broker.replica_fetch_request_partitions_max is %d)",
        fits,
        request_bytes_max,
        broker.replica_fetch_request_partitions_max,
    )
    return msgspec.structs.replace(broker, replica_fetch_request_partitions_max=fits)
