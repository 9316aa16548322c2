"""Node configuration: a TOML file plus environment overrides, validated at start.

Example (`config/node-1.toml`)::

    node_id = 1
    roles = ["controller", "broker"]
    data_dir = "data/node-1"
    cluster_id = "lograft-local"
    cluster_secret = "..."            # required: `openssl rand -hex 16`, the same
                                      # on every node; authenticates the internal
                                      # endpoints and keys the Raft links

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
    [[voters]]
    id = 2
    raft = "127.0.0.1:19092"
    http = "127.0.0.1:9092"
    [[voters]]
    id = 3
    raft = "127.0.0.1:19093"
    http = "127.0.0.1:9093"

    [raft]
    password = ""                     # default: derived from cluster_secret
    election_timeout_min_ms = 400     # any RaftConfig timing or limit
    [raft.dial]                       # optional: dial a peer somewhere else (a proxy)
    2 = "127.0.0.1:29012"

    [controller]                      # any ControllerConfig setting
    broker_session_timeout_ms = 1500

    [groups]                          # group coordinator (docs/groups.md)
    session_timeout_ms = 10000

    [stream]                          # streaming consume limits (docs/api.md)
    streams_max = 100
    remote_polls_per_leader_max = 2   # reads of other leaders' partitions

Environment overrides: `LOGRAFT_<KEY>` for a top-level key and
`LOGRAFT_<SECTION>__<KEY>` inside a section, e.g. `LOGRAFT_HTTP__PORT=9092`.
Values are parsed as TOML values when they parse (numbers, booleans, arrays)
and taken as strings otherwise. Every error names the key at fault.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lograft.errors import InvalidConfigError

ENV_PREFIX = "LOGRAFT_"
ROLES = ("controller", "broker")


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    raft: str  # host:port of its Raft listener
    http: str  # host:port of its HTTP listener

    @property
    def http_url(self) -> str:
        return f"http://{self.http}"


@dataclass(frozen=True, slots=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 9091
    # The URL this broker registers for others to dial (Kafka's
    # advertised.listeners); None: http://{host}:{port}.
    advertised_url: str | None = None
    # Largest request body accepted, bytes.
    request_bytes_max: int = 16 * 1024 * 1024
    # Largest body of a request that is not a produce (group join, sync,
    # heartbeat and commit, admin and config changes), bytes: none needs
    # more, and parsing 16 MiB of JSON holds the event loop 0.1-0.3 s.
    admin_request_bytes_max: int = 1024 * 1024
    # Request bodies held at once (being received or handled), bytes: one
    # budget for clients' requests and one of the same size for other nodes'
    # (/internal/); at least request_bytes_max (request_bodies.py).
    request_bytes_inflight_max: int = 256 * 1024 * 1024
    # How long a body waits, unread, for room in that budget before it is
    # answered 503 REQUEST_BYTES_INFLIGHT_LIMIT_REACHED, ms.
    request_bytes_inflight_wait_ms: int = 5_000
    # A body must arrive whole within this long of the node starting to read
    # it; otherwise 408 REQUEST_BODY_TIMEOUT and the connection is closed, ms.
    body_read_timeout_ms: int = 30_000
    # Peer id -> host:port this node dials for that peer's HTTP API in
    # node-to-node calls, instead of the peer's advertised address (a proxy per
    # link in fault-injection tests). Clients are never told these addresses.
    dial: Mapping[int, str] = field(default_factory=dict)
    # Most connections open at once, over all peers, for calls made on a
    # client's behalf (a produce forwarded to the partition's leader, a group
    # call forwarded to its coordinator, an admin fan-out); more wait for one.
    # Replica fetches and controller calls have pools of their own, so they
    # never wait behind these.
    forward_connections_max: int = 100
    # Client connections this node holds at once, over all addresses; more are
    # answered 503 CONNECTIONS_LIMIT_REACHED and closed (connection_guard.py).
    connections_max: int = 4096
    # Client connections from one remote address at once (at most
    # connections_max); the rest of connections_max stays for other hosts,
    # the other nodes among them.
    connections_per_ip_max: int = 1024
    # A connection that has not sent a whole request's headers this long after
    # it opened (or after that request's first byte) is closed, ms.
    header_read_timeout_ms: int = 10_000
    # An idle keep-alive connection is closed after this long, ms. Above the
    # 15 s aiohttp clients (the nodes among them) keep an idle connection, so
    # that the client, not the node, closes it first.
    keepalive_timeout_ms: int = 75_000
    # At most one INFO line per kind of client fault (malformed HTTP, a client
    # gone mid-request, a header timeout, a refused connection) this long, ms.
    client_fault_log_interval_ms: int = 10_000
    # Bytes the compressed batches of one produce request may inflate to, in
    # all (refused with 413 as soon as inflation passes it).
    produce_decompressed_bytes_max: int = 64 * 1024 * 1024
    # Bytes the compressed batches one JSON fetch (or one stream read) renders
    # may inflate to, in all; the first batch always inflates.
    fetch_decompressed_bytes_max: int = 64 * 1024 * 1024
    # Largest JSON one record renders to in a fetch or a stream, bytes.
    record_render_bytes_max: int = 8 * 1024 * 1024
    # Threads that decompress, validate and render records for requests, off
    # the event loop; more such work waits for one.
    record_threads_max: int = 2


@dataclass(frozen=True, slots=True)
class RaftSection:
    password: str = ""
    # Peer id -> host:port to dial instead of the voter's own address.
    dial: Mapping[int, str] = field(default_factory=dict)
    # Further RaftConfig settings (timings, limits), validated by RaftConfig.
    tuning: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    data_dir: Path
    roles: tuple[str, ...] = ROLES
    cluster_id: str = "lograft"
    cluster_secret: str = ""
    rack: str | None = None
    voters: tuple[Voter, ...] = ()
    http: HttpConfig = field(default_factory=HttpConfig)
    raft: RaftSection = field(default_factory=RaftSection)
    # ControllerConfig settings, validated by the controller.
    controller: Mapping[str, Any] = field(default_factory=dict)
    # BrokerConfig settings, validated by the broker.
    broker: Mapping[str, Any] = field(default_factory=dict)
    # Group coordinator settings (GroupRuntimeSettings), validated by the broker.
    groups: Mapping[str, Any] = field(default_factory=dict)
    # Streaming consume limits (StreamLimits), validated by the broker.
    stream: Mapping[str, Any] = field(default_factory=dict)
    log_level: str = "INFO"
    # Topic-level log config defaults (segment_bytes, retention_ms, ...).
    log_defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def http_url(self) -> str:
        """The URL other nodes and clients dial to reach this node's HTTP API."""
        if self.http.advertised_url is not None:
            return self.http.advertised_url
        return f"http://{self.http.host}:{self.http.port}"

    def voter(self, node_id: int) -> Voter | None:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        return None


_TOP_KEYS = {
    "node_id",
    "data_dir",
    "roles",
    "cluster_id",
    "cluster_secret",
    "rack",
    "voters",
    "http",
    "raft",
    "controller",
    "broker",
    "groups",
    "stream",
    "log_level",
    "log_defaults",
}
_VOTER_KEYS = {"id", "raft", "http"}
_HTTP_KEYS = {
    "host",
    "port",
    "request_bytes_max",
    "admin_request_bytes_max",
    "request_bytes_inflight_max",
    "request_bytes_inflight_wait_ms",
    "body_read_timeout_ms",
    "advertised_url",
    "dial",
    "forward_connections_max",
    "connections_max",
    "connections_per_ip_max",
    "header_read_timeout_ms",
    "keepalive_timeout_ms",
    "client_fault_log_interval_ms",
    "produce_decompressed_bytes_max",
    "fetch_decompressed_bytes_max",
    "record_render_bytes_max",
    "record_threads_max",
}
# [http] settings that are positive integers and need nothing else checked.
_HTTP_POSITIVE_INTS = (
    "request_bytes_inflight_wait_ms",
    "body_read_timeout_ms",
    "connections_max",
    "connections_per_ip_max",
    "header_read_timeout_ms",
    "keepalive_timeout_ms",
    "client_fault_log_interval_ms",
)
# Listening on every interface: no address another node could dial.
_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


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
    apply_env(raw, os.environ if env is None else env)
    return parse_config(raw)


def apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    for name, text in env.items():
        if not name.startswith(ENV_PREFIX) or len(name) == len(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        target = raw
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise InvalidConfigError(f"{name} overrides a key that is not a section")
        target[path[-1]] = _env_value(text)


def _env_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_config(raw: Mapping[str, Any]) -> NodeConfig:
    _no_unknown(raw, _TOP_KEYS, "")
    if "node_id" not in raw:
        raise InvalidConfigError("node_id is required", key="node_id")
    if "data_dir" not in raw:
        raise InvalidConfigError("data_dir is required", key="data_dir")
    node_id = _int(raw["node_id"], "node_id", minimum=0)
    roles = tuple(_list(raw.get("roles", list(ROLES)), "roles"))
    if not roles or any(r not in ROLES for r in roles):
        raise InvalidConfigError(
            f"roles={list(roles)!r}: use one or both of {', '.join(ROLES)}", key="roles"
        )
    voters = tuple(_voter(v, i) for i, v in enumerate(_list(raw.get("voters", []), "voters")))
    _check_voters(node_id, roles, voters)
    http = _http(raw.get("http", {}))
    if "broker" in roles and http.advertised_url is None and http.host in _WILDCARD_HOSTS:
        raise InvalidConfigError(
            f"http.host={http.host!r} listens on every interface, which is no address to "
            'register: set http.advertised_url (e.g. "http://node-1:9091")',
            key="http.advertised_url",
        )
    return NodeConfig(
        node_id=node_id,
        data_dir=Path(_str(raw["data_dir"], "data_dir")),
        roles=roles,
        cluster_id=_str(raw.get("cluster_id", "lograft"), "cluster_id"),
        cluster_secret=_str(raw.get("cluster_secret", ""), "cluster_secret"),
        rack=_str(raw["rack"], "rack") if raw.get("rack") is not None else None,
        voters=voters,
        http=http,
        raft=_raft(raw.get("raft", {})),
        controller=dict(_section(raw.get("controller", {}), "controller")),
        broker=dict(_section(raw.get("broker", {}), "broker")),
        groups=dict(_section(raw.get("groups", {}), "groups")),
        stream=dict(_section(raw.get("stream", {}), "stream")),
        log_level=_str(raw.get("log_level", "INFO"), "log_level").upper(),
        log_defaults=_log_defaults(raw.get("log_defaults", {})),
    )


def _http(raw: Any) -> HttpConfig:
    section = _section(raw, "http")
    _no_unknown(section, _HTTP_KEYS, "http.")
    d = HttpConfig()

    def setting(key: str, minimum: int) -> int:
        return _int(section.get(key, getattr(d, key)), f"http.{key}", minimum=minimum)

    request_bytes_max = setting("request_bytes_max", 1024)
    inflight_max = setting("request_bytes_inflight_max", 1)
    if inflight_max < request_bytes_max:
        # Such a budget would refuse the largest bodies forever.
        raise InvalidConfigError(
            f"http.request_bytes_inflight_max={inflight_max} is below "
            f"http.request_bytes_max={request_bytes_max}: the budget must hold at least "
            "one body of the largest size",
            key="http.request_bytes_inflight_max",
        )
    admin_bytes_max = setting("admin_request_bytes_max", 1024)
    return HttpConfig(
        host=_str(section.get("host", d.host), "http.host"),
        port=_port(section.get("port", d.port), "http.port"),
        request_bytes_max=request_bytes_max,
        admin_request_bytes_max=min(admin_bytes_max, request_bytes_max),
        request_bytes_inflight_max=inflight_max,
        advertised_url=_url(section["advertised_url"], "http.advertised_url")
        if section.get("advertised_url") is not None
        else None,
        dial=_dial(section.get("dial", {}), "http.dial"),
        forward_connections_max=setting("forward_connections_max", 1),
        **{key: setting(key, 1) for key in _HTTP_POSITIVE_INTS},
        produce_decompressed_bytes_max=setting("produce_decompressed_bytes_max", 1024),
        fetch_decompressed_bytes_max=setting("fetch_decompressed_bytes_max", 1024),
        record_render_bytes_max=setting("record_render_bytes_max", 1024),
        record_threads_max=setting("record_threads_max", 1),
    )


def _url(raw: Any, key: str) -> str:
    text = _str(raw, key).rstrip("/")
    scheme, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme not in ("http", "https") or not sep or not colon or not host or "/" in rest:
        raise InvalidConfigError(f"{key}={text!r}: write it as http://host:port", key=key)
    _port(port, key)
    return text


def _check_voters(node_id: int, roles: tuple[str, ...], voters: tuple[Voter, ...]) -> None:
    ids = {v.node_id for v in voters}
    if not voters:
        raise InvalidConfigError("voters: at least one controller voter is required", key="voters")
    if len(ids) != len(voters):
        raise InvalidConfigError("voters lists a node id twice", key="voters")
    if "controller" in roles and node_id not in ids:
        raise InvalidConfigError(
            f"node {node_id} has the controller role but is not in voters", key="voters"
        )
    if "controller" not in roles and node_id in ids:
        raise InvalidConfigError(
            f"node {node_id} is in voters, so roles must include controller", key="roles"
        )


def _raft(raw: Any) -> RaftSection:
    section = dict(_section(raw, "raft"))
    dial = _dial(section.pop("dial", {}), "raft.dial")
    password = _str(section.pop("password", ""), "raft.password")
    for reserved in ("node_id", "data_dir", "peers", "listen_address", "voter"):
        if reserved in section:
            raise InvalidConfigError(
                f"raft.{reserved} is derived from node_id, data_dir and voters; remove it",
                key=f"raft.{reserved}",
            )
    return RaftSection(password=password, dial=dial, tuning=section)


def _dial(raw: Any, key: str) -> dict[int, str]:
    """A `[raft.dial]` / `[http.dial]` table: peer node id -> host:port."""
    dial: dict[int, str] = {}
    for peer, address in _section(raw, key).items():
        entry = f"{key}.{peer}"
        dial[_int(peer, entry, minimum=0)] = _address(address, entry)
    return dial


def _log_defaults(raw: Any) -> dict[str, Any]:
    from lograft.storage.config import coerce_overrides

    section = _section(raw, "log_defaults")
    return coerce_overrides(dict(section))


def _voter(raw: Any, i: int) -> Voter:
    key = f"voters[{i}]"
    section = _section(raw, key)
    _no_unknown(section, _VOTER_KEYS, f"{key}.")
    for required in ("id", "raft", "http"):
        if required not in section:
            raise InvalidConfigError(f"{key}.{required} is required", key=f"{key}.{required}")
    return Voter(
        node_id=_int(section["id"], f"{key}.id", minimum=0),
        raft=_address(section["raft"], f"{key}.raft"),
        http=_address(section["http"], f"{key}.http"),
    )


def _address(raw: Any, key: str) -> str:
    text = _str(raw, key)
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise InvalidConfigError(f"{key}={text!r}: write it as host:port", key=key)
    _port(port, key)
    return text


def _section(raw: Any, key: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidConfigError(f"{key} must be a table (section)", key=key)
    return raw


def _no_unknown(raw: Mapping[str, Any], allowed: set[str], prefix: str) -> None:
    for k in raw:
        if k not in allowed:
            raise InvalidConfigError(
                f"unknown setting {prefix}{k}; known: {', '.join(sorted(allowed))}",
                key=f"{prefix}{k}",
            )


def _str(raw: Any, key: str) -> str:
    if not isinstance(raw, str):
        raise InvalidConfigError(f"{key} must be a string, got {raw!r}", key=key)
    return raw


def _list(raw: Any, key: str) -> list[Any]:
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    if not isinstance(raw, list):
        raise InvalidConfigError(f"{key} must be a list, got {raw!r}", key=key)
    return raw


def _int(raw: Any, key: str, *, minimum: int | None = None) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key} must be an integer, got {raw!r}", key=key)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key} must be an integer, got {raw!r}", key=key) from None
    if minimum is not None and value < minimum:
        raise InvalidConfigError(f"{key} must be >= {minimum}, got {value}", key=key)
    return value


def _port(raw: Any, key: str) -> int:
    value = _int(raw, key, minimum=0)
    if value > 65535:
        raise InvalidConfigError(f"{key} must be a port number (0-65535), got {value}", key=key)
    return value
