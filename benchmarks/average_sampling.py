"""What sampling the averaged weights every few steps costs their loss, against every step.

    python benchmarks/average_sampling.py [--steps 2000] [--seeds 0,1,2] [--checks 300,600,1200,2000]

One head-to-head MLP replica (benchmarks/vs_workloads.py: 1.1M parameters, Adam, batch 1024)
trains alone; beside it, power-function EMAs of its parameters (σ_rel = the peer's default) are
kept at once: one sampled every step (the reference), one sampled when `PowerEma.due` says (the
peer's rule), and controls sampled every 8 and every 16 steps. At each check step every EMA's
held-out loss is printed as a ratio to the reference's, with the samples it took and how many
steps old its newest sample is. The last line is `ratio: {json}` with the rule's and each
control's largest ratio over seeds and checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from machine import describe  # noqa: E402
from vs_common import AVERAGE_SIGMA_REL  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from async_opt.averaging import PowerEma  # noqa: E402

ARMS = ("rule", "every 8", "every 16")


def due(arm: str, ema: PowerEma, step: int) -> bool:
    if arm == "rule":
        return ema.due(step)
    return ema.value is None or step - ema.step >= int(arm.split()[1])


def run_seed(w: MLPWorkload, steps: int, checks: set[int]) -> dict[int, dict[str, float]]:
    """{check step: {arm: loss / reference loss}} for one workload (its seed), printing a line per check."""
    task, model, probe = w.task(0), w.build_model(), w.build_model()
    opt = torch.optim.Adam(model.parameters(), lr=w.lr)

    def loss_of(vector: torch.Tensor) -> float:
        torch.nn.utils.vector_to_parameters(vector, probe.parameters())
        return task.eval_loss(probe)

    reference = PowerEma(AVERAGE_SIGMA_REL)
    emas = {arm: PowerEma(AVERAGE_SIGMA_REL) for arm in ARMS}
    samples = dict.fromkeys(ARMS, 0)
    out: dict[int, dict[str, float]] = {}
    for step in range(1, steps + 1):
        opt.zero_grad()
        x, y = task.batch()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        reference.update(flat, step)
        for arm, ema in emas.items():
            if due(arm, ema, step):
                ema.update(flat, step)
                samples[arm] += 1
        if step in checks:
            base = loss_of(reference.value)
            out[step] = {arm: loss_of(ema.value) / base for arm, ema in emas.items()}
            cells = " | ".join(f"{arm} {out[step][arm]:.4f} ({samples[arm]} samples, newest {step - emas[arm].step} old)"
                               for arm in ARMS)
            print(f"seed {w.seed} step {step}: live {loss_of(flat):.6f}, every step {base:.6f} | {cells}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--checks", default="300,600,1200,2000")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(describe())
    checks = {int(c) for c in args.checks.split(",") if int(c) <= args.steps}
    runs = [run_seed(MLPWorkload(seed=int(s)), args.steps, checks) for s in args.seeds.split(",")]
    worst = {arm: round(max(r[arm] for run in runs for r in run.values()), 4) for arm in ARMS}
    print("ratio: " + json.dumps({"worst_loss_over_every_step": worst}))


if __name__ == "__main__":
    main()
