"""The TTS replica a peer trains: Echo-style DiT + AdamW + a latent-tar stream.

It is a `peer.trainer.Trainer`, so the peer (and gossip) can drive it without knowing
it is a TTS model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import asdict
from typing import Any, Iterator

import torch

from gossip_tts.data import BatcherConfig, CollateConfig, DataLimits, DurationBatcher, LatentStream, StreamConfig
from gossip_tts.data.batch import Batch
from gossip_tts.data.sample import CodecInfo
from gossip_tts.device import resolve_device
from gossip_tts.model import EchoDiT, ModelConfig, flow_matching_loss, model_config
from gossip_tts.train.config import TrainConfig
from gossip_tts.train.mfu import StepMeter, peak_tflops
from gossip_tts.train.offload import MasterWeights, offload_adamw
from gossip_tts.train.parallel import Group, add_full_into, compile_problem, copy_full_into, full_tensor, place_like, rank_seed, wrap_model
from gossip_tts.train.probe import probe_better
from gossip_tts.train.schedule import warmup_cosine
from peer.local.checkpoint import load_checkpoint
from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer, flatten, flatten_bf16, spanned

MODEL_PREFIX = "model."
OPTIM_PREFIX = "optim."
log = logging.getLogger(__name__)


def build_model(cfg: ModelConfig, seed: int, device: torch.device) -> EchoDiT:
    """Same config + same seed -> same initial weights on every peer (a shared starting point)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = EchoDiT(cfg)
    return model.to(device)


def speech_pace(sources: list[str], info: CodecInfo, n: int = 64, limits: DataLimits | None = None,
                stop: threading.Event | None = None) -> tuple[float, frozenset[int]]:
    """Latent frames per text byte over the first `n` whole clips (batches are cropped), so
    synthesis can guess how long a text takes to say in this data's voice and pace; and the
    distinct text bytes of those clips, so it can say which characters it was never taught."""
    frames = text_bytes = 0
    seen: set[int] = set()
    with LatentStream(StreamConfig(sources=sources, info=info, shuffle_shards=False, shuffle_buffer=1, loop=False,
                                   prefetch=8, limits=limits or DataLimits()), interrupt=stop) as stream:
        for i, sample in enumerate(stream):
            if i >= n:
                break
            frames += sample.frames
            encoded = sample.text.encode("utf-8")
            text_bytes += len(encoded)
            seen.update(encoded)
    return frames / max(1, text_bytes), frozenset(seen)


_LIMITS = ("max_frames", "max_ref_frames", "max_text_bytes")


def _shape_of(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """A model config without its length limits: what must match for weights to load."""
    return {k: v for k, v in model_cfg.items() if k not in _LIMITS}


class TTSTrainer(Trainer):
    """One local replica. Parameters live on `device`; gossip sees float32 CPU copies.

    In a torchrun group (`group`) every rank builds one of these: same initial weights, its
    own data order and noise (`rank_seed`), the model wrapped by DDP or sharded by FSDP2.
    With FSDP2, `get_flat_params`, `set_flat_params`, `state_tensors` and
    `load_state_tensors` are collectives: every rank must call them in the same order
    (peer/local/group.py makes sure of it).

    `data` bounds what the shards may cost (`DataLimits`). Setting `stop` makes a wait for
    data (a stalled source) raise StopRequested, a KeyboardInterrupt, so the training loop
    ends as on Ctrl+C; a group's rank 0 leaves it None (its ranks must step together).
    """

    def __init__(self, cfg: TrainConfig, *, init_seed: int = 0, group: Group | None = None,
                 data: DataLimits | None = None, stop: threading.Event | None = None) -> None:
        if not cfg.sources:
            raise ValueError("TrainConfig.sources is empty: give at least one folder of tars or URL")
        if group is not None and group.strategy == "fsdp2" and cfg.offload:
            raise ValueError("--offload with --parallel fsdp2: FSDP2 already shards the optimiser state; use one of them")
        self.cfg, self.group = cfg, group
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.device = group.device if group is not None else resolve_device(cfg.device)
        seed = rank_seed(cfg.seed, group.rank if group else 0)
        data = data or DataLimits()
        self.stream = LatentStream(StreamConfig(sources=cfg.sources, info=None, seed=seed, limits=data), interrupt=stop)
        base = model_config(cfg.preset, 1)
        collate_cfg = CollateConfig(
            max_frames=cfg.max_frames, max_ref_frames=cfg.max_ref_frames, max_text_bytes=cfg.max_text_bytes,
            text_frontend=base.text_frontend,
        )
        self.batcher = DurationBatcher(
            self.stream, BatcherConfig(batch_size=cfg.batch_size, bucket_size=cfg.bucket_size, collate=collate_cfg, seed=seed,
                                       bucket_bytes=data.bucket_bytes)
        )
        self._batches: Iterator[Batch] = iter(self.batcher)
        self._first: Batch | None = next(self._batches)  # reading one batch tells us the codec
        self.info: CodecInfo = self.stream.info
        log.info("building the %s model on %s%s…", cfg.preset, self.device,
                 f" from {cfg.init_from}" if cfg.init_from else "")  # seconds to a minute on a busy CPU
        self.frames_per_text_byte, seen = speech_pace(cfg.sources, self.info, limits=data, stop=stop)
        # Position limits are what training sees (a fine-tune keeps its base's longer ones: they were trained).
        init = load_checkpoint(cfg.init_from) if cfg.init_from else None
        saved = init[1].get("model_config", {}) if init else {}
        self.text_bytes = sorted(seen | set(init[1].get("text_bytes") or []) if init else seen)
        """Text bytes seen in a sample of the training texts (and its base's): synthesis names the others."""
        self.model_cfg = model_config(
            cfg.preset, self.info.latent_dim, max_frames=max(cfg.max_frames, saved.get("max_frames", 0)),
            max_text_bytes=max(cfg.max_text_bytes, saved.get("max_text_bytes", 0)),
        )
        # All peers of a swarm start from the same weights: the init seed is shared, not per peer.
        self.model = build_model(self.model_cfg, init_seed, self.device)
        if init is not None:
            self._init_from(str(cfg.init_from), *init)
            del init
        self._names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        self._offload = self._make_offload(group) if cfg.offload else None
        if self.device.type == "mps":
            log.warning("MPS: %s", "fp32 weights on the device, fp32 masters and AdamW state in CPU memory (--offload)"
                        if self._offload else "fp32 weights and AdamW state on the device")
        self._fwd = wrap_model(self.model, group)  # FSDP2 turns the parameters into DTensors here
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._compiled = cfg.compile and self._compile()
        # What the optimiser, gossip and checkpoints see: the fp32 masters when offloaded.
        self._master = self._offload.masters if self._offload else self._params
        if self._offload:
            self.optimizer = offload_adamw(self._master, cfg.lr, cfg.betas, cfg.weight_decay, fast=self.device.type == "cuda")
        else:
            self.optimizer = torch.optim.AdamW(self._master, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.generator = torch.Generator().manual_seed(seed)
        self._step = 0
        self.lr_scale = 1.0
        """Multiplies the scheduled learning rate; lowered by each rollback to a good state."""
        self.step_scale = 1.0
        """Also multiplies the scheduled learning rate: the swarm's step-size rule (`set_step_scale`)."""
        self._probe_batch: Batch | None = None
        """The batch an offered state is scored on before it is adopted (`gossip_tts.train.probe`):
        drawn at the first probe and kept aside, so every offer meets the same test."""
        self._autocast = self.device.type == "cuda" and cfg.bf16
        self.meter = StepMeter(self.model_cfg, self.device, peak_tflops(self.device, cfg.peak_tflops))

    def _make_offload(self, group: Group | None) -> MasterWeights | None:
        """CUDA: bf16 weights on the GPU, pinned fp32 masters. MPS: fp32 on both sides, or no offload
        where copying between them fails (said so). CPU: separate masters (the tests' exact twin)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        cuda = self.device.type == "cuda"
        try:
            offload = MasterWeights(params, pin=cuda, overlap=group is None)
            if self.device.type == "mps":
                offload.push_to_device()  # the round trip fails here, not mid-training, if it is going to
        except RuntimeError as exc:
            log.warning("--offload on %s failed (%s); keeping fp32 weights and AdamW state on the device", self.device, exc)
            return None
        if cuda:
            self.model.to(torch.bfloat16)  # the GPU holds bf16 weights only
        return offload

    def _compile(self) -> bool:
        """torch.compile the forward module in place (parameter names unchanged); False where it cannot."""
        problem = compile_problem(self.device)
        if problem is not None:
            log.warning("--compile: %s; training without torch.compile", problem)
            return False
        self._fwd.compile()
        return True

    def _uncompile(self, exc: Exception) -> None:
        log.warning("--compile: torch.compile failed (%s: %s); training without it",
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        self._fwd._compiled_call_impl = None
        self._compiled = False
        torch._dynamo.reset()

    # --- Trainer protocol -------------------------------------------------------------
    @property
    def step_count(self) -> int:
        return self._step

    @property
    def capabilities(self) -> Capabilities:
        """Probes, mixes in place, scales its rate on rollbacks; its reads need every rank
        only when FSDP2 shards the parameters (a read gathers them)."""
        return Capabilities(probe=True, add_in_place=True, scale_lr=True,
                            collective_reads=self.group is not None and self.group.strategy == "fsdp2",
                            device=str(self._master[0].device) if self._master else "cpu")

    def step(self) -> StepStats:
        batch = self.next_batch().to(self.device)
        lr = self._set_lr()
        if self._compiled:  # the first calls compile; a missing backend surfaces only then
            rng = self.generator.get_state()
            try:
                loss = self._forward_backward(batch)
            except Exception as exc:  # dynamo/inductor raise many types; eager below re-raises real errors
                self._uncompile(exc)
                self.generator.set_state(rng)
                loss = self._forward_backward(batch)
        else:
            loss = self._forward_backward(batch)
        grad_norm = self._apply()
        self._step += 1
        flops = self.meter.batch_flops(batch.size, batch.latent.shape[1], batch.text_ids.shape[1], batch.ref.shape[1])
        return StepStats(
            step=self._step,
            loss=float(loss.detach()),
            samples=batch.size,
            audio_seconds=batch.audio_seconds,
            extra={"lr": lr, "grad_norm": grad_norm, "skipped_clips": float(sum(self.batcher.skipped.values())),
                   "skipped_samples": float(self.stream.skipped), "shard_errors": float(self.stream.stats["shard_errors"]),
                   **self.meter.extras(flops)},
        )

    def scale_lr(self, factor: float) -> None:
        """Lower (or raise) every later learning rate by `factor` (after a rollback to a good state)."""
        self.lr_scale *= factor

    def set_step_scale(self, scale: float) -> None:
        """The swarm's step-size multiplier (the Trainer seam), on top of the rollbacks' `lr_scale`."""
        if not scale > 0:
            raise ValueError(f"step scale must be > 0, got {scale!r}")
        self.step_scale = float(scale)

    def _set_lr(self) -> float:
        lr = self.step_scale * self.lr_scale * self.cfg.lr * warmup_cosine(
            self._step, warmup=self.cfg.warmup_steps, total=self.cfg.total_steps, min_ratio=self.cfg.min_lr_ratio
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _loss(self, batch: Batch) -> torch.Tensor:
        self.model.train()
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if self._autocast else contextlib.nullcontext()
        with ctx:
            return flow_matching_loss(
                self._fwd, batch, self.generator,
                text_dropout=self.cfg.text_dropout, speaker_dropout=self.cfg.speaker_dropout,
            )

    def _forward_backward(self, batch: Batch) -> torch.Tensor:
        self.model.zero_grad(set_to_none=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss(batch)
        loss.backward()
        return loss

    def _apply(self) -> float:
        """Clip and step (on the CPU masters when offloaded, a chunk of them at a time, so no whole
        fp32 gradient is held in host memory); the gradient norm, NaN without clipping."""
        if self._offload:
            grad_norm = self._offload.step(self.optimizer, self.cfg.grad_clip)
            self._offload.push_to_device()
            return grad_norm
        grad_norm = float("nan")
        if self.cfg.grad_clip > 0:
            grad_norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(self._master, self.cfg.grad_clip)))
        self.optimizer.step()
        return grad_norm

    def param_spec(self) -> ParamSpec:
        return {n: (tuple(p.shape), "float32") for n, p in zip(self._names, self._params)}

    def get_flat_params(self) -> torch.Tensor:
        return flatten([full_tensor(p) for p in self._master])

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """The master weights stochastically rounded to bfloat16 (the Trainer seam), a tensor at a
        time where each lives: from a GPU only the bfloat16 result crosses, half of
        `get_flat_params`' transfer, and no float32 copy of the model is made. With FSDP2 a
        collective, gathering the tensors in `get_flat_params`' order."""
        numel = sum(p.numel() for p in self._master)
        return flatten_bf16((full_tensor(p) for p in self._master), numel, generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        total = sum(p.numel() for p in self._master)
        if flat.numel() != total:
            raise ValueError(f"flat vector has {flat.numel()} values, the parameters need {total}")
        offset = 0
        for p in self._master:
            copy_full_into(p, flat[offset : offset + p.numel()])
            offset += p.numel()
        if self._offload:
            self._offload.push_to_device()

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """A neighbour's state at its `step` (the Trainer seam): the schedule goes on from there."""
        self.set_flat_params(flat)
        self._step = int(step)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        """Add `delta` to the parameters spanning flat entries `start` to `start + delta.numel()`, in
        place (a mix: one pass, no full copy; the Trainer seam)."""
        touched = spanned([p.numel() for p in self._master], start, delta.numel())
        for i, at in touched:
            add_full_into(self._master[i], delta[at : at + self._master[i].numel()])
        if self._offload and touched:
            self._offload.push_to_device(range(touched[0][0], touched[-1][0] + 1))

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """A detached CPU snapshot (safe to write in the background while training goes on)."""
        tensors: dict[str, torch.Tensor] = {
            MODEL_PREFIX + n: full_tensor(p.detach()).to("cpu", torch.float32, copy=True)
            for n, p in zip(self._names, self._master)
        }
        opt_state = self.optimizer.state
        for n, p in zip(self._names, self._master):
            for key, value in opt_state.get(p, {}).items():
                if torch.is_tensor(value):
                    value = full_tensor(value.detach())
                    tensors[f"{OPTIM_PREFIX}{n}.{key}"] = value.to("cpu", copy=True).reshape(value.shape)
        tensors["rng.torch"] = self.generator.get_state()
        meta = {
            "format": "gossip-tts/tts-trainer/1",
            "step": self._step,
            "model_config": asdict(self.model_cfg),
            "codec": asdict(self.info),
            "train_config": self.cfg.to_json(),
            "frames_per_text_byte": self.frames_per_text_byte,
            "text_bytes": self.text_bytes,
        }
        return tensors, meta

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        saved = meta.get("model_config")
        if saved != asdict(self.model_cfg):
            raise ValueError(
                f"checkpoint model config differs from this run: {json.dumps(saved)} vs {json.dumps(asdict(self.model_cfg))}"
            )
        if meta.get("codec") != asdict(self.info):
            raise ValueError(f"checkpoint codec {meta.get('codec')} differs from the data's {asdict(self.info)}")
        for n, p in zip(self._names, self._master):
            copy_full_into(p, tensors[MODEL_PREFIX + n])
        if self._offload:
            self._offload.push_to_device()
        for n, p in zip(self._names, self._master):
            prefix = f"{OPTIM_PREFIX}{n}."
            state = {  # moments laid out as their parameter (sharded under FSDP2); AdamW keeps `step` on the CPU
                key[len(prefix):]: value.to("cpu") if key[len(prefix):] == "step" else place_like(p, value)
                for key, value in tensors.items()
                if key.startswith(prefix) and "." not in key[len(prefix):]
            }
            if state:
                self.optimizer.state[p] = state
        if "rng.torch" in tensors:
            self.generator.set_state(tensors["rng.torch"].to(torch.uint8))
        self._step = int(meta["step"])

    def close(self) -> None:
        self.stream.close()

    # ----------------------------------------------------------------------------------
    def _init_from(self, path: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Fine-tuning: every peer starts from the same pretrained weights (length limits may differ)."""
        if _shape_of(meta.get("model_config") or {}) != _shape_of(asdict(self.model_cfg)):
            raise ValueError(f"--init-from {path}: its model config differs from preset {self.cfg.preset!r} on this data")
        weights = {k[len(MODEL_PREFIX) :]: v for k, v in tensors.items() if k.startswith(MODEL_PREFIX)}
        self.model.load_state_dict(weights)

    def probe_better(self, flat: torch.Tensor) -> bool:
        """Whether parameters `flat` score better than ours on a fixed probe batch (joining checks it)."""
        if self._probe_batch is None:
            self._probe_batch = self.next_batch()
        return probe_better(self.model, self._probe_batch, self, flat)

    def next_batch(self) -> Batch:
        """The next training batch: what `step` trains on, and how the probe batch is drawn.
        The one seam for another batch source (benchmarks replay a fixed set of batches)."""
        return self._next_batch()

    def _next_batch(self) -> Batch:
        if self._first is not None:
            batch, self._first = self._first, None
            return batch
        return next(self._batches)

