"""An honest newcomer's time to its first mix (a neighbour copy taken into its mixing step):
what rationing snapshots in answers (peer.core.snapshots) costs a peer that joins a swarm.

    python benchmarks/joiner_first_mix.py simnet [--seeds 0 1 2 3 4]
    python benchmarks/joiner_first_mix.py processes [--runs 2] [--preset 100m --after-step 10]

simnet: four peers train from t=0; a fifth comes online at t=20 s (joining: it adopts a
neighbour's state, then gossips); printed: seconds from its start to its first mix, per seed.
processes: a `gossip-tts peer` trains (the tiny preset by default, or `--preset` on the built-in
corpus, batch 4, one thread); a second starts with `--peer` at it once it has logged step
`--after-step`; printed per run, in seconds from the second's start: its "listening" line, its
adoption of the first one's state, its first mix, both peers mixed (`/metrics`
`gossip_tts_mixes_total` ≥ 1 on each), and the snapshots the joiner received. Results in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]  # this checkout's code
from machine import describe  # noqa: E402

JOIN_AT_S = 20.0


def simnet_first_mix(seed: int) -> float | None:
    from simnet.runs.config import world_from_dict
    from simnet.runs.swarm import GossipSim

    world = world_from_dict({"n_peers": 5, "model": "lsq", "duration_s": 60.0, "churn": {
        "mode": "schedule", "events": [{"t": 0.0, "peer": 4, "action": "leave"},
                                       {"t": JOIN_AT_S, "peer": 4, "action": "join"}]}})
    sim = GossipSim(world, seed=seed)
    t = JOIN_AT_S
    while t < world.duration_s:
        t += 0.05
        sim.advance_to(t)
        joiner = sim.peers[4]
        if joiner.online and joiner.metrics.recent("mixed_staleness_steps"):
            return t - JOIN_AT_S
    return None


def metric_total(address: str, name: str) -> float:
    """A counter's total over its labels on `address`'s /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=20) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(f"gossip_tts_{name}") and not line.startswith("#"))


def peer_args(tmp: Path, swarm: str, preset: str) -> Callable[..., list[str]]:
    """`gossip-tts peer` arguments for a peer named `name` in `swarm` (`args(name, *extra)`): the tiny
    preset on a small built-in corpus, another preset on the default one (batch 4, one thread)."""
    from gossip_tts.data import ensure_builtin_corpus
    from tests.integration.conftest import tiny_args

    if preset == "tiny":
        train, _ = ensure_builtin_corpus(tmp / "corpus")
        return lambda name, *extra: tiny_args(train, tmp / name, "--listen", "127.0.0.1:0", "--swarm", swarm,
                                              "--no-mdns", *extra, steps=100000)
    return lambda name, *extra: ["--preset", preset, "--batch-size", "4", "--threads", "1", "--checkpoint-dir",
                                 str(tmp / name), "--listen", "127.0.0.1:0", "--swarm", swarm, "--no-mdns", *extra]


def first_peer(args: Callable[..., list[str]], tmp: Path, after_step: int) -> Any:
    """Peer "a" started and trained alone to step `after_step` (the first logged at or past it)."""
    from tests.integration.peers import PeerProcess, last_step

    a = PeerProcess(args("a"), tmp / "a.log")
    try:
        a.wait_listening(300)
        deadline = time.monotonic() + 1800
        while last_step(a.text()) < after_step:
            if time.monotonic() > deadline or a.proc.poll() is not None:
                raise RuntimeError(f"the first peer did not reach step {after_step}:\n" + a.text()[-2000:])
            time.sleep(0.5)
    except BaseException:
        a.kill()
        raise
    return a


def process_first_mix(tmp: Path, preset: str, after_step: int, limit_s: float) -> dict[str, float | None]:
    from tests.integration.peers import PeerProcess

    args = peer_args(tmp, f"first-mix-{int(time.time())}", preset)
    a = first_peer(args, tmp, after_step)
    b = None
    try:
        t0 = time.monotonic()
        b = PeerProcess(args("b", "--peer", a.address), tmp / "b.log")
        b.wait_listening(300)
        out: dict[str, float | None] = {"listening_s": time.monotonic() - t0, "adopted_s": None, "joiner_mixed_s": None,
                                        "both_mixed_s": None}
        while time.monotonic() - t0 < limit_s and out["both_mixed_s"] is None:
            now = time.monotonic() - t0
            if out["adopted_s"] is None and "joined: adopted the state of" in b.text():
                out["adopted_s"] = now
            mixed = [metric_total(p.address, "mixes_total") >= 1 for p in (b, a)]
            out["joiner_mixed_s"] = out["joiner_mixed_s"] or (now if mixed[0] else None)
            out["both_mixed_s"] = now if all(mixed) else None
            time.sleep(0.5)
        out["joiner_snapshots"] = metric_total(b.address, "snapshots_received_total")
        return {k: None if v is None else round(v, 1) for k, v in out.items()}
    finally:
        for p in (a, b):
            if p is not None:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", choices=["simnet", "processes"])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--preset", default="tiny", help="processes: the model both peers train")
    ap.add_argument("--after-step", type=int, default=1, help="processes: the first peer's step the second waits for")
    ap.add_argument("--limit", type=float, default=600.0, help="processes: seconds to wait for both to mix")
    opts = ap.parse_args()
    if opts.where == "simnet":
        out = {f"seed{s}": simnet_first_mix(s) for s in opts.seeds}
    else:
        out = {}
        for i in range(opts.runs):
            with tempfile.TemporaryDirectory() as tmp:
                out[f"run{i}"] = process_first_mix(Path(tmp), opts.preset, opts.after_step, opts.limit)
    print(describe())
    print(json.dumps({"first_mix_s": out}))


if __name__ == "__main__":
    main()
