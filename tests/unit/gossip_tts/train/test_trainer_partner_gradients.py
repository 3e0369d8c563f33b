"""The TTS trainer's side of partner gradients (`Capabilities.partner_gradients`): its raw gradient
sum out, a partner's gradient blended into its steps, on the plain and the offloaded path."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.train.config import TrainConfig
from gossip_tts.train.trainer import TTSTrainer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from gossip_tts.data import ensure_builtin_corpus

    train, _ = ensure_builtin_corpus(tmp_path_factory.mktemp("c") / "b", n_speakers=2, clips_per_speaker=6,
                                     val_clips_per_speaker=1)
    return str(train)


def trainer(corpus: str, offload: bool) -> TTSTrainer:
    return TTSTrainer(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=400,
                                  max_ref_frames=32, bucket_size=8, warmup_steps=2, offload=offload, seed=3))


@pytest.mark.parametrize("offload", [False, True], ids=["plain", "offload"])
def test_a_blended_partner_gradient_moves_the_step_and_the_sum_stays_our_own(corpus, offload):
    plain, blended = trainer(corpus, offload), trainer(corpus, offload)
    try:
        assert plain.capabilities.partner_gradients
        numel = plain.get_flat_params().numel()
        for t in (plain, blended):
            assert torch.equal(t.gradient_sum(), torch.zeros(numel))  # starts the sum
            t.step()
        first = plain.gradient_sum()
        assert torch.equal(first, blended.gradient_sum())  # same seed, same batch: the same raw gradients
        assert first.numel() == numel and bool(first.isfinite().all()) and first.norm() > 0
        blended.blend_partner_gradient(-3.0 * first, 1.0)  # a partner pointing the other way
        plain.step()
        blended.step()
        assert not torch.equal(plain.get_flat_params(), blended.get_flat_params())
        # what goes out is our raw gradient, not the blend: both trainers took the same batch
        torch.testing.assert_close(plain.gradient_sum(), blended.gradient_sum())
        blended.blend_partner_gradient(None, 0.0)
        before = [t.get_flat_params() for t in (plain, blended)]
        for t in (plain, blended):
            t.step()
        moved = [t.get_flat_params() - b for t, b in zip((plain, blended), before)]
        assert moved[1].norm() > 0 and not torch.equal(moved[0], moved[1])  # Adam's moments remember the blend
    finally:
        plain.close()
        blended.close()
