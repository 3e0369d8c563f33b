"""--offload: where every tensor lives (fp32 masters and AdamW moments in CPU memory, pinned where
CUDA exists; the model's weights on the device), and gossip reads and writes the masters."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.train.config import TrainConfig
from gossip_tts.train.offload import CHUNK_BYTES, MasterWeights, chunk_ranges
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


# --- the step a chunk of masters at a time --------------------------------------------------------

def _net(dtype: torch.dtype) -> torch.nn.Module:
    """Tensors of odd sizes (so the chunks' views of the buffer start anywhere), one larger than the
    small budgets below."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(13, 301), torch.nn.GELU(), torch.nn.Linear(301, 77),
                               torch.nn.LayerNorm(77), torch.nn.Linear(77, 5)).to(dtype)


def _loss(net: torch.nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(32, 13, generator=g), torch.randn(32, 5, generator=g)
    dtype = next(net.parameters()).dtype
    return torch.nn.functional.mse_loss(net(x.to(dtype)).float(), y)


ADAMW = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_bytes", [1024, CHUNK_BYTES])
@pytest.mark.parametrize("kind", list(ADAMW))
def test_chunked_step_equals_whole_gradients_clipped_bit_for_bit(dtype, chunk_bytes, kind):
    """The reference is the whole-gradient step: every master gets its full fp32 gradient, then
    `clip_grad_norm_` and one AdamW step. A bf16 model on the CPU reads its gradients as CUDA's
    bf16 staging buffers are read."""
    clip = 0.05
    net, ref_net = _net(dtype), _net(dtype)
    mw = MasterWeights(list(net.parameters()), pin=False, chunk_bytes=chunk_bytes)
    opt = torch.optim.AdamW(mw.masters, lr=1e-2, weight_decay=0.1, **ADAMW[kind])
    ref_masters = [p.detach().float().clone().requires_grad_(True) for p in ref_net.parameters()]
    ref_opt = torch.optim.AdamW(ref_masters, lr=1e-2, weight_decay=0.1, **ADAMW[kind])
    for step in range(4):
        for n in (net, ref_net):
            n.zero_grad(set_to_none=True)
            _loss(n, step).backward()
        norm = mw.step(opt, clip)
        mw.push_to_device()
        for p, m in zip(ref_net.parameters(), ref_masters):
            m.grad = p.grad.detach().to(torch.float32, copy=True)
        ref_norm = float(torch.nn.utils.clip_grad_norm_(ref_masters, clip))
        ref_opt.step()
        with torch.no_grad():
            for p, m in zip(ref_net.parameters(), ref_masters):
                p.copy_(m)
        assert norm == ref_norm and norm > clip  # it clipped, by the same norm
    for m, r in zip(mw.masters, ref_masters):
        assert torch.equal(m, r)
        state, ref_state = opt.state[m], ref_opt.state[r]
        assert state.keys() == ref_state.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(state[k], ref_state[k]) for k in state)
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), ref_net.parameters()))


def _held_grad_bytes(optimizer: torch.optim.Optimizer, log: list[int]) -> None:
    """Record, at each `optimizer.step()`, the bytes of the distinct storages its gradients live in."""
    def hook(opt: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        storages = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
                    for group in opt.param_groups for p in group["params"] if p.grad is not None}
        log.append(sum(storages.values()))

    optimizer.register_step_pre_hook(hook)


def test_chunks_hold_one_budget_of_fp32_gradient_and_leave_no_grad():
    net = _net(torch.float32)
    budget = 4096
    mw = MasterWeights(list(net.parameters()), pin=False, chunk_bytes=budget)
    opt = torch.optim.AdamW(mw.masters, lr=1e-2)
    held: list[int] = []
    _held_grad_bytes(opt, held)
    _loss(net, 0).backward()
    mw.step(opt, 1.0)
    largest = max(4 * p.numel() for p in net.parameters())
    assert largest > budget  # one tensor is a chunk of its own
    assert len(held) == len(chunk_ranges([p.numel() for p in net.parameters()], budget)) > 2
    assert max(held) <= largest
    assert all(m.grad is None for m in mw.masters)
    assert all(len(opt.state[m]) == 3 for m in mw.masters)  # and yet every master was stepped


def test_chunk_ranges_keep_order_and_budget():
    assert chunk_ranges([], 16) == []
    assert chunk_ranges([1, 2, 1, 10, 3], 16) == [range(0, 3), range(3, 4), range(4, 5)]
    assert chunk_ranges([4, 4, 4], 16) == [range(0, 1), range(1, 2), range(2, 3)]
    assert chunk_ranges([2, 2, 2], 16) == [range(0, 2), range(2, 3)]


def test_offloaded_trainer_clips_and_steps_as_plain_training_holding_no_whole_gradient(corpus):
    """`_apply` with --offload: the same clipped steps, gradient norms and optimiser state (in the
    same state_dict layout) as training the fp32 weights directly, and at no `optimizer.step()` more
    fp32 gradient than one chunk's buffer; no master keeps a `.grad` after the step."""
    kw = dict(preset="tiny", device="cpu", sources=[corpus], batch_size=4, max_frames=400, max_ref_frames=32,
              bucket_size=8, warmup_steps=2, grad_clip=0.01)
    plain, off = TTSTrainer(TrainConfig(**kw)), TTSTrainer(TrainConfig(**kw, offload=True))
    try:
        held: list[int] = []
        _held_grad_bytes(off.optimizer, held)
        for _ in range(3):
            a, b = plain.step(), off.step()
            assert a.loss == b.loss and a.extra["grad_norm"] == b.extra["grad_norm"] > 0.01
            assert all(m.grad is None for m in off._master)
        assert torch.equal(plain.get_flat_params(), off.get_flat_params())
        for p, m in zip(plain._master, off._master):
            assert all(torch.equal(v, off.optimizer.state[m][k]) for k, v in plain.optimizer.state[p].items())
        plain_sd, off_sd = plain.optimizer.state_dict(), off.optimizer.state_dict()
        assert plain_sd["param_groups"] == off_sd["param_groups"]
        assert list(plain_sd["state"]) == list(off_sd["state"])
        largest = max(4 * m.numel() for m in off._master)
        assert held and max(held) <= max(CHUNK_BYTES, largest)
    finally:
        plain.close()
        off.close()
