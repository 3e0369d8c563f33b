"""GroupTrainer and follow() on 2 gloo ranks, without a network: a mix, a checkpoint, a resume and
an adoption driven from rank 0 reach every rank (DDP: whole copies; FSDP2: shards)."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.train.parallel import ParallelConfig, init_group
from gossip_tts.train.trainer import TTSTrainer
from peer.local.group import GroupComm, GroupTrainer, follow
from tests.unit.gossip_tts.train.test_parallel_train import config, corpus  # noqa: F401  (the fixture)
from tests.unit.parallel_helpers import spawn


def group_worker(rank: int, strategy: str, corpus: str, out: str) -> None:
    group = init_group(ParallelConfig(strategy=strategy), "cpu")
    inner = TTSTrainer(config(corpus), group=group)
    comm = GroupComm(group.device)
    if rank != 0:
        steps = follow(inner, comm, verify=True)
        flat = inner.get_flat_params() if strategy == "ddp" else None  # FSDP2 would wait for a gather rank 0 left
        torch.save({"steps": steps, "flat": flat}, f"{out}/rank{rank}.pt")
        return
    g = GroupTrainer(inner, comm, verify=True)
    stats = g.step()
    g.step()
    saved = g.state_tensors()
    mixed = g.get_flat_params() * 0.5
    g.set_flat_params(mixed)  # raises unless every rank holds `mixed`
    assert torch.equal(g.get_flat_params(), mixed)
    g.step()
    g.load_state_tensors(*saved)  # back to step 2 on every rank
    assert g.step_count == 2
    resumed = g.get_flat_params()
    g.adopt(resumed, 500)  # a joined state's step reaches every rank (their schedules stay in lockstep)
    assert g.step_count == 500 and torch.equal(g.get_flat_params(), resumed)
    g.close()
    torch.save({"samples": stats.samples, "verified": g.mixes_verified, "saved": saved[0], "resumed": resumed,
                "steps": g.step_count}, f"{out}/rank0.pt")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_rank_0_drives_mixes_checkpoints_and_resumes_on_every_rank(corpus, tmp_path, strategy):  # noqa: F811
    if strategy == "fsdp2":
        pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed.fsdp.fully_shard")
    spawn(group_worker, 2, strategy, corpus, str(tmp_path))
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert r0["samples"] == 2 * config(corpus).batch_size  # the group's step counts both ranks' batches
    assert r0["verified"] == 1 and r0["steps"] == 500 and r1["steps"] == 500
    names = [k for k in r0["saved"] if k.startswith("model.")]
    saved = torch.cat([r0["saved"][k].reshape(-1) for k in names])
    assert torch.equal(r0["resumed"], saved)
    if strategy == "ddp":  # a follower's own copy (FSDP2 followers hold shards, checked by verify above)
        assert torch.equal(r1["flat"], saved)
    moments = [k for k in r0["saved"] if k.startswith("optim.") and k.endswith("exp_avg")]
    assert moments and all(r0["saved"][k].shape == r0["saved"]["model." + k[6:-8]].shape for k in moments)
