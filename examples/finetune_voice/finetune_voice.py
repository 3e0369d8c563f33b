"""Fine-tune a voice end to end: recordings → latents → tars → gossiping peers → a wav.

    python examples/finetune_voice/finetune_voice.py --voice ../shared/data/ljspeech-mini --out runs/voice

1. Split the recordings (an LJSpeech-style folder: wavs/ + metadata.csv) into train and
   held-out clips, and `gossip-tts pack` each into latent tars (one train shard per peer).
2. Pretrain a base model on the built-in corpus (or pass --base CKPT).
3. Start --peers peers on 127.0.0.1, each on its own shard, all from the base weights
   (`--init-from`), gossiping signed compressed deltas.
4. Evaluate the base and every peer on the held-out clips, and speak a held-out sentence
   in the voice (the reference is a train clip) to OUT/finetuned.wav.
5. With the [judge] extra: the base and peer 0 speak every held-out sentence, and the judge
   prints WER, CER, speaker similarity and DNSMOS for both beside its controls.

On a CPU this shows the pipeline, not studio quality: a few minutes of training on ~3
minutes of audio moves the loss on held-out clips, and the wav has the voice's spectrum,
but intelligible speech needs a GPU and more steps (--preset 100m, --steps 20000).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from gossip_tts.cache_root import cache_root
from gossip_tts.judge.config import HEARD_BEFORE_NAME
from gossip_tts.judge.held_out import CONTROLS, HeldOutConfig, controls_heard_before, judge_checkpoints, refused_ahead
from gossip_tts.judge.packaged_ears import packaged_identity
from stage_progress import Estimator, follow, minutes, plan_judge, plan_stages, read_last_pace, save_pace

LAST_PACE = "finetune-voice-pace.json"
"""This machine's pace in its last run, in `cache_root()` beside the judge's answers: the next run's opening estimate starts from it."""


def judge_installed() -> bool:
    """Whether the [judge] extra's listeners are importable, so the estimate counts the judge only when it runs."""
    return all(importlib.util.find_spec(name) for name in ("pocketsphinx", "resemblyzer", "speechmos"))


def judge_work(cfg: HeldOutConfig, refused: dict[str, set[str]] | None = None) -> tuple[int, int, int]:
    """(clips to speak, clips to hear, control clips recalled) for the estimate; none without the
    extra. `refused`: per checkpoint, the sentences it will refuse at once (heard from no model)."""
    if not judge_installed():
        return 0, 0, 0
    refused = refused or {}
    dropped = set().union(*refused.values())
    spoken = len(cfg.checkpoints) * len(cfg.sentences) - sum(map(len, refused.values()))
    kept = len(cfg.sentences) - len(dropped)
    recalled = controls_heard_before(cfg, packaged_identity())
    return spoken, (len(cfg.checkpoints) + CONTROLS) * kept - recalled, recalled


def cli(*args: str, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "w") if log else None
    return subprocess.Popen([sys.executable, "-m", "gossip_tts", *args], stdout=out or None,
                            stderr=subprocess.STDOUT if out else None, text=True)


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gossip_tts", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gossip-tts {args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def read_metadata(voice: Path) -> list[list[str]]:
    with open(voice / "metadata.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE) if r and (voice / "wavs" / f"{r[0]}.wav").exists()]
    if len(rows) < 6:
        raise SystemExit(f"{voice} has {len(rows)} usable clips; the example needs at least 6")
    return rows


def split_folder(voice: Path, rows: list[list[str]], dest: Path) -> Path:
    """An LJSpeech-style folder of links to a subset of the clips."""
    (dest / "wavs").mkdir(parents=True, exist_ok=True)
    for row in rows:
        link = dest / "wavs" / f"{row[0]}.wav"
        if not link.exists():
            link.symlink_to((voice / "wavs" / f"{row[0]}.wav").resolve())
    with open(dest / "metadata.csv", "w", encoding="utf-8") as f:
        f.writelines("|".join(r) + "\n" for r in rows)
    return dest


def eval_loss(ckpt: Path, val: Path) -> float:
    m = re.search(r"eval_loss=([0-9.eE+-]+)", run("eval", "--checkpoint", str(ckpt), "--data", str(val)))
    assert m, "eval printed no eval_loss"
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voice", type=Path, required=True, help="LJSpeech-style folder: wavs/*.wav + metadata.csv")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--peers", type=int, default=2)
    ap.add_argument("--preset", default="tiny", help="model size; small or larger needs a GPU to finish in minutes")
    ap.add_argument("--base", type=Path, default=None, help="a checkpoint to fine-tune (default: pretrain one)")
    ap.add_argument("--base-steps", type=int, default=200)
    ap.add_argument("--steps", type=int, default=150, help="fine-tuning steps per peer")
    ap.add_argument("--held-out", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-frames", type=int, default=1024, help="longest whole clip trained on (longer ones are skipped)")
    ap.add_argument("--synth-steps", type=int, default=32)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    knobs = ["--preset", args.preset, "--device", "auto", "--threads", str(args.threads), "--batch-size",
             str(args.batch_size), "--max-frames", str(args.max_frames), "--log-every", "5"]

    rows = read_metadata(args.voice)
    train_rows, val_rows = rows[: -args.held_out], rows[-args.held_out :]
    est = Estimator(args.preset, read_last_pace(cache_root() / LAST_PACE, args.preset))
    reference = args.voice / "wavs" / f"{train_rows[0][0]}.wav"
    judging = HeldOutConfig(checkpoints={"base": args.base or out / "base", "fine-tuned": out / "peer0"},
                            voice=args.voice, sentences=[(r[0], r[-1]) for r in val_rows], reference=reference,
                            out=out / "judged", synth_steps=args.synth_steps, heard_before=cache_root() / HEARD_BEFORE_NAME)
    spoken, heard, recalled = judge_work(judging)
    planned = plan_stages(est, clips=len(rows), peers=args.peers, base_steps=0 if args.base else args.base_steps,
                          steps=args.steps, synth_steps=args.synth_steps, spoken_clips=spoken, heard_clips=heard)
    pace = (f"{est.slowdown:.2f}x the reference pace, this machine's in its last run" if est.last_pace
            else "the pace of 2 busy CPU cores")
    print(f"estimated: {', '.join(f'{name} ~{minutes(s * est.slowdown)}' for name, s in planned.items() if s)}; "
          f"total ~{minutes(est.to_the_end(planned, None))} (at {pace}; re-estimated after each stage from how fast "
          "this machine ran the stages before it)", flush=True)

    t0 = time.monotonic()
    took: dict[str, float] = {}  # seconds per stage, for the `stages: {json}` line
    print(f"[1/4] packing {len(train_rows)} train and {len(val_rows)} held-out clips of {args.voice} "
          f"(~{minutes(planned['pack'] * est.slowdown)})", flush=True)
    per_peer = math.ceil(len(train_rows) / args.peers)
    folders = [(f"train{i}", train_rows[i * per_peer : (i + 1) * per_peer]) for i in range(args.peers)] + [("val", val_rows)]
    for name, part in folders:
        run("pack", str(split_folder(args.voice, part, out / "clips" / name)), str(out / "tars" / name),
            "--speaker", "voice", "--overwrite")
        print(f"      packed {name}: {len(part)} clips ({minutes(time.monotonic() - t0)})", flush=True)
    took["pack"] = time.monotonic() - t0
    est.finished(planned["pack"], took["pack"])
    print(est.eta(planned, "pack", time.monotonic() - t0), flush=True)

    base = args.base
    if base is None:
        base = out / "base"
        t = time.monotonic()
        print(f"[2/4] pretraining a {args.preset} base on the built-in corpus for {args.base_steps} steps "
              f"(~{minutes(planned['base'] * est.slowdown)})", flush=True)
        log = out / "base.log"
        proc = cli("peer", "--solo", *knobs, "--max-steps", str(args.base_steps), "--checkpoint-dir", str(base),
                   "--overwrite", log=log)  # a rerun into the same --out starts over
        if follow([proc], [log], args.base_steps, "base", est.to_the_end(planned, "base")) != [0]:
            raise SystemExit(f"pretraining failed:\n{log.read_text()[-3000:]}")
        took["base"] = time.monotonic() - t
        est.finished(planned["base"], took["base"])
        print(est.eta(planned, "base", time.monotonic() - t0), flush=True)
    else:
        print(f"[2/4] fine-tuning {base}", flush=True)

    t = time.monotonic()
    print(f"[3/4] {args.peers} peers fine-tune for {args.steps} steps each, gossiping on 127.0.0.1 "
          f"(~{minutes(planned['fine-tune'] * est.slowdown)})", flush=True)
    procs, logs, address = [], [], None
    for i in range(args.peers):
        logs.append(out / f"peer{i}.log")
        boot = ["--peer", address] if address else []
        procs.append(cli("peer", *knobs, "--init-from", str(base), "--data", str(out / "tars" / f"train{i}"),
                         "--checkpoint-dir", str(out / f"peer{i}"), "--overwrite", "--max-steps", str(args.steps), "--listen",
                         "127.0.0.1:0", "--no-mdns", "--swarm", "finetune-voice", *boot, log=logs[-1]))
        while address is None:
            m = re.search(r"listening on http://(\S+)", logs[-1].read_text())
            if m:
                address = m.group(1)
            elif procs[-1].poll() is not None:
                raise SystemExit(f"peer 0 failed:\n{logs[-1].read_text()}")
            time.sleep(0.2)
    labels = " | ".join(f"peer{i}" for i in range(args.peers))
    for i, code in enumerate(follow(procs, logs, args.steps, labels, est.to_the_end(planned, "fine-tune"))):
        if code != 0:
            raise SystemExit(f"peer {i} failed:\n{logs[i].read_text()[-3000:]}")
    took["fine-tune"] = time.monotonic() - t
    est.finished(planned["fine-tune"], took["fine-tune"])
    print(est.eta(planned, "fine-tune", time.monotonic() - t0), flush=True)

    print(f"[4/4] held-out eval loss and a sample (~{minutes(planned['eval+sample'] * est.slowdown)})", flush=True)
    t = time.monotonic()
    losses = []
    for name, ckpt in [("base", base)] + [(f"peer{i}", out / f"peer{i}") for i in range(args.peers)]:
        losses.append(eval_loss(ckpt, out / "tars" / "val"))
        print(f"      eval {name}: {losses[-1]:.4f} ({minutes(time.monotonic() - t)})", flush=True)
    before, after = losses[0], losses[1:]
    print(f"held-out eval loss: base {before:.4f} -> fine-tuned {', '.join(f'{a:.4f}' for a in after)}")
    text = val_rows[0][-1]
    wav = out / "finetuned.wav"
    print(f"      synthesizing a held-out sentence with {args.synth_steps} sampler steps", flush=True)
    run("synthesize", "--checkpoint", str(out / "peer0"), "--text", text, "--reference", str(reference),
        "--out", str(wav), "--steps", str(args.synth_steps))
    print(f"wrote {wav}: {text!r} in the voice of {reference.name}")
    plot_spectrograms(args.voice / "wavs" / f"{val_rows[0][0]}.wav", wav, out / "finetuned.png")
    took["eval+sample"] = time.monotonic() - t
    est.finished(planned["eval+sample"], took["eval+sample"])
    t = time.monotonic()
    if spoken:  # the checkpoints now exist: the sentences they will refuse are known
        refused = refused_ahead(judging)
        spoken, heard, recalled = judge_work(judging, refused)
        planned["judge"] = plan_judge(est, args.synth_steps, spoken, heard)
        kept = f", {recalled} control clips recalled from {judging.heard_before}" if recalled else ""
        too_long = set().union(*refused.values())
        kept += f", {len(too_long)} sentence(s) too long for a model" if too_long else ""
        print(f"      judging: the base and peer 0 speak the {len(val_rows)} held-out sentences, heard beside the real "
              f"recordings, their codec round trip and noise (~{minutes(planned['judge'] * est.slowdown)}: {spoken} "
              f"clips to speak, {heard} to hear{kept})", flush=True)
    judge_checkpoints(judging)
    took["judge"] = time.monotonic() - t
    est.finished(planned["judge"], took["judge"])
    if est.measured is not None:
        save_pace(cache_root() / LAST_PACE, args.preset, est.measured)
    took["total"] = time.monotonic() - t0
    print("stages: " + json.dumps({name: round(s, 1) for name, s in took.items()}))  # read by curve.py
    print(f"done in {minutes(took['total'])}", flush=True)


def plot_spectrograms(real: Path, generated: Path, png: Path) -> None:
    """Log-mel spectrograms of the held-out recording and of the generated wav, one above the other."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no spectrogram plot (pip install -e '.[plot]')")
        return
    from gossip_tts.audio import load_codec, read_wav

    codec = load_codec("mel")
    fig, axes = plt.subplots(2, 1, figsize=(8, 5))
    for ax, path, title in zip(axes, (real, generated), ("held-out recording", "generated (fine-tuned peer 0)")):
        wav, sr = read_wav(path)
        ax.imshow(codec.encode(wav, sr).T, origin="lower", aspect="auto", cmap="magma")
        ax.set_title(f"{title}: {path.name}", fontsize=9)
        ax.set_ylabel("mel bin")
    axes[-1].set_xlabel(f"frame ({codec.frame_rate:.1f} per second)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
