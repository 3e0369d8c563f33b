"""The two Echo-faithful changes measured on the voice example's data.

    python benchmarks/echo_faithful.py --voice ../shared/data/ljspeech-mini [--seeds 0,1,2] [--out DIR]

1. Whole clips vs the old random crop. The voice example's split (the last --held-out clips
   are never trained on), preset, batch size, --max-frames and base are used; one replica
   (no gossip, so a seed gives one run) fine-tunes the same base for --steps steps twice per
   seed: on whole clips (the trainer as it is) and on `CroppedTranscriptTrainer`, the old
   behaviour kept here for comparison only: every target latent cut to a random window of
   --crop-frames frames (128, the old example's --max-frames) while its whole transcript stays
   (same batches, same seed). Both are scored by `gossip-tts eval`'s loss on the held-out whole
   clips.
2. Guidance by MCD-DTW (gossip_tts/audio/mcd.py) between the real recording of each held-out
   sentence and the same sentence synthesised by `gossip-tts synthesize` (reference: the
   example's train clip; sampling seed = training seed) with Echo's guidance (the default),
   the nested form, and none (both scales 0: the conditional velocity alone), from each
   whole-clip model; the crop models are scored with the default guidance too. Two controls
   give the scale: the real clip through the mel codec and back (the floor this codec allows),
   and another real sentence of the same voice (right voice, wrong words).

stdout: the machine, the exact command, two markdown tables (median, min-max over seeds and
each seed's value; MCD per seed is the mean over the held-out sentences) and a line
`ratio: {...}` (JSON); then, with the [judge] extra, the judge's table for the base and the
first seed's whole-clip model on the held-out sentences and its `judge: {...}` line (without it,
one line saying so). Progress goes to stderr. Checkpoints and wavs go to --out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

from gossip_tts.audio import load_codec, read_wav  # noqa: E402
from gossip_tts.audio.mcd import mcd_dtw  # noqa: E402
from gossip_tts.data import ensure_builtin_corpus  # noqa: E402
from gossip_tts.data.batch import Batch  # noqa: E402
from gossip_tts.apps.eval_app import EvalConfig, evaluate  # noqa: E402
from gossip_tts.judge.held_out import HeldOutConfig, judge_checkpoints  # noqa: E402
from gossip_tts.apps.synth_app import SynthConfig  # noqa: E402
from gossip_tts.apps.synth_app import run as synthesize  # noqa: E402
from gossip_tts.train.config import TrainConfig  # noqa: E402
from gossip_tts.train.trainer import TTSTrainer  # noqa: E402
from peer.local.checkpoint import save_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUIDANCE = {  # label -> SynthConfig fields
    "echo": dict(guidance="independent"),
    "nested": dict(guidance="nested"),
    "none": dict(guidance="independent", cfg_text=0.0, cfg_speaker=0.0),
}


def load_example():
    """The voice example's own split and packing helpers (one source of truth for its settings)."""
    path = ROOT / "examples" / "finetune_voice" / "finetune_voice.py"
    if str(path.parent) not in sys.path:  # the example imports its sibling modules (stage_progress)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("finetune_voice", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def crop_to_windows(batch: Batch, frames: int, rng: np.random.Generator) -> Batch:
    """Each row's real frames cut to a random window of at most `frames`; text and reference
    untouched, so the transcript names words the window may not hold (the old collate)."""
    lengths = batch.latent_mask.sum(dim=1).tolist()
    windows = []
    for row, n in enumerate(int(x) for x in lengths):
        start = int(rng.integers(0, n - frames + 1)) if n > frames else 0
        windows.append(batch.latent[row, start : start + min(n, frames)])
    width = max(w.shape[0] for w in windows)
    latent = batch.latent.new_zeros(batch.size, width, batch.latent.shape[2])
    mask = torch.zeros(batch.size, width, dtype=torch.bool)
    for row, w in enumerate(windows):
        latent[row, : w.shape[0]] = w
        mask[row, : w.shape[0]] = True
    kept = float(mask.sum()) / max(1.0, float(sum(lengths)))
    return Batch(latent, mask, batch.text_ids, batch.text_mask, batch.ref, batch.ref_mask, batch.audio_seconds * kept)


class CroppedTranscriptTrainer(TTSTrainer):
    """The trainer as it was before whole-clip training, for this comparison only: the same
    batches of whole clips, each target then cropped by `crop_to_windows`."""

    def __init__(self, cfg: TrainConfig, crop_frames: int) -> None:
        self.crop_frames = crop_frames
        self.crop_rng = np.random.default_rng(cfg.seed)
        super().__init__(cfg)

    def _next_batch(self) -> Batch:
        return crop_to_windows(super()._next_batch(), self.crop_frames, self.crop_rng)


def train(trainer: TTSTrainer, steps: int, ckpt: Path, label: str) -> dict[str, float]:
    """`steps` steps, then a checkpoint; returns wall seconds and audio seconds trained on."""
    start, audio = time.perf_counter(), 0.0
    try:
        for i in range(steps):
            stats = trainer.step()
            audio += stats.audio_seconds
            if (i + 1) % 20 == 0 or i + 1 == steps:
                progress(f"{label}: step {i + 1}/{steps} loss {stats.loss:.4f}")
        save_checkpoint(ckpt, *trainer.state_tensors())
    finally:
        trainer.close()
    return {"seconds": time.perf_counter() - start, "audio_seconds": audio}


def heldout_loss(ckpt: Path, val: Path) -> float:
    return evaluate(EvalConfig(checkpoint=ckpt, sources=[str(val)]), emit=progress)


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def score_guidance(ckpt: Path, rows: list[list[str]], voice: Path, reference: Path, seed: int, labels: list[str],
                   out: Path, steps: int) -> dict[str, list[float]]:
    """MCD-DTW (dB) per held-out sentence for each guidance in `labels`."""
    scores: dict[str, list[float]] = {label: [] for label in labels}
    for row in rows:
        real, sr = read_wav(voice / "wavs" / f"{row[0]}.wav")
        for label in labels:
            wav_path = out / f"{ckpt.name}-{label}-{row[0]}.wav"
            synthesize(SynthConfig(checkpoint=ckpt, text=row[-1], out=wav_path, reference=reference, steps=steps,
                                   seed=seed, **GUIDANCE[label]), emit=lambda _msg: None)
            generated, gen_sr = read_wav(wav_path)
            if gen_sr != sr:
                raise SystemExit(f"{wav_path} is at {gen_sr} Hz, the recording at {sr} Hz")
            scores[label].append(mcd_dtw(real, generated, sr))
        progress(f"{ckpt.name} {row[0]}: " + ", ".join(f"{k} {v[-1]:.2f} dB" for k, v in scores.items()))
    return scores


def controls(rows: list[list[str]], voice: Path, reference: Path) -> dict[str, float]:
    """Mean MCD-DTW of the codec round trip of each held-out clip, and of another real sentence."""
    codec = load_codec("mel")
    round_trip, other = [], []
    for row in rows:
        real, sr = read_wav(voice / "wavs" / f"{row[0]}.wav")
        round_trip.append(mcd_dtw(real, codec.decode(codec.encode(real, sr)), codec.sample_rate))
        ref, ref_sr = read_wav(reference)
        other.append(mcd_dtw(real, ref, sr) if ref_sr == sr else float("nan"))
    return {"codec round trip of the real clip": float(np.mean(round_trip)),
            "another real sentence, same voice": float(np.mean(other))}


def summary(per_seed: list[float]) -> dict[str, object]:
    return {"median": statistics.median(per_seed), "min": min(per_seed), "max": max(per_seed),
            "per_seed": [round(v, 4) for v in per_seed]}


def row(label: str, values: list[float], seeds: list[int], digits: int = 4) -> str:
    s = summary(values)
    each = ", ".join(f"s{seed} {v:.{digits}f}" for seed, v in zip(seeds, values))
    return f"| {label} | {s['median']:.{digits}f} | {s['min']:.{digits}f}-{s['max']:.{digits}f} | {each} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voice", type=Path, default=ROOT.parent / "shared" / "data" / "ljspeech-mini")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "echo_faithful")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--base-steps", type=int, default=100)
    ap.add_argument("--steps", type=int, default=60, help="fine-tuning steps per run")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--held-out", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-frames", type=int, default=1024)
    ap.add_argument("--crop-frames", type=int, default=128, help="the old behaviour's window (the old example's --max-frames)")
    ap.add_argument("--synth-steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    example, out = load_example(), args.out
    out.mkdir(parents=True, exist_ok=True)

    rows = example.read_metadata(args.voice)
    train_rows, val_rows = rows[: -args.held_out], rows[-args.held_out :]
    reference = args.voice / "wavs" / f"{train_rows[0][0]}.wav"
    progress(f"packing {len(train_rows)} train and {len(val_rows)} held-out clips")
    for name, part in (("train", train_rows), ("val", val_rows)):
        example.run("pack", str(example.split_folder(args.voice, part, out / "clips" / name)), str(out / "tars" / name),
                    "--speaker", "voice", "--overwrite")

    def config(sources: list[str], seed: int, steps: int, init_from: Path | None = None) -> TrainConfig:
        return TrainConfig(preset=args.preset, device="cpu", sources=sources, seed=seed, batch_size=args.batch_size,
                           max_frames=args.max_frames, warmup_steps=min(args.warmup_steps, steps), threads=args.threads,
                           init_from=str(init_from) if init_from else None)

    base = out / "base"
    train(TTSTrainer(config([str(ensure_builtin_corpus()[0])], 0, args.base_steps)), args.base_steps, base, "base")
    loss: dict[str, list[float]] = {"whole": [], "crop": []}
    runs: dict[str, list[dict[str, float]]] = {"whole": [], "crop": []}
    mcd: dict[str, list[float]] = {k: [] for k in [*GUIDANCE, "crop model, echo"]}
    pairs: list[float] = []  # echo minus nested, per (seed, sentence)
    for seed in seeds:
        for variant in ("whole", "crop"):
            cfg = config([str(out / "tars" / "train")], seed, args.steps, base)
            trainer = TTSTrainer(cfg) if variant == "whole" else CroppedTranscriptTrainer(cfg, args.crop_frames)
            ckpt = out / f"{variant}-s{seed}"
            runs[variant].append(train(trainer, args.steps, ckpt, f"{variant} seed {seed}"))
            loss[variant].append(heldout_loss(ckpt, out / "tars" / "val"))
            progress(f"{variant} seed {seed}: held-out loss {loss[variant][-1]:.4f}")
            labels = list(GUIDANCE) if variant == "whole" else ["echo"]
            scores = score_guidance(ckpt, val_rows, args.voice, reference, seed, labels, out, args.synth_steps)
            if variant == "whole":
                for label in GUIDANCE:
                    mcd[label].append(float(np.mean(scores[label])))
                pairs += [e - n for e, n in zip(scores["echo"], scores["nested"])]
            else:
                mcd["crop model, echo"].append(float(np.mean(scores["echo"])))
    base_loss = heldout_loss(base, out / "tars" / "val")
    ctrl = controls(val_rows, args.voice, reference)
    report(args, seeds, base_loss, loss, runs, mcd, pairs, ctrl, time.perf_counter() - started)
    judge_checkpoints(HeldOutConfig(checkpoints={"base": base, f"whole clips, seed {seeds[0]}": out / f"whole-s{seeds[0]}"},
                                    sentences=[(r[0], r[-1]) for r in val_rows], voice=args.voice, reference=reference,
                                    out=out / "judged", synth_steps=args.synth_steps, seed=seeds[0]))


def report(args, seeds, base_loss, loss, runs, mcd, pairs, ctrl, seconds) -> None:
    n = len(seeds)
    print(describe())
    print("command: python " + " ".join(shlex.quote(a) for a in [str(Path(sys.argv[0])), *sys.argv[1:]]))
    print(f"settings: preset {args.preset}, base {args.base_steps} steps on the built-in corpus, {args.steps} fine-tuning "
          f"steps (warmup {min(args.warmup_steps, args.steps)}), batch {args.batch_size}, max-frames {args.max_frames}, crop window "
          f"{args.crop_frames}, {args.held_out} held-out clips, {args.synth_steps} sampler steps, {args.threads} thread(s); "
          f"total {seconds / 60:.1f} min")
    print("\nHeld-out loss (gossip-tts eval on whole held-out clips; lower is better)\n")
    print("| training | median | range | per seed |\n|---|---|---|---|")
    print(f"| base, before fine-tuning | {base_loss:.4f} | - | - |")
    print(row(f"old: random {args.crop_frames}-frame window, whole transcript", loss["crop"], seeds))
    print(row("new: whole clips", loss["whole"], seeds))
    ratio_loss = [w / c for w, c in zip(loss["whole"], loss["crop"])]
    print(row("ratio new / old", ratio_loss, seeds, 3))
    for variant in ("crop", "whole"):
        r = runs[variant]
        print(f"\n{variant}: {np.mean([x['seconds'] for x in r]) / args.steps:.2f} s/step, "
              f"{np.mean([x['audio_seconds'] for x in r]):.0f} audio-seconds trained on per run", end="")
    print("\n\nMCD-DTW to the real recording, dB (lower is better; per seed: mean over the held-out sentences)\n")
    print("| sampler | median | range | per seed |\n|---|---|---|---|")
    names = {"echo": "whole-clip model, Echo guidance (default)", "nested": "whole-clip model, nested guidance",
             "none": "whole-clip model, no guidance", "crop model, echo": "old crop model, Echo guidance"}
    for key, values in mcd.items():
        print(row(names[key], values, seeds, 2))
    for label, value in ctrl.items():
        print(f"| control: {label} | {value:.2f} | - | - |")
    wins = sum(p < 0 for p in pairs)
    print(f"\nEcho below nested on {wins} of {len(pairs)} (seed, sentence) pairs; "
          f"median difference {statistics.median(pairs):+.2f} dB (range {min(pairs):+.2f} to {max(pairs):+.2f})")
    ratio = {
        "heldout_loss_new_over_old": summary(ratio_loss),
        "heldout_loss": {"base": base_loss, "old_crop": summary(loss["crop"]), "new_whole": summary(loss["whole"])},
        "mcd_echo_over_nested": summary([e / m for e, m in zip(mcd["echo"], mcd["nested"])]),
        "mcd_echo_over_none": summary([e / m for e, m in zip(mcd["echo"], mcd["none"])]),
        "mcd_db": {k: summary(v) for k, v in mcd.items()},
        "mcd_echo_minus_nested_pairs": {"echo_lower": wins, "pairs": len(pairs), "median": statistics.median(pairs)},
        "mcd_controls_db": ctrl,
        "seeds": n,
    }
    print("ratio: " + json.dumps(ratio, sort_keys=True))


if __name__ == "__main__":
    main()
