"""A candidate flood on a real `gossip-tts peer --preset tiny` process: first contacts claiming
addresses that accept a connection and never answer, 20 at a time, again and again.

Each claim held one of the victim's 16 candidate slots for three request timeouts (~90 s), so a
newcomer started with `--peer VICTIM` stayed unverified at the victim for as long as the flood
went on: never its partner, and without a snapshot in its answers. Now a dial to a candidate has
a short deadline and each host holds a few slots (`peer.core.candidates`): the newcomer is
verified, and gets the victim's snapshot, within 45 s of its start."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.adversarial.conftest import Forger, metric, read_state, source_ip

pytestmark = pytest.mark.slow

CLAIMS = 20
EVERY_S = 5.0
"""A new round of claims this often: each claim's slot is taken again as soon as it is freed."""
NEWCOMER_WITHIN_S = 45.0


def test_a_newcomer_is_verified_within_45_s_during_a_candidate_flood(peers, attacker, swarm_name) -> None:
    # The victim serves its exact parameters (float32 copies), so the newcomer's copy of it comes
    # only in a snapshot, which only a verified asker gets: a bfloat16 victim's state is its public
    # copy, which seeds the newcomer's copy of it, and then updates, not a snapshot, follow.
    victim = peers("victim", env={"GOSSIP_TTS_GOSSIP_COPY_DTYPE": "float32"})
    base = f"http://{victim.wait_listening()}"
    fingerprint, x = read_state(base, swarm_name, source=source_ip(990))

    release = asyncio.Event()

    async def never(request):  # accepts, reads the request, and answers only at the end of the test
        await release.wait()

    claimed = [attacker.serve(never, host=f"127.0.9.{i + 1}") for i in range(CLAIMS)]  # 20 hosts, the worst case
    stop, rounds = threading.Event(), [0]

    def flood() -> None:
        while not stop.is_set():
            for i, listen in enumerate(claimed):  # a first contact from a fresh key, claiming `listen`
                try:
                    Forger(swarm_name, fingerprint, x, listen=listen).exchange(base, source=source_ip(300 + i))
                except OSError:
                    pass
            rounds[0] += 1
            stop.wait(EVERY_S)

    thread = threading.Thread(target=flood, daemon=True)
    failures0 = metric(base, "gossip_tts_hello_failures_total")
    thread.start()
    time.sleep(2 * EVERY_S)  # the flood holds the slots
    newcomer = peers("newcomer", "--peer", victim.address, shard=1)
    newcomer_base = f"http://{newcomer.wait_listening()}"
    started = time.monotonic()
    verified_after = None
    while time.monotonic() - started < NEWCOMER_WITHIN_S + 30:
        if metric(newcomer_base, "gossip_tts_snapshots_received_total") >= 1:  # only a verified asker gets one
            verified_after = time.monotonic() - started
            break
        time.sleep(0.5)
    stop.set()
    thread.join(60)
    attacker.loop.call_soon_threadsafe(release.set)
    failures = metric(base, "gossip_tts_hello_failures_total") - failures0
    print(f"{rounds[0]} rounds of {CLAIMS} claims; the victim's hellos that failed: {failures:.0f}; "
          f"the newcomer got the victim's snapshot after {verified_after} s")
    assert failures >= CLAIMS  # the claims were dialled, and never answered
    assert verified_after is not None and verified_after <= NEWCOMER_WITHIN_S
