"""Whether a partner's gradients help an Adam replica, fresh or as old as a wire could bring them.

    python benchmarks/adam_partner_gradients.py [--steps 300] [--seeds 0,1,2]

Partner steps (docs/mixing.md#partner-steps) add a pulled partner's own SGD steps to ours; under
Adam a step is normalised per coordinate, so they multiply the step size instead. What would add
under Adam is the partner's *gradient*, fed into our optimiser beside our own. This measures that
on the head-to-head MLP (benchmarks/vs_workloads.py: 1.1M parameters, Adam, batch 1024) as 4
replicas in one process, in synchronous rounds, with exact copies (no codec, no clock): every
`--every` steps each replica pulls one random other and moves `--gamma` of the way to it. Arms:

- alone: no exchange (the control every gain is measured from);
- ddp: one model stepping on the mean gradient of the 4 replicas' batches;
- mix: the pair mixing alone;
- mix + fresh gradients (w): at every step Adam takes (g + w·g_p) / (1 + w), g_p the pulled
  partner's gradient *of this very step* — more than a wire can bring;
- mix + period-old gradients (w): g_p is the partner's mean gradient over its last period, the
  freshest a publish could carry; used through the whole next period (or over the period before,
  two periods old: a pull that came back a period late).

Score: held-out loss (the teacher's clean outputs) averaged over the last 8 steps and over the
replicas; capture = (alone − arm) / (alone − ddp). Prints a table per seed and a last line
`result: {json}`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

N_REPLICAS = 4
TAIL_STEPS = 8


@dataclass(frozen=True)
class Arm:
    name: str
    mix: bool = False
    ddp: bool = False
    weight: float = 0.0
    """Weight of the partner's gradient beside ours (0: none)."""
    fresh: bool = True
    """The partner's gradient of this step (True) or its mean over a past period (False)."""
    periods_old: int = 1
    """Which past period's mean (1: the last one)."""


ARMS = (Arm("alone"), Arm("ddp", ddp=True), Arm("mix", mix=True),
        Arm("mix + fresh gradients (w 1)", mix=True, weight=1.0),
        Arm("mix + period-old gradients (w 1)", mix=True, weight=1.0, fresh=False),
        Arm("mix + period-old gradients (w 0.3)", mix=True, weight=0.3, fresh=False),
        Arm("mix + two-periods-old gradients (w 0.3)", mix=True, weight=0.3, fresh=False, periods_old=2))


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def set_grad(model: torch.nn.Module, vector: torch.Tensor) -> None:
    torch.nn.utils.vector_to_parameters(vector, [p.grad for p in model.parameters()])


def run_arm(arm: Arm, w: MLPWorkload, steps: int, every: int, gamma: float) -> float:
    """Held-out loss of `arm` over its last TAIL_STEPS steps, the replicas' mean."""
    tasks = [w.task(r) for r in range(N_REPLICAS)]
    models = [w.build_model() for _ in range(1 if arm.ddp else N_REPLICAS)]
    opts = [torch.optim.Adam(m.parameters(), lr=w.lr) for m in models]
    rng = random.Random(w.seed)
    partner: list[int | None] = [None] * N_REPLICAS
    period_sum = [None] * N_REPLICAS
    period_means = [deque(maxlen=arm.periods_old) for _ in range(N_REPLICAS)]
    tail = []
    for t in range(steps):
        if arm.ddp:
            opts[0].zero_grad()
            (sum(task.loss(models[0], task.batch()) for task in tasks) / N_REPLICAS).backward()
            opts[0].step()
        else:
            grads = []
            for m, o, task in zip(models, opts, tasks):
                o.zero_grad()
                task.loss(m, task.batch()).backward()
                grads.append(flat_grad(m))
            for i, (m, o) in enumerate(zip(models, opts)):
                p = partner[i]
                past = period_means[p] if p is not None else ()
                if arm.weight > 0 and p is not None and (arm.fresh or len(past) == arm.periods_old):
                    other = grads[p] if arm.fresh else past[0]
                    set_grad(m, (grads[i] + arm.weight * other) / (1 + arm.weight))
                o.step()
                period_sum[i] = grads[i] if period_sum[i] is None else period_sum[i] + grads[i]
            if arm.mix and (t + 1) % every == 0:
                xs = [torch.nn.utils.parameters_to_vector(m.parameters()).detach().clone() for m in models]
                for i, m in enumerate(models):
                    partner[i] = rng.choice([j for j in range(N_REPLICAS) if j != i])
                    torch.nn.utils.vector_to_parameters(xs[i] + gamma * (xs[partner[i]] - xs[i]), m.parameters())
                    period_means[i].append(period_sum[i] / every)
                    period_sum[i] = None
        if t >= steps - TAIL_STEPS:
            tail.append(statistics.mean(tasks[0].eval_loss(m) for m in models))
    return statistics.mean(tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--every", type=int, default=4, help="steps per publish period")
    ap.add_argument("--gamma", type=float, default=0.5, help="how far a replica moves toward its partner")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(describe())
    result: dict[str, dict[str, float]] = {}
    for seed in (int(s) for s in a.seeds.split(",")):
        losses = {}
        for arm in ARMS:
            losses[arm.name] = run_arm(arm, MLPWorkload(seed=seed), a.steps, a.every, a.gamma)
            print(f"seed {seed}: {arm.name}: {losses[arm.name]:.6f}", file=sys.stderr, flush=True)
        alone, ddp = losses["alone"], losses["ddp"]
        print(f"\nseed {seed}, {a.steps} steps\n| arm | held-out loss | / alone | capture of DDP's gain |\n|---|---|---|---|")
        for name, loss in losses.items():
            print(f"| {name} | {loss:.6f} | {loss / alone:.3f} | {(alone - loss) / (alone - ddp):.2f} |")
        result[str(seed)] = losses
    print("result: " + json.dumps(result))


if __name__ == "__main__":
    main()
