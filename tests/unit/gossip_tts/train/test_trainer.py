"""The TTS trainer: whole clips only, position limit = training cap; offloaded master weights give the
same steps; state round-trips exactly."""

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
    return TTSTrainer(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=kw.pop("max_frames", 400),
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


def test_training_batches_pair_each_transcript_with_its_whole_clip(corpus):
    """Fails if the trainer ever feeds part of a clip with the clip's whole transcript."""
    from gossip_tts.data import LatentStream, StreamConfig

    with LatentStream(StreamConfig(sources=[corpus], info=None, shuffle_shards=False, shuffle_buffer=1, loop=False)) as s:
        clips = {x.text: x.latent for x in s}
    cap = sorted(x.shape[0] for x in clips.values())[len(clips) // 2]  # half the clips are over it
    t = make(corpus, max_frames=cap)
    try:
        assert t.model.cfg.max_frames == cap  # the position limit is what training sees
        seen = set()
        for _ in range(6):
            b = t._next_batch()
            for i in range(b.size):
                text = bytes(b.text_ids[i, : int(b.text_mask[i].sum())].tolist()).decode()
                n = int(b.latent_mask[i].sum())
                assert n == clips[text].shape[0] <= cap, f"{text!r}: {n} of {clips[text].shape[0]} frames"
                assert torch.allclose(b.latent[i, :n], torch.from_numpy(clips[text].astype("float32")))
                seen.add(text)
        assert len(seen) > 1 and t.batcher.skipped["audio_over_cap"] > 0
        assert t.step().extra["skipped_clips"] > 0
    finally:
        t.close()


def test_step_trains_on_what_next_batch_returns(corpus):
    """`next_batch` is the seam for another batch source (benchmarks replay a fixed set):
    every step must take its batch from it."""

    class Replay(TTSTrainer):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.batch, self.served = super().next_batch(), 0

        def next_batch(self):
            self.served += 1
            return self.batch

    a = Replay(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=400,
                           max_ref_frames=32, bucket_size=8, warmup_steps=2))
    try:
        for _ in range(3):
            a.step()
        assert a.served == 3
    finally:
        a.close()


def test_the_checkpoint_records_the_text_bytes_of_its_training_texts(corpus):
    from gossip_tts.data.reader import LatentStream, StreamConfig

    with LatentStream(StreamConfig(sources=[corpus], shuffle_shards=False, shuffle_buffer=1, loop=False)) as stream:
        texts = [sample.text for sample in stream]
    _, meta = make(corpus).state_tensors()
    assert set(meta["text_bytes"]) == set("".join(texts).encode("utf-8")), meta["text_bytes"]


def test_one_line_says_the_model_is_being_built(corpus, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="gossip_tts")
    make(corpus)
    said = [r.getMessage() for r in caplog.records if r.name == "gossip_tts.train.trainer"]
    assert said == ["building the tiny model on cpu…"], said


@pytest.mark.parametrize("offload", [False, True])
def test_a_mix_added_a_span_of_whole_tensors_at_a_time_reaches_the_device_weights(corpus, offload):
    """`add_to_flat_params(delta, start)`: a span of whole parameter tensors is added where it lies,
    and with --offload only the tensors it changed are pushed to the device; a span that cuts a
    tensor is refused and changes nothing."""
    t = make(corpus, offload=offload)
    try:
        before = t.get_flat_params()
        sizes = [p.numel() for p in t._master]
        start, n = sizes[0], sizes[1] + sizes[2]  # the second and third tensors
        t.add_to_flat_params(torch.ones(n), start)
        expected = before.clone()
        expected[start:start + n] += 1
        assert torch.equal(t.get_flat_params(), expected)
        assert torch.equal(torch.nn.utils.parameters_to_vector(t.model.parameters()), expected)
        with pytest.raises(ValueError, match="does not span whole parameters"):
            t.add_to_flat_params(torch.ones(n), start + 1)
        assert torch.equal(t.get_flat_params(), expected)
    finally:
        t.close()


@pytest.mark.parametrize("offload", [False, True])
def test_the_bfloat16_copy_of_the_masters_is_a_rounding_of_get_flat_params(corpus, offload):
    from tests.unit.peer.test_flat_params_bf16 import check

    t = make(corpus, offload=offload)
    try:
        t.step()
        check(t)  # within a bfloat16 step everywhere, exact where representable, the same bits again
    finally:
        t.close()
