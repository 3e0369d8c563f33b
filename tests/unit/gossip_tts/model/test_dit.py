"""EchoDiT: shapes, zero start, mask handling (padding invariance, empty conditions), overfitting."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gossip_tts.data.batch import Batch
from gossip_tts.data.text import encode_text
from gossip_tts.model import EchoDiT, flow_matching_loss, model_config

D = 128



def random_model(seed: int = 0) -> EchoDiT:
    """Tiny model with every weight random: zero-initialised projections would hide mask bugs."""
    torch.manual_seed(seed)
    model = EchoDiT(model_config("tiny", D))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # norm weights
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:  # unit-variance outputs, so attention is far from uniform
                p.normal_(0.0, p.shape[-1] ** -0.5 if p.shape[0] != 256 else 1.0)
    return model


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Two samples; the second is padded on x, text and ref (padding holds junk, not zeros)."""
    g = torch.Generator().manual_seed(seed)
    b, t, l, r = 2, 30, 17, 13
    x_mask = torch.ones(b, t, dtype=torch.bool)
    x_mask[1, 21:] = False
    text_mask = torch.ones(b, l, dtype=torch.bool)
    text_mask[1, 9:] = False
    ref_mask = torch.ones(b, r, dtype=torch.bool)
    ref_mask[1, 6:] = False  # 6 frames: the second speaker patch is half padding
    return dict(
        x_t=torch.randn(b, t, D, generator=g), t=torch.rand(b, generator=g),
        text_ids=torch.randint(0, 256, (b, l), generator=g), text_mask=text_mask,
        ref=torch.randn(b, r, D, generator=g), ref_mask=ref_mask, x_mask=x_mask,
    )


def pad_more(kw: dict[str, torch.Tensor], extra: int = 7, seed: int = 1) -> dict[str, torch.Tensor]:
    """The same real content with `extra` more padded positions of junk on x, text and ref."""
    g = torch.Generator().manual_seed(seed)
    b = kw["x_t"].shape[0]
    return dict(
        x_t=torch.cat([kw["x_t"], 5 * torch.randn(b, extra, D, generator=g)], 1),
        t=kw["t"],
        text_ids=torch.cat([kw["text_ids"], torch.randint(0, 256, (b, extra), generator=g)], 1),
        text_mask=F.pad(kw["text_mask"], (0, extra)),
        ref=torch.cat([kw["ref"], 5 * torch.randn(b, extra, D, generator=g)], 1),
        ref_mask=F.pad(kw["ref_mask"], (0, extra)),
        x_mask=F.pad(kw["x_mask"], (0, extra)),
    )


def test_shape_and_zero_initial_prediction() -> None:
    kw = inputs()
    out = EchoDiT(model_config("tiny", D))(**kw)
    assert out.shape == kw["x_t"].shape
    assert torch.equal(out, torch.zeros_like(out))


def test_padding_does_not_change_real_frames() -> None:
    model, kw = random_model(), inputs()
    with torch.no_grad():
        out = model(**kw)
        padded = model(**pad_more(kw))[:, : kw["x_t"].shape[1]]
    real = kw["x_mask"]
    assert out[real].abs().mean() > 0.1  # non-trivial, so the comparison means something
    torch.testing.assert_close(padded[real], out[real], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[~real], torch.zeros_like(out[~real]))


@pytest.mark.parametrize("mask_name", ["x_mask", "text_mask", "ref_mask"])
def test_unmasking_the_padding_does_change_real_frames(mask_name: str) -> None:
    """Control for the invariance test: the junk in the padding is visible once unmasked."""
    model, kw = random_model(), pad_more(inputs())
    with torch.no_grad():
        out = model(**kw)
        kw[mask_name] = torch.ones_like(kw[mask_name])
        leaked = model(**kw)
    t, real = inputs()["x_t"].shape[1], inputs()["x_mask"]
    assert (leaked[:, :t] - out[:, :t])[real].abs().max() > 1e-3


def test_empty_text_and_speaker_give_finite_output_that_differs() -> None:
    model, kw = random_model(), inputs()
    with torch.no_grad():
        full = model(**kw)
        none = model(**{**kw, "text_mask": torch.zeros_like(kw["text_mask"]),
                        "ref_mask": torch.zeros_like(kw["ref_mask"])})
        no_text = model(**{**kw, "text_mask": torch.zeros_like(kw["text_mask"])})
    for out in (none, no_text):
        assert torch.isfinite(out).all()
        assert (out - full)[kw["x_mask"]].abs().max() > 1e-3


def test_sample_without_real_frames_is_finite() -> None:
    model, kw = random_model(), inputs()
    kw["x_mask"] = torch.zeros_like(kw["x_mask"])
    kw["text_mask"] = torch.zeros_like(kw["text_mask"])
    kw["ref_mask"] = torch.zeros_like(kw["ref_mask"])
    out = model(**kw)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_text_and_frame_order_matter() -> None:
    """The text reaches the output, and RoPE makes the trunk position-aware."""
    model, kw = random_model(), inputs()
    with torch.no_grad():
        out = model(**kw)
        other_text = model(**{**kw, "text_ids": (kw["text_ids"] + 1) % 256})
        flipped = model(**{**kw, "x_t": kw["x_t"].flip(1), "x_mask": torch.ones_like(kw["x_mask"])})
        straight = model(**{**kw, "x_mask": torch.ones_like(kw["x_mask"])})
    assert (other_text - out).abs().max() > 1e-3
    assert (flipped.flip(1) - straight).abs().max() > 1e-3


def test_cached_conditions_equal_forward() -> None:
    model, kw = random_model(), inputs()
    with torch.no_grad():
        cond = model.encode_conditions(kw["text_ids"], kw["text_mask"], kw["ref"], kw["ref_mask"])
        cached = model.denoise(kw["x_t"], kw["t"], cond, kw["x_mask"])
        assert torch.equal(cached, model(**kw))


def test_refuses_wrong_shapes() -> None:
    model, kw = random_model(), inputs()
    with pytest.raises(ValueError, match="bytes"):
        model(**{**kw, "text_ids": torch.zeros(2, 513, dtype=torch.long),
                 "text_mask": torch.ones(2, 513, dtype=torch.bool)})
    with pytest.raises(ValueError, match="t must have shape"):
        model(**{**kw, "t": torch.rand(3)})
    with pytest.raises(ValueError, match="channels"):
        model(**{**kw, "x_t": torch.randn(2, 30, 64)})


def overfit_batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    texts = ["hello world", "a quick fox", "gossip tts", "tiny model"]
    n_bytes = max(len(encode_text(s)) for s in texts)
    ids = torch.zeros(4, n_bytes, dtype=torch.long)
    text_mask = torch.zeros(4, n_bytes, dtype=torch.bool)
    for i, s in enumerate(texts):
        b = encode_text(s)
        ids[i, : len(b)] = torch.tensor(b)
        text_mask[i, : len(b)] = True
    return Batch(
        latent=torch.randn(4, 40, D, generator=g), latent_mask=torch.ones(4, 40, dtype=torch.bool),
        text_ids=ids, text_mask=text_mask, ref=torch.randn(4, 16, D, generator=g),
        ref_mask=torch.ones(4, 16, dtype=torch.bool), audio_seconds=4.0,
    )


def test_tiny_preset_overfits_one_batch() -> None:
    torch.manual_seed(0)
    model, batch = EchoDiT(model_config("tiny", D)), overfit_batch()
    t = torch.tensor([0.2, 0.4, 0.6, 0.8])

    def loss() -> torch.Tensor:  # fixed t and noise, no dropout: a pure regression target
        return flow_matching_loss(model, batch, torch.Generator().manual_seed(1), 0.0, 0.0, t=t)

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    start = loss().item()
    for _ in range(60):
        opt.zero_grad()
        loss().backward()
        opt.step()
    end = loss().item()
    assert start > 1.5  # zero prediction against ε − x0 with unit x0 and ε: about 2
    assert end < 0.5 * start


def test_attention_mask_never_has_an_empty_row() -> None:
    """Some SDPA backends return NaN for a row with no key; such rows are opened instead."""
    from gossip_tts.model.layers import key_mask_for_attention

    keys = torch.tensor([[True, False, False], [False, False, False]])
    mask = key_mask_for_attention(keys)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[0, 0, 0].tolist() == [True, False, False]
    assert mask[1, 0, 0].tolist() == [True, True, True]


def test_zero_length_text_and_reference_work() -> None:
    model, kw = random_model(), inputs()
    kw.update(text_ids=kw["text_ids"][:, :0], text_mask=kw["text_mask"][:, :0],
              ref=kw["ref"][:, :0], ref_mask=kw["ref_mask"][:, :0])
    with torch.no_grad():
        out = model(**kw)
    assert out.shape == kw["x_t"].shape and torch.isfinite(out).all()


def test_bf16_weights_without_autocast_accept_float32_inputs() -> None:
    """A bf16 model (offloaded training, half-precision synthesis) takes the float32 batches the data gives."""
    torch.manual_seed(0)
    model = EchoDiT(model_config("tiny", D))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, p.shape[-1] ** -0.5) if p.dim() > 1 else p.fill_(1.0)
    b = overfit_batch()
    args = (b.latent, torch.rand(4), b.text_ids, b.text_mask, b.ref, b.ref_mask)
    want = model(*args)
    half = model.to(torch.bfloat16)
    got = half(*args)  # raised "expected m1 and m2 to have the same dtype" before the speaker reference was cast
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    assert (got.float() - want).norm() / want.norm() < 0.05


@pytest.mark.parametrize("preset", ["tiny", "echo-tiny"])
def test_shard_units_name_every_block_once_each_attention_before_its_block_with_condition_kv(preset: str) -> None:
    model = EchoDiT(model_config(preset, D))
    units = model.shard_units()
    modules = [m for m, _ in units]
    assert len({id(m) for m in modules}) == len(modules), "a unit named twice"
    blocks = [*model.blocks, *model.text_encoder.encoder.blocks, *model.speaker_encoder.encoder.blocks]
    assert {id(b) for b in blocks} <= {id(m) for m in modules}
    for block in model.blocks:  # the attention, with the method encode_conditions calls, then its block
        at = modules.index(block.attn)
        assert units[at][1] == ("condition_kv",) and callable(getattr(block.attn, "condition_kv"))
        assert modules.index(block) == at + 1
    assert {id(m) for m in modules} == {id(b) for b in blocks} | {id(b.attn) for b in model.blocks}
    assert all(methods == () for m, methods in units if m not in [b.attn for b in model.blocks])
