"""`probe_better` of the toy trainers and of a torchrun group (rank 0 decides): how a joiner
refuses an offered state that does not score better than its own parameters."""

from __future__ import annotations

import torch
import torch.distributed as dist

from peer.local.group import GroupComm, GroupTrainer, follow
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer, make_shard
from peer.trainer import Capabilities
from simnet.world.mlp_trainer import MLPConfig, MLPTrainer
from tests.unit.parallel_helpers import spawn

DIM = 16


def _trained(trainer, steps: int):
    for _ in range(steps):
        trainer.step()
    return trainer


def test_least_squares_probe_prefers_a_state_further_along_and_changes_nothing() -> None:
    fresh = LeastSquaresTrainer(LeastSquaresConfig(dim=DIM, seed=1))
    trained = _trained(LeastSquaresTrainer(LeastSquaresConfig(dim=DIM, seed=2)), 200)
    mine, theirs = fresh.get_flat_params(), trained.get_flat_params()
    assert fresh.probe_better(theirs) and not trained.probe_better(mine)
    assert not fresh.probe_better(mine)  # strictly better only
    for liar in (torch.full((DIM,), 1e30), torch.full((DIM,), float("nan"))):
        assert not fresh.probe_better(liar)
    assert torch.equal(fresh.get_flat_params(), mine)


def test_mlp_probe_prefers_a_state_further_along_and_changes_nothing() -> None:
    fresh = MLPTrainer(MLPConfig(task="regress", seed=1))
    trained = _trained(MLPTrainer(MLPConfig(task="regress", seed=2)), 200)
    mine, theirs = fresh.get_flat_params(), trained.get_flat_params()
    assert fresh.probe_better(theirs) and not trained.probe_better(mine)
    assert not fresh.probe_better(torch.full_like(mine, float("nan")))
    assert not fresh.probe_better(mine + 1e20)
    assert torch.equal(fresh.get_flat_params(), mine)


class RecordingProbe(LeastSquaresTrainer):
    """Records every state it is asked to score."""

    def __init__(self, cfg: LeastSquaresConfig) -> None:
        super().__init__(cfg)
        self.probed: list[torch.Tensor] = []

    def probe_better(self, flat: torch.Tensor) -> bool:
        self.probed.append(flat.clone())
        return super().probe_better(flat)


def _cfg(rank: int) -> LeastSquaresConfig:
    # Far-apart shards: what is best for shard 0 is worse than zeros for shard 1.
    return LeastSquaresConfig(dim=DIM, shard=rank, n_shards=2, heterogeneity=10.0, problem_seed=3, seed=rank)


def _shard_0_optimum() -> torch.Tensor:
    a, b = make_shard(_cfg(0), 0)
    return torch.linalg.lstsq(a, b[:, None]).solution[:, 0]


def probe_worker(rank: int, out: str) -> None:
    dist.init_process_group("gloo")
    comm = GroupComm(torch.device("cpu"))
    inner = RecordingProbe(_cfg(rank))
    offered = _shard_0_optimum()
    own_verdict = LeastSquaresTrainer.probe_better(inner, offered)
    if rank != 0:
        follow(inner, comm)
        torch.save({"own": own_verdict, "probed": inner.probed}, f"{out}/rank{rank}.pt")
        return
    group = GroupTrainer(inner, comm)
    verdicts = [group.probe_better(offered), group.probe_better(torch.full((DIM,), 1e30))]
    group.close()
    torch.save({"own": own_verdict, "verdicts": verdicts, "probed": inner.probed}, f"{out}/rank0.pt")


def test_rank_0_decides_for_the_group_and_every_rank_scores_the_same_state(tmp_path) -> None:
    spawn(probe_worker, 2, str(tmp_path))
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert (r0["own"], r1["own"]) == (True, False)  # the ranks disagree on the offered state...
    assert r0["verdicts"] == [True, False]  # ...and the group answers with rank 0's verdict
    assert len(r0["probed"]) == len(r1["probed"]) == 2  # every rank scored what rank 0 was offered, in order
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(r0["probed"], r1["probed"]))
    assert torch.allclose(r0["probed"][0], _shard_0_optimum(), atol=1e-4)
    assert torch.equal(r0["probed"][1], torch.full((DIM,), 1e30))


def test_a_group_whose_trainer_cannot_judge_says_so_without_a_command() -> None:
    class NoProbe:
        capabilities = Capabilities(probe=False)

        def param_spec(self):
            return {"w": ((DIM,), "float32")}

    class Comm:
        def command(self, code=None):
            raise AssertionError("no command for a probe the trainer cannot run")

    assert GroupTrainer(NoProbe(), Comm()).probe_better(torch.zeros(DIM)) is None  # type: ignore[arg-type]
