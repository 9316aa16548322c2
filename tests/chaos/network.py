"""A toxiproxy proxy on every inter-node link of a test cluster, and the faults it can cause.

Usage (the runner does this for a scenario with `needs_network=True`)::

    cluster = LograftCluster(workdir, 3)          # not started yet
    with Network(cluster) as net:                 # toxiproxy up, proxies made,
        cluster.start()                           # node configs route through them
        net.cut(1, 2)                             # bytes 1 -> 2 stop, 2 -> 1 flow
        net.isolate(3)                            # 3 hears nobody, nobody hears 3
        net.heal()                                # every link as it was
        cluster.close()
    # leaving the block stops the loss/flap threads and kills the toxiproxy
    # server by its pid, and asserts that its API and proxy ports are free

`Network(cluster)` must be entered before the nodes start: it rewrites each
node's `[raft.dial]` and `[http.dial]` (NodeSpec.dial / NodeSpec.http_dial),
and a node reads its config only when it starts. A node restarted later keeps
the proxied config. `toxiproxy-python` keeps the API address in class
attributes (`APIConsumer.host/port`), so one process runs one Network at a time
(tests/chaos/toxiproxy_server.py runs the server and says which calls bypass
the client, and why).

Topology (docs/reliability.md, "Topology", has the diagram): for each link
kind K in (raft, http) and each ordered pair (a, b), one proxy `K-a-b`
through which node a dials node b. `raft-a-b` exists when b is a voter (only
voters listen for Raft); `http-a-b` for every pair. Client-facing traffic (the
test's own requests, the workload's producers and consumers) goes to each
node's advertised HTTP address directly and is never touched. The voters run
without a controller listener (api/controller_listener.py), so controller
calls travel the `http` links like any other node-to-node call.

Directions. A TCP connection through `K-a-b` carries a's bytes to b on the
proxy's *upstream* stream and b's answers on its *downstream* stream. So
"every byte from a to b" is the upstream of each `K-a-b` plus the downstream
of each `K-b-a`. Every directed operation (cut, latency, bandwidth, loss) acts
on exactly that set, on connections already open and on new ones, whichever
side dialled (pysyncobj keeps one connection per voter pair, dialled by the
greater id; aiohttp keeps pooled keep-alive connections).

Operations (a, b, n are node ids; `kinds` narrows to ("raft",) or ("http",)):

- `cut(a, b)`: nothing a sends reaches b; b -> a still flows. So a's requests
  to b hang, and b's requests to a arrive (and are acted on) but their answers
  hang. The bytes are dropped by a `timeout` toxic (timeout 0: drop, never
  close), on open connections and new ones alike; the proxy itself is local,
  so a new connection is accepted and then hangs, as after a lost SYN-ACK
  nothing would tell the sender either. On `heal()` toxiproxy closes every
  connection the cut passed through (removing a `timeout` toxic closes its
  connections), so no connection ever resumes with a hole in its byte
  stream: to the nodes, a healed cut looks like a partition that lasted until
  TCP gave up. (Holding the bytes instead, with a huge `latency`, would let a
  connection resume intact, but toxiproxy v2.12.0 wedges when such a toxic is
  removed after the far end closed the connection.)
- `cut_both(a, b)`: cut(a, b) and cut(b, a).
- `isolate(n)`: cut_both(n, m) for every other node m. Clients still reach n.
- `partition(groups)`: e.g. [{1}, {2, 3}]: cut_both across groups; the groups
  must cover every node exactly once.
- `bridge(n)`: the other nodes split in two sides that cannot hear each other;
  n hears and is heard by both (Jepsen's bridge). `sides` may be given.
- `latency(a, b, ms, jitter_ms=0)`: bytes a -> b are delayed by ms +- jitter.
- `bandwidth(a, b, kbytes_per_s)`: bytes a -> b at most that rate (toxiproxy's
  unit: KB/s).
- `loss(a, b, rate, rng)`: emulated packet loss a -> b, see "Loss" below.
  `loss(a, b)` without `loss(b, a)` is asymmetric loss.
- `flap(a, b, period_s)`: the link between a and b (both directions) goes down
  and up in turn, every period_s / 2, until heal(): down means the proxies
  are disabled, which closes their open connections and refuses new ones.
- `heal()`: stop every loss and flap thread, remove every toxic, enable every
  proxy. Should toxiproxy not answer the reset in time, the server is
  restarted with the same proxies at the same addresses (every inter-node
  connection closes, as on any heal of a cut).

Loss. Toxiproxy has no packet-loss toxic, and TCP never shows an application
a lost packet: it retransmits, so what loss does to lograft is stall a
direction and, when a burst lasts, make the endpoints time out and reconnect.
A toxic's `toxicity` is drawn per connection (and drawn again whenever the
chain changes), so on the long-lived connections here (one Raft connection
per voter pair, pooled HTTP) it is all or nothing for a connection, not a
rate; and it draws from toxiproxy's own random source, which our seed cannot
replay. So loss is emulated by toggling, from a generator seeded by the
scenario's rng: time is cut into slices of LOSS_SLICE_MS; in each slice, with
probability `rate`, the direction a -> b is cut (as `cut`), and at the
slice's end the cut is removed, which closes the connections it passed
through. So a lossy slice is a burst of loss that ends in a reconnect, and
`rate` is the share of time a -> b delivers nothing; b -> a is untouched, so
requests from b arrive while their answers are lost. Each link's draws are
kept in `loss_draws` for the report.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import urllib.request
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from tests.chaos.toxiproxy_server import SERVER_PATH, ToxiproxyError, ToxiproxyServer
from tests.integration.cluster_harness import (
    PROCESS_EXIT_TIMEOUT_S,
    LograftCluster,
    free_port,
    port_is_free,
)

LinkKind = Literal["raft", "http"]
KINDS: tuple[LinkKind, ...] = ("raft", "http")
Stream = Literal["upstream", "downstream"]

# One loss slice: a burst of loss long enough to stall a request, short
# enough that several fit in a fault's hold, ms.
# Tries to create one proxy when its chosen port turns out to be taken.
PROXY_PORT_ATTEMPTS = 5
LOSS_SLICE_MS = 500
# A probe (Network.probe) that gets no answer within this long counts as cut, s.
PROBE_TIMEOUT_S = 1.0

__all__ = ["KINDS", "SERVER_PATH", "Link", "LinkKind", "Network"]


@dataclass(frozen=True)
class Link:
    """The proxy through which node `src` dials node `dst` for `kind` traffic."""

    kind: LinkKind
    src: int
    dst: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.src}-{self.dst}"


class Network:
    """Every inter-node link of `cluster` through its own toxiproxy proxy."""

    def __init__(
        self,
        cluster: LograftCluster,
        *,
        server_path: Path = SERVER_PATH,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        # Told of every fault and heal, as one plain line each.
        self.log = log or (lambda _line: None)
        self.server = ToxiproxyServer(server_path, cluster.workdir / "toxiproxy.log")
        # Link -> host:port its proxy listens on.
        self.proxies: dict[Link, str] = {}
        # "a->b" -> the loss draws of that direction, in order (True: a lossy slice).
        self.loss_draws: dict[str, list[bool]] = {}
        self._api_ports: set[int] = set()
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Network:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start toxiproxy, make a proxy per link and point every node's config at them."""
        running = [n.node_id for n in self.cluster if n.running]
        assert not running, f"nodes {running} already run: their configs would bypass the proxies"
        voters = {spec.node_id for spec in self.cluster.voter_specs()}
        for a, b in itertools.permutations(self.node_ids, 2):
            for kind in KINDS:
                if kind == "http" or b in voters:  # only voters listen for Raft
                    self.proxies[Link(kind, a, b)] = f"127.0.0.1:{free_port()}"
        self._start_server()
        for node in self.cluster:
            # No controller listener: controller calls go to the HTTP port,
            # through the http proxies, so every fault acts on them too.
            node.spec.controller_port = None
            mine = {
                link: address for link, address in self.proxies.items() if link.src == node.node_id
            }
            node.spec.dial = {k.dst: addr for k, addr in mine.items() if k.kind == "raft"}
            node.spec.http_dial = {k.dst: addr for k, addr in mine.items() if k.kind == "http"}

    def _start_server(self) -> None:
        self.server.start()
        self._api_ports.add(self.server.port)
        try:
            for link in list(self.proxies):
                self._create_proxy(link)
        except BaseException:
            self.server.stop()
            raise

    def _create_proxy(self, link: Link) -> None:
        """Create the link's proxy; a port taken since `free_port` chose it
        (by any process's outgoing connection) gets a new port. The node
        configs are written after this, so they name the port that worked."""
        for _ in range(PROXY_PORT_ATTEMPTS - 1):
            try:
                self.server.create_proxy(link.name, self.proxies[link], self._upstream(link))
                return
            except ToxiproxyError as exc:
                if "address already in use" not in str(exc):
                    raise
                self.proxies[link] = f"127.0.0.1:{free_port()}"
        self.server.create_proxy(link.name, self.proxies[link], self._upstream(link))

    def _upstream(self, link: Link) -> str:
        spec = self.cluster[link.dst].spec
        return spec.raft_address if link.kind == "raft" else spec.http_address

    def close(self) -> None:
        """Stop the threads, kill the server by pid, assert its ports are free again."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop_threads()
        finally:
            self.server.stop()
        ports = self._api_ports | {int(a.rsplit(":", 1)[1]) for a in self.proxies.values()}
        busy = sorted(p for p in ports if not port_is_free(p))
        assert not busy, f"toxiproxy ports still in use after close: {busy}"

    def listen_address(self, link: Link) -> str:
        """host:port where the proxy of `link` listens (what src dials to reach dst)."""
        return self.proxies[link]

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.cluster.nodes)

    # -- directed faults ---------------------------------------------------------------------

    def streams(
        self, a: int, b: int, kinds: Collection[LinkKind] = KINDS
    ) -> list[tuple[str, Stream]]:
        """Every (proxy name, stream) that carries bytes from a to b (see "Directions")."""
        self._check_pair(a, b)
        found: list[tuple[str, Stream]] = []
        for kind in kinds:
            forward, backward = Link(kind, a, b), Link(kind, b, a)
            if forward in self.proxies:
                found.append((forward.name, "upstream"))
            if backward in self.proxies:
                found.append((backward.name, "downstream"))
        return found

    def cut(self, a: int, b: int, kinds: Collection[LinkKind] = KINDS) -> None:
        """Nothing a sends reaches b (dropped; connections closed on heal); b -> a flows."""
        self.log(f"network: cut {a} -> {b} ({'+'.join(kinds)})")
        self._add_toxics(a, b, kinds, "cut", "timeout", {"timeout": 0})

    def cut_both(self, a: int, b: int, kinds: Collection[LinkKind] = KINDS) -> None:
        self.cut(a, b, kinds)
        self.cut(b, a, kinds)

    def isolate(self, n: int, kinds: Collection[LinkKind] = KINDS) -> None:
        """n hears no other node and no other node hears n; clients still reach n."""
        self.log(f"network: isolate {n}")
        for m in self.node_ids:
            if m != n:
                self.cut_both(n, m, kinds)

    def partition(
        self, groups: Sequence[Collection[int]], kinds: Collection[LinkKind] = KINDS
    ) -> None:
        """Nodes in different groups cannot hear each other; the groups cover every node."""
        named = [n for g in groups for n in g]
        if sorted(named) != self.node_ids:
            raise ValueError(
                f"groups {[sorted(g) for g in groups]} must cover nodes {self.node_ids} "
                "exactly once"
            )
        self.log(f"network: partition {' | '.join(str(sorted(g)) for g in groups)}")
        side = {n: i for i, g in enumerate(groups) for n in g}
        for a, b in itertools.combinations(self.node_ids, 2):
            if side[a] != side[b]:
                self.cut_both(a, b, kinds)

    def bridge(
        self,
        n: int,
        sides: tuple[Collection[int], Collection[int]] | None = None,
        kinds: Collection[LinkKind] = KINDS,
    ) -> tuple[set[int], set[int]]:
        """The others split in two sides that cannot hear each other; n links both.
        Default sides: the other nodes in id order, halved. Returns the sides."""
        others = [m for m in self.node_ids if m != n]
        if sides is None:
            half = (len(others) + 1) // 2
            sides = (others[:half], others[half:])
        left, right = set(sides[0]), set(sides[1])
        if left & right or (left | right) != set(others) or not left or not right:
            raise ValueError(f"sides {sorted(left)} / {sorted(right)} must split {others}")
        self.log(f"network: bridge {sorted(left)} <-> {n} <-> {sorted(right)}")
        for a in sorted(left):
            for b in sorted(right):
                self.cut_both(a, b, kinds)
        return left, right

    def latency(
        self,
        a: int,
        b: int,
        ms: int,
        jitter_ms: int = 0,
        kinds: Collection[LinkKind] = KINDS,
    ) -> None:
        """Bytes from a to b arrive `ms` +- `jitter_ms` milliseconds late."""
        self.log(f"network: latency {a} -> {b} {ms} +- {jitter_ms} ms ({'+'.join(kinds)})")
        self._add_toxics(a, b, kinds, "latency", "latency", {"latency": ms, "jitter": jitter_ms})

    def bandwidth(
        self, a: int, b: int, kbytes_per_s: int, kinds: Collection[LinkKind] = KINDS
    ) -> None:
        """Bytes from a to b flow at most `kbytes_per_s` KB/s (per connection)."""
        if kbytes_per_s <= 0:
            raise ValueError("toxiproxy reads a bandwidth <= 0 as unlimited: use cut()")
        self.log(f"network: bandwidth {a} -> {b} {kbytes_per_s} KB/s ({'+'.join(kinds)})")
        self._add_toxics(a, b, kinds, "bandwidth", "bandwidth", {"rate": kbytes_per_s})

    def loss(
        self,
        a: int,
        b: int,
        rate: float,
        rng: random.Random,
        *,
        slice_ms: int = LOSS_SLICE_MS,
        kinds: Collection[LinkKind] = KINDS,
    ) -> None:
        """Emulated packet loss from a to b until heal() (see "Loss" above). `rng` seeds
        this direction's own generator, so a run replays from the scenario's seed."""
        if not 0 <= rate <= 1:
            raise ValueError(f"rate {rate} is not a probability")
        self._check_pair(a, b)
        own = random.Random(rng.getrandbits(64))
        draws = self.loss_draws.setdefault(f"{a}->{b}", [])
        self.log(
            f"network: loss {a} -> {b}, {rate:.0%} of {slice_ms} ms slices ({'+'.join(kinds)})"
        )

        def lossy() -> None:
            while not self._stop.is_set():
                lossy_slice = own.random() < rate
                draws.append(lossy_slice)
                added = []
                if lossy_slice:
                    added = self._add_toxics(a, b, kinds, "loss", "timeout", {"timeout": 0})
                self._stop.wait(slice_ms / 1000)
                for proxy, name in added:
                    self.server.remove_toxic(proxy, name)

        self._spawn(f"loss-{a}-{b}", lossy)

    def flap(self, a: int, b: int, period_s: float, kinds: Collection[LinkKind] = KINDS) -> None:
        """The a-b link goes down (proxies disabled) and up every period_s / 2 until heal()."""
        self._check_pair(a, b)
        names = [
            link.name
            for link in self.proxies
            if {link.src, link.dst} == {a, b} and link.kind in kinds
        ]
        self.log(f"network: flap {a} <-> {b} every {period_s / 2:.2f}s ({'+'.join(kinds)})")

        def flapping() -> None:
            while not self._stop.is_set():
                for name in names:
                    self.server.set_enabled(name, False)
                if self._stop.wait(period_s / 2):
                    break
                for name in names:
                    self.server.set_enabled(name, True)
                self._stop.wait(period_s / 2)
            # heal() enables every proxy after the threads stop.

        self._spawn(f"flap-{a}-{b}", flapping)

    # -- observing ---------------------------------------------------------------------------

    def probe(self, a: int, b: int, timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
        """Seconds a `GET /healthz` took from a's side of `http-a-b` to b and back, or None
        if no answer came within `timeout_s`: what node a calling node b would see now."""
        url = f"http://{self.listen_address(Link('http', a, b))}/healthz"
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                resp.read()
        except OSError:  # refused, reset, timed out: no answer
            return None
        return time.monotonic() - started

    def reachability(self, timeout_s: float = PROBE_TIMEOUT_S) -> dict[tuple[int, int], bool]:
        """(a, b) -> whether a `probe(a, b)` was answered, every ordered pair probed at once."""
        pairs = list(itertools.permutations(self.node_ids, 2))
        with ThreadPoolExecutor(len(pairs)) as pool:
            answers = list(pool.map(lambda ab: self.probe(*ab, timeout_s=timeout_s), pairs))
        return {pair: answer is not None for pair, answer in zip(pairs, answers, strict=True)}

    def toxics(self) -> dict[str, list[str]]:
        """Proxy name -> names of its toxics, for the proxies that have any."""
        return {
            name: sorted(t["name"] for t in proxy["toxics"])
            for name, proxy in self.server.proxies().items()
            if proxy["toxics"]
        }

    def disabled(self) -> list[str]:
        """Names of the proxies that are down (disabled) right now."""
        return sorted(name for name, p in self.server.proxies().items() if not p["enabled"])

    # -- healing -----------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop every loss/flap thread, remove every toxic, enable every proxy."""
        self._stop_threads()
        self.log("network: heal")
        try:
            self.server.reset()
        except ToxiproxyError as exc:
            # A wedged server: start a fresh one with the same proxies (see the docstring).
            self.log(f"network: toxiproxy did not reset ({exc}); restarting it")
            self.server.stop()
            self._start_server()

    # -- internals ---------------------------------------------------------------------------

    def _check_pair(self, a: int, b: int) -> None:
        if a == b or a not in self.cluster.nodes or b not in self.cluster.nodes:
            raise ValueError(f"({a}, {b}) is not a pair of distinct nodes of {self.node_ids}")

    def _add_toxics(
        self,
        a: int,
        b: int,
        kinds: Collection[LinkKind],
        label: str,
        toxic_type: str,
        attributes: dict[str, int],
    ) -> list[tuple[str, str]]:
        """One toxic on every stream a -> b; returns (proxy, toxic name) of each."""
        added: list[tuple[str, str]] = []
        for proxy, stream in self.streams(a, b, kinds):
            with self._lock:
                name = f"{label}-{a}-{b}-{stream}-{next(self._names)}"
            self.server.add_toxic(proxy, name, toxic_type, stream, attributes)
            added.append((proxy, name))
        return added

    def _spawn(self, name: str, body: Callable[[], None]) -> None:
        thread = threading.Thread(target=body, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _stop_threads(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=PROCESS_EXIT_TIMEOUT_S)
            assert not thread.is_alive(), f"network thread {thread.name} did not stop"
        self._threads.clear()
        self._stop = threading.Event()
