"""Radius steering against a real peer with one or two neighbours (SECURITY.md, "radius steering
in a small swarm"; docs/mixing.md, "Small swarms").

The victim is a `gossip-tts peer` process. The liar is `python -m tests.adversarial.lying_peer
--kind steer`: the same command with its trainer wrapped in simnet's AttackTrainer, so that from
the first step at which it holds the victim's copy it publishes x + d·e, e a fixed random unit
direction and d growing 1.25× at every read of its parameters (its mix and its publish: about
two a step). It speaks the real protocol on 127.0.0.1 and the victim mixes only partners it
chose (pull-only), so the victim must choose it. Set-ups: the liar is the victim's only
neighbour; the victim has the liar and an honest peer. The control of each run is the same
set-up with the liar replaced by the same command with `--kind none` (it publishes what it
trains), every process with the same key and seed as in the attacked arm, so the same data
order, run at the same time on the same cores. Score: the victim's held-out loss at step STEPS
(its averaged weights, what `gossip-tts eval` reports), `RUNS` runs of each set-up (seeds 0-2; the
five of docs/mixing.md's figures ended well inside the bound, and CI's hour holds three).

Before three distances are known the radius is `clip_own_multiplier` (4) × the lower median of
our own recent moves; a steerer's pull is clipped to it, and beyond it redescends (clip_power 2).
The ratio need not be 1 with nothing dragging the victim: out of range, the liar's copy brings
the victim none of the liar's honest training either, which its control's does.

The control that this measurement can fail turns the victim's defences down: half our norm as the
radius (the fallback before; `clip_own_multiplier` 1e12 leaves only that cap) and plain clipping
(clip_power 1), so that a liar beyond the radius pulls the whole radius at every mix. With the
old radius alone, at the default power, the redescending pull already bounds the drag on this
model and the steerer cost the victim no more than today (docs/mixing.md): this test does not
tell the two radii apart; tests/unit/peer/core/test_steering_fallback.py does.

Measured on 2 shared cores: docs/mixing.md, "Small swarms" (`-s` prints each run).
"""

from __future__ import annotations

import hashlib
import re
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protocol import Identity
from tests.adversarial.conftest import http, start_peer
from tests.integration.peers import PeerProcess
from tests.integration.swarm_checks import eval_loss

pytestmark = pytest.mark.slow

STEPS = 100
"""The victim's --max-steps, in both arms (counting the steps of the state it adopts on joining)."""
RUNS = 3
BOUND = 1.05
"""A victim's held-out loss beside a steerer, at most this many times its control's."""
UNDEFENDED_AT_LEAST = 1.1
"""The control that can fail: with the old radius and plain clipping the steerer costs at least this,
twice the defended bound's margin. How far it drags depends on when the lie starts (the first
exchange, between steps 25 and 33 of STEPS with the host's load): 1.13-1.20 on a quiet host,
further under load (docs/mixing.md, "Small swarms"); a bound of 1.2 failed on a quiet host."""
UNDEFENDED = {"GOSSIP_TTS_GOSSIP_CLIP_OWN_MULTIPLIER": "1e12", "GOSSIP_TTS_GOSSIP_CLIP_POWER": "1"}
"""The victim's settings in that control: only the cap (half our norm) bounds the radius before three
neighbours, as before the radius followed our own moves, and a copy beyond it pulls the whole radius."""
WATCHED = ("gossip_tts_mixes_total", "gossip_tts_mix_clipped_total", "gossip_tts_clip_radius")


@dataclass
class Arm:
    """One set-up in one run: a victim and its neighbours, in a swarm of their own."""

    label: str
    folder: Path
    swarm: str
    victim: PeerProcess | None = None
    neighbours: list[PeerProcess] = field(default_factory=list)
    watched: dict[str, float] = field(default_factory=dict)
    """The victim's last /metrics values of WATCHED (read while it trains)."""

    @property
    def liar(self) -> PeerProcess:
        return self.neighbours[-1]

    def processes(self) -> list[PeerProcess]:
        return self.neighbours + ([self.victim] if self.victim else [])


def _key(folder: Path, role: str, run: int) -> str:
    """The key file of `role` in `run`: the same key (so the same data order) in both arms."""
    path = folder / f"{role}-{run}.key"
    if not path.exists():
        Identity.generate(hashlib.sha256(f"steering:{role}:{run}".encode()).digest()).save(path)
    return str(path)


def _start_neighbours(corpus, tmp_path: Path, label: str, run: int, kind: str, neighbours: int) -> Arm:
    """The victim's neighbours: with two, an honest `gossip-tts peer` (shard 2); last, the liar or
    its honest stand-in (shard 1), a lying_peer process of `kind` "steer" or "none"."""
    arm = Arm(label, tmp_path / f"{label}-{run}", f"test-{uuid.uuid4().hex[:10]}")
    arm.folder.mkdir()
    swarm = arm.swarm
    seed = ("--seed", str(run))
    if neighbours == 2:
        arm.neighbours.append(start_peer(corpus, arm.folder, "honest", swarm, "--key", _key(tmp_path, "honest", run),
                                         *seed, shard=2))
    launcher = ["tests.adversarial.lying_peer", "--kind", kind, "--growth", "1.25", "--attack-seed", str(run)]
    arm.neighbours.append(start_peer(corpus, arm.folder, "liar", swarm, "--key", _key(tmp_path, "liar", run), *seed,
                                     shard=1, launcher=launcher))
    return arm


def _start_victim(corpus, tmp_path: Path, arm: Arm, run: int, env: dict[str, str] | None) -> PeerProcess:
    peers = [flag for p in arm.neighbours for flag in ("--peer", p.wait_listening())]
    arm.victim = start_peer(corpus, arm.folder, "victim", arm.swarm, "--key", _key(tmp_path, "victim", run),
                            "--seed", str(run), *peers, shard=0, env=env, steps=STEPS)
    return arm.victim


def _watch(arm: Arm, victim: PeerProcess) -> None:
    """Read the victim's mixing figures from its /metrics while it trains."""
    try:
        text = http(f"http://{victim.address}/metrics", timeout=5)[1].decode()
    except OSError:  # it just finished
        return
    for line in text.splitlines():
        name = line.split(" ", 1)[0]
        if name in WATCHED:
            arm.watched[name] = float(line.split()[-1])


def _run(corpus, tmp_path: Path, run: int, neighbours: int, env: dict[str, str] | None = None,
         tag: str = "") -> tuple[float, float, Arm]:
    """One run: the steered arm and its control at once; (victim loss steered, control's, steered arm)."""
    arms: list[Arm] = []
    try:
        arms = [_start_neighbours(corpus, tmp_path, f"{tag}{kind}-{neighbours}n", run, kind, neighbours)
                for kind in ("steer", "none")]
        victims = [_start_victim(corpus, tmp_path, arm, run, env) for arm in arms]
        for victim in victims:
            victim.wait_listening()
        deadline = time.monotonic() + 600
        while any(v.proc.poll() is None for v in victims):
            assert time.monotonic() < deadline, "the victims did not finish within 600 s"
            for arm, victim in zip(arms, victims):
                if victim.proc.poll() is None:
                    _watch(arm, victim)
            time.sleep(1.0)
        for victim in victims:
            assert victim.wait_exit(10) == 0, victim.text()[-3000:]
    finally:
        for arm in arms:
            for p in arm.processes():
                p.kill()
    steered, control = arms
    lying = re.search(r"lying from step (\d+) \(steer\)", steered.liar.text())
    assert lying and int(lying.group(1)) < STEPS, steered.liar.text()[-3000:]  # the lie began while the victim trained
    assert steered.watched.get("gossip_tts_mix_clipped_total", 0) >= 1, steered.watched  # and reached its mix
    losses = [eval_loss(arm.folder / "victim", corpus["val"]) for arm in arms]
    w = steered.watched
    print(f"{neighbours} neighbour(s){' ' + tag.rstrip('-') if tag else ''}, run {run}: victim loss {losses[0]:.4f} "
          f"beside the steerer, {losses[1]:.4f} control, ratio {losses[0] / losses[1]:.3f}; the steerer lied from "
          f"step {lying.group(1)}; the victim mixed {w.get('gossip_tts_mixes_total', 0):.0f} copies, clipped "
          f"{w.get('gossip_tts_mix_clipped_total', 0):.0f}, last radius {w.get('gossip_tts_clip_radius', 0):.3g} "
          f"(control {control.watched.get('gossip_tts_clip_radius', 0):.3g})", flush=True)
    return losses[0], losses[1], steered


@pytest.mark.timeout(1200)  # RUNS runs; one takes 40-110 s on 2 shared cores
@pytest.mark.parametrize("neighbours", [1, 2])
def test_a_steering_neighbour_of_one_or_two_costs_the_victim_at_most_5_percent(corpus, tmp_path, neighbours):
    ratios = []
    for run in range(RUNS):
        steered, control, _ = _run(corpus, tmp_path, run, neighbours)
        ratios.append(steered / control)
    print(f"{neighbours} neighbour(s): ratios {[round(r, 3) for r in ratios]}, median {statistics.median(ratios):.3f}, "
          f"worst {max(ratios):.3f} (bound {BOUND})", flush=True)
    assert max(ratios) <= BOUND, ratios


def test_control_with_the_old_radius_and_plain_clipping_the_steerer_drags_the_victim(corpus, tmp_path):
    steered, control, arm = _run(corpus, tmp_path, 0, 1, env=UNDEFENDED, tag="undefended-")
    assert steered >= UNDEFENDED_AT_LEAST * control, (steered, control, arm.watched)
