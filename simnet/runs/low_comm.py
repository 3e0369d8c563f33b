"""Two low-communication relatives of DiLoCo, over the same rounds, speed model and links as
`SyncSim`'s diloco: H inner steps per round, then one outer step from the `diloco` section.

- sparseloco (Sarfi et al. 2025): each peer sends its pseudo-gradient's top k entries in 2 bits
  each, with error feedback (`async_opt.ErrorFeedback`); the messages are all-gathered on the
  ring (a sparse message cannot be summed on the way: each peer forwards the n − 1 others'),
  `(n−1) · message bytes / bandwidth + (n−1) · latency`; every peer applies the outer step to
  the mean of the n reconstructed messages, so the replicas stay equal.
- noloco (Kolehmainen et al. 2025): no all-reduce; each round the peers are paired at random
  and each pair exchanges its outer parameters φ and trained parameters x, one message each
  way. Each peer takes its own outer step (own momentum) from the pair's mean φ on the pair's
  mean pseudo-gradient; with outer lr 1 and no momentum this is an exact average of the two
  trained replicas. NoLoCo pulls φ towards the pair's mean by a factor; here the pull is whole.
  The replicas differ, so a peer is scored on its own parameters and the mean model apart.
"""

from __future__ import annotations

import numpy as np
import torch

from async_opt import DiLoCoOuter, ErrorFeedback, allreduce_mean, consensus_distance, kept, message_bytes
from simnet.runs.baselines import SyncSim
from simnet.runs.config import WorldConfig


class SparseLoCoSim(SyncSim):
    """sparseloco: DiLoCo's rounds with top-k, 2-bit pseudo-gradients and error feedback."""

    METHODS = ("sparseloco",)

    def __init__(self, world: WorldConfig, seed: int, method: str = "sparseloco") -> None:
        super().__init__(world, seed, method)
        d, s = world.diloco, world.sparseloco
        self.outer = DiLoCoOuter(d.outer_lr, d.momentum, d.nesterov)
        self.feedback = [ErrorFeedback(s.topk, s.ef_decay) for _ in self.trainers]

    def _comm_s(self) -> float:
        """A ring all-gather of the n messages: each hop carries n − 1 of them in turn."""
        n = len(self.order)
        numel = self.nbytes // 4
        size = message_bytes(numel, kept(numel, self.world.sparseloco.topk))
        hops = [(self.order[k], self.order[(k + 1) % n]) for k in range(n)]
        bw = min(self.links.bandwidth_bps(a, b) for a, b in hops)
        lat = max(self.links.base_latency(a, b) for a, b in hops)
        return (n - 1) * (size * 8 / bw + lat)

    def _outer(self, xs: list[torch.Tensor]) -> float:
        msgs = [fb.compress(self.x - x) for fb, x in zip(self.feedback, xs)]
        assert self.outer is not None
        self.x = self.outer.apply(self.x, allreduce_mean([m.dense(self.x.dtype) for m in msgs]))
        for tr in self.trainers:
            tr.set_flat_params(self.x)
        return (len(msgs) - 1) * sum(m.nbytes() for m in msgs) / len(msgs)


class NoLoCoSim(SyncSim):
    """noloco: an outer step with one random partner per round instead of an all-reduce."""

    METHODS = ("noloco",)

    def __init__(self, world: WorldConfig, seed: int, method: str = "noloco") -> None:
        super().__init__(world, seed, method)
        d = world.diloco
        self.outers = [DiLoCoOuter(d.outer_lr, d.momentum, d.nesterov) for _ in self.trainers]
        self.phi = [self.x.clone() for _ in self.trainers]
        self.rng = np.random.default_rng([seed, 0x9A12])

    def _comm_s(self) -> float:
        """One exchange each way of φ and x (two copies of the parameters) over the slowest
        link any pair could be given."""
        n = len(self.trainers)
        return max(2 * self.nbytes * 8 / self.links.bandwidth_bps(a, b) + self.links.base_latency(a, b)
                   for a in range(n) for b in range(a + 1, n))

    def pairs(self) -> list[tuple[int, int]]:
        """This round's random pairing; with an odd n one peer is left out and steps alone."""
        order = [int(i) for i in self.rng.permutation(len(self.trainers))]
        return list(zip(order[0::2], order[1::2]))

    def _outer(self, xs: list[torch.Tensor]) -> float:
        phi = list(self.phi)
        pairs = self.pairs()
        paired = {i for pair in pairs for i in pair}
        for i, j in pairs:
            mean_phi = allreduce_mean([self.phi[i], self.phi[j]])
            phi[i] = self.outers[i].step(mean_phi, [xs[i], xs[j]])
            phi[j] = self.outers[j].step(mean_phi, [xs[i], xs[j]])
        for k in set(range(len(xs))) - paired:
            phi[k] = self.outers[k].step(self.phi[k], [xs[k]])
        self.phi = phi
        for tr, p in zip(self.trainers, phi):
            tr.set_flat_params(p)
        self.x = allreduce_mean(phi)
        return 2 * self.nbytes * len(paired) / len(xs)

    def _scores(self) -> dict[str, float]:
        own = [self._eval(p, loss) for p, loss in zip(self.phi, self._losses)]
        return {"loss": sum(own) / len(own), "loss_of_mean": self._eval(self.x, sum(own) / len(own)),
                "loss_min": min(own), "loss_max": max(own), "consensus": consensus_distance(self.phi)}
