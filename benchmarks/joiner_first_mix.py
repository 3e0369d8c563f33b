"""An honest newcomer's time to its first mix (a neighbour copy taken into its mixing step):
what rationing snapshots in answers (peer.core.snapshots) costs a peer that joins a swarm.

    python benchmarks/joiner_first_mix.py simnet [--seeds 0 1 2 3 4]
    python benchmarks/joiner_first_mix.py processes [--runs 2]

simnet: four peers train from t=0; a fifth comes online at t=20 s (joining: it adopts a
neighbour's state, then gossips); printed: seconds from its start to its first mix, per seed.
processes: a tiny-preset `gossip-tts peer` trains; a second starts with `--peer` at it;
printed: seconds from the second's "listening" line to its first mix (`/metrics`
`gossip_tts_mixed_staleness_steps_count` > 0), per run. Results in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
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


def _mixes(address: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("gossip_tts_mixed_staleness_steps_count"))


def process_first_mix(tmp: Path) -> float:
    from gossip_tts.data import ensure_builtin_corpus
    from tests.integration.conftest import tiny_args
    from tests.integration.peers import PeerProcess

    train, _ = ensure_builtin_corpus(tmp / "corpus")
    swarm = f"first-mix-{int(time.time())}"
    args = lambda name, *extra: tiny_args(train, tmp / name, "--listen", "127.0.0.1:0", "--swarm", swarm,
                                          "--no-mdns", *extra, steps=100000)
    a = PeerProcess(args("a"), tmp / "a.log")
    b = None
    try:
        a.wait_listening()
        a.wait_for(r"^step \d+ ", timeout=180)
        b = PeerProcess(args("b", "--peer", a.address), tmp / "b.log")
        b.wait_listening()
        t0 = time.monotonic()
        while _mixes(b.address) == 0:
            if time.monotonic() - t0 > 180:
                raise RuntimeError("no mix within 180 s:\n" + b.text()[-2000:])
            time.sleep(0.1)
        return time.monotonic() - t0
    finally:
        for p in (a, b):
            if p is not None:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", choices=["simnet", "processes"])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--runs", type=int, default=2)
    opts = ap.parse_args()
    if opts.where == "simnet":
        out = {f"seed{s}": simnet_first_mix(s) for s in opts.seeds}
    else:
        out = {}
        for i in range(opts.runs):
            with tempfile.TemporaryDirectory() as tmp:
                out[f"run{i}"] = round(process_first_mix(Path(tmp)), 2)
    print(json.dumps({"first_mix_s": out}))


if __name__ == "__main__":
    main()
