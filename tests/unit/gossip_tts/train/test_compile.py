"""--compile: the tiny preset trains through torch.compile and takes the eager steps (within float
tolerance); where the compiler is missing the test says so and is skipped."""

from __future__ import annotations

import math

import pytest
import torch

from gossip_tts.train.config import TrainConfig
from gossip_tts.train.parallel import compile_problem
from gossip_tts.train.trainer import TTSTrainer

PROBLEM = compile_problem(torch.device("cpu"))
pytestmark = pytest.mark.slow  # a cold compile takes minutes on 2 cores: .ci/run runs it on its own


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from gossip_tts.data import ensure_builtin_corpus

    train, _ = ensure_builtin_corpus(tmp_path_factory.mktemp("c") / "b", n_speakers=2, clips_per_speaker=4,
                                     val_clips_per_speaker=1)
    return str(train)


def make(corpus: str, compile: bool) -> TTSTrainer:
    return TTSTrainer(TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=400,
                                  max_ref_frames=32, bucket_size=8, warmup_steps=2, compile=compile))


@pytest.mark.skipif(PROBLEM is not None, reason=f"torch.compile cannot run here: {PROBLEM}")
def test_compiled_training_takes_the_eager_steps(corpus):
    eager, compiled = make(corpus, False), make(corpus, True)
    try:
        assert compiled._compiled
        a, b = eager.step(), compiled.step()  # one step: compiling (forward and backward) takes minutes on 2 cores
        assert math.isfinite(b.loss)
        assert b.loss == pytest.approx(a.loss, rel=1e-4, abs=1e-5)
        assert compiled._compiled  # no fallback to eager happened
        torch.testing.assert_close(compiled.get_flat_params(), eager.get_flat_params(), rtol=1e-3, atol=1e-5)
    finally:
        eager.close()
        compiled.close()


def test_a_failing_compile_falls_back_to_eager_with_a_message(corpus, caplog, monkeypatch):
    trainer = make(corpus, False)
    try:
        trainer._compiled = True  # as if compiled; its first compiled step fails:
        real = trainer._forward_backward
        calls = []

        def broken_then_real(batch):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("backend compiler failed: no such compiler")
            return real(batch)

        monkeypatch.setattr(trainer, "_forward_backward", broken_then_real)
        trainer._fwd._compiled_call_impl = None
        reference = make(corpus, False)
        a = reference.step()
        b = trainer.step()
        reference.close()
        assert not trainer._compiled and "training without it" in caplog.text
        assert b.loss == a.loss  # the retry drew the same noise as an eager step would have
    finally:
        trainer.close()
