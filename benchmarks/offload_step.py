"""Host memory and time of one offloaded optimiser step: whole fp32 gradients against a chunk at a time.

    MALLOC_MMAP_THRESHOLD_=65536 python benchmarks/offload_step.py [--preset 100m] [--adamw fused] [--clip 0.01]

With --offload the host holds the fp32 masters and AdamW's two moments, and the step reads the
gradients from bf16 staging buffers (CUDA) or the device. This gives a preset's parameters, on
the CPU path of `MasterWeights` (fp32 weights and gradients in host memory too), fixed random
gradients, and measures a clipped step (clip, AdamW, push to the weights) two ways, one after the
other in this process:

- whole: the step as it was before it went by chunks, a control kept only here: every master gets
  its whole fp32 gradient, `clip_grad_norm_` over them, one `optimizer.step()`;
- chunked: `MasterWeights.step`, `--chunk-mib` (CHUNK_BYTES) of fp32 gradient at a time.

Each makes its state and takes a warm-up step first (the moments, and the chunked step's buffer,
are made there). Figures are in fp32 copies of the parameters (4 bytes each): `held` is what the
process held before the measured step beyond what it held before the state was made (weights,
gradients, masters: 1 each; moments: 2; and the buffer the chunked step keeps), `peak` how far
the resident peak of the (first measured) step rose above that. Freed large blocks go back to the OS only below
glibc's mmap threshold, hence MALLOC_MMAP_THRESHOLD_; without it the peaks understate. The two
ways' masters must come out equal (`identical`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # this checkout's code
import torch  # noqa: E402
from machine import describe  # noqa: E402
from proc_memory import reset_peak, status_bytes  # noqa: E402

from gossip_tts.model import EchoDiT, model_config  # noqa: E402
from gossip_tts.train.offload import CHUNK_BYTES, MasterWeights  # noqa: E402

ADAMW = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def shapes(preset: str) -> list[torch.Size]:
    with torch.device("meta"):
        model = EchoDiT(model_config(preset))
    return [p.shape for p in model.parameters() if p.requires_grad]


def whole_step(mw: MasterWeights, opt: torch.optim.Optimizer, clip: float) -> float:
    """The control: whole fp32 gradients on every master, then clip and one step; the gradients
    are dropped after it, as the next step's `zero_grad` did."""
    for p, m in zip(mw.params, mw.masters):
        m.grad = None if p.grad is None else p.grad.detach().to("cpu", torch.float32, copy=True)
    norm = float(torch.nn.utils.clip_grad_norm_(mw.masters, clip))
    opt.step()
    mw.push_to_device()
    opt.zero_grad(set_to_none=True)
    return norm


def chunked_step(mw: MasterWeights, opt: torch.optim.Optimizer, clip: float) -> float:
    norm = mw.step(opt, clip)
    mw.push_to_device()
    return norm


def measure(way: str, sizes: list[torch.Size], args: argparse.Namespace) -> tuple[dict, list[torch.Tensor]]:
    start = status_bytes("VmRSS")
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).mul_(0.02).requires_grad_(True) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    mw = MasterWeights(params, pin=False, chunk_bytes=int(args.chunk_mib * 2**20))
    opt = torch.optim.AdamW(mw.masters, lr=1e-3, weight_decay=0.1, **ADAMW[args.adamw])
    step = whole_step if way == "whole" else chunked_step
    step(mw, opt, args.clip)  # warm-up
    copy = 4 * sum(p.numel() for p in params)
    base = status_bytes("VmRSS")
    if not reset_peak():
        raise SystemExit("cannot reset the resident peak here (/proc/self/clear_refs): Linux only")
    t0 = time.perf_counter()
    norm = step(mw, opt, args.clip)
    seconds = time.perf_counter() - t0
    peak = status_bytes("VmHWM")
    for _ in range(args.repeats - 1):  # the fastest of these: the machines are shared
        t0 = time.perf_counter()
        step(mw, opt, args.clip)
        seconds = min(seconds, time.perf_counter() - t0)
    row = {"way": way, "held": round((base - start) / copy, 3), "peak": round((peak - base) / copy, 3),
           "step_s": round(seconds, 3), "grad_norm": norm}
    return row, mw.masters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="100m", help="model preset whose parameter shapes are stepped")
    ap.add_argument("--adamw", choices=list(ADAMW), default="fused",
                    help="AdamW implementation (offload on CUDA uses fused where torch has it)")
    ap.add_argument("--clip", type=float, default=0.01, help="gradient clip (small, so it clips)")
    ap.add_argument("--chunk-mib", type=float, default=CHUNK_BYTES / 2**20, help="fp32 gradient per chunk, MiB")
    ap.add_argument("--repeats", type=int, default=1,
                    help="steps timed (the fastest is reported; the peak is the first's)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe())
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        print("note: MALLOC_MMAP_THRESHOLD_ is not set, so freed blocks may stay resident and peaks understate")
    sizes = shapes(args.preset)
    n = sum(s.numel() for s in sizes)
    print(f"{args.preset}: {n} parameters in {len(sizes)} tensors, AdamW {args.adamw}, {torch.get_num_threads()} "
          f"threads, chunks of {args.chunk_mib:g} MiB; figures in fp32 copies ({4 * n / 2**30:.3f} GiB each)")
    rows, masters = [], []
    for way in ("whole", "chunked"):
        row, m = measure(way, sizes, args)
        rows.append(row)
        masters.append([t.detach() for t in m])
        del m
        print(f"  {way:8} held {row['held']:6.3f}  peak above held {row['peak']:6.3f}  step {row['step_s']:7.3f} s")
    identical = all(torch.equal(a, b) for a, b in zip(*masters)) and rows[0]["grad_norm"] == rows[1]["grad_norm"]
    print("summary: " + json.dumps({"preset": args.preset, "parameters": n, "adamw": args.adamw,
                                    "chunk_mib": args.chunk_mib, "identical": identical,
                                    **{f"{r['way']}_{k}": r[k] for r in rows for k in ("held", "peak", "step_s")}}))


if __name__ == "__main__":
    main()
