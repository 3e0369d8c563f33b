"""Training throughput of the TTS trainer: samples/s and audio-seconds/s per preset, MFU on a GPU.

    python benchmarks/train_throughput.py [--presets tiny,small] [--steps 20] [--device auto]

Presets run one after another in the same process, on the same data (the built-in corpus),
so their numbers compare side by side. MFU = achieved model FLOPs / the GPU's dense bf16 peak
(pass --peak-tflops for GPUs not in the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

from gossip_tts.data import ensure_builtin_corpus  # noqa: E402
from gossip_tts.model import count_parameters, train_flops_per_sample  # noqa: E402
from gossip_tts.train.config import TrainConfig  # noqa: E402
from gossip_tts.train.mfu import peak_tflops as mfu_peak  # noqa: E402
from gossip_tts.train.trainer import TTSTrainer  # noqa: E402

def peak_tflops(explicit: float | None) -> float | None:
    """The GPU's dense bf16 peak (gossip_tts.train.mfu's table), or `explicit`."""
    return mfu_peak(torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"), explicit)


def measure(preset: str, sources: list[str], device: str, steps: int, batch_size: int, max_frames: int,
            offload: bool = False) -> dict:
    cfg = TrainConfig(preset=preset, device=device, sources=sources, batch_size=batch_size, max_frames=max_frames,
                      max_ref_frames=64, warmup_steps=1, offload=offload)
    trainer = TTSTrainer(cfg)
    try:
        for _ in range(3):  # warm-up: allocator, kernels, prefetch
            trainer.step()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        samples = audio = 0.0
        t0 = time.perf_counter()
        for i in range(steps):
            stats = trainer.step()
            samples += stats.samples
            audio += stats.audio_seconds
            print(f"\r{preset}: step {i + 1}/{steps}", end="", file=sys.stderr, flush=True)
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(file=sys.stderr)
        frames_per_sample = audio / samples * trainer.info.frame_rate
        flops = train_flops_per_sample(trainer.model_cfg, int(frames_per_sample), 64, 64)
        return {
            "preset": preset + ("+offload" if offload else ""),
            "params_m": round(count_parameters(trainer.model) / 1e6, 2),
            "device": str(trainer.device),
            "samples_per_s": samples / dt,
            "audio_s_per_s": audio / dt,
            "step_s": dt / steps,
            "model_tflops_per_s": flops * samples / dt / 1e12,
        }
    finally:
        trainer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-frames", type=int, default=256)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--offload", action="store_true", help="also measure each preset with ZeRO-style offload")
    ap.add_argument("--data", action="append", default=None, help="tar sources (default: the built-in corpus)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sources = args.data or [str(ensure_builtin_corpus()[0])]
    print(describe())
    peak = peak_tflops(args.peak_tflops)
    rows = []
    for p in args.presets.split(","):
        for off in ([False, True] if args.offload else [False]):
            rows.append(measure(p, sources, args.device, args.steps, args.batch_size, args.max_frames, off))
    print(f"{'preset':<8}{'params':>9}{'device':>8}{'samples/s':>11}{'audio-s/s':>11}{'s/step':>8}{'TFLOP/s':>9}{'MFU':>7}")
    for r in rows:
        mfu = r["model_tflops_per_s"] / peak if peak else None
        r["mfu"] = mfu
        print(f"{r['preset']:<8}{r['params_m']:>8.2f}M{r['device']:>8}{r['samples_per_s']:>11.1f}{r['audio_s_per_s']:>11.1f}"
              f"{r['step_s']:>8.3f}{r['model_tflops_per_s']:>9.4f}{(f'{mfu:.1%}' if mfu is not None else 'n/a'):>7}")
    if len(rows) > 1:
        print(f"ratio {rows[0]['preset']}/{rows[1]['preset']} samples/s: {rows[0]['samples_per_s'] / rows[1]['samples_per_s']:.2f}")
    print("summary: " + json.dumps({r["preset"]: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows}, sort_keys=True))


if __name__ == "__main__":
    main()
