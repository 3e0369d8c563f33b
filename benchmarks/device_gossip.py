"""The node's arithmetic on a GPU against the CPU path, side by side in one run (issue: the sizes users
train). Part of `benchmarks/device_check.py`; alone:

    python benchmarks/device_gossip.py [--device cuda] [--sizes 30000000,100000000]
    python benchmarks/device_gossip.py --device cpu --sizes 200000        # a dry run of the code paths

1. Codec parity: a sparse codec that selects where the vector lives (`SparseCodec.compress_where_held`,
   `protocol.topk_device`) must pack the same bytes as the CPU path from a copy of it, for top-k and
   random-k, float32 and bfloat16 deltas; each side's seconds.
2. Node cost: two `GossipNode`s on the device (`GossipNode(device=)`) and two on the CPU, the same
   seeded parameters: each publishes a bfloat16 hand-over and they exchange both ways, three
   periods; seconds per period and ns per parameter, device against CPU, and the CPU threads'
   seconds on the device path (what it still costs the host).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import describe  # noqa: E402

from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.trainer import flatten_bf16  # noqa: E402
from protocol import Identity  # noqa: E402
from protocol.codecs import parse_codec  # noqa: E402

SPECS = ("topk:0.1+int8", "topk:0.01+int8", "randk:0.05+int8")
NOW = 1.7e9


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def codec_parity(device: str, n: int) -> list[dict[str, Any]]:
    """Each spec and dtype: whether the device path packed the CPU path's bytes, and both times."""
    rows = []
    base = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1e-3
    for dtype in (torch.float32, torch.bfloat16):
        host = base.to(dtype)
        held = host.to(device)
        for spec in SPECS:
            codec = parse_codec(spec)
            t0 = time.perf_counter()
            want, want_rec = codec.compress_sparse(host, seed=11)
            t1 = time.perf_counter()
            got, got_rec = codec.compress_where_held(held, seed=11)
            _sync(device)
            t2 = time.perf_counter()
            same = want.keys() == got.keys() and all(bytes(want[k]) == bytes(got[k]) for k in want)
            same = same and torch.equal(want_rec.indices, got_rec.indices) and torch.equal(want_rec.values, got_rec.values)
            rows.append(dict(n=n, dtype=str(dtype).removeprefix("torch."), spec=spec, same_bits=same,
                             cpu_s=round(t1 - t0, 4), device_s=round(t2 - t1, 4)))
    return rows


def _pair(device: str, n: int) -> tuple[list[GossipNode], torch.Tensor]:
    cfg = GossipConfig(swarm="device-gossip", partner_steps=0.0)
    x0 = torch.randn(n, generator=torch.Generator().manual_seed(3)) * 0.05
    nodes = [GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), {"p": ((n,), "float32")}, x0, now=NOW,
                        entropy=bytes([i + 1]) * 16, device=device) for i in range(2)]
    return nodes, x0


def node_cost(device: str, n: int, periods: int = 3) -> dict[str, Any]:
    """Seconds per period (two publishes, an exchange each way) of a node pair on `device`."""
    nodes, x0 = _pair(device, n)
    keys = [node.identity.public_key for node in nodes]
    noise = torch.Generator().manual_seed(7)
    rounding = torch.Generator().manual_seed(1)
    times, host_cpu = [], []
    for period in range(periods + 1):  # the first period makes first contact and sends snapshots: not timed
        steps = [(x0 + torch.randn(n, generator=noise) * 1e-3 * (period + 1)).to(device) for _ in nodes]
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        for node, x in zip(nodes, steps):
            node.publish(flatten_bf16([x], n, rounding, torch.device(device)), period + 1, NOW + period)
        for i, j in ((0, 1), (1, 0)):
            body = nodes[i].build_request(keys[j] if keys[j] in nodes[i].neighbours else None, NOW + period)
            answer, _ = nodes[j].handle_request(body, NOW + period)
            nodes[i].handle_response(answer, NOW + period)
        _sync(device)
        if period:
            times.append(time.perf_counter() - t0)
            host_cpu.append(time.process_time() - c0)
    best = min(times)
    average = nodes[0].average.weights()  # what a checkpoint writes: on the host
    return dict(n=n, device=device, period_s=round(best, 4), ns_per_param=round(best / n * 1e9, 2),
                host_cpu_s=round(min(host_cpu), 4), node_device=str(nodes[0].public.x_hat.device),
                average_on_host=average is None or average[0].device.type == "cpu")


def run(device: str, sizes: list[int]) -> dict[str, Any]:
    """Both parts at each size, the CPU beside the device; a report for device_check's JSON."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU path on one core, as scale.py measures it
    report: dict[str, Any] = {"machine": describe(), "parity": [], "cost": []}
    try:
        _measure(device, sizes, report)
    finally:
        torch.set_num_threads(threads)
    same = all(r["same_bits"] for r in report["parity"])
    print(f"codec parity: {'every' if same else 'NOT every'} frame the same bits on {device} as on the CPU "
          f"({len(report['parity'])} cases)", flush=True)
    report["parity_ok"] = same
    return report


def _measure(device: str, sizes: list[int], report: dict[str, Any]) -> None:
    for n in sizes:
        report["parity"] += codec_parity(device, n)
        cpu, dev = node_cost("cpu", n), node_cost(device, n)
        report["cost"] += [cpu, dev]
        print(f"{n:>12,d} params: a period {cpu['period_s']:.3f} s on the CPU ({cpu['ns_per_param']} ns/param), "
              f"{dev['period_s']:.3f} s on {device} ({dev['ns_per_param']} ns/param, host CPU {dev['host_cpu_s']:.3f} s): "
              f"{cpu['period_s'] / max(dev['period_s'], 1e-9):.1f}x", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", default="30000000,100000000")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("device_gossip: no CUDA GPU here (use --device cpu for a dry run)")
        return 0
    print(describe(), flush=True)
    report = run(args.device, [int(s) for s in args.sizes.split(",")])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if report["parity_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
