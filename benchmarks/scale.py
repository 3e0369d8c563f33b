"""What gossip costs a peer at each model size, and what that means at `800m` and `echo-2.4b`.

    python benchmarks/scale.py [--sizes 10000000,30000000,100000000] [--held 2,8] [--periods 4]
                               [--copy-dtypes bfloat16,float32] [--json OUT]

For each size and each count of neighbour copies held, in a fresh process: the publish periods
of benchmarks/publish_cycle.py (our node, two partners we pull and who pull us, the rest held
without pulling; the trainer adds the mix in place, as the TTS trainer does; one torch thread).
It prints, per size:

- CPU per parameter per period, by stage and by thread (ns: thread CPU seconds / parameters), and
  what one elementwise pass over the model costs on the same machine (the whole period in passes);
- what our node holds, in fp32 copies of the model (4 bytes a parameter): a census of every
  tensor storage and byte string reachable from the node, each counted once — the persistent
  cost — and the process's peak RSS turned into the same units after taking out the trainers'
  own parameters and the partners' holdings (an estimate that also carries the partners'
  temporaries);
- the temporaries of each of our stages (the rise of resident memory above its start, in a child
  whose large blocks are given back when freed; the CPU figures come from a second child that
  allocates as a peer does, `run_child`), and from them our node's peak: what it holds,
  the parameter copy the boundary hands the worker, and the largest stage's temporaries (the
  worker runs one stage at a time); the extrapolation uses this one;
- the bytes our node sends and receives per period.

Each set of runs is made again with every other `--copy-dtypes` precision (the control: float32
copies) and printed beside the first as ratios. Then it fits CPU seconds per period = a + b·n over the sizes (least squares) and copies held
= c + d·(neighbours beyond two), and extrapolates: CPU seconds per period and CPU RAM (with and
without `--offload`, which adds the fp32 masters, AdamW's two moments and a bf16 staging copy:
14 bytes a parameter) at `800m` and `echo-2.4b`, and, side by side, the steps per publish the
peer's publish budget (`GossipConfig.publish_budget`, the rule of `peer.core.publish_budget`)
would pick against an H100 and an RTX 4090 step of those presets (matmul FLOPs at 40% MFU,
`gossip_tts.model.flops`, batch 16 of 512 frames, 128 text bytes, 256 reference frames), taking
the extrapolated CPU seconds per period as the protocol's seconds per publish.
Everything measured is measured on this machine, named on the first line; the extrapolations
say they are.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # this checkout's code
import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine import describe  # noqa: E402

PRESETS = {"800m": 811_757_824, "echo-2.4b": 2_381_270_912}
"""Parameters of the presets users train (gossip_tts.model, counted on the meta device)."""
OFFLOAD_COPIES = 3.5
"""CPU memory `--offload` adds, in fp32 copies: master weights and AdamW's two moments (12 bytes a
parameter) and the bf16 staging of gradients (2 bytes): gossip_tts/train/offload.py, whose step
takes its fp32 gradients a chunk at a time (`CHUNK_BYTES`, a fixed 64 MiB:
benchmarks/offload_step.py measures it)."""
GPUS = {"H100": 989.0, "RTX 4090": 165.0}
"""Dense bf16 peak TFLOP/s (gossip_tts.train.mfu.PEAK_BF16_TFLOPS)."""
MFU = 0.4
SAMPLE = dict(batch=16, frames=512, text_len=128, ref_len=256)
MMAP_THRESHOLD = 1 << 16
"""glibc's malloc threshold above which a block is mapped on its own (the child's environment)."""
STAGES = ("publish", "    codec", "    lz4 + sign", "  averaged weights", "request x2", "ingest x2", "serve x2",
          "boundary", "  mix")


def held_bytes(root: Any, storages: set[int] | None = None) -> int:
    """Bytes of every tensor storage, array and byte string reachable from `root`, each once
    (`storages`: data pointers already counted elsewhere, to count each storage once over calls)."""
    storages = set() if storages is None else storages
    seen, total, stack = set(), 0, [root]
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, str, int, float, bool)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
            continue
        if isinstance(obj, (bytes, bytearray, memoryview)):
            total += len(obj)
            continue
        if isinstance(obj, np.ndarray):
            total += obj.nbytes if obj.base is None else 0
            continue
        stack.extend(gc.get_referents(obj))
    return total


def by_attribute(node: Any) -> dict[str, int]:
    """What each of the node's attributes holds, a storage counted under the first that reaches
    it (a view shares its copies' tensors: it shows what it adds); neighbours one by one."""
    storages: set[int] = set()
    out: dict[str, int] = {}
    for name, value in vars(node).items():
        if name == "neighbours":
            for i, neighbour in enumerate(value.values()):
                out[f"neighbour {i + 1}"] = held_bytes(neighbour, storages)
        else:
            out[name.lstrip("_")] = held_bytes(value, storages)
    return {name: size for name, size in out.items() if size}


def one_pass_ns(numel: int, repeats: int = 3) -> float:
    """ns a parameter of one elementwise pass over a model of `numel` (c = a + b in float32, one
    thread, the best of `repeats`): the unit the stages' figures are read in, since every stage is a
    sequence of such torch or numpy passes, and what a pass costs differs between machines."""
    a, b, c = torch.rand(numel), torch.rand(numel), torch.empty(numel)
    torch.add(a, b, out=c)  # faulted in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.add(a, b, out=c)
        best = min(best, time.perf_counter() - start)
    return best / numel * 1e9


def child(numel: int, held: int, periods: int, compression: str, copy_dtype: str,
          calibrate: bool = False) -> dict[str, Any]:
    """One size in this process: publish_cycle's periods, a census, the peak RSS; with `calibrate`,
    after them, the cost of one pass (`one_pass_ns`; its three model-sized tensors would count in
    the peak, so only the CPU child measures it)."""
    import publish_cycle

    torch.set_num_threads(1)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def census(ours: Any, partners: list[Any]) -> dict[str, Any]:
        return {"ours": held_bytes(ours), "partners": sum(held_bytes(p) for p in partners),
                "by_attribute": by_attribute(ours)}

    # partner steps off: the TTS trainer's Adam steps do not add (Capabilities.additive_steps)
    out = publish_cycle.measure(numel, periods, compression, add_in_place=True, held=held, census=census,
                                partner_steps=0.0, copy_dtype=copy_dtype)
    # the stages' peaks reset the kernel's count (publish_cycle.Timer): the highest seen is kept there
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, out["highest_rss"])
    copy = 4.0 * numel
    trainers = 4  # our parameters, the two partners' and the flat start publish_cycle builds them from
    return {
        "numel": numel, "held": held, "copy_dtype": copy_dtype,
        "ns": {name: out[name] / numel * 1e9 for name in (*STAGES, "worker", "training")},
        "census_copies": out["census"]["ours"] / copy,
        "by_attribute": {name: size / copy for name, size in out["census"]["by_attribute"].items()},
        "peak_copies": (peak - base - out["census"]["partners"]) / copy - trainers,
        "stage_peaks": {name: size / copy for name, size in out["peaks"].items()},
        "wire_bytes": out["wire_bytes"], "update_bytes": out["update_bytes"],
        "cpu_s": out["worker"] + out["training"],
        "pass_ns": one_pass_ns(numel) if calibrate else None,
    }


def run_child(numel: int, held: int, periods: int, compression: str, copy_dtype: str,
              memory: bool = True) -> dict[str, Any]:
    """One child's figures. `memory`: with a fixed threshold every large block is mapped and given
    back when freed, so each stage's rise of resident memory is its own temporaries, not what an
    earlier stage left in the heap; but then every temporary, a piece included, is faulted in
    afresh, which a peer's allocator (glibc raises its threshold up to 32 MiB) does not do for
    pieces, so CPU is measured in a child without it (`memory=False`)."""
    cmd = [sys.executable, __file__, "--child", str(numel), str(held), str(periods), compression, copy_dtype,
           "memory" if memory else "cpu"]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)} if memory else dict(os.environ)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"scale.py: size {numel:,} with {held} copies failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_peak_from_parts(row: dict[str, Any]) -> float | None:
    """What a node holds plus the boundary's parameter copy plus the largest temporaries of one
    worker stage, in copies; None where the stages' temporaries could not be measured."""
    stages = row["stage_peaks"]
    if "boundary" not in stages or len(stages) < 2:
        return None
    return row["census_copies"] + stages["boundary"] + max(v for k, v in stages.items() if k != "boundary")


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares a + b·x (a = 0, b = the mean ratio, when there is one point)."""
    if len(xs) == 1:
        return 0.0, ys[0] / xs[0]
    b, a = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(a), float(b)


def step_seconds(preset: str, tflops: float) -> float:
    from gossip_tts.model import model_config, train_flops_per_sample

    flops = train_flops_per_sample(model_config(preset), SAMPLE["frames"], SAMPLE["text_len"], SAMPLE["ref_len"])
    return flops * SAMPLE["batch"] / (tflops * 1e12 * MFU)


def report(rows: list[dict[str, Any]], helds: list[int]) -> dict[str, Any]:
    sizes = sorted({r["numel"] for r in rows})
    at = {(r["numel"], r["held"]): r for r in rows}
    low = min(helds)
    print(f"| ns per parameter per period ({low} copies held) | " + " | ".join(f"{n / 1e6:g}M" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in (*STAGES, "worker", "training"):
        label = "· " + name.strip() if name.startswith(" ") else name
        print(f"| {label} | " + " | ".join(f"{at[n, low]['ns'][name]:.1f}" for n in sizes) + " |")
    if all(at[n, low].get("pass_ns") for n in sizes):
        def in_passes(r: dict[str, Any]) -> str:
            return f"{r['pass_ns']:.2f} ({(r['ns']['worker'] + r['ns']['training']) / r['pass_ns']:.0f})"

        print("| one pass, c = a + b in float32 (the unit: worker + training in passes) | "
              + " | ".join(in_passes(at[n, low]) for n in sizes) + " |")
    for held in helds:
        present = [n for n in sizes if (n, held) in at]
        print(f"| node's copies held, census ({held} neighbours) | "
              + " | ".join(f"{at[n, held]['census_copies']:.2f}" if n in present else "-" for n in sizes) + " |")
        print(f"| node's peak, estimated from RSS ({held} neighbours) | "
              + " | ".join(f"{at[n, held]['peak_copies']:.1f}" if n in present else "-" for n in sizes) + " |")
    stages = [name for name in at[sizes[0], low]["stage_peaks"]]
    for name in stages:
        print(f"| temporaries of {name.strip()}, its peak above its start (copies, RSS) | "
              + " | ".join(f"{at[n, low]['stage_peaks'].get(name, 0.0):.2f}" for n in sizes) + " |")
    held_by = {k for n in sizes for k, v in at[n, low]["by_attribute"].items() if v >= 0.005}
    for name in sorted(held_by):
        print(f"| · {name} | " + " | ".join(f"{at[n, low]['by_attribute'].get(name, 0.0):.2f}" for n in sizes) + " |")
    from peer.core.gossip_config import GossipConfig

    # the census counts the frames its few periods left; a long run fills the outbox to its bound
    cfg = GossipConfig()
    bound = [max(cfg.outbox_bound(n), cfg.outbox_min_frames * at[n, low]["update_bytes"]) / (4 * n) for n in sizes]
    print("| · outbox at its bound, a long run (copies) | " + " | ".join(f"{b:.2f}" for b in bound) + " |")
    print(f"| MB on the wire per period | " + " | ".join(f"{at[n, low]['wire_bytes'] / 1e6:.1f}" for n in sizes) + " |")
    a, b = fit(sizes, [at[n, low]["cpu_s"] for n in sizes])
    both = [n for n in sizes if all((n, h) in at for h in helds)]
    per_neighbour = 0.0
    if len(helds) > 1 and both:
        hi = max(helds)
        per_neighbour = float(np.mean([(at[n, hi]["census_copies"] - at[n, low]["census_copies"]) / (hi - low)
                                       for n in both]))
    persistent = at[sizes[-1], low]["census_copies"]
    # the largest size, where the allocator's fixed part matters least; never below what the census counts.
    # From its parts where the stages' temporaries were measured: what the node holds, the parameter
    # copy the boundary hands the worker, and the largest temporaries of one worker stage (they run
    # one at a time). The RSS estimate also carries the partners' own temporaries.
    parts = node_peak_from_parts(at[sizes[-1], low])
    peak = max(parts if parts is not None else at[sizes[-1], low]["peak_copies"], persistent)
    print(f"| node's peak from its parts ({low} neighbours): held + the boundary's copy + the largest stage's "
          f"temporaries | " + " | ".join(f"{node_peak_from_parts(at[n, low]) or float('nan'):.2f}" for n in sizes) + " |")
    print(f"\nfit over {', '.join(f'{n / 1e6:g}M' for n in sizes)}: CPU per period = {a:.3f} s + {b * 1e9:.1f} ns × n; "
          f"at {sizes[-1] / 1e6:g}M the node holds {persistent:.2f} copies with {low} neighbours (peak ~{peak:.1f}), "
          f"{per_neighbour:.2f} more per further neighbour")
    print("extrapolated (not measured) to the presets users train:")
    out = {"fit_a_s": a, "fit_b_s": b, "persistent_copies": persistent, "peak_copies": peak,
           "per_neighbour_copies": per_neighbour, "presets": {}}
    for preset, n in PRESETS.items():
        cpu = a + b * n
        ram = peak * 4 * n / 2**30
        print(f"  {preset} ({n / 1e6:,.0f}M): {cpu:.1f} CPU-s per period; CPU RAM for gossip {ram:.1f} GiB "
              f"({ram + OFFLOAD_COPIES * 4 * n / 2**30:.1f} GiB with --offload)")
        steps = {gpu: step_seconds(preset, tf) for gpu, tf in GPUS.items()}
        out["presets"][preset] = {"cpu_s": cpu, "ram_gib": ram, "ram_offload_gib": ram + OFFLOAD_COPIES * 4 * n / 2**30,
                                  "step_s": steps, "publish_every": {gpu: cadence(cpu, s) for gpu, s in steps.items()}}
    cadence_table(out["presets"])
    return out


def cadence(protocol_s: float, step_s: float) -> int:
    """The steps per publish the peer's budget settles at for these costs."""
    from peer.core.gossip_config import GossipConfig
    from peer.core.publish_budget import budget_period

    return budget_period(protocol_s, step_s, GossipConfig.publish_budget)


def cadence_table(presets: dict[str, Any]) -> None:
    """The cadence the budget picks, presets side by side: the protocol's CPU is this machine's,
    extrapolated; the steps are a GPU's at `MFU`, computed from FLOPs; neither is measured there."""
    from peer.core.gossip_config import GossipConfig

    names = list(presets)
    print(f"\nthe protocol's CPU measured on this {describe()}")
    print(f"| publish cadence at a {GossipConfig.publish_budget:.0%} budget, extrapolated (not measured): "
          f"protocol CPU of this machine, a GPU step at {MFU:.0%} MFU | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print("| protocol CPU-s per publish | " + " | ".join(f"{presets[p]['cpu_s']:.1f}" for p in names) + " |")
    for gpu in GPUS:
        print(f"| {gpu}: step | " + " | ".join(f"{presets[p]['step_s'][gpu] * 1e3:,.0f} ms" for p in names) + " |")
        print(f"| {gpu}: publish every | "
              + " | ".join(f"{presets[p]['publish_every'][gpu]:,} steps" for p in names) + " |")


def beside(rows: list[dict[str, Any]], others: list[dict[str, Any]], name: str, other: str) -> None:
    """What the node holds and peaks at with `name` copies, over the same runs with `other` copies."""
    theirs = {(r["numel"], r["held"]): r for r in others}
    print(f"\n| {name} over {other} copies | census | peak from RSS | worker CPU | training-thread CPU |")
    print("|---|---|---|---|---|")
    for r in rows:
        t = theirs[r["numel"], r["held"]]
        print(f"| {r['numel'] / 1e6:g}M, {r['held']} neighbours ({t['census_copies']:.2f} copies in {other}) "
              f"| {r['census_copies'] / t['census_copies']:.3f} | {r['peak_copies'] / t['peak_copies']:.3f} "
              f"| {r['ns']['worker'] / t['ns']['worker']:.3f} | {r['ns']['training'] / t['ns']['training']:.3f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        numel, held, periods, compression = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        calibrate = len(sys.argv) > 7 and sys.argv[7] == "cpu"
        print(json.dumps(child(numel, held, periods, compression, sys.argv[6], calibrate=calibrate)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000000,30000000,100000000")
    ap.add_argument("--held", default="2,8", help="neighbour copies held, each a run (the larger at the two "
                                                  "smallest sizes only: at 100M it needs over 10 GB)")
    ap.add_argument("--periods", type=int, default=4)
    ap.add_argument("--compression", default="topk:0.1+int8")
    ap.add_argument("--copy-dtypes", default="bfloat16,float32",
                    help="GossipConfig.copy_dtype of each set of runs: the first in full, the others beside it")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    helds = sorted(int(h) for h in args.held.split(","))
    dtypes = args.copy_dtypes.split(",")
    print(describe())
    runs: dict[str, list[dict[str, Any]]] = {}
    for dtype in dtypes:
        runs[dtype] = []
        for n in sizes:
            for held in helds:
                if held != helds[0] and n not in sorted(sizes)[:2]:
                    continue
                print(f"measuring {n:,} parameters, {held} neighbour copies in {dtype}…", file=sys.stderr, flush=True)
                row = run_child(n, held, args.periods, args.compression, dtype)
                timed = run_child(n, held, args.periods, args.compression, dtype, memory=False)
                runs[dtype].append({**row, "ns": timed["ns"], "cpu_s": timed["cpu_s"], "pass_ns": timed["pass_ns"]})
    print(f"copies in {dtypes[0]}:")
    out = report(runs[dtypes[0]], helds)
    for other in dtypes[1:]:
        beside(runs[dtypes[0]], runs[other], dtypes[0], other)
    if args.json:
        args.json.write_text(json.dumps({"machine": describe(), "rows": runs[dtypes[0]], "runs": runs, **out}, indent=1))


if __name__ == "__main__":
    main()
