"""Attacks on real peer processes on 127.0.0.1: the integration tests' fixtures, and what the
attack tests share (plain HTTP, /metrics sums, memory read from /proc, forged frames)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import urllib.parse
import uuid
import zlib
from http.client import HTTPConnection
from pathlib import Path
from typing import Awaitable, Callable

import pytest
import torch
from aiohttp import web

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from protocol import FrameKind, Identity, VerifyPolicy, decode_frame, flat_model_spec, read_vector
from protocol.limits import Limits
from protocol.messages import make_control_frame, make_snapshot_frame
from tests.integration.conftest import corpus, swarm_name, tiny_args  # noqa: F401  (pytest fixtures)
from tests.integration.peers import PeerProcess

MB = 1 << 20
torch.set_num_threads(1)  # the attacker's tensor work should not take the victims' cores (2 on CI)


def http(url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 30,
         source: str | None = None) -> tuple[int, bytes]:
    """(status, body) of one request, sent from `source` (a 127.x.y.z address) when given."""
    parts = urllib.parse.urlsplit(url)
    conn = HTTPConnection(parts.hostname, parts.port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("POST" if body is not None else "GET", target, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def metric(base: str, line_start: str) -> float:
    """Sum of every /metrics sample whose line starts with `line_start` (name and labels)."""
    text = http(base + "/metrics")[1].decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start))


def series_count(base: str, line_start: str) -> int:
    text = http(base + "/metrics")[1].decode()
    return sum(line.startswith(line_start) for line in text.splitlines())


def status(base: str) -> dict:
    return json.loads(http(base + "/v1/status")[1])


def start_peer(corpus: dict[str, Path], tmp_path: Path, name: str, swarm: str, *extra: str, shard: int = 0,
               env: dict[str, str] | None = None, steps: int = 100000,
               launcher: list[str] | None = None) -> PeerProcess:
    """A tiny-preset peer on 127.0.0.1 without mDNS (it trains until killed unless `steps` says;
    `launcher`: see PeerProcess)."""
    args = tiny_args(corpus[f"shard{shard}"], tmp_path / name, "--listen", "127.0.0.1:0", "--swarm", swarm,
                     "--no-mdns", *extra, steps=steps)
    return PeerProcess(args, tmp_path / f"{name}.log", env=env, launcher=launcher)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


def verify_policy(swarm: str, fingerprint: str) -> VerifyPolicy:
    return VerifyPolicy(swarm=swarm, fingerprint=fingerprint, limits=Limits())


def read_state(base: str, swarm: str, source: str | None = None) -> tuple[str, torch.Tensor]:
    """(fingerprint, parameters) of a peer, from its /v1/status and one /v1/state (one per address per 10 s)."""
    fingerprint = status(base)["fingerprint"]
    state = http(base + "/v1/state", source=source)[1]
    return fingerprint, read_vector(decode_frame(state, verify_policy(swarm, fingerprint), now=time.time()))


@pytest.fixture
def peers(corpus, tmp_path, swarm_name):
    """Start tiny peers (`peers(name, *flags, env=...)`) that are killed at teardown."""
    started: list[PeerProcess] = []

    def _start(name: str, *extra: str, env: dict[str, str] | None = None, steps: int = 100000,
               shard: int = 0) -> PeerProcess:
        p = start_peer(corpus, tmp_path, name, swarm_name, *extra, shard=shard, env=env, steps=steps)
        started.append(p)
        return p

    yield _start
    for p in started:
        p.kill()


# ---------------------------------------------------------------------------------- memory
def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class PeakRss:
    """How far a process's resident memory rose above its level at `__enter__`, in bytes.

    The kernel's high-water mark (VmHWM) is reset on entry (`/proc/PID/clear_refs`, value 5)
    so it catches a peak between samples; where that is not allowed a 10 ms sampler stands in.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.base = self.peak = 0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._hwm = True

    def __enter__(self) -> "PeakRss":
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            self._hwm = False
        self.base = self.peak = _status_kib(self.pid, "VmRSS") * 1024
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            try:
                self.peak = max(self.peak, _status_kib(self.pid, "VmRSS") * 1024)
            except (OSError, KeyError):
                return

    def read(self) -> int:
        """Growth so far (peak minus the level at entry; the sampler's, once the process is gone)."""
        if self._hwm:
            try:
                self.peak = max(self.peak, _status_kib(self.pid, "VmHWM") * 1024)
            except (OSError, KeyError):  # exited: a zombie's status has no memory lines
                pass
        return self.peak - self.base

    def __exit__(self, *exc: object) -> None:
        self.read()
        self._stop.set()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def settled_rss(pid: int, below: int = 4 * MB, window_s: float = 2.0, timeout: float = 40.0) -> int:
    """Wait until a process's resident memory rises by less than `below` over a `window_s` window
    (a peer's first steps and first exchanges still allocate); that window's growth. A measure of
    an attack's memory starts from here, so training's own warm-up is not counted as the attack's."""
    deadline = time.monotonic() + timeout
    while True:
        with PeakRss(pid) as rss:
            time.sleep(window_s)
        if rss.growth < below or time.monotonic() > deadline:
            return rss.growth


# ---------------------------------------------------------------------------------- sockets
def connect_from(address: str, source_ip: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
    """A TCP connection to `address` from `source_ip` (any 127.x.y.z is this machine)."""
    host, port = address.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.bind((source_ip, 0))
    s.connect((host, int(port)))
    return s


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of process `pid` (and the threads it starts later) on `cpus` only."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def source_ip(i: int) -> str:
    """The i-th of many distinct loopback source addresses (127.0.1.1, 127.0.1.2, ...)."""
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


# ---------------------------------------------------------------------------------- forged frames
class Forger:
    """A key the victim has never seen, claiming the victim's swarm and model and speaking the
    exchange protocol as a peer's core does (tickets included: `peer.core.node.GossipNode`).

    Its public copy is `x` (the victim's own parameters make its pushes harmless). Its first
    request is a first contact (a control frame alone, answered with a ticket); once it holds a
    ticket of the victim's, a request pushes its copy."""

    def __init__(self, swarm: str, fingerprint: str, x: torch.Tensor, listen: str = "", seed: bytes | None = None) -> None:
        self.identity = Identity.generate(seed) if seed else Identity.generate()
        numel = x.numel()
        self.node = GossipNode(GossipConfig(swarm=swarm), self.identity, {"w": ((numel,), "float32")}, x,
                               now=time.time(), listen=listen)
        self.node.fingerprint = fingerprint  # the victim's model, whatever our parameter names
        self.node.policy = VerifyPolicy(swarm=swarm, fingerprint=fingerprint, limits=self.node.limits,
                                        model_spec=flat_model_spec(numel))
        self.victim: bytes | None = None
        """The victim's key, once an answer of its own told us."""

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    @property
    def ticketed(self) -> bool:
        """Whether our next request spends a ticket of the victim's (and so may push)."""
        return self.node.held_tickets.get(self.victim)[1] > 0

    def request(self, now: float | None = None) -> bytes:
        return self.node.build_request(self.victim, time.time() if now is None else now)

    def answered(self, reply: bytes, now: float | None = None) -> None:
        """Take the victim's answer: its key, and its ticket for our next request."""
        self.victim = self.node.handle_response(reply, time.time() if now is None else now).sender

    def exchange(self, base: str, now: float | None = None, source: str | None = None) -> int:
        """One exchange with the victim at `base`; its HTTP status."""
        code, reply = http(base + "/v1/exchange", self.request(now), source=source)
        if code == 200:
            self.answered(reply, now)
        return code

    def push(self, base: str, now: float | None = None, source: str | None = None) -> int:
        """A first contact where we hold no ticket, then the exchange that pushes our copy; the last status."""
        if not self.ticketed:
            code = self.exchange(base, now, source)
            if code != 200:
                return code
        return self.exchange(base, now, source)


class Liar:
    """Signs hellos and states for a swarm and model (what a peer serves at GET /v1/hello and /v1/state)."""

    def __init__(self, swarm: str, fingerprint: str) -> None:
        self.identity = Identity.generate()
        self.swarm, self.fingerprint = swarm, fingerprint
        self.seq = 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def state(self, vector: torch.Tensor, step: int) -> bytes:
        return make_snapshot_frame(self.identity, swarm=self.swarm, fingerprint=self.fingerprint, seq=self._next(),
                                   step=step, timestamp=time.time(), vector=vector, extra={"kind": "state"})

    def hello(self, nonce: str, listen: str, step: int) -> bytes:
        extra = {"listen": listen, "peers": [], "nonce": nonce}
        return make_control_frame(self.identity, kind=FrameKind.HELLO, swarm=self.swarm, fingerprint=self.fingerprint,
                                  seq=self._next(), step=step, timestamp=time.time(), extra=extra)


# ---------------------------------------------------------------------------------- servers the attacker runs
class AttackerServer:
    """aiohttp apps the attacker serves on 127.0.0.1 ports, on their own event-loop thread.

    `serve(handler)` returns the address; `handler(request)` is an async aiohttp handler for
    every path. Every request is recorded in `seen` as (address, method, path).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.seen: list[tuple[str, str, str]] = []
        self._runners: list[web.AppRunner] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def serve(self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]], host: str = "127.0.0.1") -> str:
        async def start() -> str:
            here: list[str] = []

            async def record(request: web.Request) -> web.StreamResponse:
                self.seen.append((here[0], request.method, request.path))
                return await handler(request)

            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", record)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, host, 0)
            await site.start()
            self._runners.append(runner)
            here.append(f"{host}:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
            return here[0]

        return asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)

    def close(self) -> None:
        async def stop() -> None:
            for runner in self._runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture
def attacker():
    server = AttackerServer()
    yield server
    server.close()


def gzip_bomb(size: int) -> bytes:
    """About `size` bytes of gzip that inflate ~1000-fold (zeros; each 1 MiB block flushed whole,
    so one compressed block repeats). Its trailer is not checked by anyone who inflates it first."""
    zeros = b"\0" * MB
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    return head + block * max(1, (size - len(head)) // len(block))


# ---------------------------------------------------------------------------------- a victim and its neighbour
class Pair:
    """A victim peer gossiping with one honest neighbour (a module's tests share it, in file order)."""

    def __init__(self, victim: PeerProcess, honest: PeerProcess, swarm: str) -> None:
        self.victim, self.honest, self.swarm = victim, honest, swarm
        self.base, self.honest_base = f"http://{victim.address}", f"http://{honest.address}"
        self.fingerprint, self.x = read_state(self.base, swarm, source=source_ip(999))

    def policy(self) -> VerifyPolicy:
        return verify_policy(self.swarm, self.fingerprint)

    def forger(self, listen: str = "") -> Forger:
        return Forger(self.swarm, self.fingerprint, self.x, listen=listen)

    def exchanges_ok(self) -> float:
        """Exchanges each side started with the other and completed: the pair's gossip rate."""
        return metric(self.base, "gossip_tts_exchanges_ok_total") + metric(self.honest_base, "gossip_tts_exchanges_ok_total")


@pytest.fixture(scope="module")
def pair(corpus, tmp_path_factory):
    tmp, swarm = tmp_path_factory.mktemp("pair"), f"test-{uuid.uuid4().hex[:10]}"
    started: list[PeerProcess] = []
    try:
        started.append(start_peer(corpus, tmp, "honest", swarm, shard=1))
        started[0].wait_listening()
        started.append(start_peer(corpus, tmp, "victim", swarm, "--peer", started[0].address))
        started[1].wait_listening()
        p = Pair(started[1], started[0], swarm)
        wait_until(lambda: p.exchanges_ok() >= 4, 180, "the two peers exchange")
        yield p
    finally:
        for proc in started:
            proc.kill()


@pytest.fixture
def victim_on_its_own_core(pair):
    """The victim alone on one core, its honest neighbour and the attacking threads on the other:
    the leeches' own CPU (on their own machines in a real attack) does not come out of the
    victim's training, so its rate shows what answering them costs it."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two cores: the victim on one, its neighbour and the attacker on the other")
    mine = set(cpus)
    pin(pair.victim.proc.pid, {cpus[0]})
    for pid in (pair.honest.proc.pid, os.getpid()):
        pin(pid, {cpus[1]})
    yield pair
    for pid in (pair.victim.proc.pid, pair.honest.proc.pid, os.getpid()):
        pin(pid, mine)
