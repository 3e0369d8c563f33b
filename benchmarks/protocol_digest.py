"""Digests of everything the protocol makes in a scripted life of three peers: run it on two
commits to show a change kept every bit.

    python benchmarks/protocol_digest.py [--sizes 676,70001,1132560] [--codecs topk:0.1+int8,int8,topk:0.01]
                                         [--copy-dtype bfloat16|float32]
    python benchmarks/protocol_digest.py --topk 1132560,30000000

Three real `GossipNode`s with their `BoundaryHook`s and `Mixer`s (one trainer adds the mix in
place, two mix through a copy) train a stand-in model, publish, and exchange every way round
for ten periods: first contacts, snapshots, a skipped publish (a gap), a forgotten neighbour.
One line per size and codec: a digest over every request and answer body, the parameters after
every boundary, every public copy, neighbour copy, served parameters, averaged weights, the
moves and norms, and the state frames at the end. Everything is seeded, stamped with a fixed
clock and signed with fixed keys (Ed25519 signatures are deterministic), so two commits that
compute the same bits print the same lines. `--topk` instead digests `topk_indices` on Gaussian,
heavy-tailed and heavily tied vectors of those sizes at 10% and 1%.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from peer.boundary import BoundaryHook, PendingPublish  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from peer.trainer import Capabilities, StepStats, add_flat_into, flatten, unflatten_into  # noqa: E402
from protocol import Identity  # noqa: E402
from protocol.codecs_sparse import topk_indices  # noqa: E402

NOW = 1.7e9


class Stand:
    """A stand-in trainer: three tensors that drift by seeded noise (a larger jump every third step)."""

    def __init__(self, n: int, seed: int, in_place: bool, device: str = "cpu") -> None:
        self.g = torch.Generator().manual_seed(seed)  # on the CPU: the same noise whatever the device
        self.params = [(torch.randn(s, generator=self.g) * 0.05).to(device) for s in (n // 3, n // 3, n - 2 * (n // 3))]
        self.steps, self.capabilities = 0, Capabilities(add_in_place=in_place, device=device)

    @property
    def step_count(self) -> int:
        return self.steps

    def train(self) -> None:
        self.steps += 1
        for p in self.params:
            p.add_((torch.randn(p.shape, generator=self.g) * (1e-2 if self.steps % 3 else 1e-1)).to(p.device))

    def get_flat_params(self) -> torch.Tensor:
        return flatten(self.params)

    def param_spec(self) -> dict[str, tuple[tuple[int, ...], str]]:
        return {f"p{i}": (tuple(p.shape), "float32") for i, p in enumerate(self.params)}

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        add_flat_into(delta, self.params, start)

    def set_step_scale(self, scale: float) -> None:
        pass


def life(n: int, codec: str, periods: int = 10, copy_dtype: str = "bfloat16", device: str = "cpu") -> str:
    """The digest of one scripted life; `device`: where the stand-ins' parameters and the nodes'
    copies live (off the CPU, reductions such as norms may sum in another order, so its digest
    need not equal the CPU's once a mix has weighed a distance)."""
    digest = hashlib.sha256()

    def add(tag: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().contiguous()
            value = (value.view(torch.int16) if value.dtype == torch.bfloat16 else value).numpy().tobytes()
        digest.update(tag.encode() + b"=" + (value if isinstance(value, bytes) else repr(value).encode()))

    cfg = GossipConfig(swarm="digest", compression=codec, copy_dtype=copy_dtype)
    trainers = [Stand(n, 1, False, device), Stand(n, 2, True, device), Stand(n, 3, False, device)]
    for t in trainers[1:]:
        t.set_flat_params(trainers[0].get_flat_params())
    x0, clock = trainers[0].get_flat_params(), [NOW]
    nodes = [GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), {"p": ((n,), "float32")}, x0, now=NOW,
                        metrics=Metrics(process=False), entropy=bytes([i + 1]) * 16, device=device) for i in range(3)]
    pending = [PendingPublish() for _ in nodes]
    hooks = [BoundaryHook(Mixer(cfg, pulls=2), node.view_slot, p, lambda step, due: None, Metrics(process=False),
                          cfg.publish_cadence(), lambda: clock[0], device=node.device) for node, p in zip(nodes, pending)]
    keys = [node.identity.public_key for node in nodes]
    for period in range(periods):
        clock[0] += 0.1
        for i, (t, hook, node, p) in enumerate(zip(trainers, hooks, nodes, pending)):
            if period == 6 and i == 2:
                node.forget(keys[0])  # a snapshot again
            t.train()
            hook(t, StepStats(step=t.steps, loss=0.0, samples=1))
            add(f"x{period}.{i}", t.get_flat_params())
            item = p.take()
            if item is not None and not (period == 4 and i == 1):  # one skipped publish: a gap later
                node.publish(item[0], item[1], clock[0])
            p.finished()  # as the worker says when a publish ends: a copy at every step
        for i, j in ((0, 1), (0, 2), (1, 2), (2, 0), (1, 0), (2, 1)):
            body = nodes[i].build_request(keys[j] if keys[j] in nodes[i].neighbours else None, clock[0])
            answer, _ = nodes[j].handle_request(body, clock[0])
            nodes[i].handle_response(answer, clock[0])
            add(f"req{period}.{i}{j}", body)
            add(f"ans{period}.{j}{i}", answer)
        for i, node in enumerate(nodes):
            add(f"public{period}.{i}", node.public.x_hat)
            add(f"served{period}.{i}", node.served)
            add(f"moves{period}.{i}", (list(node.public.moves), node.view_slot.current.public_norm))
            for key, nb in sorted(node.neighbours.items()):
                add(f"copy{period}.{i}.{key.hex()[:8]}", nb.copy.x_hat if nb.copy.x_hat is not None else b"")
            average = node.average.weights()
            add(f"average{period}.{i}", average[0] if average else b"")
    for i, node in enumerate(nodes):
        add(f"state{i}", node.state_frame(clock[0]))
    return digest.hexdigest()[:24]


def topk_digest(n: int) -> str:
    digest, rng = hashlib.sha256(), np.random.default_rng(5)
    for kind in ("gaussian", "heavy", "ties"):
        v = rng.standard_normal(n).astype(np.float32)
        if kind == "heavy":
            v = (rng.standard_t(2.5, n) * np.exp(rng.standard_normal(n))).astype(np.float32)
        elif kind == "ties":
            v = np.round(v * 4).astype(np.float32)
        for fraction in (0.1, 0.01):
            digest.update(topk_indices(v, math.ceil(fraction * n)).tobytes())
    return digest.hexdigest()[:24]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="676,70001,1132560")
    ap.add_argument("--codecs", default="topk:0.1+int8,int8,topk:0.01")
    ap.add_argument("--copy-dtype", default="bfloat16", help="GossipConfig.copy_dtype (float32: exact copies)")
    ap.add_argument("--topk", help="comma-separated sizes: digest top-k's indices instead")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.topk:
        for n in (int(s) for s in args.topk.split(",")):
            print(f"topk {n} {topk_digest(n)}", flush=True)
        return
    for n in (int(s) for s in args.sizes.split(",")):
        for codec in args.codecs.split(","):
            print(f"{n} {codec} {args.copy_dtype} {life(n, codec, copy_dtype=args.copy_dtype)}", flush=True)


if __name__ == "__main__":
    main()
