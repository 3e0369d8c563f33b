"""Everything worth checking once on a GPU, in one short run (for a session that has a device).

    python benchmarks/device_check.py [--device cuda] [--presets tiny,small,100m] [--steps 10]

1. Masks under bf16 autocast: padding does not change real frames (within bf16 precision),
   and all-masked text/speaker gives finite output — attention kernels differ by device.
2. Training throughput and MFU per preset, plain and with `--offload` (fp32 masters and
   AdamW state in CPU memory, bf16 weights on the GPU), side by side in one process.
3. Offloaded training stays finite and its loss falls over a few steps.
`--device cpu` runs the same code paths here as a dry run (no MFU).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import describe  # noqa: E402
from train_throughput import measure, peak_tflops  # noqa: E402

from gossip_tts.data import ensure_builtin_corpus  # noqa: E402
from gossip_tts.train.config import TrainConfig  # noqa: E402
from gossip_tts.train.trainer import TTSTrainer  # noqa: E402
from tests.unit.test_model_dit import inputs, pad_more, random_model  # noqa: E402


def mask_checks(device: str) -> dict:
    model = random_model().to(device)
    kw = {k: v.to(device) for k, v in inputs().items()}
    padded_kw = {k: v.to(device) for k, v in pad_more(inputs()).items()}
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.no_grad(), torch.autocast(device_type=device, dtype=dtype, enabled=device == "cuda"):
        out = model(**kw).float()
        padded = model(**padded_kw).float()[:, : kw["x_t"].shape[1]]
        empty = model(**{**kw, "text_mask": torch.zeros_like(kw["text_mask"]),
                         "ref_mask": torch.zeros_like(kw["ref_mask"])}).float()
    real = kw["x_mask"]
    rel = float((padded[real] - out[real]).norm() / out[real].norm())
    return {"padding_rel_diff": rel, "padding_ok": rel < (2e-2 if device == "cuda" else 1e-5),
            "all_masked_finite": bool(torch.isfinite(empty).all())}


def offload_trains(device: str, sources: list[str], steps: int) -> dict:
    trainer = TTSTrainer(TrainConfig(preset="small", device=device, sources=sources, batch_size=16, max_frames=256,
                                     offload=True, warmup_steps=2, lr=1e-3))
    try:
        losses = [trainer.step().loss for _ in range(steps)]
    finally:
        trainer.close()
    k = max(1, steps // 4)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    return {"first": first, "last": last, "finite": all(math.isfinite(v) for v in losses), "falls": last < first}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--presets", default="tiny,small,100m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=None)
    args = ap.parse_args()
    t0 = time.time()
    print(describe())
    sources = [str(ensure_builtin_corpus()[0])]
    report: dict = {"masks": mask_checks(args.device)}
    print("masks:", report["masks"], flush=True)
    peak = peak_tflops(args.peak_tflops) if args.device == "cuda" else None
    rows = []
    for preset in args.presets.split(","):
        for offload in (False, True):
            r = measure(preset, sources, args.device, args.steps, 16, 256, offload)
            r["mfu"] = r["model_tflops_per_s"] / peak if peak else None
            rows.append(r)
            mfu = "n/a" if r["mfu"] is None else f"{r['mfu']:.1%}"
            print(f"{r['preset']:<14} {r['samples_per_s']:9.1f} samples/s {r['audio_s_per_s']:9.1f} audio-s/s "
                  f"{r['model_tflops_per_s']:8.3f} TFLOP/s MFU {mfu}", flush=True)
    for plain, off in zip(rows[::2], rows[1::2]):
        print(f"offload/plain samples/s for {plain['preset']}: {off['samples_per_s'] / plain['samples_per_s']:.2f}")
    report["throughput"] = rows
    report["offload_training"] = offload_trains(args.device, sources, max(8, args.steps))
    print("offload training:", report["offload_training"])
    report["seconds"] = round(time.time() - t0, 1)
    print("summary: " + json.dumps(report, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
