"""The workloads the head-to-head benchmarks (vs_ddp.py, vs_hivemind.py) train, every arm alike.

- `mlp` (MLPWorkload): an MLP (64 → 1024 → 1024 → 16, tanh, ~1.1M parameters) regressing a
  fixed random teacher net plus noise, Adam, batch 1024. Held-out targets are the teacher's
  clean outputs: the loss is the excess error a model can still remove (noisy held-out targets
  put the noise's σ² = 0.01 under every arm's loss and push every ratio towards 1;
  docs/benchmarks/head-to-head.md#the-workloads-benchmarksvs_workloadspy).
- `tts` (TTSWorkload): the project's `tiny` TTS preset (EchoDiT, ~0.4M parameters) trained
  with rectified flow on the built-in corpus (synthetic speech, 4 speakers, 128 training
  clips; gossip_tts.data.builtin), AdamW with the trainer's betas, weight decay and gradient
  clip at a constant learning rate, batch 16 clips. The held-out loss is the corpus's 16
  validation clips scored by `gossip_tts.model.eval_loss` (a fixed t grid, fixed noise, no
  dropout), the number `gossip-tts eval` prints. With `parts` > 1 each rank holds only its own
  part of the training clips (the corpus writes them speaker by speaker, so 2 or 4 parts are
  whole speakers): the case peers are for, where the swarm has seen every voice and a lone
  peer only its own.

Every process draws its own batches (seed, rank) and all start from the same weights.

Imports only torch, the standard library and, for `tts`, `gossip_tts.model` (torch only,
found through the repository root on sys.path): hivemind's workers load this module from a
venv of their own that never has the project installed. So the parent reads the corpus's tars
once (`prepare_tts`, in the project's environment) into one file of plain tensors, which every
worker loads with `torch.load(weights_only=True)`: no tar reader, no pickle.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

class Task(Protocol):
    """One process's view of a workload: its own batch stream and the shared held-out set."""

    def batch(self) -> Any: ...

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor: ...

    def eval_loss(self, model: nn.Module) -> float: ...


# ---------------------------------------------------------------------------- mlp
@dataclass(frozen=True)
class MLPWorkload:
    in_dim: int = 64
    hidden: int = 1024
    out_dim: int = 16
    batch_size: int = 1024
    lr: float = 1e-3
    noise: float = 0.1
    seed: int = 0
    eval_samples: int = 2048
    grad_clip: float = 0.0
    kind: str = "mlp"

    def __post_init__(self) -> None:
        if min(self.in_dim, self.hidden, self.out_dim, self.batch_size, self.eval_samples) <= 0:
            raise ValueError("workload sizes must be > 0")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

    def build_model(self, seed: int | None = None) -> nn.Module:
        torch.manual_seed(self.seed if seed is None else seed)
        return nn.Sequential(nn.Linear(self.in_dim, self.hidden), nn.Tanh(), nn.Linear(self.hidden, self.hidden), nn.Tanh(),
                             nn.Linear(self.hidden, self.out_dim))

    def param_count(self) -> int:
        h = self.hidden
        return self.in_dim * h + h + h * h + h + h * self.out_dim + self.out_dim

    def optimizer(self) -> Callable[..., torch.optim.Optimizer]:
        """The optimiser's factory (hivemind takes a factory, everyone else calls it on parameters)."""
        return partial(torch.optim.Adam, lr=self.lr)

    def task(self, rank: int) -> "MLPTask":
        return MLPTask(self, rank)

    def describe(self) -> str:
        return f"MLP {self.param_count():,} parameters, Adam lr {self.lr}, batch {self.batch_size}/process"


class MLPTask:
    """The teacher (fixed by the workload's seed), one process's batch stream and the held-out set."""

    def __init__(self, w: MLPWorkload, rank: int) -> None:
        self.w = w
        self.teacher = w.build_model(seed=10_007 * w.seed + 1).requires_grad_(False)
        self.stream = torch.Generator().manual_seed(10_007 * w.seed + 1000 + rank)
        g = torch.Generator().manual_seed(10_007 * w.seed + 2)
        self.eval_x = torch.randn(w.eval_samples, w.in_dim, generator=g)
        with torch.no_grad():
            self.eval_y = self.teacher(self.eval_x)

    def _label(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        with torch.no_grad():
            y = self.teacher(x)
        return y + self.w.noise * torch.randn(y.shape, generator=g)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.w.batch_size, self.w.in_dim, generator=self.stream)
        return x, self._label(x, self.stream)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x), y)

    def eval_loss(self, model: nn.Module) -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(self.eval_x), self.eval_y))


# ---------------------------------------------------------------------------- tts
TTS_TENSORS = ("latent", "latent_mask", "text_ids", "text_mask", "ref", "ref_mask")
"""The fields of a `gossip_tts.data.Batch` the corpus file holds, for the train and val splits."""


@dataclass(frozen=True)
class TTSWorkload:
    data: str
    """The corpus as one tensor file (`prepare_tts` writes it)."""
    latent_dim: int
    max_frames: int
    max_text_bytes: int
    preset: str = "tiny"
    batch_size: int = 16
    lr: float = 1e-3
    seed: int = 0
    grad_clip: float = 1.0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    parts: int = 1
    """Rank r draws only from part r % parts of the training clips (contiguous blocks, in the
    corpus's speaker order); 1: every rank draws from all of them."""
    kind: str = "tts"

    def __post_init__(self) -> None:
        if min(self.latent_dim, self.max_frames, self.max_text_bytes, self.batch_size, self.parts) <= 0:
            raise ValueError("workload sizes and parts must be > 0")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        object.__setattr__(self, "betas", tuple(self.betas))  # JSON gives a list

    def model_config(self) -> Any:
        from gossip_tts.model import model_config

        return model_config(self.preset, self.latent_dim, max_frames=self.max_frames, max_text_bytes=self.max_text_bytes)

    def build_model(self, seed: int | None = None) -> nn.Module:
        from gossip_tts.model import EchoDiT

        torch.manual_seed(self.seed if seed is None else seed)
        return EchoDiT(self.model_config())

    def param_count(self) -> int:
        return sum(p.numel() for p in self.build_model().parameters())

    def optimizer(self) -> Callable[..., torch.optim.Optimizer]:
        return partial(torch.optim.AdamW, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)

    def task(self, rank: int) -> "TTSTask":
        return TTSTask(self, rank)

    def describe(self) -> str:
        held = f", each process holding 1/{self.parts} of the training clips" if self.parts > 1 else ""
        return (f"TTS preset {self.preset!r} {self.param_count():,} parameters, rectified flow on the built-in corpus{held}, "
                f"AdamW lr {self.lr} (constant, grad clip {self.grad_clip}), batch {self.batch_size} clips/process")


class TTSTask:
    """Batches drawn at random (per rank) from the rank's part of the training clips; held out: the
    validation clips, every speaker's."""

    def __init__(self, w: TTSWorkload, rank: int) -> None:
        from gossip_tts.data.batch import Batch

        self.w = w
        saved = torch.load(w.data, weights_only=True)
        self.train = {k: saved[f"train.{k}"] for k in TTS_TENSORS}
        val = {k: saved[f"val.{k}"] for k in TTS_TENSORS}
        self.val = Batch(**{k: v.float() if v.is_floating_point() else v for k, v in val.items()}, audio_seconds=0.0)
        clips = int(self.train["latent"].shape[0])
        if w.parts > clips:
            raise ValueError(f"cannot cut {clips} training clips into {w.parts} parts")
        part = rank % w.parts
        self.first, self.clips = clips * part // w.parts, clips * (part + 1) // w.parts - clips * part // w.parts
        self.stream = torch.Generator().manual_seed(10_007 * w.seed + 1000 + rank)
        self.noise = torch.Generator().manual_seed(10_007 * w.seed + 5000 + rank)

    def batch(self) -> Any:
        from gossip_tts.data.batch import Batch

        idx = self.first + torch.randint(self.clips, (self.w.batch_size,), generator=self.stream)
        rows = {k: v[idx] for k, v in self.train.items()}
        t = int(rows["latent_mask"].sum(1).max())  # trim the padding no clip of this batch needs
        r = int(rows["ref_mask"].sum(1).max())
        n = max(1, int(rows["text_mask"].sum(1).max()))
        return Batch(rows["latent"][:, :t].float(), rows["latent_mask"][:, :t], rows["text_ids"][:, :n],
                     rows["text_mask"][:, :n], rows["ref"][:, :r].float(), rows["ref_mask"][:, :r], audio_seconds=0.0)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        from gossip_tts.model import flow_matching_loss

        return flow_matching_loss(model, batch, self.noise)

    def eval_loss(self, model: nn.Module) -> float:
        from gossip_tts.model import eval_loss

        with torch.no_grad():
            return float(eval_loss(model, [self.val]))


def prepare_tts(out: Path, seed: int = 0, cache_dir: Path | None = None, **corpus: int) -> TTSWorkload:
    """Build (or reuse) the built-in corpus, write its train and val clips to `out` as padded
    tensors (references cropped once, as training's collate does) and return the workload.

    Needs the project's environment (its tar reader); the workers that load `out` do not."""
    import numpy as np

    from gossip_tts.data import CollateConfig, LatentStream, StreamConfig, collate
    from gossip_tts.data.builtin import ensure_builtin_corpus
    from gossip_tts.data.text import encode_text
    from gossip_tts.model import model_config

    train_dir, val_dir = ensure_builtin_corpus(cache_dir, **corpus)
    frontend = model_config("tiny").text_frontend
    tensors: dict[str, torch.Tensor] = {}
    for split, folder in (("train", train_dir), ("val", val_dir)):
        stream = LatentStream(StreamConfig(sources=[str(folder)], seed=0, shuffle_shards=False, shuffle_buffer=1, loop=False))
        try:
            samples = list(stream)
        finally:
            stream.close()
        if not samples:
            raise ValueError(f"no clips in {folder}")
        cfg = CollateConfig(max_frames=max(s.frames for s in samples), max_ref_frames=128,
                            max_text_bytes=max(len(encode_text(s.text, frontend)) for s in samples), text_frontend=frontend)
        b = collate(samples, cfg, np.random.default_rng(seed))
        for k in TTS_TENSORS:
            v = getattr(b, k)
            tensors[f"{split}.{k}"] = v.half() if v.is_floating_point() else v
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, out)
    frames = max(int(tensors[f"{s}.latent_mask"].sum(1).max()) for s in ("train", "val"))
    text = max(int(tensors[f"{s}.text_mask"].sum(1).max()) for s in ("train", "val"))
    return TTSWorkload(data=str(out), latent_dim=int(tensors["train.latent"].shape[-1]), max_frames=frames,
                       max_text_bytes=text, seed=seed)


# ---------------------------------------------------------------------------- to and from the workers
Workload = MLPWorkload | TTSWorkload
WORKLOADS: dict[str, type[MLPWorkload] | type[TTSWorkload]] = {"mlp": MLPWorkload, "tts": TTSWorkload}
KINDS = tuple(WORKLOADS)


def workload_json(w: Workload) -> str:
    return json.dumps(asdict(w))


def load_workload(text: str) -> Workload:
    fields = json.loads(text)
    kind = fields.get("kind", "mlp")
    if kind not in WORKLOADS:
        raise ValueError(f"unknown workload kind {kind!r}; choose one of {', '.join(KINDS)}")
    return WORKLOADS[kind](**fields)


def make_workload(kind: str, seed: int, scratch: Path | None = None) -> Workload:
    """What a script's `--workload` names: `tts` writes its corpus file under `scratch` (default:
    a fresh temporary folder, left beside the run's records)."""
    if kind == "mlp":
        return MLPWorkload(seed=seed)
    if kind == "tts":
        import tempfile

        scratch = scratch if scratch is not None else Path(tempfile.mkdtemp(prefix="vs_tts_corpus_"))
        return prepare_tts(scratch / "tts_corpus.pt", seed=seed)
    raise ValueError(f"unknown workload {kind!r}; choose one of {', '.join(KINDS)}")
