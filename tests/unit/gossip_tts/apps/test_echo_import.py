"""import-echo: Echo TTS's weights give this model the same velocity as Echo's own forward.

The equivalence tests build echo-tts's EchoDiT (its published code, random weights, nothing
downloaded) and need the `echo-tts` package: .ci/run installs it in its own venv. Without it
they skip; the RoPE-layout check below runs everywhere.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from gossip_tts.apps.echo_import import ImportConfig, permute_heads, rope_permutation, run
from gossip_tts.model import model_config
from gossip_tts.model.layers import apply_rope, rope_tables
from gossip_tts.train.load import load_model


def adjacent_rope(x: torch.Tensor, pos: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """RoPE over adjacent pairs (x0, x1), (x2, x3), ... as Echo applies it; x (T, hd)."""
    hd = x.shape[-1]
    freqs = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos[:, None].double() * freqs  # (T, hd/2)
    a, b = x[..., 0::2].double(), x[..., 1::2].double()
    out = torch.empty_like(x, dtype=torch.float64)
    out[..., 0::2], out[..., 1::2] = a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()
    return out


def test_permuting_rows_turns_adjacent_pair_rope_into_half_rope() -> None:
    g = torch.Generator().manual_seed(0)
    hd, t = 16, 7
    q, k = torch.randn(t, hd, generator=g, dtype=torch.float64), torch.randn(t, hd, generator=g, dtype=torch.float64)
    want = adjacent_rope(q, torch.arange(t)) @ adjacent_rope(k, torch.arange(t)).T  # Echo's scores
    cos, sin = rope_tables(t, hd, 10000.0, torch.device("cpu"))
    perm = rope_permutation(hd)
    ours = apply_rope(q[:, perm][None, None].float(), cos, sin)[0, 0] @ apply_rope(k[:, perm][None, None].float(), cos, sin)[0, 0].T
    torch.testing.assert_close(ours.double(), want, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(apply_rope(q[None, None].float(), cos, sin)[0, 0] @ apply_rope(k[None, None].float(), cos, sin)[0, 0].T,
                              want.float(), atol=1e-3)  # without the permutation the scores differ
    w = torch.arange(2 * hd * 3, dtype=torch.float32).view(2 * hd, 3)  # two heads' rows
    assert torch.equal(permute_heads(w, 2)[hd:], w[hd:][perm]) and torch.equal(permute_heads(w, 2)[:hd], w[:hd][perm])


def test_unknown_tensors_are_refused(tmp_path) -> None:
    src = tmp_path / "x.safetensors"
    save_file({"decoder.weight": torch.zeros(2)}, str(src))
    with pytest.raises((ValueError, KeyError)):
        run(ImportConfig(src, tmp_path / "out"), emit=lambda _: None)


def echo_dit(latent_dim: int = 80):
    """echo-tts's own EchoDiT in the echo-tiny shape, every weight random (norm weights too)."""
    from gossip_tts.audio.echo_package import echo_module

    try:
        echo = echo_module("model")
    except ImportError as exc:
        pytest.skip(f"echo-tts is not installed here ({exc}); .ci/run runs this in its own venv")
    c = model_config("echo-tiny", latent_dim)
    torch.manual_seed(0)
    model = echo.EchoDiT(
        latent_size=latent_dim, model_size=c.d_model, num_layers=c.n_layers, num_heads=c.n_heads,
        intermediate_size=c.mlp_hidden, norm_eps=c.norm_eps, text_vocab_size=256, text_model_size=c.text_dim,
        text_num_layers=c.text_layers, text_num_heads=c.text_heads, text_intermediate_size=c.text_mlp_hidden,
        speaker_patch_size=c.speaker_patch, speaker_model_size=c.speaker_dim, speaker_num_layers=c.speaker_layers,
        speaker_num_heads=c.speaker_heads, speaker_intermediate_size=c.speaker_mlp_hidden,
        timestep_embed_size=c.t_freq_dim, adaln_rank=c.adaln_rank,
    ).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * (p.shape[-1] ** -0.5 if p.dim() > 1 else 0.3) + (1.0 if p.dim() == 1 else 0.0))
    return model


def test_imported_echo_gives_echos_velocity(tmp_path) -> None:
    echo = echo_dit()
    src = tmp_path / "pytorch_model.safetensors"
    save_file({k: v.contiguous() for k, v in echo.state_dict().items()}, str(src))
    said: list[str] = []
    run(ImportConfig(src, tmp_path / "imported"), emit=said.append)
    assert any("dropped" in line and "latent_encoder" in line for line in said)
    ours, meta = load_model(tmp_path / "imported", torch.device("cpu"))
    assert ours.cfg == model_config("echo-tiny", 80) and meta["codec"]["codec"] == "echo"

    g = torch.Generator().manual_seed(1)
    b, frames, text_len, ref_len = 2, 24, 19, 32
    x, t = torch.randn(b, frames, 80, generator=g), torch.rand(b, generator=g)
    ids = torch.randint(1, 256, (b, text_len), generator=g)
    text_mask = torch.ones(b, text_len, dtype=torch.bool)
    text_mask[1, 11:] = False
    ref = torch.randn(b, ref_len, 80, generator=g)  # junk in the padding: neither model may read it
    ref_mask = torch.ones(b, ref_len, dtype=torch.bool)
    ref_mask[1, 20:] = False
    with torch.no_grad():
        want = echo(x, t, text_mask, ref_mask, echo.get_kv_cache_text(ids, text_mask), echo.get_kv_cache_speaker(ref))
        got = ours(x, t, ids, text_mask, ref, ref_mask)
    rel = ((got - want).norm() / want.norm()).item()
    assert want.abs().max() > 0.1 and rel < 1e-4, rel


def test_imported_echo_matches_in_every_guidance_branch(tmp_path) -> None:
    """Dropped text (∅) and dropped speaker are Echo's masked-out keys, as its sampler uses them."""
    echo = echo_dit()
    src = tmp_path / "e.safetensors"
    save_file({k: v.contiguous() for k, v in echo.state_dict().items()}, str(src))
    run(ImportConfig(src, tmp_path / "imported"), emit=lambda _: None)
    ours, _ = load_model(tmp_path / "imported", torch.device("cpu"))
    g = torch.Generator().manual_seed(2)
    x, t = torch.randn(1, 16, 80, generator=g), torch.full((1,), 0.7)
    ids, ref = torch.randint(1, 256, (1, 9), generator=g), torch.randn(1, 8, 80, generator=g)
    on_t, on_r = torch.ones(1, 9, dtype=torch.bool), torch.ones(1, 8, dtype=torch.bool)
    with torch.no_grad():
        kv_t, kv_r = echo.get_kv_cache_text(ids, on_t), echo.get_kv_cache_speaker(ref)
        for tm, rm in ((~on_t, on_r), (on_t, ~on_r)):
            want = echo(x, t, tm, rm, kv_t, kv_r)
            got = ours(x, t, ids, tm, ref, rm)
            assert ((got - want).norm() / want.norm()).item() < 1e-4
