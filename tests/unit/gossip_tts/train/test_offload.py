"""--offload: where every tensor lives (fp32 masters and AdamW moments in CPU memory, pinned where
CUDA exists; the model's weights on the device), and gossip reads and writes the masters."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.train.config import TrainConfig
from gossip_tts.train.trainer import TTSTrainer

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from gossip_tts.data import ensure_builtin_corpus

    train, _ = ensure_builtin_corpus(tmp_path_factory.mktemp("c") / "b", n_speakers=2, clips_per_speaker=6,
                                     val_clips_per_speaker=1)
    return str(train)


def test_offload_keeps_masters_and_moments_in_host_memory(corpus):
    t = TTSTrainer(TrainConfig(preset="tiny", device="cuda" if CUDA else "cpu", sources=[corpus], batch_size=4,
                               max_frames=400, max_ref_frames=32, bucket_size=8, warmup_steps=2, offload=True))
    try:
        for _ in range(2):
            t.step()
        masters = t._master
        assert masters and all(m.device.type == "cpu" and m.dtype == torch.float32 for m in masters)
        assert all(m.is_pinned() == CUDA for m in masters)
        params = [p for p in t.model.parameters() if p.requires_grad]
        assert {id(m) for m in masters}.isdisjoint(id(p) for p in params)
        assert all(p.device.type == t.device.type for p in params)
        assert all(p.dtype == (torch.bfloat16 if CUDA else torch.float32) for p in params)
        # the optimiser steps the masters, and its moments sit beside them
        assert [id(p) for p in t.optimizer.param_groups[0]["params"]] == [id(m) for m in masters]
        for m in masters:
            state = t.optimizer.state[m]
            for key in ("exp_avg", "exp_avg_sq"):
                assert state[key].device.type == "cpu" and state[key].dtype == torch.float32
                assert state[key].shape == m.shape
        assert all(m.grad is None or m.grad.device.type == "cpu" for m in masters)
        # gossip: the flat vector is the masters; writing it lands in the masters, then on the device
        flat = t.get_flat_params()
        assert torch.equal(flat, torch.cat([m.detach().reshape(-1) for m in masters]))
        t.set_flat_params(flat * 0.5)
        assert torch.equal(torch.cat([m.detach().reshape(-1) for m in masters]), flat * 0.5)
        on_device = torch.cat([p.detach().reshape(-1).float().cpu() for p in params])
        torch.testing.assert_close(on_device, flat * 0.5, rtol=1e-2 if CUDA else 0, atol=1e-2 if CUDA else 0)
    finally:
        t.close()
