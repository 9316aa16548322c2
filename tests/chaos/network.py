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
attributes (`APIConsumer.host/port`), so one process runs one Network at a time.

Topology (docs/reliability.md, "Topology", has the diagram): for each link
kind K in (raft, http) and each ordered pair (a, b), one proxy `K-a-b`
through which node a dials node b. `raft-a-b` exists when b is a voter (only
voters listen for Raft); `http-a-b` for every pair. Client-facing traffic (the
test's own requests, the workload's producers and consumers) goes to each
node's advertised HTTP address directly and is never touched.

Directions. A TCP connection through `K-a-b` carries a's bytes to b on the
proxy's *upstream* stream and b's answers on its *downstream* stream. So
"every byte from a to b" is the upstream of each `K-a-b` plus the downstream
of each `K-b-a`. Every directed operation (cut, latency, bandwidth, loss) acts
on exactly that set, on connections already open and on new ones, whichever
side dialled (pysyncobj keeps one connection per voter pair, dialled by the
greater id; aiohttp keeps pooled keep-alive connections).

Operations (a, b, n are node ids; `kinds` narrows to ("raft",) or ("http",)):

- `cut(a, b)`: nothing a sends reaches b; b -> a still flows. So a's requests
  to b hang, and b's requests to a arrive but their answers hang. Bytes are
  *held*, not dropped (a `latency` toxic of CUT_HOLD_MS): that is what a
  one-way partition does to TCP (the sender retransmits; nothing is lost or
  reordered), so after `heal()` a connection that survived its endpoints'
  timeouts resumes intact, with the held bytes delivered late, like a stale
  packet after a real partition. New connections are accepted by the proxy
  (it is local) and then hang the same way.
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
  proxy. The held bytes of a cut are delivered on removal.

Loss. Toxiproxy has no packet-loss toxic, and TCP never shows an application
a lost packet: it retransmits, so what loss does to lograft is stall the
direction (head-of-line blocking until the retransmission) and, when heavy,
break connections. A toxic's `toxicity` is drawn per connection (and again
whenever the chain changes), so on the long-lived connections here (one
Raft connection per pair, pooled HTTP) it is all or nothing for a connection,
not a rate, and it draws from toxiproxy's own random source, which the seed
cannot replay. So loss is emulated by toggling from a seeded generator: time
is cut into slices of LOSS_SLICE_MS (Linux's minimum retransmission timeout);
in each slice, with probability `rate`, the direction a -> b is held (the
cut's latency toxic) and released at the slice's end, in order; with
probability `reset_rate` the pair's connections are also closed at the end
of a slice (as heavy loss ends in a TCP reset).
"""

from __future__ import annotations

import itertools
import random
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from toxiproxy.api import APIConsumer
from toxiproxy.proxy import Proxy
from toxiproxy.server import Toxiproxy

from tests.integration.cluster_harness import (
    PROCESS_EXIT_TIMEOUT_S,
    LograftCluster,
    eventually,
    free_port,
    port_is_free,
)

LinkKind = Literal["raft", "http"]
KINDS: tuple[LinkKind, ...] = ("raft", "http")
Stream = Literal["upstream", "downstream"]

ROOT = Path(__file__).resolve().parents[2]
SERVER_PATH = ROOT / ".tools" / "bin" / "toxiproxy-server"
# How long the toxiproxy server may take to answer its API after start, s.
SERVER_START_TIMEOUT_S = 10.0
# A cut holds bytes this long: longer than any test, so "never" in practice, ms.
CUT_HOLD_MS = 24 * 3600 * 1000
# One loss slice: Linux's minimum TCP retransmission timeout, ms.
LOSS_SLICE_MS = 200
# A probe (Network.probe) that gets no answer within this long counts as cut, s.
PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Link:
    """The proxy through which node `src` dials node `dst` for `kind` traffic."""

    kind: LinkKind
    src: int
    dst: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.src}-{self.dst}"


class ToxiproxyServer:
    """The toxiproxy server process, started and stopped by its pid."""

    def __init__(self, path: Path, log_path: Path) -> None:
        self.path = path
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.path.exists(), f"{self.path} is missing: scripts/setup.sh builds it"
        self.port = free_port()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.path), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Connection-level logs would dwarf the nodes' own.
                env={"LOG_LEVEL": "warn"},
                start_new_session=True,
            )
        APIConsumer.host, APIConsumer.port = "127.0.0.1", self.port
        client = Toxiproxy()

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"toxiproxy server exited; see {self.log_path}")
            return bool(client.running())

        eventually(up, SERVER_START_TIMEOUT_S, "the toxiproxy server's API")

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=PROCESS_EXIT_TIMEOUT_S)


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
        self.proxies: dict[Link, Proxy] = {}
        self._ports: set[int] = set()
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
        self.server.start()
        try:
            self._make_proxies()
        except BaseException:
            self.server.stop()
            raise
        for node in self.cluster:
            spec = node.spec
            spec.dial = {
                link.dst: self.listen_address(link)
                for link in self.proxies
                if link.kind == "raft" and link.src == spec.node_id
            }
            spec.http_dial = {
                link.dst: self.listen_address(link)
                for link in self.proxies
                if link.kind == "http" and link.src == spec.node_id
            }

    def close(self) -> None:
        """Stop the threads, kill the server by pid, assert its ports are free again."""
        if self._closed:
            return
        self._closed = True
        self._stop_threads()
        self.server.stop()
        ports = self._ports | ({self.server.port} if self.server.port else set())
        busy = sorted(p for p in ports if not port_is_free(p))
        assert not busy, f"toxiproxy ports still in use after close: {busy}"

    def _make_proxies(self) -> None:
        client = Toxiproxy()
        voters = {spec.node_id for spec in self.cluster.voter_specs()}
        for a, b in itertools.permutations(sorted(self.cluster.nodes), 2):
            target = self.cluster[b].spec
            kinds: list[tuple[LinkKind, str]] = [("http", target.http_address)]
            if b in voters:
                kinds.append(("raft", target.raft_address))
            for kind, upstream in kinds:
                link = Link(kind, a, b)
                port = free_port()
                self._ports.add(port)
                self.proxies[link] = client.create(
                    upstream=upstream, name=link.name, listen=f"127.0.0.1:{port}"
                )

    def listen_address(self, link: Link) -> str:
        """host:port where the proxy of `link` listens (what src dials to reach dst)."""
        return str(self.proxies[link].listen)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.cluster.nodes)

    # -- directed faults ---------------------------------------------------------------------

    def streams(
        self, a: int, b: int, kinds: Collection[LinkKind] = KINDS
    ) -> list[tuple[Proxy, Stream]]:
        """Every (proxy, stream) that carries bytes from a to b (see "Directions")."""
        self._check_pair(a, b)
        found: list[tuple[Proxy, Stream]] = []
        for kind in kinds:
            forward, backward = Link(kind, a, b), Link(kind, b, a)
            if forward in self.proxies:
                found.append((self.proxies[forward], "upstream"))
            if backward in self.proxies:
                found.append((self.proxies[backward], "downstream"))
        return found

    def cut(self, a: int, b: int, kinds: Collection[LinkKind] = KINDS) -> None:
        """Nothing a sends reaches b (held until heal); b -> a still flows."""
        self.log(f"network: cut {a} -> {b} ({'+'.join(kinds)})")
        self._add_toxic(a, b, kinds, "cut", "latency", {"latency": CUT_HOLD_MS, "jitter": 0})

    def cut_both(self, a: int, b: int, kinds: Collection[LinkKind] = KINDS) -> None:
        self.cut(a, b, kinds)
        self.cut(b, a, kinds)

    def isolate(self, n: int, kinds: Collection[LinkKind] = KINDS) -> None:
        """n hears no other node and no other node hears n; clients still reach n."""
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
        for a in left:
            for b in right:
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
        self._add_toxic(a, b, kinds, "latency", "latency", {"latency": ms, "jitter": jitter_ms})

    def bandwidth(
        self, a: int, b: int, kbytes_per_s: int, kinds: Collection[LinkKind] = KINDS
    ) -> None:
        """Bytes from a to b flow at most `kbytes_per_s` KB/s (per connection)."""
        if kbytes_per_s <= 0:
            raise ValueError("toxiproxy reads a bandwidth <= 0 as unlimited: use cut()")
        self.log(f"network: bandwidth {a} -> {b} {kbytes_per_s} KB/s ({'+'.join(kinds)})")
        self._add_toxic(a, b, kinds, "bandwidth", "bandwidth", {"rate": kbytes_per_s})

    def loss(
        self,
        a: int,
        b: int,
        rate: float,
        rng: random.Random,
        *,
        reset_rate: float = 0.0,
        slice_ms: int = LOSS_SLICE_MS,
        kinds: Collection[LinkKind] = KINDS,
    ) -> None:
        """Emulated packet loss from a to b until heal() (see "Loss" above). `rng` seeds
        this link's own generator, so the run replays from the scenario's seed."""
        if not 0 <= rate <= 1 or not 0 <= reset_rate <= 1:
            raise ValueError("rate and reset_rate are probabilities (0..1)")
        own = random.Random(rng.getrandbits(64))
        self.log(
            f"network: loss {a} -> {b} rate {rate}, resets {reset_rate}, "
            f"slices of {slice_ms} ms ({'+'.join(kinds)})"
        )
        streams = self.streams(a, b, kinds)

        def lossy() -> None:
            while not self._stop.is_set():
                held = own.random() < rate
                hold = {"latency": CUT_HOLD_MS}
                names = self._add_toxic(a, b, kinds, "loss", "latency", hold) if held else []
                self._stop.wait(slice_ms / 1000)
                self._remove(names)
                if own.random() < reset_rate:
                    self._reset({proxy.name: proxy for proxy, _ in streams}.values())

        self._spawn(f"loss-{a}-{b}", lossy)

    def flap(self, a: int, b: int, period_s: float, kinds: Collection[LinkKind] = KINDS) -> None:
        """The a-b link goes down (proxies disabled) and up every period_s / 2 until heal()."""
        self._check_pair(a, b)
        proxies = [p for link, p in self.proxies.items() if {link.src, link.dst} == {a, b}]
        proxies = [p for p in proxies if any(p.name.startswith(k + "-") for k in kinds)]
        self.log(f"network: flap {a} <-> {b} every {period_s / 2:.2f}s ({'+'.join(kinds)})")

        def flapping() -> None:
            while not self._stop.is_set():
                for p in proxies:
                    p.disable()
                if self._stop.wait(period_s / 2):
                    break
                for p in proxies:
                    p.enable()
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

    # -- healing -----------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop every loss/flap thread, remove every toxic, enable every proxy."""
        self._stop_threads()
        self.log("network: heal")
        # POST /reset: every proxy enabled, every toxic removed, in one call.
        Toxiproxy().reset()

    def toxics(self) -> dict[str, list[str]]:
        """Proxy name -> names of its toxics (what is in force right now)."""
        return {p.name: sorted(p.toxics()) for p in self.proxies.values() if p.toxics()}

    # -- internals ---------------------------------------------------------------------------

    def _check_pair(self, a: int, b: int) -> None:
        if a == b or a not in self.cluster.nodes or b not in self.cluster.nodes:
            raise ValueError(f"({a}, {b}) is not a pair of distinct nodes of {self.node_ids}")

    def _add_toxic(
        self,
        a: int,
        b: int,
        kinds: Collection[LinkKind],
        label: str,
        toxic_type: str,
        attributes: dict[str, int],
    ) -> list[tuple[Proxy, str]]:
        added: list[tuple[Proxy, str]] = []
        for proxy, stream in self.streams(a, b, kinds):
            with self._lock:
                name = f"{label}-{a}-{b}-{stream}-{next(self._names)}"
            proxy.add_toxic(type=toxic_type, stream=stream, name=name, attributes=attributes)
            added.append((proxy, name))
        return added

    def _remove(self, toxics: Iterable[tuple[Proxy, str]]) -> None:
        for proxy, name in toxics:
            proxy.destroy_toxic(name)

    def _reset(self, proxies: Iterable[Proxy]) -> None:
        """Close the open connections of `proxies` (disabling a proxy closes them)."""
        for proxy in proxies:
            proxy.disable()
            proxy.enable()

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
