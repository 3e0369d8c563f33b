"""Joining trusts no claim: an offered state is adopted only if it scores better than ours on a
fixed probe batch; a liar's huge weights, or a mere copy of a fresh model, never do."""

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


def make(corpus, seed: int = 0) -> TTSTrainer:
    return TTSTrainer(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=400,
                                  max_ref_frames=32, bucket_size=8, warmup_steps=2, lr=3e-3, seed=seed))


def test_probe_prefers_a_trained_state_and_refuses_a_liars(corpus):
    fresh, trained = make(corpus), make(corpus)
    for _ in range(30):
        trained.step()
    good = trained.get_flat_params()
    mine = fresh.get_flat_params()
    assert fresh.probe_better(good)  # a state further along is better on our own batch
    assert not trained.probe_better(mine)  # and the reverse is refused
    assert torch.equal(fresh.get_flat_params(), mine)  # probing leaves our parameters as they were
    liar = torch.full_like(good, 1e30)  # finite, so it passes the protocol, but absurd
    assert not fresh.probe_better(liar)
