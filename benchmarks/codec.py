"""Bytes on the wire, reconstruction error and speed of each tensor codec, side by side.

For one parameter delta (by default: the small TTS preset, trained a few steps on the
built-in corpus), every codec builds a real signed update frame; we report the whole
frame's size against fp32, ||x - x̂|| / ||x||, what lz4 saved on the payload, and the
throughput of compress+sign and verify+decompress in MB/s of fp32 input (median of
--repeats). Numbers from one run on one machine, printed with the machine's description.

    python benchmarks/codec.py [--delta-source tts|synthetic] [--steps 5] [--repeats 3]
    python benchmarks/codec.py --selection [--selection-sizes 1132560,30000000]

`--selection` instead times top-k selection, exact against an approximate threshold, on
synthetic vectors of each size (`codec_selection.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import sys
import time
from pathlib import Path

import lz4.frame
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import (Identity, SparseVector, VerifyPolicy, decode_frame, flat_model_spec,  # noqa: E402
                      make_update_frame, model_fingerprint, parse_codec, read_vector)
from protocol.frame import PREFIX_SIZE  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from codec_selection import compare, print_rows  # noqa: E402

DEFAULT_CODECS = ["identity", "fp16", "bf16", "int8", "topk:0.1+int8", "topk:0.01", "topk:0.01+int8",
                  "topk:0.001+int8", "randk:0.01", "randk:0.01+int8"]


def tts_delta(steps: int) -> tuple[torch.Tensor, str]:
    """Parameters after `steps` AdamW steps minus the initial ones, small preset, CPU."""
    from gossip_tts.data.builtin import ensure_builtin_corpus
    from gossip_tts.train.config import TrainConfig
    from gossip_tts.train.trainer import TTSTrainer

    train_dir, _ = ensure_builtin_corpus()
    trainer = TTSTrainer(TrainConfig(preset="small", device="cpu", sources=[str(train_dir)],
                                     batch_size=4, max_frames=128, warmup_steps=0))
    try:
        before = trainer.get_flat_params().clone()
        for _ in range(steps):
            trainer.step()
        delta = (trainer.get_flat_params() - before).float().contiguous()
    finally:
        trainer.close()
    return delta, f"tts: small preset, {steps} AdamW steps on the built-in corpus"


def synthetic_delta(numel: int, seed: int = 0) -> tuple[torch.Tensor, str]:
    """Heavy-tailed stand-in: Student-t(3) entries, a log-normal scale per 'tensor'."""
    rng = np.random.default_rng(seed)
    out = np.empty(numel, np.float32)
    pos = 0
    while pos < numel:
        size = min(numel - pos, int(rng.integers(256, 300_000)))
        out[pos:pos + size] = rng.standard_t(3, size) * np.exp(rng.normal(-9.0, 1.5))
        pos += size
    return torch.from_numpy(out), f"SYNTHETIC heavy-tailed vector (Student-t(3) x log-normal per-tensor scale), seed {seed}"


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu or 'unknown CPU'}; {os.cpu_count()} CPUs, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), numpy {np.__version__}, {platform.python_implementation()} "
            f"{platform.python_version()}, {platform.system()} {platform.release()}")


def lz4_gain(frame: bytes) -> float:
    _, _, _, header_len, payload_len = struct.unpack_from(">4sH32sIQ", frame)
    payload = frame[PREFIX_SIZE + header_len:PREFIX_SIZE + header_len + payload_len]
    return len(lz4.frame.decompress(payload)) / len(payload)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delta-source", choices=["tts", "synthetic"], default="tts")
    parser.add_argument("--steps", type=int, default=5, help="training steps for the tts delta")
    parser.add_argument("--numel", type=int, default=6_000_000, help="size of the synthetic delta")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--codecs", default=",".join(DEFAULT_CODECS))
    parser.add_argument("--selection", action="store_true", help="time exact and approximate top-k selection")
    parser.add_argument("--selection-sizes", default="1132560,30000000")
    parser.add_argument("--selection-codec", default="topk:0.1+int8")
    args = parser.parse_args()
    if args.selection:
        torch.set_num_threads(1)
        print(f"machine: {machine()}")
        print(f"codec {args.selection_codec}, synthetic heavy-tailed vectors (seed 0), best of {args.repeats}")
        rows = [r for n in args.selection_sizes.split(",")
                for r in compare(synthetic_delta(int(n))[0], args.selection_codec, args.repeats)]
        print_rows(rows)
        print("summary: " + json.dumps({"machine": machine(), "codec": args.selection_codec, "rows": rows}))
        return

    source = args.delta_source
    if source == "tts":
        try:
            delta, label = tts_delta(args.steps)
        except Exception as exc:  # the TTS stack is optional here: say so and carry on
            print(f"note: tts delta unavailable ({type(exc).__name__}: {exc}); using synthetic")
            delta, label = synthetic_delta(args.numel)
            source = "synthetic"
    else:
        delta, label = synthetic_delta(args.numel)
    n = delta.numel()
    fp32_bytes = 4 * n
    identity = Identity.generate(bytes(32))
    fingerprint = model_fingerprint({"flat": ((n,), "float32")})
    policy = VerifyPolicy("bench", fingerprint, model_spec=flat_model_spec(n))
    norm = float(delta.norm())

    print(f"machine: {machine()}")
    print(f"delta: {label}; {n:,} parameters, ||x|| = {norm:.4g}, "
          f"max |x| = {float(delta.abs().max()):.3g}, zeros {float((delta == 0).float().mean()):.2%}")
    print(f"{'codec':<18} {'frame bytes':>12} {'x fewer':>9} {'rel err':>9} {'lz4 gain':>8} "
          f"{'enc MB/s':>9} {'dec MB/s':>9}")
    rows = []
    for spec in args.codecs.split(","):
        codec = parse_codec(spec)

        def encode() -> tuple[bytes, SparseVector]:
            return make_update_frame(identity, swarm="bench", fingerprint=fingerprint, seq=1, step=0,
                                     timestamp=0.0, codec=codec, delta=delta)

        frame, kept = encode()
        recon = kept.dense()  # a sparse codec's update comes back as its kept entries
        decoded = read_vector(decode_frame(frame, policy, now=0.0))
        assert torch.equal(decoded, recon), spec
        enc_s = median_seconds(encode, args.repeats)
        dec_s = median_seconds(lambda: read_vector(decode_frame(frame, policy, now=0.0)), args.repeats)  # expanded whole
        row = {"codec": codec.spec, "frame_bytes": len(frame), "ratio_vs_fp32": fp32_bytes / len(frame),
               "rel_error": float((delta - recon).norm()) / norm if norm else 0.0,
               "lz4_gain": lz4_gain(frame), "encode_MBps": fp32_bytes / 1e6 / enc_s,
               "decode_MBps": fp32_bytes / 1e6 / dec_s}
        rows.append(row)
        print(f"{row['codec']:<18} {row['frame_bytes']:>12,} {row['ratio_vs_fp32']:>8.1f}x "
              f"{row['rel_error']:>9.4f} {row['lz4_gain']:>8.2f} {row['encode_MBps']:>9.0f} "
              f"{row['decode_MBps']:>9.0f}")
    summary = {"machine": machine(), "delta_source": source, "delta": label, "numel": n,
               "repeats": args.repeats,
               "codecs": {r["codec"]: {k: round(v, 5) if isinstance(v, float) else v
                                       for k, v in r.items() if k != "codec"} for r in rows}}
    print("summary: " + json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
