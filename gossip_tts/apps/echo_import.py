"""`gossip-tts import-echo`: Echo TTS's published safetensors -> a checkpoint of this project.

The result loads with `--init-from` (fine-tuning, preset echo-2.4b) and `synthesize`, and
computes the same velocity as Echo's own forward (tested against echo-tts to 1e-4 in fp32).
Every kept tensor is copied bit for bit (dtype kept) except for two lossless rewrites:

- names: Echo's module names are mapped onto this model's (a table below, one rule each);
- RoPE layout: Echo rotates adjacent pairs (x0, x1), (x2, x3), ...; this model rotates
  halves (x_i, x_{i+hd/2}). Permuting each head's rows of the query and key projections
  (self, text and speaker keys alike) and its QK-norm weights by [0, 2, 4, ..., 1, 3, ...]
  turns one into the other; dot products are unchanged, values are untouched.

Echo's blockwise/continuation modules (latent_encoder, latent_norm, wk_latent, wv_latent)
serve generation that continues a given audio prefix, which this model does not do: they
are dropped, and the run says so. Any other tensor it does not know is an error.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file

from gossip_tts.model import ModelConfig, model_config
from peer.local.checkpoint import save_checkpoint

MODEL_PREFIX = "model."
ECHO_CODEC = {"codec": "echo", "latent_dim": 80, "frame_rate": 44100 / 2048}
_DROPPED = re.compile(r"^(latent_encoder\.|latent_norm\.)|\.w[kv]_latent\.")


def _encoder_rules(echo: str, ours: str) -> list[tuple[str, str]]:
    """Echo's `<echo>.blocks.i.*` -> this model's `<ours>.encoder.blocks.i.*`."""
    src, dst = rf"{echo}\.blocks\.(\d+)\.", rf"{ours}.encoder.blocks.\1."
    return [
        (src + r"attention\.(wq|wk|wv|wo|gate|q_norm|k_norm)\.weight", dst + r"attn.\2.weight"),
        (src + r"attention_norm\.weight", dst + "attn_norm.weight"),
        (src + r"mlp_norm\.weight", dst + "mlp_norm.weight"),
        (src + r"mlp\.(w1|w2|w3)\.weight", dst + r"mlp.\2.weight"),
    ]


# Echo name (regex) -> this model's name.
RULES: list[tuple[str, str]] = [
    (r"text_encoder\.text_embedding\.weight", "text_encoder.embed.weight"),
    (r"text_norm\.weight", "text_encoder.encoder.out_norm.weight"),
    (r"speaker_norm\.weight", "speaker_encoder.encoder.out_norm.weight"),
    (r"speaker_encoder\.in_proj\.(weight|bias)", r"speaker_encoder.in_proj.\1"),
    *_encoder_rules("text_encoder", "text_encoder"),
    *_encoder_rules("speaker_encoder", "speaker_encoder"),
    (r"cond_module\.0\.weight", "t_mlp.0.weight"),
    (r"cond_module\.2\.weight", "t_mlp.2.weight"),
    (r"cond_module\.4\.weight", "shared_adaln.weight"),
    (r"(in_proj|out_proj)\.(weight|bias)", r"\1.\2"),
    (r"out_norm\.weight", "out_norm.weight"),
    (r"blocks\.(\d+)\.attention\.(wq|wk|wv|wo|gate|wk_text|wv_text|wk_speaker|wv_speaker|q_norm|k_norm)\.weight",
     r"blocks.\1.attn.\2.weight"),
    (r"blocks\.(\d+)\.mlp\.(w1|w2|w3)\.weight", r"blocks.\1.mlp.\2.weight"),
    (r"blocks\.(\d+)\.attention_adaln\.(\w+)\.(weight|bias)", r"blocks.\1.attn_adaln.\2.\3"),
    (r"blocks\.(\d+)\.mlp_adaln\.(\w+)\.(weight|bias)", r"blocks.\1.mlp_adaln.\2.\3"),
]
_PERMUTED = re.compile(r"\.attn\.(wq|wk|wk_text|wk_speaker|q_norm|k_norm)\.weight$")


@dataclass
class ImportConfig:
    """What to convert and where to write it."""

    src: Path
    """Echo's weights file (safetensors, e.g. jordand/echo-tts-base pytorch_model.safetensors)."""
    out: Path
    """Folder the checkpoint is written to (`<out>/checkpoint.safetensors`)."""

    def __post_init__(self) -> None:
        self.src, self.out = Path(self.src), Path(self.out)
        if not self.src.is_file():
            raise ValueError(f"{self.src} is not a file; give Echo's pytorch_model.safetensors")


def our_name(echo_name: str) -> str:
    """This model's name for an Echo tensor (ValueError if Echo's name is unknown)."""
    for pattern, template in RULES:
        m = re.fullmatch(pattern, echo_name)
        if m:
            return m.expand(template)
    raise ValueError(f"unknown Echo tensor {echo_name!r}: is this an Echo TTS checkpoint?")


def rope_permutation(head_dim: int) -> torch.Tensor:
    """Index that turns Echo's adjacent RoPE pairs into this model's halves."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def permute_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Apply rope_permutation within every head: rows of an (H·hd, in) weight or a (H, hd) norm."""
    if t.dim() == 2 and t.shape[0] == n_heads:  # per-head norm weight (H, hd)
        return t[:, rope_permutation(t.shape[1])].contiguous()
    hd = t.shape[0] // n_heads
    return t.view(n_heads, hd, -1)[:, rope_permutation(hd)].reshape(t.shape).contiguous()


def infer_config(state: dict[str, torch.Tensor]) -> ModelConfig:
    """The echo-arch config whose shapes match Echo's tensors (limits as Echo's inference uses them)."""

    def count(prefix: str) -> int:
        return len({k[len(prefix):].split(".")[0] for k in state if k.startswith(prefix)})

    def heads(prefix: str) -> int:
        return int(state[f"{prefix}.attention.q_norm.weight"].shape[0])

    latent_dim = int(state["in_proj.weight"].shape[1])
    shape = dict(
        d_model=int(state["in_proj.weight"].shape[0]), n_layers=count("blocks."), n_heads=heads("blocks.0"),
        mlp_hidden_dim=int(state["blocks.0.mlp.w1.weight"].shape[0]),
        text_dim=int(state["text_encoder.text_embedding.weight"].shape[1]), text_layers=count("text_encoder.blocks."),
        text_heads=heads("text_encoder.blocks.0"),
        text_mlp_hidden_dim=int(state["text_encoder.blocks.0.mlp.w1.weight"].shape[0]),
        speaker_dim=int(state["speaker_encoder.in_proj.weight"].shape[0]), speaker_layers=count("speaker_encoder.blocks."),
        speaker_heads=heads("speaker_encoder.blocks.0"),
        speaker_mlp_hidden_dim=int(state["speaker_encoder.blocks.0.mlp.w1.weight"].shape[0]),
        speaker_patch=int(state["speaker_encoder.in_proj.weight"].shape[1]) // latent_dim,
        adaln_rank=int(state["blocks.0.attention_adaln.shift_down.weight"].shape[0]),
        t_freq_dim=int(state["cond_module.0.weight"].shape[1]),
    )
    return model_config("echo-2.4b", latent_dim, **shape)


def convert(state: dict[str, torch.Tensor], emit: Callable[[str], None] = print) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, this model's state dict) from Echo's state dict."""
    dropped = sorted(k for k in state if _DROPPED.search(k))
    kept = {k: v for k, v in state.items() if k not in set(dropped)}
    if dropped:
        emit(f"dropped {len(dropped)} tensors of Echo's blockwise/continuation modules "
             "(latent_encoder, latent_norm, wk_latent, wv_latent): this model generates whole clips")
    cfg = infer_config(kept)
    if int(kept["text_encoder.text_embedding.weight"].shape[0]) != 256:
        raise ValueError("Echo's text embedding must have 256 rows (UTF-8 bytes)")
    out: dict[str, torch.Tensor] = {}
    for echo_name, tensor in kept.items():
        name = our_name(echo_name)
        if _PERMUTED.search(name):
            n_heads = cfg.n_heads if name.startswith("blocks.") else (
                cfg.text_heads if name.startswith("text_") else cfg.speaker_heads)
            tensor = permute_heads(tensor, n_heads)
        out[name] = tensor
    return cfg, out


def run(cfg: ImportConfig, emit: Callable[[str], None] = print) -> Path:
    """Convert, check that every tensor of the model is filled, and write the checkpoint."""
    from gossip_tts.model import EchoDiT, count_parameters

    try:
        tensors = load_file(str(cfg.src))
    except Exception as exc:  # safetensors raises its own types for a file that is not one
        raise ValueError(f"{cfg.src} is not a safetensors file ({exc}); pass Echo's model.safetensors") from None
    model_cfg, weights = convert(tensors, emit)
    with torch.device("meta"):
        model = EchoDiT(model_cfg)
    expected = {n: tuple(p.shape) for n, p in model.state_dict().items()}
    got = {n: tuple(t.shape) for n, t in weights.items()}
    if expected != got:
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        wrong = sorted(n for n in set(expected) & set(got) if expected[n] != got[n])
        raise ValueError(f"Echo's tensors do not fill the model: missing {missing[:3]}, extra {extra[:3]}, wrong shape {wrong[:3]}")
    meta = {"format": "gossip-tts/echo-import/1", "step": 0, "model_config": asdict(model_cfg), "codec": ECHO_CODEC,
            "source": cfg.src.name}
    path = save_checkpoint(cfg.out, {MODEL_PREFIX + n: t for n, t in weights.items()}, meta)
    preset = next((p for p in ("echo-2.4b", "echo-tiny") if model_cfg == model_config(p, model_cfg.latent_dim)), None)
    hint = f"fine-tune with --preset {preset} --init-from {cfg.out}" if preset else "no preset has this shape"
    emit(f"wrote {path}: {count_parameters(model) / 1e6:.1f}M parameters; {hint}")
    return path
