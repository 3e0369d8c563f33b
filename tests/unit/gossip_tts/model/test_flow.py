"""Rectified flow: stratified logit-normal t, the masked loss, dropout, and eval_loss."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.data.batch import Batch
from gossip_tts.model import (
    eval_loss,
    flow_matching_loss,
    sample_t,
)
from tests.unit.model_helpers import random_tiny_model

D = 16



def make_batch(seed: int = 0, extra_pad: int = 0) -> Batch:
    """Three clips of 12, 9 and 5 real frames (padded with junk to 12 + extra_pad)."""
    g = torch.Generator().manual_seed(seed)
    lengths, t = [12, 9, 5], 12 + extra_pad
    latent = torch.randn(3, 12, D, generator=g)
    latent = torch.cat([latent, torch.randn(3, extra_pad, D)], 1)
    mask = torch.arange(t)[None] < torch.tensor(lengths)[:, None]
    return Batch(
        latent=latent, latent_mask=mask,
        text_ids=torch.randint(1, 256, (3, 6), generator=g), text_mask=torch.ones(3, 6, dtype=torch.bool),
        ref=torch.randn(3, 8, D, generator=g), ref_mask=torch.ones(3, 8, dtype=torch.bool), audio_seconds=1.0,
    )




class Recorder(torch.nn.Module):
    """Stand-in model: returns x_t (so the loss is checkable by hand) and records its inputs."""

    def forward(self, x_t, t, text_ids, text_mask, ref, ref_mask, x_mask=None):
        self.seen = dict(x_t=x_t, t=t, text_mask=text_mask, ref_mask=ref_mask)
        return x_t


@pytest.mark.parametrize("batch_size", [1, 2, 7, 64])
def test_sample_t_is_stratified_and_inside_the_open_interval(batch_size: int) -> None:
    t = sample_t(batch_size, torch.Generator().manual_seed(batch_size))
    assert t.shape == (batch_size,) and t.dtype == torch.float32
    t = t.double()
    assert ((t > 0) & (t < 1)).all()
    u = torch.special.ndtr(torch.logit(t))  # back to the uniform draw
    bins = torch.floor(u * batch_size).long().clamp(max=batch_size - 1)
    assert sorted(bins.tolist()) == list(range(batch_size))


def test_sample_t_is_logit_normal_shuffled_and_seeded() -> None:
    t = sample_t(4096, torch.Generator().manual_seed(0))
    z = torch.logit(t.double())
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1) < 0.05
    assert not torch.equal(t, t.sort().values)  # bins are shuffled across the batch
    assert torch.equal(t, sample_t(4096, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError):
        sample_t(0, torch.Generator())


def test_loss_by_hand_with_a_stand_in_model() -> None:
    batch, model = make_batch(), Recorder()
    loss = flow_matching_loss(model, batch, torch.Generator().manual_seed(3), 0.0, 0.0)
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(12, 3, D, generator=g).transpose(0, 1)  # drawn frame-major
    torch.rand(3, generator=g), torch.rand(3, generator=g)  # dropout draws
    t = sample_t(3, g)[:, None, None]
    x_t = (1 - t) * batch.latent + t * noise
    err = ((x_t - (noise - batch.latent)) ** 2)[batch.latent_mask]
    torch.testing.assert_close(loss, err.mean())
    torch.testing.assert_close(model.seen["x_t"], x_t)


def test_loss_ignores_padded_frames_but_not_real_ones() -> None:
    model, batch = random_tiny_model(D), make_batch()
    g = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    base = flow_matching_loss(model, batch, g())
    junk = batch.latent.clone()
    junk[~batch.latent_mask] = 100.0
    same = flow_matching_loss(model, Batch(**{**batch.__dict__, "latent": junk}), g())
    assert same.item() == pytest.approx(base.item(), abs=1e-6)
    real = batch.latent.clone()
    real[2, 0] += 1.0
    changed = flow_matching_loss(model, Batch(**{**batch.__dict__, "latent": real}), g())
    assert abs(changed.item() - base.item()) > 1e-4


def test_dropout_zeroes_whole_masks_per_sample_from_the_generator() -> None:
    batch, model = make_batch(), Recorder()
    flow_matching_loss(model, batch, torch.Generator().manual_seed(0), text_dropout=1.0, speaker_dropout=0.0)
    assert not model.seen["text_mask"].any() and torch.equal(model.seen["ref_mask"], batch.ref_mask)
    flow_matching_loss(model, batch, torch.Generator().manual_seed(0), text_dropout=0.0, speaker_dropout=1.0)
    assert torch.equal(model.seen["text_mask"], batch.text_mask) and not model.seen["ref_mask"].any()

    big = Batch(
        latent=torch.zeros(400, 2, D), latent_mask=torch.ones(400, 2, dtype=torch.bool),
        text_ids=torch.ones(400, 3, dtype=torch.long), text_mask=torch.ones(400, 3, dtype=torch.bool),
        ref=torch.zeros(400, 4, D), ref_mask=torch.ones(400, 4, dtype=torch.bool), audio_seconds=1.0,
    )
    flow_matching_loss(model, big, torch.Generator().manual_seed(0), text_dropout=0.25, speaker_dropout=0.5)
    text_rows = (~model.seen["text_mask"].any(1)).float().mean().item()
    ref_rows = (~model.seen["ref_mask"].any(1)).float().mean().item()
    assert 0.18 < text_rows < 0.32 and 0.42 < ref_rows < 0.58
    first = model.seen["text_mask"].clone()
    flow_matching_loss(model, big, torch.Generator().manual_seed(0), text_dropout=0.25, speaker_dropout=0.5)
    assert torch.equal(first, model.seen["text_mask"])


def test_default_dropouts_train_every_branch_both_samplers_use() -> None:
    """Independent guidance needs (∅,S) and (T,∅), nested needs (∅,∅): at the trainer's default
    0.1/0.1 each shows up near its p·q share, so none is left untrained."""
    from gossip_tts.train.config import TrainConfig

    tc, model, n = TrainConfig(), Recorder(), 2000
    big = Batch(
        latent=torch.zeros(n, 2, D), latent_mask=torch.ones(n, 2, dtype=torch.bool),
        text_ids=torch.ones(n, 3, dtype=torch.long), text_mask=torch.ones(n, 3, dtype=torch.bool),
        ref=torch.zeros(n, 4, D), ref_mask=torch.ones(n, 4, dtype=torch.bool), audio_seconds=1.0,
    )
    flow_matching_loss(model, big, torch.Generator().manual_seed(0), tc.text_dropout, tc.speaker_dropout)
    has_t, has_s = model.seen["text_mask"].any(1), model.seen["ref_mask"].any(1)
    share = {
        "no_text": (~has_t & has_s).float().mean().item(),
        "no_speaker": (has_t & ~has_s).float().mean().item(),
        "neither": (~has_t & ~has_s).float().mean().item(),
    }
    assert 0.06 < share["no_text"] < 0.12 and 0.06 < share["no_speaker"] < 0.12, share
    assert 0.003 < share["neither"] < 0.02, share


def test_given_t_keeps_noise_and_dropout() -> None:
    batch, model = make_batch(), Recorder()
    t = torch.tensor([0.0, 0.5, 1.0])
    flow_matching_loss(model, batch, torch.Generator().manual_seed(0), t=t)
    torch.testing.assert_close(model.seen["x_t"][0], batch.latent[0])  # t=0: the clean latent
    noise = torch.randn(12, 3, D, generator=torch.Generator().manual_seed(0)).transpose(0, 1)
    torch.testing.assert_close(model.seen["x_t"][2], noise[2])  # t=1: the noise drawn first
    with pytest.raises(ValueError):
        flow_matching_loss(model, batch, torch.Generator(), t=torch.rand(2))


def test_eval_loss_is_deterministic_and_padding_free() -> None:
    model = random_tiny_model(D)
    batches = [make_batch(0), make_batch(1)]
    a = eval_loss(model, batches, seed=7)
    assert a == eval_loss(model, batches, seed=7)
    assert a != eval_loss(model, batches, seed=8)
    padded = eval_loss(model, [make_batch(0, extra_pad=5), make_batch(1, extra_pad=3)], seed=7)
    assert padded == pytest.approx(a, rel=1e-5)
    with pytest.raises(ValueError):
        eval_loss(model, [])


def test_eval_loss_by_hand_with_a_stand_in_model() -> None:
    """At t=0 the stand-in predicts x0 against target ε − x0: per-element error (2·x0 − ε)²."""
    batch = make_batch()
    value = eval_loss(Recorder(), [batch], grid=(0.0, 1.0), seed=2)
    noise = torch.randn(12, 3, D, generator=torch.Generator().manual_seed(2 * 1_000_003)).transpose(0, 1)
    m = batch.latent_mask
    at0 = ((2 * batch.latent - noise) ** 2)[m].mean()
    at1 = ((batch.latent) ** 2)[m].mean()  # x_t = ε, target ε − x0: error x0²
    assert value == pytest.approx(((at0 + at1) / 2).item(), rel=1e-5)


def test_eval_loss_does_not_build_a_graph() -> None:
    model = random_tiny_model(D)
    eval_loss(model, [make_batch()], grid=(0.5,))
    assert all(p.grad is None for p in model.parameters())
