"""A torchrun group's DDP and FSDP2 steps equal one process's steps on the same global batch.

The global batch of a 2-rank group is rank 0's batch and rank 1's batch; DDP and FSDP2
average the two ranks' gradients, so the reference takes the mean of the two batch losses
(each with its rank's own noise) in one process, then clips and steps the same way.
"""

from __future__ import annotations

import pytest
import torch

from gossip_tts.train.config import TrainConfig
from gossip_tts.train.parallel import ParallelConfig, init_group, rank_seed
from gossip_tts.train.trainer import TTSTrainer
from tests.unit.parallel_helpers import spawn

STEPS = 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from gossip_tts.data import ensure_builtin_corpus

    train, _ = ensure_builtin_corpus(tmp_path_factory.mktemp("c") / "b", n_speakers=2, clips_per_speaker=6,
                                     val_clips_per_speaker=1)
    return str(train)


def config(corpus: str, seed: int = 7) -> TrainConfig:
    # A small clip norm, so clipping acts and the group's global gradient norm is what counts.
    return TrainConfig(preset="tiny", device="cpu", sources=[corpus], batch_size=3, max_frames=400,
                       max_ref_frames=32, bucket_size=8, warmup_steps=2, grad_clip=0.05, lr=1e-3, seed=seed)


def rank_worker(rank: int, strategy: str, corpus: str, out: str) -> None:
    group = init_group(ParallelConfig(strategy=strategy), "cpu")
    assert group is not None and group.rank == rank and group.world_size == 2
    trainer = TTSTrainer(config(corpus), group=group)
    losses = [trainer.step().loss for _ in range(STEPS)]
    flat = trainer.get_flat_params()  # a gather under FSDP2: every rank calls it
    torch.save({"losses": losses, "flat": flat}, f"{out}/rank{rank}.pt")
    trainer.close()


def reference(corpus: str) -> tuple[list[list[float]], torch.Tensor]:
    """One process, rank 0's and rank 1's batches and noise, one model, mean of the two losses."""
    a = TTSTrainer(config(corpus))
    b = TTSTrainer(config(corpus, seed=rank_seed(7, 1)))
    b._fwd = a.model  # b only supplies rank 1's batches and noise
    losses = []
    try:
        for _ in range(STEPS):
            a._set_lr()
            a.model.zero_grad(set_to_none=True)
            la, lb = a._loss(a._next_batch()), b._loss(b._next_batch())
            ((la + lb) / 2).backward()
            a._apply()
            a._step += 1
            losses.append([float(la.detach()), float(lb.detach())])
        return losses, a.get_flat_params()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])  # fsdp2: 20-40 s on 2 cores
def test_group_steps_equal_one_process_on_the_same_global_batch(corpus, tmp_path, strategy):
    spawn(rank_worker, 2, strategy, corpus, str(tmp_path))
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    losses, flat = reference(corpus)
    start = TTSTrainer(config(corpus))
    moved = float((flat - start.get_flat_params()).abs().max())
    start.close()
    assert moved > 1e-4  # the steps did something, so equality below means something
    torch.testing.assert_close(r0["losses"], [x[0] for x in losses], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r1["losses"], [x[1] for x in losses], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r0["flat"], flat, rtol=1e-4, atol=2e-6)
    assert torch.equal(r0["flat"], r1["flat"])  # every rank holds the same model
