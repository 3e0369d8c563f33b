"""Calibrate simnet's protocol cost model (`simnet.world.cost.CostConfig`) on the real code.

    python benchmarks/protocol_cost.py [--sizes 100000,1000000,4000000] [--repeats 5]

Times, at several model sizes and with one torch thread, what a peer's node worker and
training thread really do: publishing an update (compress, reconstruct, sign), building
an exchange body around a snapshot (sign), ingesting an update and a snapshot (verify,
decode, apply), and the mixing step. A least-squares fit over the sizes gives the fixed
part and the part per byte or per parameter; the last line is a `[world.cost]` table to
paste into a scenario (the defaults in simnet/world/cost.py came from this script).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

from async_opt import mix_step  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from protocol import Identity  # noqa: E402

NOW = 1.7e9


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b·x, with a and b clamped at >= 0."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    b = max(b, 0.0)
    return max(my - b * mx, 0.0), b


def measure(numel: int, compression: str, repeats: int) -> dict[str, float]:
    cfg = GossipConfig(swarm="cost", compression=compression)
    spec = {"w": ((numel,), "float32")}
    x = torch.randn(numel)
    a = GossipNode(cfg, Identity.generate(b"\x01" * 32), spec, x, now=NOW)
    b = GossipNode(cfg, Identity.generate(b"\x02" * 32), spec, x, now=NOW)
    steps = iter(range(1, 10**6))
    drift = [x.clone()]

    def publish() -> None:
        drift[0] = drift[0] + torch.randn(numel) * 1e-3
        a.publish(drift[0], next(steps), NOW)

    out = {"publish": best_of(publish, repeats), "update_bytes": a.last_publish_bytes}
    a_key, b_key = a.identity.public_key, b.identity.public_key
    clock = [NOW]

    def request(now: float) -> bytes:
        """b's exchange request to a, answered by a as to a verified asker (the only kind a snapshot goes to)."""
        body = b.build_request(a_key if a_key in b.neighbours else None, now)
        return a.handle_request(body, now, address="127.0.0.2", verified={b_key})[0]

    def answer(forget: bool = False) -> bytes:
        """a's answer to an exchange b starts: an exact snapshot when b holds nothing of a, else
        the updates b lacks. A first contact is answered with a ticket only, so b spends one
        first; each call is a minute later, so a's snapshot budget has refilled. Ingesting an
        answer (`handle_response`) builds nothing in reply."""
        clock[0] += 60.0
        if forget:
            b.forget(a_key)
        if forget or a_key not in b.neighbours:
            b.handle_response(request(clock[0]), clock[0])
        return request(clock[0])

    out["build_snapshot"] = best_of(lambda: a._frames_for(None, NOW, None), repeats)
    out["snapshot_bytes"] = len(answer(forget=True))
    body = answer(forget=True)
    t0 = time.perf_counter()
    b.handle_response(body, clock[0])  # one exact timing: each answer can be ingested once
    out["ingest_snapshot"] = time.perf_counter() - t0
    ingest = []
    for _ in range(repeats):
        publish()
        body = answer()
        t0 = time.perf_counter()
        b.handle_response(body, clock[0])
        ingest.append(time.perf_counter() - t0)
    out["ingest_update"] = statistics.median(ingest)
    out["update_body_bytes"] = len(body)
    copies = [x + torch.randn(numel) * 0.01 for _ in range(4)]
    out["mix4"] = best_of(lambda: mix_step(x, x, [(c, 0.5) for c in copies], 1.0), repeats)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000,4000000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compression", default="int8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(describe())
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = {n: measure(n, args.compression, args.repeats) for n in sizes}
    print(f"{'params':>9} {'publish ms':>11} {'build snap ms':>14} {'ingest snap ms':>15} {'ingest upd ms':>14} "
          f"{'mix x4 ms':>10} {'snap MB':>8} {'update kB':>10}")
    for n, r in rows.items():
        print(f"{n:>9} {r['publish'] * 1e3:>11.2f} {r['build_snapshot'] * 1e3:>14.2f} {r['ingest_snapshot'] * 1e3:>15.2f} "
              f"{r['ingest_update'] * 1e3:>14.2f} {r['mix4'] * 1e3:>10.2f} {r['snapshot_bytes'] / 1e6:>8.2f} "
              f"{r['update_bytes'] / 1e3:>10.1f}")
    ns = [float(n) for n in sizes]
    op_pub, pub = fit(ns, [rows[n]["publish"] for n in sizes])
    op_build, sign = fit([rows[n]["snapshot_bytes"] for n in sizes], [rows[n]["build_snapshot"] for n in sizes])
    # ingest = op + verify·bytes + apply·params; a snapshot has 4 bytes per parameter, an
    # update u bytes, so the two slopes separate verify and apply.
    op_in, s_snap = fit(ns, [rows[n]["ingest_snapshot"] for n in sizes])
    _, s_upd = fit(ns, [rows[n]["ingest_update"] for n in sizes])
    u = rows[sizes[-1]]["update_body_bytes"] / sizes[-1]
    verify = max((s_snap - s_upd) / (4.0 - u), 0.0) if u < 4.0 else 0.0
    apply = max(s_snap - 4.0 * verify, 0.0)
    _, mix = fit(ns, [rows[n]["mix4"] / 4 for n in sizes])
    op = statistics.median([op_pub, op_build, op_in])
    print(f"fit ({args.compression}, one torch thread): fixed {op * 1e6:.0f} us/op, publish {pub * 1e9:.2f} ns/param, "
          f"sign {sign * 1e9:.2f} ns/B, verify {verify * 1e9:.2f} ns/B, apply {apply * 1e9:.2f} ns/param, "
          f"mix {mix * 1e9:.2f} ns/param per copy")
    print(f"[world.cost] op_s = {op:.3g}, publish_s_per_param = {pub:.3g}, sign_s_per_byte = {sign:.3g}, "
          f"verify_s_per_byte = {verify:.3g}, apply_s_per_param = {apply:.3g}, mix_s_per_param = {mix:.3g}")


if __name__ == "__main__":
    main()
