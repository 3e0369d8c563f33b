"""The TTS trainer: offloaded master weights give the same steps; state round-trips exactly."""

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


def make(corpus, **kw):
    return TTSTrainer(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=48,
                                  max_ref_frames=32, bucket_size=8, warmup_steps=2, **kw))


def test_offload_takes_exactly_the_same_steps_on_cpu(corpus):
    plain, off = make(corpus), make(corpus, offload=True)
    try:
        assert off._master[0] is not off._params[0]  # the masters really are separate copies
        for _ in range(4):
            a, b = plain.step(), off.step()
            assert a.loss == b.loss
        assert torch.equal(plain.get_flat_params(), off.get_flat_params())
        assert torch.equal(torch.nn.utils.parameters_to_vector(off.model.parameters()), off.get_flat_params())
        # gossip writes the masters; the device weights follow
        x = off.get_flat_params() * 0.5
        off.set_flat_params(x)
        assert torch.equal(torch.nn.utils.parameters_to_vector(off.model.parameters()), x)
    finally:
        plain.close()
        off.close()


@pytest.mark.parametrize("offload", [False, True])
def test_state_round_trip_resumes_identically(corpus, offload):
    a = make(corpus, offload=offload)
    for _ in range(3):
        a.step()
    tensors, meta = a.state_tensors()
    b = make(corpus, offload=offload)
    b.load_state_tensors(tensors, meta)
    assert b.step_count == 3 and torch.equal(a.get_flat_params(), b.get_flat_params())
    state_a = a.optimizer.state[a._master[0]]
    state_b = b.optimizer.state[b._master[0]]
    assert torch.equal(state_a["exp_avg"], state_b["exp_avg"]) and torch.equal(state_a["exp_avg_sq"], state_b["exp_avg_sq"])
    a.close()
    b.close()


def test_checkpoint_of_another_model_is_refused(corpus):
    a = make(corpus)
    tensors, meta = a.state_tensors()
    meta = {**meta, "model_config": {**meta["model_config"], "d_model": 999}}
    with pytest.raises(ValueError, match="model config differs"):
        a.load_state_tensors(tensors, meta)
    a.close()
