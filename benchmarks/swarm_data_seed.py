"""How much the one seed holder uploads while a swarm replicates its corpus with the real fetch plan.

    python benchmarks/swarm_data_seed.py [--peers 16] [--shards 64] [--shard-mb 50] [--seeds 0,1,2]

Not simnet: a small event simulation around the fetcher's pure decisions
(`peer.shards.plan.fetch_order`, `choose_fetches`, `source_order`), the ones the real
`ShardFetcher` makes. Peer 0 holds the corpus; the others start empty, each with
`max_fetches` download slots, and always try a shard's first source in `source_order`.
Each peer has `--up-mbps`/`--down-mbps` of access bandwidth (WAN: 20 Mb/s by default), shared
evenly by the transfers it has open when one starts (a transfer keeps the rate it started
with). Holders are known at once (real adverts lag by up to `advert_every_s`, which delays,
but does not redirect, fetches). Printed: the seed's upload as a multiple of the corpus,
the time until every peer holds every shard, and the most any other peer uploaded.
Target: the seed uploads at most 3x the corpus.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from peer.shards.plan import choose_fetches, fetch_order  # noqa: E402


def replicate(peers: int, shards: int, shard_bytes: int, up_bps: float, down_bps: float, max_fetches: int,
              seed: int) -> dict[str, float]:
    names = [f"{seed}-{i:064x}"[-64:] for i in range(shards)]
    ids = [f"peer-{seed}-{p}" for p in range(peers)]
    held = [set(names) if p == 0 else set() for p in range(peers)]
    orders = [fetch_order(names, ids[p]) for p in range(peers)]
    busy: list[set[str]] = [set() for _ in range(peers)]
    uploads, downloads = [0] * peers, [0] * peers
    uploaded = [0] * peers
    events: list[tuple[float, int, int, int, str]] = []  # (done at, tie, peer, source, shard)
    tie = 0
    now = 0.0

    def plan() -> None:
        nonlocal tie
        holders: dict[str, set[str]] = {}
        for q in range(peers):
            for s in held[q]:
                holders.setdefault(s, set()).add(str(q))
        for p in range(1, peers):
            free = max_fetches - len(busy[p])
            for job in choose_fetches(orders[p], held[p], busy[p], holders, set(), free, ids[p], room_for=free):
                src = int(job.sources[0])
                uploads[src] += 1
                downloads[p] += 1
                rate = min(up_bps / uploads[src], down_bps / downloads[p])
                busy[p].add(job.shard)
                tie += 1
                heapq.heappush(events, (now + shard_bytes * 8 / rate, tie, p, src, job.shard))

    plan()
    while events:
        now, _, p, src, shard = heapq.heappop(events)
        uploads[src] -= 1
        downloads[p] -= 1
        uploaded[src] += shard_bytes
        busy[p].discard(shard)
        held[p].add(shard)
        plan()
    assert all(len(h) == shards for h in held)
    corpus = shards * shard_bytes
    return {"seed_upload_x_corpus": uploaded[0] / corpus, "max_other_upload_x_corpus": max(uploaded[1:]) / corpus,
            "minutes_to_full_replication": now / 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=16)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--shard-mb", type=float, default=50.0)
    ap.add_argument("--up-mbps", type=float, default=20.0)
    ap.add_argument("--down-mbps", type=float, default=20.0)
    ap.add_argument("--max-fetches", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        result = replicate(args.peers, args.shards, int(args.shard_mb * 1e6), args.up_mbps * 1e6, args.down_mbps * 1e6,
                           args.max_fetches, seed)
        print(json.dumps({"seed": seed, **{k: round(v, 3) for k, v in result.items()}}))


if __name__ == "__main__":
    main()
