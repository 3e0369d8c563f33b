"""Every trainer's bfloat16 copy of its parameters: a new CPU vector within one bfloat16 step of
`get_flat_params` (the neighbour below or above), equal to it where that is exactly representable,
the same bits from the same generator; and `flatten_bf16` under it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from peer.local.group import GET, GroupTrainer
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from peer.trainer import Capabilities, StepStats, Trainer, WrappedTrainer, flatten_bf16
from simnet.attacks.trainer import AttackConfig, AttackTrainer
from simnet.world.mlp_trainer import MLPConfig, MLPTrainer


def assert_rounded_copy(flat: torch.Tensor, got: torch.Tensor) -> None:
    """`got` is a bfloat16 CPU vector as long as float32 `flat`, each entry the bfloat16 pattern
    `flat`'s truncates to or the next one away from zero, and `flat` itself where it is exact."""
    assert got.dtype == torch.bfloat16 and got.device.type == "cpu" and got.shape == flat.shape
    words = flat.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    step = (got.view(torch.int16).to(torch.int64) & 0xFFFF) - (words >> 16)
    assert bool(((step == 0) | (step == 1)).all())
    exact = (words & 0xFFFF) == 0
    assert bool(exact.any()) and torch.equal(got[exact].to(torch.float32), flat[exact])


def with_exact_entries(trainer: Trainer) -> torch.Tensor:
    """Set every third parameter to a bfloat16 value (exact in both), the rest stay; the float32 copy."""
    flat = trainer.get_flat_params()
    flat[::3] = flat[::3].to(torch.bfloat16).to(torch.float32)
    trainer.set_flat_params(flat)
    return trainer.get_flat_params()


def check(trainer: Trainer) -> None:
    flat = with_exact_entries(trainer)
    got = trainer.flat_params_bf16(torch.Generator().manual_seed(1))
    assert_rounded_copy(flat, got)
    again = trainer.flat_params_bf16(torch.Generator().manual_seed(1))
    assert torch.equal(got.view(torch.int16), again.view(torch.int16))
    assert torch.equal(trainer.get_flat_params(), flat)  # reading them changed nothing


def least_squares(dim: int = 3000) -> LeastSquaresTrainer:
    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=dim))
    for _ in range(3):
        trainer.step()
    return trainer


def test_the_least_squares_trainer() -> None:
    check(least_squares())


def test_the_mlp_trainer() -> None:
    trainer = MLPTrainer(MLPConfig())
    for _ in range(3):
        trainer.step()
    check(trainer)


class _Plain(Trainer):
    """A trainer with only the required methods: it gets `Trainer`'s default."""

    capabilities = Capabilities(collective_reads=False)

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, generator=torch.Generator().manual_seed(n))

    @property
    def step_count(self) -> int:
        return 0

    def step(self) -> StepStats:
        return StepStats(0, 0.0, 0)

    def param_spec(self) -> dict[str, Any]:
        return {"x": ((self.x.numel(),), "float32")}

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.x = flat.clone()

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        self.x = flat.clone()

    def set_step_scale(self, scale: float) -> None:
        pass

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"x": self.x.clone()}, {}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.x = tensors["x"].clone()

    def close(self) -> None:
        pass


def test_the_default_rounds_get_flat_params() -> None:
    check(_Plain(300_007))  # past a piece of the rounding


def test_a_wrapper_forwards_to_what_it_wraps() -> None:
    inner = least_squares()
    check(WrappedTrainer(inner))
    want = inner.flat_params_bf16(torch.Generator().manual_seed(2))
    got = WrappedTrainer(inner).flat_params_bf16(torch.Generator().manual_seed(2))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_an_attacker_rounds_the_vector_it_shows() -> None:
    inner = least_squares()
    attacker = AttackTrainer(inner, AttackConfig(kind="scale", scale=-3.0), seed=0)
    check(attacker)
    attacker.arm(lambda: [])
    shown = attacker.get_flat_params()
    assert not torch.equal(shown, inner.get_flat_params())  # the lie, not the honest parameters
    assert_rounded_copy(shown, attacker.flat_params_bf16(torch.Generator().manual_seed(3)))


class _Commands:
    """A `GroupComm` that records the commands rank 0 sends (no other rank: nothing to broadcast)."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def command(self, code: int | None = None) -> int:
        assert code is not None
        self.sent.append(code)
        return code


def test_a_group_reads_with_every_rank_and_rounds_as_its_inner_trainer() -> None:
    inner, comm = least_squares(), _Commands()
    group = GroupTrainer(inner, comm)  # type: ignore[arg-type]  # only `command` is called
    flat = with_exact_entries(inner)
    got = group.flat_params_bf16(torch.Generator().manual_seed(4))
    assert comm.sent == [GET]  # the other ranks read their parameters as for get_flat_params
    assert_rounded_copy(flat, got)
    want = inner.flat_params_bf16(torch.Generator().manual_seed(4))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_flatten_bf16_rounds_tensors_of_every_shape_stride_and_dtype() -> None:
    g = torch.Generator().manual_seed(5)
    a = torch.randn(30, 70, generator=g).t()  # not contiguous
    b = torch.randn(5, generator=g, dtype=torch.float64)
    c = torch.randn(9, generator=g).to(torch.bfloat16)
    a[0, :3] = torch.tensor([1.0, -0.0, 2.0 ** -133])  # exact
    got = flatten_bf16([a, b, c], a.numel() + b.numel() + c.numel(), torch.Generator().manual_seed(6))
    assert_rounded_copy(torch.cat([a.reshape(-1), b.to(torch.float32), c.to(torch.float32)]), got)
    assert torch.equal(got[-9:], c)
    with pytest.raises(ValueError, match="hold 2100 values, 2101 were said"):
        flatten_bf16([a], a.numel() + 1, torch.Generator())
    with pytest.raises(ValueError, match="more than the 2099"):
        flatten_bf16([a], a.numel() - 1, torch.Generator())
    assert flatten_bf16([], 0, torch.Generator()).shape == (0,)
