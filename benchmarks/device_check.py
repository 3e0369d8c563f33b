"""Everything worth measuring once on a GPU, in one run of at most about 8 minutes (H200-class).

    python benchmarks/device_check.py [--presets 100m,800m] [--steps 10] [--peak-tflops T] [--budget-s 450]
    python benchmarks/device_check.py --device cpu --presets tiny --steps 2 --judge-clips 2   # a CPU dry run

1. samples/s, model TFLOP/s, MFU and peak memory per preset in bf16, eager and torch.compile;
2. peak memory and samples/s with `--offload` (fp32 masters and AdamW state in pinned CPU memory);
3. the judge (`gossip_tts.judge`, the [judge] extra): the first preset's eager model, as trained in
   part 1, speaks `--judge-clips` held-out sentences of the built-in corpus it trained on in the
   voice of one of its speakers; WER, CER, similarity and DNSMOS beside the controls (the
   corpus's own recordings of them, their codec round trip, noise). A model trained for a few
   steps does not say the words yet, and the ASR does not read the corpus's synthetic words
   (its own recordings score WER 1.0): the part checks that synthesis and the judge run on the
   device and times them, and similarity and DNSMOS are the figures that move. Without the
   extra it says so in one line;
4. a 2-process torchrun peer (`gossip-tts peer --nproc 2`, DDP) on this one GPU (gloo: NCCL
   refuses two ranks on one device), its progress line;
5. gossip overhead: one peer's samples/s with two neighbours vs alone (benchmarks/gossip_overhead.py),
   its node on the CPU and then, with `device_budget_gib` 40, on the GPU;
0. first, the node's arithmetic on the GPU (benchmarks/device_gossip.py): the codec's frames the
   same bits as the CPU's, and a node pair's seconds per period on the GPU beside the CPU.
The figures are the ones the peer itself reports (gossip_tts.train.mfu). The JSON report goes to
`$OUT/device_check.json` when OUT is set (else `--json PATH`). Without a CUDA GPU it says so
and exits 0. Parts that would overrun `--budget-s` are skipped and marked so in the report.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import device_gossip  # noqa: E402
from machine import describe  # noqa: E402

from gossip_tts.data import ensure_builtin_corpus  # noqa: E402
from gossip_tts.data.builtin import write_voice_folder  # noqa: E402
from gossip_tts.judge.held_out import HeldOutConfig, judge_checkpoints  # noqa: E402
from gossip_tts.model import count_parameters  # noqa: E402
from gossip_tts.train.config import TrainConfig  # noqa: E402
from gossip_tts.train.trainer import TTSTrainer  # noqa: E402
from peer.local.checkpoint import save_checkpoint  # noqa: E402

FIGURE = re.compile(r"\b(step|samples/s|tflops|mfu|peak_mem_gib) (\S+)")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def train_run(preset: str, sources: list[str], steps: int, batch_size: int, max_frames: int, *, device: str = "cuda",
              compile: bool = False, offload: bool = False, peak: float | None = None,
              save_to: Path | None = None) -> dict[str, Any]:
    """Warm up (3 steps: allocator, kernels, compiling), then time `steps` steps; peak memory over all.
    With `save_to`, the trained model is checkpointed there (the judge part speaks with it)."""
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    cfg = TrainConfig(preset=preset, device=device, sources=sources, batch_size=batch_size, max_frames=max_frames,
                      max_ref_frames=64, warmup_steps=1, compile=compile, offload=offload, peak_tflops=peak)
    t_build = time.perf_counter()
    trainer = TTSTrainer(cfg)
    try:
        t0 = time.perf_counter()
        losses = [trainer.step().loss for _ in range(3)]
        sync(device)
        warm_s = time.perf_counter() - t0
        samples, tflops, mfus = 0, [], []
        t0 = time.perf_counter()
        for _ in range(steps):
            stats = trainer.step()
            samples += stats.samples
            losses.append(stats.loss)
            tflops.append(stats.extra.get("tflops", float("nan")))
            mfus.append(stats.extra.get("mfu", float("nan")))
        sync(device)
        dt = time.perf_counter() - t0
        if save_to is not None:
            save_checkpoint(save_to, *trainer.state_tensors())
        return {
            "preset": preset, "compile": compile and trainer._compiled, "compile_asked": compile, "offload": offload,
            "params_m": round(count_parameters(trainer.model) / 1e6, 1), "samples_per_s": round(samples / dt, 2),
            "step_s": round(dt / steps, 4), "tflops": float(f"{sum(tflops) / len(tflops):.4g}"),
            "mfu": round(sum(mfus) / len(mfus), 4) if not math.isnan(mfus[0]) else None,
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None,
            "warmup_s": round(warm_s, 1), "build_s": round(t0 - t_build - warm_s, 1),
            "losses_finite": all(math.isfinite(v) for v in losses),
        }
    finally:
        trainer.close()
        del trainer
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def group_peer(sources: list[str], preset: str, steps: int, timeout: float, device: str = "cuda") -> dict[str, Any]:
    """`gossip-tts peer --nproc 2` on this GPU (solo: the network side is tested on CPU), its last progress line."""
    cmd = [sys.executable, "-m", "gossip_tts", "peer", "--nproc", "2", "--parallel", "ddp", "--device", device,
           "--preset", preset, "--data", sources[0], "--max-steps", str(steps), "--solo", "--checkpoint-dir", "none",
           "--log-every", "2", "--batch-size", "16", "--max-frames", "256"]
    env = {**os.environ, "GOSSIP_TTS_PARALLEL_BACKEND": "gloo"}
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s", "tail": str(exc.stdout or "")[-1500:]}
    text = out.stdout + out.stderr
    progress = [dict(FIGURE.findall(line)) for line in text.splitlines() if " samples/s " in line]
    last = {k: float(v) for k, v in progress[-1].items()} if progress else {}
    return {"ok": out.returncode == 0 and "group of 2 processes" in text, "returncode": out.returncode,
            "seconds": round(time.perf_counter() - t0, 1), "last_line": last, "tail": text[-1500:] if out.returncode else ""}


def gossip_overhead(preset: str, timeout: float, device: str = "cuda", budget_gib: float = 0.0) -> dict[str, Any]:
    """benchmarks/gossip_overhead.py: the same trainer's samples/s with gossip on (two neighbours) vs off,
    training on `device`, its node on the GPU where `budget_gib` lets it (else on the CPU)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gossip_overhead.py"), "--preset", preset, "--phases", "4",
           "--steps-per-phase", "8", "--max-frames", "256", "--device", device, "--device-budget-gib", str(budget_gib)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    summary = [line for line in out.stdout.splitlines() if line.startswith("summary: ")]
    if out.returncode or not summary:
        return {"ok": False, "returncode": out.returncode, "tail": (out.stdout + out.stderr)[-1500:]}
    return {"ok": True, **json.loads(summary[-1][len("summary: "):])}


def judge_part(checkpoint: Path, work: Path, clips: int, synth_steps: int, device: str) -> dict[str, Any]:
    """The trained model speaks `clips` held-out sentences of the built-in corpus; the judge's figures."""
    from gossip_tts.audio import load_codec

    t0 = time.perf_counter()
    voice = write_voice_folder(work / "voice", int(load_codec("mel").sample_rate), n_clips=clips)
    sentences = [tuple(line.split("|", 1)) for line in (voice / "metadata.csv").read_text("utf-8").splitlines()]
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    rows = judge_checkpoints(HeldOutConfig(checkpoints={"trained": checkpoint}, sentences=sentences, voice=voice,
                                           reference=voice / "reference.wav", out=work / "judged",
                                           synth_steps=synth_steps, device=device), emit=emit)
    seconds = round(time.perf_counter() - t0, 1)
    if rows is None:
        return {"ok": False, "skipped": lines[-1] if lines else "no judge table", "seconds": seconds}
    doc = json.loads(next(line for line in reversed(lines) if line.startswith("judge: "))[len("judge: "):])
    return {"ok": True, "clips": clips, "synth_steps": synth_steps, "seconds": seconds, **doc}


class Budget:
    """Skips what would not fit in the time left (a part's cost is guessed before it starts)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def allows(self, guess_s: float) -> bool:
        return time.monotonic() + guess_s <= self.end


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="100m,800m")
    ap.add_argument("--gossip-sizes", default="30000000,100000000", help="parameters of part 0's node pairs")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the same code paths (tiny presets), no GPU figures")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-frames", type=int, default=256)
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--budget-s", type=float, default=450.0, help="stop starting new parts after this long")
    ap.add_argument("--json", type=Path, default=None, help="where the report goes (default: $OUT/device_check.json)")
    ap.add_argument("--judge-clips", type=int, default=4, help="held-out sentences the judge part scores (0: no judge part)")
    ap.add_argument("--synth-steps", type=int, default=32, help="sampler steps of each judged sentence")
    ap.add_argument("--work", type=Path, default=None,
                    help="the judge part's clips (default: $OUT/device_check_judge, else a temporary folder)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else "torch finds no usable GPU"
        print(f"device_check: no CUDA GPU here ({why}); nothing to measure. Run it on a machine with an NVIDIA GPU.")
        return 0
    t_start = time.time()
    budget = Budget(args.budget_s)
    print(describe(), flush=True)
    sources = [str(ensure_builtin_corpus()[0])]
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    report: dict[str, Any] = {"machine": describe(), "gpu": gpu, "torch": torch.__version__,
                              "train": [], "skipped": []}
    presets = args.presets.split(",")
    if budget.allows(90):
        report["device_gossip"] = device_gossip.run(args.device, [int(s) for s in args.gossip_sizes.split(",")])
    else:
        report["skipped"].append("device gossip")
    guesses = {"100m": 40.0, "800m": 90.0}
    plan = [(p, c, o) for p in presets for c, o in ((False, False), (True, False), (False, True))]
    work = args.work or (Path(os.environ["OUT"]) / "device_check_judge" if os.environ.get("OUT")
                         else Path(tempfile.mkdtemp(prefix="device-check-")))
    # the model in a temporary folder: with its optimiser state a 100m checkpoint is over a GB
    judged_model = Path(tempfile.mkdtemp(prefix="device-check-model-")) / "model" if args.judge_clips > 0 else None
    for preset, compile, offload in plan:
        label = f"{preset}{' compile' if compile else ''}{' offload' if offload else ''}"
        if not budget.allows(guesses.get(preset, 60.0) * (2.5 if compile else 1.0)):
            report["skipped"].append(label)
            continue
        try:
            first = (preset, compile, offload) == plan[0]
            row = train_run(preset, sources, args.steps, args.batch_size, args.max_frames, device=args.device, compile=compile,
                            offload=offload, peak=args.peak_tflops, save_to=judged_model if first else None)
        except torch.cuda.OutOfMemoryError as exc:
            row = {"preset": preset, "compile_asked": compile, "offload": offload, "error": f"out of memory: {exc}"[:300]}
        report["train"].append(row)
        print(f"{label:<22} " + json.dumps(row), flush=True)
    if judged_model is not None and (judged_model / "checkpoint.safetensors").exists() and budget.allows(60):
        report["judge"] = judge_part(judged_model, work, args.judge_clips, args.synth_steps, args.device)
        print("judge part:", json.dumps(report["judge"]), flush=True)
        shutil.rmtree(judged_model.parent, ignore_errors=True)
    elif judged_model is not None:
        report["skipped"].append("judge")
    if budget.allows(90):
        report["torchrun_peer"] = group_peer(sources, presets[0], 30, min(240, budget.end - time.monotonic()), args.device)
        print("torchrun peer:", json.dumps(report["torchrun_peer"]), flush=True)
    else:
        report["skipped"].append("torchrun peer")
    for label, gib in (("gossip_overhead", 0.0), ("gossip_overhead_node_on_gpu", 40.0)):  # the node on the CPU, then the GPU
        if budget.allows(90):
            report[label] = gossip_overhead(presets[0], min(240, budget.end - time.monotonic()), args.device, gib)
            print(f"{label.replace('_', ' ')}:", json.dumps(report[label]), flush=True)
        else:
            report["skipped"].append(label.replace("_", " "))
    report["seconds"] = round(time.time() - t_start, 1)
    target = args.json or (Path(os.environ["OUT"]) / "device_check.json" if os.environ.get("OUT") else None)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"report written to {target}")
    print("summary: " + json.dumps(report, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
