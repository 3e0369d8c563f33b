"""What one address can take from a training peer (real `gossip-tts peer --preset tiny` processes).

- Connections: 128 idle sockets from one address, reopened as they close, got every new honest
  connection refused (the status page, `gossip-tts status`, newcomers). Now one address holds
  `max_connections_per_address` (peer.net.connection_caps), and at least half of new honest
  connections from other addresses are served (all of them, measured).
- Ticketed exchanges: an answer hands out a fresh ticket, so one first contact bought an
  unrationed chain of exchanges; from one address with four keys a pre-signed snapshot was applied
  over a thousand times in half a minute, and the victim's training lost a third of its steps.
  Now a replayed snapshot is refused before it is decoded (peer.core.ingest.unchanging) and every
  exchange is charged its work per key and per address (NetConfig.key_work_per_s,
  address_work_per_s). Judged by the CPU the attack makes the victim's own network threads (HTTP,
  node worker) spend over the clean windows beside it: at most a tenth of a core. Training's own
  share is printed and bounded loosely: on a shared host other processes pushed onto the victim's
  core while the attacker runs move it more than the attack does. With benching on (the default),
  the address is soon refused past its refusal budget and its connections are reset unread: the
  attack's attempts are counted, answered or reset.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import NamedTuple

import pytest
import torch

from protocol import make_snapshot_frame, pack_bundle
from tests.adversarial.conftest import Forger, connect_from, http, metric, read_state, source_ip
from tests.adversarial.test_snapshot_leech import _thread_cpu_s
from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from vs_load import parse_pid_stat  # noqa: E402  (/proc/PID/stat)

pytestmark = pytest.mark.slow

FLOOD = 128
HONEST = 6
WINDOW_S = 8.0
ROUNDS = 2


def test_one_address_with_128_idle_sockets_leaves_new_connections_served(pair) -> None:
    stop = threading.Event()
    held: list = []

    def flood() -> None:  # one address, its sockets reopened as the victim closes them
        while not stop.is_set():
            while len(held) < FLOOD and not stop.is_set():
                try:
                    s = connect_from(pair.victim.address, source_ip(500))
                    s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends it
                    held.append(s)
                except OSError:
                    break
            for s in list(held):
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        held.remove(s)
                        s.close()
                except BlockingIOError:
                    pass
                except OSError:
                    held.remove(s)
            time.sleep(0.05)

    thread = threading.Thread(target=flood, daemon=True)
    refused0 = metric(pair.base, "gossip_tts_connections_refused_total")
    thread.start()
    time.sleep(3)
    served = 0
    for i in range(HONEST):
        try:
            code, _ = http(pair.base + ("/metrics" if i % 2 else "/v1/status"), source=source_ip(600 + i), timeout=10)
            served += code == 200
        except OSError:
            pass
    stop.set()
    thread.join(10)
    for s in held:
        s.close()
    refused = metric(pair.base, "gossip_tts_connections_refused_total") - refused0
    print(f"{served} of {HONEST} honest connections served; {refused:.0f} of the flood's closed at once")
    assert served >= HONEST / 2 and refused >= 1


KEYS = 4
REQUESTS_PER_S = 60.0
"""The replayers' pace, all keys together: what the attack seen reached (about 55 a second). Sent
back to back instead, it is the flood of refused requests of test_refused_flood.py; this test
measures what the exchanges cost."""
NOT_BENCHED = {"GOSSIP_TTS_NET_REFUSALS_PER_S": "inf"}


class Target(NamedTuple):
    """The victim a replayer speaks to: its URL, swarm, model and parameters."""
    base: str
    swarm: str
    fingerprint: str
    x: torch.Tensor


class Replayer:
    """One key from one address: a first contact, then, spending each answer's ticket, a snapshot of
    its copy: the same pre-signed one every time, or (`fresh`) one signed anew with the next seq."""

    def __init__(self, pair: Target, source: str, fresh: bool) -> None:
        self.pair, self.source, self.fresh = pair, source, fresh
        self.forger = Forger(pair.swarm, pair.fingerprint, pair.x)
        self.seq, self.sent, self.ok = 1, 0, 0
        self.tried = self.reset = 0
        """Requests tried (first contacts too), and those whose connection was reset unanswered."""
        self.replayed = self._snapshot(1)

    def _snapshot(self, seq: int) -> bytes:
        return make_snapshot_frame(self.forger.identity, swarm=self.pair.swarm, fingerprint=self.pair.fingerprint,
                                   seq=seq, step=0, timestamp=time.time(), vector=self.pair.x,
                                   extra={"epoch": self.forger.node.epoch})

    def once(self) -> None:
        self.tried += 1
        try:
            self._once()
        except OSError:  # benched: reset as it was accepted, or at its next bytes
            self.reset += 1
            raise

    def _once(self) -> None:
        forger, node = self.forger, self.forger.node
        if not forger.ticketed:
            forger.exchange(self.pair.base, source=self.source)
            return
        now = time.time()
        if self.fresh:
            self.seq += 1
        frames = [self._snapshot(self.seq) if self.fresh else self.replayed]
        to_epoch, ticket = node.held_tickets.take(forger.victim)
        control = node._control_frame(forger.victim, now, to_epoch=to_epoch, ticket=ticket,
                                      reply=node.tickets.issue(forger.victim), offer=node.tickets.issue(forger.victim),
                                      frames=frames)
        code, reply = http(self.pair.base + "/v1/exchange", pack_bundle([control] + frames), source=self.source)
        self.sent += 1
        if code == 200:
            self.ok += 1
            forger.answered(reply)
        else:  # refused unread: the ticket is still good
            node.held_tickets.keep(forger.victim, to_epoch, ticket)


def _process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return parse_pid_stat(f.read())[1]


def _run(replayers: list[Replayer], seconds: float) -> None:
    stop = threading.Event()
    every = len(replayers) / REQUESTS_PER_S

    def loop(r: Replayer) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                r.once()
            except OSError:
                pass
            next_at += every
            time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [threading.Thread(target=loop, args=(r,), daemon=True) for r in replayers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)


def test_a_replayed_snapshot_is_applied_once(peers, swarm_name) -> None:
    # Benching off: past the work budgets nearly every replay is refused, and an address refused
    # that often is soon benched, so the replays would stop reaching the node whose refusal of
    # them is this test's subject (the ticketed flood below runs against benching).
    victim = peers("replayed", env=NOT_BENCHED)
    base = f"http://{victim.wait_listening()}"
    victim.wait_for(r"^step \d+ ", timeout=180)  # past joining: a joining peer answers 503
    target = Target(base, swarm_name, *read_state(base, swarm_name, source=source_ip(997)))
    replayers = [Replayer(target, source_ip(700), fresh=False) for _ in range(KEYS)]
    applied0 = metric(base, "gossip_tts_snapshots_received_total")
    stale0 = metric(base, 'gossip_tts_frames_refused_total{reason="stale_seq"}')
    _run(replayers, WINDOW_S)
    applied = metric(base, "gossip_tts_snapshots_received_total") - applied0
    stale = metric(base, 'gossip_tts_frames_refused_total{reason="stale_seq"}') - stale0
    ok = sum(r.ok for r in replayers)
    print(f"{sum(r.sent for r in replayers)} replays sent, {ok} answered, {applied:.0f} snapshots applied, "
          f"{stale:.0f} refused as stale")
    assert ok > 2 * KEYS  # the replays reached the node
    assert applied <= KEYS  # each key's snapshot once
    assert stale >= ok - 2 * KEYS


def test_ticketed_snapshots_from_one_address_cost_the_victim_a_tenth_of_a_core_at_most(victim_on_its_own_core) -> None:
    """Four keys from one address, each pushing a snapshot signed anew with the next seq (each one
    would change the copy held: the dearest exchange there is) under every ticket it is handed."""
    pair = victim_on_its_own_core
    pid = pair.victim.proc.pid
    target = Target(pair.base, pair.swarm, pair.fingerprint, pair.x)
    replayers = [Replayer(target, source_ip(701), fresh=True) for _ in range(KEYS)]
    benched0 = metric(pair.base, "gossip_tts_connections_benched_total")
    cpu: list[tuple[bool, float, float]] = []  # (attacked, training's share of a core, the other threads')
    for attacked in [False, True, False, True, False][: 2 * ROUNDS + 1]:
        train0, all0, t0 = _thread_cpu_s(pid, pid), _process_cpu_s(pid), time.monotonic()
        if attacked:
            _run(replayers, WINDOW_S)
        else:
            time.sleep(WINDOW_S)
        elapsed, train = time.monotonic() - t0, _thread_cpu_s(pid, pid) - train0
        cpu.append((attacked, train / elapsed, (_process_cpu_s(pid) - all0 - train) / elapsed))
    ratios = [c / statistics.mean((cpu[i - 1][1], cpu[i + 1][1])) for i, (a, c, _) in enumerate(cpu) if a]
    extra = [o - statistics.mean((cpu[i - 1][2], cpu[i + 1][2])) for i, (a, _, o) in enumerate(cpu) if a]
    print(f"the victim's other threads (HTTP, node worker) took {', '.join(f'{e:+.3f}' for e in extra)} "
          "of a core more than in the clean windows beside")
    refused = metric(pair.base, 'gossip_tts_http_refused_total{reason="key_work"}') + metric(
        pair.base, 'gossip_tts_http_refused_total{reason="address_work"}')
    benched = metric(pair.base, "gossip_tts_connections_benched_total") - benched0
    tried = sum(r.tried for r in replayers)
    print(f"training CPU {', '.join(f'{r:.3f}' for r in ratios)}x the clean windows beside "
          f"(windows: {', '.join(f'{c:.2f}' for _, c, _ in cpu)} of a core); {tried} tried, "
          f"{sum(r.sent for r in replayers)} pushes sent, {sum(r.ok for r in replayers)} answered, {refused:.0f} "
          f"refused by work, {sum(r.reset for r in replayers)} reset unanswered ({benched:.0f} benched)")
    # The attack ran: tried, answered or reset (while accepting pauses for benched connections, a
    # request waits in the victim's kernel, so fewer are tried than the pace).
    assert tried >= 0.25 * REQUESTS_PER_S * WINDOW_S * ROUNDS
    assert statistics.median(extra) <= 0.1, extra  # what the attack makes the victim spend: a tenth of a core at most
    assert statistics.median(ratios) >= 0.6, ratios  # against a gross loss; a busy host moves this one
