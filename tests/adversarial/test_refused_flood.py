"""Requests sent back to back, nearly all refused before their body is read, from one address and
from eight: the victim keeps 0.9x the training it has in the clean windows beside (the victim alone
on one core; the attacker and the honest neighbour on the other).

A refusal is cheap, but a 429 is an accepted connection, a parsed request, a middleware run and an
answer on the event loop, which shares the interpreter lock and the core with training: ~1,000
a second cost the victim a third to a half of its training. Now an address refused past its
budget is benched (its connections reset as they are accepted, before HTTP), and benched
connections past a budget in all pause accepting (`peer.net.refusal_bench`), and the network
threads run at a lower priority than training (`NetConfig.network_nice`), the defaults. The
control is a victim with both off (`UNDEFENDED`), flooded the same way, which must do worse.
Training is judged by its thread's CPU, steps printed beside (test_snapshot_leech.py says why)."""

from __future__ import annotations

import os
import signal
import statistics
import threading
from typing import NamedTuple

import pytest

from tests.adversarial.conftest import Pair, connect_from, metric, pin, source_ip, start_peer, wait_until
from tests.adversarial.test_snapshot_leech import _answer, _paired, attack_window

pytestmark = pytest.mark.slow

UNDEFENDED = {"GOSSIP_TTS_NET_REFUSALS_PER_S": "inf", "GOSSIP_TTS_NET_NETWORK_NICE": "0"}
"""The control's settings: benching off, and the network threads at training's priority. With
benching off alone the lowered threads keep most of training (SECURITY.md, the refused-flood row)."""
WINDOW_S = 10.0
SOCKETS = 8
"""Sockets the attacker sends on at once, spread over the attack's addresses."""


class Flood(NamedTuple):
    steps_per_s: float
    training_cpu: float
    """The share of a core the victim's training thread (its main thread) had."""
    answered: int
    """The attacker's requests answered (refused with 429, nearly all)."""
    closed: int
    """The attacker's connections closed without an answer (benched)."""
    exchanges: float
    """Exchanges the victim and its honest neighbour completed."""


def _flood(pair: Pair, addresses: int) -> Flood:
    """What the victim did in WINDOW_S while `addresses` (0: none) sent first contacts back to back."""
    stop, answered, closed = threading.Event(), [0] * SOCKETS, [0] * SOCKETS
    body = pair.forger().request()  # a ticketless first contact: past a burst, refused unread
    request = f"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body

    def sender(i: int) -> None:
        s, buf = None, bytearray()
        while not stop.is_set():
            try:
                if s is None:
                    s, buf = connect_from(pair.victim.address, source_ip(300 + i % addresses)), bytearray()
                s.sendall(request)
                _answer(s, buf)
                answered[i] += 1
            except (OSError, AttributeError, ValueError):
                closed[i] += 1
                if s is not None:
                    s.close()
                s = None

    threads = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(SOCKETS if addresses else 0)]
    exchanges = pair.exchanges_ok()
    steps_per_s, training_cpu = attack_window(pair, threads, stop, WINDOW_S)
    return Flood(steps_per_s, training_cpu, sum(answered), sum(closed), pair.exchanges_ok() - exchanges)


def _windows(pair: Pair, rounds: int, label: str) -> dict[int, list[float]]:
    """Interleaved clean and flooded windows; per flood (1 and 8 addresses), its training CPU over
    the clean windows beside each. The attacker sends as fast as the victim lets it: a benched
    victim's kernel holds its connects while accepting pauses."""
    _flood(pair, 0)  # settling
    windows = [(n, _flood(pair, n)) for n in [0, 1, 0, 8] * rounds + [0]]
    for n, w in windows:
        print(f"{label}, {n} address(es): {w.steps_per_s:.2f} steps/s, training {w.training_cpu:.0%} of a core, "
              f"{w.answered / WINDOW_S:.0f} requests answered and {w.closed / WINDOW_S:.0f} closed unanswered "
              f"a second, {w.exchanges:.0f} honest exchanges")
    ratios = {}
    for n in (1, 8):
        ratios[n] = _paired(windows, n, "training_cpu")
        steps, exchanges = _paired(windows, n, "steps_per_s"), _paired(windows, n, "exchanges")
        print(f"{label}, {n} address(es): training CPU {', '.join(f'{r:.3f}' for r in ratios[n])}x the clean "
              f"windows beside; steps/s {', '.join(f'{r:.3f}' for r in steps)}x; honest exchanges "
              f"{', '.join(f'{r:.2f}' for r in exchanges)}x")
        tried = min(w.answered + w.closed for m, w in windows if m == n) / WINDOW_S
        print(f"{label}, {n} address(es): at least {tried:.0f} requests a second answered or closed")
        assert tried >= 20, (label, n, tried)  # the attack ran (a benched victim lets ~50 a second through)
    return ratios


def test_a_flood_of_refused_requests_leaves_training_its_pace(victim_on_its_own_core, corpus, tmp_path) -> None:
    pair = victim_on_its_own_core
    benched = _windows(pair, 3, "benched")
    print("connections benched:", metric(pair.base, "gossip_tts_connections_benched_total"),
          "accept pauses:", metric(pair.base, "gossip_tts_accept_pauses_total"))
    for n, ratios in benched.items():
        assert statistics.median(ratios) >= 0.9, (n, ratios)

    os.kill(pair.victim.proc.pid, signal.SIGSTOP)  # the control trains on the victim's core alone
    control = start_peer(corpus, tmp_path, "control", pair.swarm, "--peer", pair.honest.address, env=UNDEFENDED)
    try:
        control.wait_listening()
        pin(control.proc.pid, set(os.sched_getaffinity(pair.victim.proc.pid)))
        unbenched = Pair(control, pair.honest, pair.swarm)
        wait_until(lambda: metric(unbenched.base, "gossip_tts_exchanges_ok_total") >= 2, 180, "the control exchanges")
        for n, ratios in _windows(unbenched, 2, "control").items():
            assert statistics.median(ratios) <= 0.85, (n, ratios)  # the flood (~1,000 answers a second) costs it
    finally:
        control.kill()
        os.kill(pair.victim.proc.pid, signal.SIGCONT)
