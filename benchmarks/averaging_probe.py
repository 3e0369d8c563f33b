"""What a replica's loss is made of: Adam's step noise, and which averaging removes it.

    python benchmarks/averaging_probe.py [--steps 100] [--seeds 0,1,2]

The head-to-head MLP (benchmarks/vs_common.py: 1.1M parameters, Adam, batch 1024) as 4
replicas in ONE process, in synchronous rounds: every replica takes a step; every 4th step
each publishes and exchanges with one random other through the real peer core (`GossipNode`,
`Mixer`, the wire frames; no sockets, no clock but a fake one), so the figures hold no
wall-clock, load or protocol-CPU effects: only the algorithm, at equal steps. Arms:

- alone: the 4 replicas never exchange (the head-to-head's control);
- gossip (the peer's default codec) and gossip int8: the real mixing step;
- pull P: every 4 steps each replica moves P of the way (×4/3) to the exact mean of all four
  (no compression, no staleness): an upper reference for mixing every 4 steps.

Each arm's held-out loss (the teacher's clean outputs) is reported four ways: a replica as it
trains (what the head-to-head measures), the exact mean of the 4 replicas (what data
parallelism trains), a replica averaged with its own last 3 publishes (an iterate average any
lone peer can keep), and, for gossip, a replica averaged with the neighbour copies it holds
(an estimate of the swarm's mean that a peer can compute alone). Prints a table per seed and a
last line `ratio: {json}`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from vs_common import Task, Workload, build_model  # noqa: E402

from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from protocol import Identity, flat_model_spec  # noqa: E402

N, EVERY, HISTORY = 4, 4, 3
VIEWS = ("replica", "mean of replicas", "own iterate average", "replica + held copies")


def flat(m: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(m.parameters()).detach().clone()


def exchange(a: GossipNode, b: GossipNode, now: float) -> None:
    """`a` asks `b` and takes the answer, as a driver does (a first contact only trades tickets)."""
    key = b.identity.public_key
    known = key in a.neighbours or a.held_tickets.get(key)[1] > 0
    reply, _ = b.handle_request(a.build_request(key if known else None, now), now)
    a.handle_response(reply, now)


def run_arm(w: Workload, steps: int, arm: dict) -> dict[str, float]:
    tasks = [Task(w, r) for r in range(N)]
    models = [build_model(w, seed=w.seed) for _ in range(N)]
    opts = [torch.optim.Adam(m.parameters(), lr=w.lr) for m in models]
    now = 1e6
    gossip = arm.get("gossip")
    nodes = [GossipNode(GossipConfig(swarm="probe", **gossip), Identity.generate(bytes([i + 1]) * 32),
                        flat_model_spec(flat(models[0]).numel()), flat(models[i]), now=now, metrics=Metrics())
             for i in range(N)] if gossip is not None else []
    mixers = [Mixer(node.cfg) for node in nodes]
    history: list[list[torch.Tensor]] = [[] for _ in range(N)]
    rng = random.Random(w.seed)
    for s in range(1, steps + 1):
        now += 0.1
        for i, (m, opt, task) in enumerate(zip(models, opts, tasks)):
            x, y = task.batch()
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            if nodes:  # the step boundary, as BoundaryHook runs it
                mixers[i].observe_boundary(now)
                view = nodes[i].view_slot.current
                if mixers[i].has_news(view):
                    torch.nn.utils.vector_to_parameters(mixers[i].mix(flat(m), view, s, now)[0], m.parameters())
                if s % EVERY == 0:
                    nodes[i].publish(flat(m), s, now)
        if s % EVERY:
            continue
        for i, m in enumerate(models):
            history[i] = (history[i] + [flat(m)])[-HISTORY:]
        if "pull" in arm:
            xs = [flat(m) for m in models]
            mean = torch.stack(xs).mean(0)
            for m, xi in zip(models, xs):
                torch.nn.utils.vector_to_parameters(xi + arm["pull"] * (mean - xi) * N / (N - 1), m.parameters())
        for i in range(N):
            if nodes:
                exchange(nodes[i], nodes[rng.choice([j for j in range(N) if j != i])], now)
    probe = build_model(w, seed=w.seed)

    def loss_of(vector: torch.Tensor) -> float:
        torch.nn.utils.vector_to_parameters(vector, probe.parameters())
        return tasks[0].eval_loss(probe)

    xs = [flat(m) for m in models]
    out = {"replica": statistics.mean(tasks[0].eval_loss(m) for m in models),
           "mean of replicas": loss_of(torch.stack(xs).mean(0)),
           "own iterate average": statistics.mean(loss_of((x + sum(h)) / (1 + len(h))) for x, h in zip(xs, history))}
    if nodes:
        held = [[c.x_hat for c in node.view_slot.current.copies] for node in nodes]
        out["replica + held copies"] = statistics.mean(loss_of((x + sum(c)) / (1 + len(c))) for x, c in zip(xs, held))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pull", type=float, default=0.3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    arms = {"alone": {}, "gossip (default codec)": {"gossip": {}}, "gossip int8": {"gossip": {"compression": "int8"}},
            f"pull {a.pull:g}": {"pull": a.pull}}
    print(describe())
    print(f"{N} replicas in one process, {a.steps} steps each, exchange every {EVERY}; held-out loss at the last step")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for seed in [int(s) for s in a.seeds.split(",")]:
        w = Workload(seed=seed)
        print(f"\nseed {seed}\n\n| arm | " + " | ".join(VIEWS) + " |\n" + "|---" * (len(VIEWS) + 1) + "|", flush=True)
        for name, arm in arms.items():
            r = run_arm(w, a.steps, arm)
            results[name].append(r)
            print(f"| {name} | " + " | ".join(f"{r[v]:.6f}" if v in r else "–" for v in VIEWS) + " |", flush=True)
    alone = [r["replica"] for r in results["alone"]]
    ratio = {}
    for name in arms:
        for view in VIEWS:
            vals = [r[view] / base for r, base in zip(results[name], alone) if view in r]
            if vals and (name, view) != ("alone", "replica"):
                ratio[f"{name}: {view} / alone replica"] = [round(v, 3) for v in vals]
    print("\nratio: " + json.dumps(ratio, sort_keys=True))


if __name__ == "__main__":
    main()
