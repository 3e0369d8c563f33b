"""The peer's own mixing code on the head-to-head MLP with the machine taken out: N replicas in
lockstep in one process, no clock, no threads, no CPU shared with the protocol.

    python benchmarks/lockstep_peers.py [--peers 4] [--steps 200] [--seeds 0,1,2] [--no-late] [--variant FIELD=VALUE[;...]]
    python benchmarks/lockstep_peers.py --peers 2 --steps 810 --ddp-steps 705 --gossip-steps 565

Each replica is the head-to-head MLP (benchmarks/vs_workloads.py: 1.1M parameters, Adam, batch
1024) behind a real `GossipNode`, `BoundaryHook` and `Mixer` with the peer's defaults: after every
step it runs the step boundary (mixing whatever its pulls brought), publishes, and pulls
`SessionConfig().pulls` random others through the node's own exchange code (signed, compressed
frames). Each gossip arm also runs late (unless `--no-late`): the pulls of a round happen before
that round's publishes, so every copy a replica mixes is one publish older, as an answer that
comes back a step late brings it.

Beside them, with the same batches: the replicas alone, and DDP (one model stepping on the mean
gradient of the N replicas' batches). Score: held-out loss over the last 8 steps, the replicas'
mean; capture = (alone − gossip) / (alone − DDP), the figure vs_ddp.py measures on real
processes. Run for as many steps as a real run takes (capture falls with length: the step-size
rule's larger step buys speed early, DDP's quieter gradient a lower floor later), the gap between
the two is what the machine costs: the protocol's CPU taken from training, the threads' timing.
`--ddp-steps` and `--gossip-steps` give those arms the step counts a real run's processes got
(each arm is scored at its own end): the CPU's share of that gap, measured without the machine.
Prints a table and a last line `result: {json}`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from vs_ddp import gossip_fields  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from peer.boundary import BoundaryHook, PendingPublish  # noqa: E402
from peer.core.config import SessionConfig  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from peer.trainer import Capabilities, StepStats, flatten, unflatten_into  # noqa: E402
from protocol import Identity  # noqa: E402

TAIL_STEPS = 8
T0 = 1_000_000.0


class Replica:
    """One replica behind the parts of the Trainer seam the step boundary calls."""

    capabilities = Capabilities()

    def __init__(self, w: MLPWorkload, rank: int) -> None:
        self.task, self.model = w.task(rank), w.build_model()
        self.params = list(self.model.parameters())
        self.opt, self.lr, self.step_count = w.optimizer()(self.params), w.lr, 0

    def step(self) -> StepStats:
        self.opt.zero_grad()
        loss = self.task.loss(self.model, self.task.batch())
        loss.backward()
        self.opt.step()
        self.step_count += 1
        return StepStats(self.step_count, float(loss.detach()), 1)

    def get_flat_params(self) -> torch.Tensor:
        return flatten(self.params)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params)

    def set_step_scale(self, scale: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = self.lr * scale


def exchange(asker: GossipNode, answerer: GossipNode, now: float) -> None:
    """`asker` pulls `answerer` as a driver does: request, answer, ingest."""
    key = answerer.identity.public_key
    known = key in asker.neighbours or asker.held_tickets.get(key)[1] > 0
    reply, _ = answerer.handle_request(asker.build_request(key if known else None, now), now,
                                       verified={asker.identity.public_key})
    asker.handle_response(reply, now)


def gossip(w: MLPWorkload, n: int, steps: int, cfg: GossipConfig, late: bool) -> tuple[float, float]:
    """(held-out loss over the last TAIL_STEPS steps, the last step-size multiplier)."""
    cfg = cfg.for_trainer(Replica.capabilities.additive_steps)
    pulls = SessionConfig().for_partner_steps(cfg.partner_steps > 0).pulls
    replicas = [Replica(w, r) for r in range(n)]
    nodes, pending, hooks = [], [], []
    for i, rep in enumerate(replicas):
        spec = {name: (tuple(p.shape), "float32") for name, p in rep.model.named_parameters()}
        node = GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), spec, rep.get_flat_params(), now=T0,
                          metrics=Metrics())
        nodes.append(node)
        pending.append(PendingPublish())
        hooks.append(BoundaryHook(Mixer(cfg, pulls), node.view_slot, pending[i], lambda step, due: None, Metrics(),
                                  cfg.publish_cadence(), lambda: T0, node.partner_steps.taken()))
    rng = random.Random(w.seed)

    def pull_round(now: float) -> None:
        for i in range(n):
            for j in rng.sample([j for j in range(n) if j != i], min(pulls, n - 1)):
                exchange(nodes[i], nodes[j], now)

    def step(t: int) -> None:
        now = T0 + t
        for rep, hook in zip(replicas, hooks):
            hook(rep, rep.step())
        if late:
            pull_round(now)
        for node, slot in zip(nodes, pending):
            if (item := slot.take()) is not None:
                node.publish(item[0], item[1], now, item[2])
        if not late:
            pull_round(now)

    return tail_loss(steps, step, replicas), hooks[0].metrics.get("step_scale") or 1.0


def tail_loss(steps: int, step: Callable[[int], None], replicas: list[Replica]) -> float:
    """Run `step(t)` for t < `steps`; the replicas' mean held-out loss over the last TAIL_STEPS steps."""
    tail = []
    for t in range(steps):
        step(t)
        if t >= steps - TAIL_STEPS:
            tail.append(statistics.mean(replicas[0].task.eval_loss(r.model) for r in replicas))
    return statistics.mean(tail)


def alone(w: MLPWorkload, n: int, steps: int) -> float:
    replicas = [Replica(w, r) for r in range(n)]

    def step(t: int) -> None:
        for rep in replicas:
            rep.step()

    return tail_loss(steps, step, replicas)


def ddp(w: MLPWorkload, n: int, steps: int) -> float:
    """One replica (rank 0's held-out set) stepping on the mean loss of all n ranks' batches."""
    model, tasks = Replica(w, 0), [w.task(r) for r in range(n)]

    def step(t: int) -> None:
        model.opt.zero_grad()
        (sum(task.loss(model.model, task.batch()) for task in tasks) / n).backward()
        model.opt.step()

    return tail_loss(steps, step, [model])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--ddp-steps", type=int, default=0, help="steps of the DDP arm (default: --steps)")
    ap.add_argument("--gossip-steps", type=int, default=0, help="steps of every gossip arm (default: --steps)")
    ap.add_argument("--no-late", action="store_true", help="skip each gossip arm's late twin (copies a publish older)")
    ap.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE[;...]",
                    help="an extra gossip arm with these GossipConfig fields changed (repeatable)")
    a = ap.parse_args()
    ddp_steps, gossip_steps = a.ddp_steps or a.steps, a.gossip_steps or a.steps
    if min(a.steps, ddp_steps, gossip_steps) < TAIL_STEPS:
        ap.error(f"every arm needs at least {TAIL_STEPS} steps (its score is the mean over its last {TAIL_STEPS})")
    torch.set_num_threads(1)
    print(describe())
    arms = {"gossip": GossipConfig(swarm="lockstep")}
    arms.update({f"gossip [{v}]": GossipConfig(swarm="lockstep", **gossip_fields(v)) for v in a.variant})
    result: dict[str, dict[str, float]] = {}
    print(f"\n{a.peers} replicas; steps: alone {a.steps}, DDP {ddp_steps}, gossip {gossip_steps}\n"
          "| seed | alone | DDP | arm | loss | capture of DDP's gain | step scale |\n|---|---|---|---|---|---|---|")
    for seed in (int(s) for s in a.seeds.split(",")):
        w = MLPWorkload(seed=seed)
        row = {"alone": alone(w, a.peers, a.steps), "ddp": ddp(w, a.peers, ddp_steps)}
        for name, cfg in arms.items():
            for late in (False,) if a.no_late else (False, True):
                label = f"{name}, late" if late else name
                loss, scale = gossip(w, a.peers, gossip_steps, cfg, late)
                row[label], row[f"{label} capture"] = loss, (row["alone"] - loss) / (row["alone"] - row["ddp"])
                print(f"| {seed} | {row['alone']:.6f} | {row['ddp']:.6f} | {label} | {loss:.6f} | "
                      f"{row[f'{label} capture']:.2f} | {scale:.2f} |", flush=True)
        result[str(seed)] = row
    print("result: " + json.dumps(result))


if __name__ == "__main__":
    main()
