"""What a replica's loss is made of, and which averaging removes it, at equal steps.

    python benchmarks/averaging_probe.py [--steps 100] [--seeds 0,1,2] [--straggler]

The head-to-head MLP (benchmarks/vs_common.py: 1.1M parameters, Adam, batch 1024) as 4
replicas in ONE process, in synchronous rounds: every replica takes a step; every 4th step
each publishes and exchanges with one random other through the real peer core (`GossipNode`,
`Mixer`, the wire frames, the node's averaged weights; no sockets, a fake clock), so the
figures hold no wall-clock, load or protocol-CPU effects: only the algorithm. Arms:

- alone: the 4 replicas never exchange (the head-to-head's control);
- ddp: one model stepping on the mean gradient of the 4 replicas' batches (exact data parallelism);
- gossip (the peer's default codec) and gossip int8: the real mixing step;
- pull P: every 4 steps each replica moves P of the way (×4/3) to the exact mean of all four
  (no compression, no staleness): exact periodic averaging.

With `--straggler` (`--steps` then counts rounds): one replica steps once every 4 rounds, every
replica publishes when the peer's own `PublishCadence` says so, and the straggler's averaged
weights are scored against the fast replicas', with the peer's progress weighting and with
every model counted alike (the control).

Each arm's held-out loss (the teacher's clean outputs), averaged over the last 4 steps so that
no arm is caught just after (or just before) its exchange, three ways: a replica as it
trains; its averaged weights, the ones a peer hands its user (peer.core.average: a gossip
peer's power-function EMA of its swarm estimate; for every other arm the same EMA of its own
parameters, sampled every 4 steps); and the exact mean of the replicas. Prints a table per
seed and a last line `ratio: {json}`.
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
from vs_common import AVERAGE_EVERY, AVERAGE_SIGMA_REL  # noqa: E402
from vs_workloads import MLPTask, MLPWorkload  # noqa: E402

from async_opt.averaging import PowerEma  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from protocol import Identity, flat_model_spec  # noqa: E402

N, EVERY = 4, AVERAGE_EVERY
VIEWS = ("replica", "averaged weights", "mean of replicas")


def flat(m: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(m.parameters()).detach().clone()


def exchange(a: GossipNode, b: GossipNode, now: float) -> None:
    """`a` asks `b` and takes the answer, as a driver does (a first contact only trades tickets)."""
    key = b.identity.public_key
    known = key in a.neighbours or a.held_tickets.get(key)[1] > 0
    reply, _ = b.handle_request(a.build_request(key if known else None, now), now)
    a.handle_response(reply, now)


def step_replicas(models: list, opts: list, tasks: list[MLPTask], ddp: bool) -> None:
    """One Adam step of every replica, or with `ddp` one step of the single model on the mean gradient."""
    for i, (m, opt) in enumerate(zip(models, opts)):
        opt.zero_grad()
        for task in (tasks if ddp else [tasks[i]]):
            x, y = task.batch()
            (torch.nn.functional.mse_loss(m(x), y) / (len(tasks) if ddp else 1)).backward()
        opt.step()


def make_nodes(cfg: GossipConfig, models: list, now: float) -> list[GossipNode]:
    """One real gossip node per replica, starting from its parameters."""
    return [GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), flat_model_spec(flat(models[0]).numel()),
                       flat(m), now=now, metrics=Metrics()) for i, m in enumerate(models)]


def held_out_scorer(w: MLPWorkload, task: MLPTask):
    """A function from a parameter vector to its held-out loss on `task` (one probe model, reloaded)."""
    probe = w.build_model()

    def loss_of(vector: torch.Tensor) -> float:
        torch.nn.utils.vector_to_parameters(vector, probe.parameters())
        return task.eval_loss(probe)

    return loss_of


def run_arm(w: MLPWorkload, steps: int, arm: dict) -> dict[str, float]:
    tasks = [w.task(r) for r in range(N)]
    ddp = arm.get("ddp", False)
    models = [w.build_model() for _ in range(1 if ddp else N)]
    opts = [torch.optim.Adam(m.parameters(), lr=w.lr) for m in models]
    now = 1e6
    gossip = arm.get("gossip")
    nodes = make_nodes(GossipConfig(swarm="probe", average_sigma_rel=AVERAGE_SIGMA_REL, **gossip), models, now) \
        if gossip is not None else []
    mixers = [Mixer(node.cfg) for node in nodes]
    emas = [PowerEma(AVERAGE_SIGMA_REL) for _ in models]
    rng, loss_of, seen = random.Random(w.seed), held_out_scorer(w, tasks[0]), {v: [] for v in VIEWS}

    for s in range(1, steps + 1):
        now += 0.1
        step_replicas(models, opts, tasks, ddp)
        for i, m in enumerate(models):
            if nodes:  # the step boundary, as BoundaryHook runs it
                mixers[i].observe_boundary(now)
                view = nodes[i].view_slot.current
                if mixers[i].has_news(view):
                    torch.nn.utils.vector_to_parameters(mixers[i].mix(flat(m), view, s, now)[0], m.parameters())
                if s % EVERY == 0:
                    nodes[i].publish(flat(m), s, now)
            elif s % EVERY == 0:
                emas[i].update(flat(m), s)
        if s > steps - EVERY:  # the last EVERY steps: every phase of the exchange period
            xs = [flat(m) for m in models]
            averaged = [n.average.weights()[0] for n in nodes] if nodes else [e.value for e in emas]
            seen["replica"].append(statistics.mean(loss_of(x) for x in xs))
            seen["averaged weights"].append(statistics.mean(loss_of(a) for a in averaged))
            seen["mean of replicas"].append(loss_of(torch.stack(xs).mean(0)))
        if s % EVERY:
            continue
        if "pull" in arm:
            xs = [flat(m) for m in models]
            mean = torch.stack(xs).mean(0)
            for m, xi in zip(models, xs):
                torch.nn.utils.vector_to_parameters(xi + arm["pull"] * (mean - xi) * N / (N - 1), m.parameters())
        for i in range(len(nodes)):
            exchange(nodes[i], nodes[rng.choice([j for j in range(N) if j != i])], now)
    return {view: statistics.mean(values) for view, values in seen.items()}


def run_straggler_arm(w: MLPWorkload, steps: int, weigh_progress: bool, slow: int = 4) -> tuple[float, float]:
    """Replica N−1 steps once every `slow` rounds; every replica publishes when the peer's own
    `PublishCadence` says so (a fake clock, 0.1 s a round) and exchanges with a random other.
    Returns the averaged weights' held-out loss over the second half (every 8 rounds): the fast
    replicas' mean and the straggler's. `weigh_progress` False is the control: every model
    counts alike in the swarm estimate, as a peer of equal speed counts them."""
    tasks = [w.task(r) for r in range(N)]
    models = [w.build_model() for _ in range(N)]
    opts = [torch.optim.Adam(m.parameters(), lr=w.lr) for m in models]
    now = 1e6
    cfg = GossipConfig(swarm="probe", average_sigma_rel=AVERAGE_SIGMA_REL)
    nodes = make_nodes(cfg, models, now)
    for node in nodes:
        node.average.weigh_progress = weigh_progress
    mixers = [Mixer(cfg) for _ in nodes]
    cadences = [cfg.publish_cadence() for _ in nodes]
    rng, loss_of, own, fast, lagging = random.Random(w.seed), held_out_scorer(w, tasks[0]), [0] * N, [], []

    for s in range(1, steps + 1):
        now += 0.1
        for i, m in enumerate(models):
            if i == N - 1 and s % slow:
                continue
            step_replicas([m], [opts[i]], [tasks[i]], ddp=False)
            own[i] += 1
            mixers[i].observe_boundary(now)
            view = nodes[i].view_slot.current
            cadences[i].observe(view)
            if mixers[i].has_news(view):
                torch.nn.utils.vector_to_parameters(mixers[i].mix(flat(m), view, own[i], now)[0], m.parameters())
            if cadences[i].due(own[i], now):
                nodes[i].publish(flat(m), own[i], now)
                cadences[i].published(own[i], now)
                exchange(nodes[i], nodes[rng.choice([j for j in range(N) if j != i])], now)
        if s % 8 == 0 and s > steps // 2:
            scores = [loss_of(n.average.weights()[0]) for n in nodes]
            fast.append(statistics.mean(scores[:-1]))
            lagging.append(scores[-1])
    return statistics.mean(fast), statistics.mean(lagging)


def straggler_main(a: argparse.Namespace) -> None:
    print(f"{N} replicas in one process, replica {N - 1} 4x slower, {a.steps} rounds; averaged weights' held-out "
          "loss, mean over the second half", flush=True)
    print("\n| seed | arm | fast replicas | straggler | straggler / fast |\n|---|---|---|---|---|")
    ratio: dict[str, list[float]] = {"progress-weighted: straggler / fast": [], "equal weights: straggler / fast": []}
    for seed in [int(s) for s in a.seeds.split(",")]:
        for name, weigh in (("progress-weighted", True), ("equal weights", False)):
            f, lag = run_straggler_arm(MLPWorkload(seed=seed), a.steps, weigh)
            ratio[f"{name}: straggler / fast"].append(round(lag / f, 3))
            print(f"| {seed} | {name} | {f:.6f} | {lag:.6f} | {lag / f:.3f} |", flush=True)
    print("\nratio: " + json.dumps(ratio, sort_keys=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pull", type=float, default=0.3)
    ap.add_argument("--straggler", action="store_true",
                    help="one replica 4x slower: its averaged weights with and without progress weighting")
    a = ap.parse_args()
    if a.steps < 2 * EVERY:
        raise SystemExit(f"--steps must be >= {2 * EVERY} (the scores are of the last {EVERY}, after a first publish)")
    torch.set_num_threads(1)
    if a.straggler:
        print(describe())
        straggler_main(a)
        return
    arms = {"alone": {}, "ddp": {"ddp": True}, "gossip (default codec)": {"gossip": {}},
            "gossip int8": {"gossip": {"compression": "int8"}}, f"pull {a.pull:g}": {"pull": a.pull}}
    print(describe())
    print(f"{N} replicas in one process, {a.steps} steps each, exchange every {EVERY}; held-out loss, mean of the last {EVERY} steps")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for seed in [int(s) for s in a.seeds.split(",")]:
        w = MLPWorkload(seed=seed)
        print(f"\nseed {seed}\n\n| arm | " + " | ".join(VIEWS) + " |\n" + "|---" * (len(VIEWS) + 1) + "|", flush=True)
        for name, arm in arms.items():
            r = run_arm(w, a.steps, arm)
            results[name].append(r)
            print(f"| {name} | " + " | ".join(f"{r[v]:.6f}" for v in VIEWS) + " |", flush=True)
    ratio = {}
    for name in arms:
        for view in VIEWS[:2]:  # each view against the same view of the lone replicas
            if name != "alone":
                ratio[f"{name}: {view} / alone's"] = [round(r[view] / base[view], 3)
                                                      for r, base in zip(results[name], results["alone"])]
    ratio["alone: averaged weights / replica"] = [round(r["averaged weights"] / r["replica"], 3) for r in results["alone"]]
    print("\nratio: " + json.dumps(ratio, sort_keys=True))


if __name__ == "__main__":
    main()
