"""The built-in default corpus: synthetic "speech" a TTS model can genuinely learn.

Sentences are drawn (seeded) from a small word list and rendered by a source-filter
synthesiser in which every character is a short segment of its own sound: vowels and
sonorants are a glottal pulse train shaped by formant-like resonances, fricatives are
band-passed noise, plosives are a closure then a burst, spaces and full stops are silence.
Each speaker has its own pitch, vocal-tract scale (formants), spectral tilt, breathiness
and rate. So the text determines the spectrogram sequence and the speaker its timbre: a
model has to learn both, with nothing downloaded. The audio is encoded with the mel codec
into ordinary latent tars, built once into a cache folder and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gossip_tts.audio.base import Codec
from gossip_tts.cache_root import cache_root
from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.tars import ShardWriter
from peer.torch_threads import one_torch_thread

VERSION = "builtin-v1"
MARKER = "corpus.json"
_SEED = 20240611
WORDS = (
    "the a red blue green yellow big small little quick slow happy cat dog fox bird fish zebra "
    "queen kite sun moon tree house water light hat map jam plum wax violin hello runs sees "
    "sings jumps goes over under near with"
).split()

# (F1, F2, F3) in Hz for an average adult vocal tract; speakers scale them.
_VOWELS = {"a": (730, 1090, 2440), "e": (530, 1840, 2480), "i": (270, 2290, 3010),
           "o": (570, 840, 2410), "u": (300, 870, 2240), "y": (400, 1900, 2600)}
_SONORANTS = {"m": (250, 1100, 2300), "n": (250, 1600, 2500), "l": (360, 1300, 2700),
              "r": (450, 1250, 1700), "w": (300, 650, 2200)}
# Fricatives: (noise centre Hz, bandwidth Hz, voiced)
_FRICATIVES = {"s": (6500, 1800, False), "z": (5500, 1800, True), "f": (4500, 3000, False),
               "v": (4000, 3000, True), "h": (1600, 1400, False), "c": (3500, 900, False),
               "x": (2600, 900, False), "j": (2800, 800, True)}
# Plosives: (burst centre Hz, voiced)
_PLOSIVES = {"p": (900, False), "b": (700, True), "t": (4200, False), "d": (3200, True),
             "k": (2200, False), "g": (1800, True), "q": (1500, False)}


@dataclass(frozen=True)
class Voice:
    """What makes one synthetic speaker sound like itself."""

    f0: float  # mean pitch, Hz
    formant_scale: float  # >1 is a shorter vocal tract (higher formants)
    tilt: float  # spectral roll-off exponent of the glottal source
    breath: float  # share of aspiration noise in voiced sounds
    rate: float  # segment duration multiplier


def make_voices(n: int, seed: int = _SEED) -> list[Voice]:
    """`n` voices spread over pitch and timbre: stratified draws keep any two clearly apart."""
    rng = np.random.default_rng([seed, 1])
    q = (np.arange(n) + rng.uniform(0.2, 0.8, n)) / n
    f0 = 85.0 * (260.0 / 85.0) ** q
    scale = 0.85 + 0.35 * rng.permutation(q)
    return [
        Voice(float(f0[i]), float(scale[i]), float(rng.uniform(0.6, 1.3)), float(rng.uniform(0.02, 0.15)),
              float(rng.uniform(0.85, 1.15)))
        for i in range(n)
    ]


def make_sentence(rng: np.random.Generator) -> str:
    return " ".join(WORDS[int(i)] for i in rng.integers(len(WORDS), size=int(rng.integers(3, 8)))) + "."


def _resonances(freqs: np.ndarray, formants: tuple[float, ...], scale: float) -> np.ndarray:
    env = np.zeros_like(freqs)
    for i, f in enumerate(formants):
        bw = 60.0 + 40.0 * i
        env += (0.9**i) / (1.0 + ((freqs - f * scale) / bw) ** 2)
    return env


_DURATIONS = {**dict.fromkeys(_VOWELS, 0.11), **dict.fromkeys(_SONORANTS, 0.08),
              **dict.fromkeys(_FRICATIVES, 0.09), **dict.fromkeys(_PLOSIVES, 0.07), " ": 0.05, ".": 0.15}


def _filter(x: np.ndarray, sr: int, gain: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Shape `x` by a zero-phase gain over frequency (in Hz), in one FFT."""
    n = x.size + 512
    spec = np.fft.rfft(x, n) * gain(np.fft.rfftfreq(n, 1.0 / sr))
    return np.fft.irfft(spec, n)[: x.size]


def _segment(ch: str, pulses: np.ndarray, noise: np.ndarray, n: int, fade: int, voice: Voice, sr: int) -> np.ndarray:
    """The sound of one character: `pulses` is the glottal source, `n` the core length."""
    k = voice.formant_scale

    def voiced(formants: tuple[float, ...]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda f: _resonances(f, formants, k) * (1.0 + f / 300.0) ** -voice.tilt

    def band(fc: float, bw: float) -> Callable[[np.ndarray], np.ndarray]:
        return lambda f: np.exp(-0.5 * ((f - fc * k) / bw) ** 2)

    if ch in _VOWELS or ch in _SONORANTS:
        shape = voiced(_VOWELS.get(ch) or _SONORANTS[ch])
        gain = 1.0 if ch in _VOWELS else 0.5
        return gain * (_filter(pulses, sr, shape) + voice.breath * _filter(0.05 * noise, sr, shape))
    if ch in _FRICATIVES:
        fc, bw, is_voiced = _FRICATIVES[ch]
        y = 0.08 * _filter(noise, sr, band(fc, bw))
        return y + 0.3 * _filter(pulses, sr, voiced((250,))) if is_voiced else y
    if ch in _PLOSIVES:
        fc, is_voiced = _PLOSIVES[ch]
        burst = np.zeros_like(noise)  # closure (silence) for 60% of the segment, then a decaying burst
        b0, b1 = fade + int(0.6 * n), fade + n
        burst[b0:b1] = noise[b0:b1] * np.exp(-np.linspace(0, 5, b1 - b0))
        y = 0.25 * _filter(burst, sr, band(fc, 0.6 * fc))
        return y + 0.2 * _filter(pulses, sr, voiced((200,))) if is_voiced else y
    return np.zeros_like(noise)  # space, full stop, anything else: silence


def synthesize(text: str, voice: Voice, sr: int, rng: np.random.Generator) -> np.ndarray:
    """Render `text` in `voice` at `sr` Hz; the same rng state gives the same waveform."""
    lengths = [int(_DURATIONS.get(c, 0.05) * voice.rate * sr) for c in text]
    lead = int(0.05 * sr)
    fade = int(0.012 * sr)  # segments overlap by this much each side, with raised-cosine edges
    total = lead * 2 + sum(lengths)
    # Pitch falls over the sentence (declination) with a slow wobble, like a read sentence.
    t = np.linspace(0.0, 1.0, total)
    f0 = voice.f0 * (1.08 - 0.16 * t) * (1.0 + 0.03 * np.sin(2 * np.pi * 3.0 * t))
    pulses = np.diff(np.floor(np.cumsum(f0 / sr)), prepend=0.0)  # one impulse per glottal period
    ramp = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 2 * fade))
    out = np.zeros(total)
    pos = lead
    for ch, n in zip(text, lengths):
        seg = slice(pos - fade, pos + n + fade)
        env = np.ones(n + 2 * fade)
        env[: 2 * fade] *= ramp
        env[-2 * fade :] *= ramp[::-1]
        out[seg] += env * _segment(ch, pulses[seg], rng.standard_normal(n + 2 * fade), n, fade, voice, sr)
        pos += n
    out += 1e-4 * rng.standard_normal(total)  # a noise floor, as in any recording
    return (0.5 * out / max(1e-9, np.abs(out).max())).astype(np.float32)


def default_cache_dir(n_speakers: int = 4, clips_per_speaker: int = 32, val_clips_per_speaker: int = 4) -> Path:
    """`$GOSSIP_TTS_CACHE/builtin-v1` (else `~/.cache/gossip-tts/builtin-v1`); other sizes get their own folder."""
    name = VERSION
    if (n_speakers, clips_per_speaker, val_clips_per_speaker) != (4, 32, 4):
        name += f"-s{n_speakers}-c{clips_per_speaker}-v{val_clips_per_speaker}"
    return cache_root() / name


_README = """\
gossip-tts built-in corpus ({version})

Synthetic speech that a text-to-speech model can genuinely learn, generated
deterministically by gossip_tts.data.builtin (no download). Each sentence is 3-7
words from a {n_words}-word list; each character is rendered as a short segment of its
own sound (vowels and m n l r w: a glottal pulse train through formant resonances;
s z f v h c x j: band-passed noise; p b t d k g q: closure and burst; space and '.':
silence). Each of the {n_speakers} speakers has its own pitch, formant scale, spectral
tilt, breathiness and speaking rate, so text decides the spectrogram sequence and the
speaker decides the timbre.

train/  {n_train} clips ({clips} per speaker), latent tars
val/    {n_val} clips ({val} per speaker), other sentences, same speakers
Latents: codec {codec!r}, {dim} dims, {fr:.4g} frames/s, float16. Each sample's
reference latent is another train clip of the same speaker.
Built in {secs:.1f} s. Delete this folder to rebuild it; corpus.json is the marker.
"""


def build_corpus(out: Path, codec: Codec, n_speakers: int, clips_per_speaker: int, val_clips_per_speaker: int) -> dict:
    """Write train/ and val/ latent tars into `out` (which must be empty); returns the marker fields."""
    start = time.perf_counter()
    # per-clip tensors are small: on a busy machine, intra-op threads cost more than they save
    # (docs/benchmarks/peer.md#the-built-in-corpus-on-one-torch-thread)
    with one_torch_thread():
        counts = _write_splits(out, codec, n_speakers, clips_per_speaker, val_clips_per_speaker)
    secs = time.perf_counter() - start
    info = CodecInfo(codec.name, int(codec.latent_dim), float(codec.frame_rate))
    (out / "README.txt").write_text(_README.format(
        version=VERSION, n_words=len(WORDS), n_speakers=n_speakers, n_train=counts["train"], n_val=counts["val"],
        clips=clips_per_speaker, val=val_clips_per_speaker, codec=info.codec, dim=info.latent_dim,
        fr=info.frame_rate, secs=secs))
    return {"version": VERSION, "n_speakers": n_speakers, "clips_per_speaker": clips_per_speaker,
            "val_clips_per_speaker": val_clips_per_speaker, "codec": info.codec, "latent_dim": info.latent_dim,
            "frame_rate": info.frame_rate, "build_seconds": round(secs, 2)}


def _write_splits(out: Path, codec: Codec, n_speakers: int, clips_per_speaker: int, val_clips_per_speaker: int
                  ) -> dict[str, int]:
    info = CodecInfo(codec.name, int(codec.latent_dim), float(codec.frame_rate))
    voices = make_voices(n_speakers)
    sr = int(codec.sample_rate)

    def clip(split: int, spk: int, i: int) -> tuple[str, np.ndarray]:
        rng = np.random.default_rng([_SEED, split, spk, i])
        text = make_sentence(rng)
        return text, codec.encode(synthesize(text, voices[spk], sr, rng), sr)

    train = {(s, i): clip(0, s, i) for s in range(n_speakers) for i in range(clips_per_speaker)}
    counts = {}
    for split, name, n in ((0, "train", clips_per_speaker), (1, "val", val_clips_per_speaker)):
        with ShardWriter(out / name, info, shard_size=32, prefix=f"builtin-{name}") as w:
            for s in range(n_speakers):
                pick = np.random.default_rng([_SEED, 2, split, s])
                for i in range(n):
                    text, latent = train[(s, i)] if split == 0 else clip(1, s, i)
                    # reference: another train clip of the same speaker (never the clip itself)
                    j = (i + 1 + int(pick.integers(clips_per_speaker - 1))) % clips_per_speaker if split == 0 \
                        else int(pick.integers(clips_per_speaker))
                    w.write(LatentSample(f"{name}-s{s:02d}-c{i:04d}", latent, train[(s, j)][1], text, f"spk{s:02d}"))
        counts[name] = n_speakers * n
    return counts


def write_voice_folder(dest: Path, sr: int, n_clips: int = 4, speaker: int = 0, n_speakers: int = 4) -> Path:
    """One speaker's held-out clips of the default corpus as an LJSpeech-style folder (`wavs/<id>.wav`,
    `metadata.csv` of `id|text`), the very sentences and waveforms its val split encodes, plus
    `reference.wav`, a train clip of that speaker: what `gossip_tts.judge` needs to score a model
    trained on the corpus, with nothing downloaded."""
    from gossip_tts.audio.io import write_wav

    voice = make_voices(n_speakers)[speaker]
    (dest / "wavs").mkdir(parents=True, exist_ok=True)
    rows = []
    for split, i in [(0, 0)] + [(1, i) for i in range(n_clips)]:
        rng = np.random.default_rng([_SEED, split, speaker, i])  # as `_write_splits` draws each clip
        text = make_sentence(rng)
        key = f"{('train', 'val')[split]}-s{speaker:02d}-c{i:04d}"
        write_wav(dest / ("reference.wav" if split == 0 else f"wavs/{key}.wav"), synthesize(text, voice, sr, rng), sr)
        rows += [f"{key}|{text}\n"] if split == 1 else []
    (dest / "metadata.csv").write_text("".join(rows), encoding="utf-8")
    return dest


def _marker(root: Path) -> dict | None:
    try:
        m = json.loads((root / MARKER).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _matches(m: dict | None, want: dict) -> bool:
    return m is not None and all(m.get(k) == v for k, v in want.items())


def ensure_builtin_corpus(
    cache_dir: Path | None = None,
    *,
    n_speakers: int = 4,
    clips_per_speaker: int = 32,
    val_clips_per_speaker: int = 4,
    announce: Callable[[Path], None] | None = None,
) -> tuple[Path, Path]:
    """Returns (train_dir, val_dir) of the built-in corpus, building it on first use;
    `announce(folder)` is told only then, before the seconds the build takes.

    `cache_dir` is the corpus folder itself (default: `default_cache_dir(...)`). It is
    built in a temporary sibling folder and renamed into place with its marker already
    inside, so a crash never leaves a half corpus that looks finished, and two processes
    building at once both end up with one complete corpus.
    """
    if n_speakers < 1 or clips_per_speaker < 2 or val_clips_per_speaker < 1:
        raise ValueError("need n_speakers >= 1, clips_per_speaker >= 2 (references come from other clips) "
                         f"and val_clips_per_speaker >= 1; got {n_speakers}, {clips_per_speaker}, {val_clips_per_speaker}")
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(
        n_speakers, clips_per_speaker, val_clips_per_speaker)
    want = {"version": VERSION, "n_speakers": n_speakers, "clips_per_speaker": clips_per_speaker,
            "val_clips_per_speaker": val_clips_per_speaker}
    if _matches(_marker(root), want):
        return root / "train", root / "val"
    if root.exists() and any(root.iterdir()) and _marker(root) is None:
        raise FileExistsError(f"{root} exists and is not a gossip-tts built-in corpus; choose another cache_dir")
    from gossip_tts.audio import load_codec

    if announce is not None:
        announce(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        with one_torch_thread():
            codec = load_codec("mel")
        fields = build_corpus(tmp, codec, n_speakers, clips_per_speaker, val_clips_per_speaker)
        (tmp / MARKER).write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n", "utf-8")
        try:
            os.rename(tmp, root)  # also replaces an empty folder
        except OSError:
            if not _matches(_marker(root), want):  # an older corpus: swap it out
                old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
                os.rename(root, old / "corpus")
                os.rename(tmp, root)
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)  # lost a race to an identical build, or failed
    return root / "train", root / "val"
