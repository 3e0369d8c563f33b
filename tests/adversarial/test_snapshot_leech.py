"""Ticketless first contacts, a few hundred bytes each, from one address and from eight, asking a
training peer for exchanges as fast as 100 a second: what they get back stays within the
snapshot budget (peer.core.snapshots; GossipConfig.answer_snapshot_every_s and
answer_snapshots_per_min), past a burst each address's requests are refused before they are read
(NetConfig.stranger_exchanges_per_s), and the victim trains at 0.9x its rate in clean windows
between the attacks (the control; medians over several windows of each). Before, each was answered with a full snapshot: ~1.9 GB out
per 20 s window at the tiny preset."""

from __future__ import annotations

import os
import re
import socket
import statistics
import threading
import time

import pytest

from peer.core.gossip_config import GossipConfig
from tests.adversarial.conftest import connect_from, http, metric, pin, source_ip, status

pytestmark = pytest.mark.slow

WINDOW_S = 10.0
ROUNDS = 4
"""Windows of each attack, interleaved with clean ones: a shared machine's own drift between
windows is as large as the effect, so rates are compared as medians over several."""
REQUESTS_PER_S = 100.0
"""All leeching addresses together (the attack seen sent ~120 a second)."""


def _answer(s: socket.socket, buf: bytearray) -> int:
    """Read one HTTP answer from `s` (`buf` holds what came after the previous one); its size."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(rest) < length:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    buf[:] = rest[length:]
    return len(head) + 4 + length


def _window(pair, addresses: int) -> tuple[float, int, int, float]:
    """(victim steps per second, bytes the leeches received, requests they sent, the leeches' CPU
    seconds) over WINDOW_S. Each leech sends one prepared first contact again and again on a
    kept-alive socket, so the attack costs this (shared) machine little CPU next to the victim's."""
    stop, got, sent = threading.Event(), [0] * addresses, [0] * addresses
    every = addresses / REQUESTS_PER_S

    def leech(i: int) -> None:
        body = pair.forger().request()  # never answered: a ticketless first contact each time
        request = (f"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        s, buf, next_at = None, bytearray(), time.monotonic()
        while not stop.is_set():
            try:
                if s is None:
                    s, buf = connect_from(pair.victim.address, source_ip(200 + i)), bytearray()
                s.sendall(request)
                got[i] += _answer(s, buf)
                sent[i] += 1
            except (OSError, AttributeError, ValueError):
                s = None
            next_at += every
            time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [threading.Thread(target=leech, args=(i,), daemon=True) for i in range(addresses)]
    step0, t0, cpu0 = status(pair.base)["step"], time.monotonic(), time.process_time()
    for t in threads:
        t.start()
    time.sleep(WINDOW_S)
    stop.set()
    for t in threads:
        t.join(60)
    rate = (status(pair.base)["step"] - step0) / (time.monotonic() - t0)
    return rate, sum(got), sum(sent), time.process_time() - cpu0


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


def test_a_snapshot_leech_from_one_or_eight_addresses_stays_within_the_budget(victim_on_its_own_core):
    pair, cfg = victim_on_its_own_core, GossipConfig()
    snapshot = len(http(pair.base + "/v1/state", source=source_ip(998))[1])  # the model's size, signed
    budget = (cfg.max_neighbours + cfg.answer_snapshots_per_min * WINDOW_S / 60) * snapshot
    refusals = lambda: (metric(pair.base, 'gossip_tts_snapshots_withheld_total{reason="unticketed"}')  # noqa: E731
                        + metric(pair.base, 'gossip_tts_http_refused_total{reason="stranger_rate"}'))
    _window(pair, 0)  # settling: a peer that has just started trains faster than it will go on to
    refused0 = refusals()
    # The control: the same peers unattacked, in windows between the attacks.
    windows: dict[int, list[tuple[float, int, int, float]]] = {0: [], 1: [], 8: []}
    for n in [0, 1, 0, 8] * ROUNDS + [0]:
        windows[n].append(_window(pair, n))
    rate = {n: statistics.median(w[0] for w in ws) for n, ws in windows.items()}
    print(f"victim steps/s clean {', '.join(f'{w[0]:.2f}' for w in windows[0])} (median {rate[0]:.2f}); " + "; ".join(
        f"{n} address(es): {', '.join(f'{w[0]:.2f}' for w in windows[n])} steps/s (median {rate[n]:.2f}, "
        f"{rate[n] / rate[0]:.2f}x), {max(w[2] for w in windows[n])} requests, "
        f"{max(w[1] for w in windows[n]) / 1e6:.2f} MB back per window at most" for n in (1, 8))
        + f"; budget {budget / 1e6:.1f} MB per window")
    for n in (1, 8):
        for _, got, requests, _ in windows[n]:
            assert requests >= 0.5 * REQUESTS_PER_S * WINDOW_S, (n, requests)  # the attack ran
            assert got <= budget, (n, got, budget)
        assert rate[n] >= 0.9 * rate[0], (n, rate)
    # every leech request was answered without a snapshot, or refused before it was read, and counted
    assert refusals() - refused0 >= 0.9 * sum(w[2] for n in (1, 8) for w in windows[n])
    assert pair.exchanges_ok() > 0
