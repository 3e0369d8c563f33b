"""ZeRO-Offload-style master weights: fp32 parameters and optimiser state live in CPU memory.

Ren et al. 2021 (ZeRO-Offload): the GPU keeps only what forward/backward need (here bf16
weights on CUDA), while the fp32 master copy and AdamW's two moments — 12 of the 14 bytes
per parameter — stay in host memory, and the optimiser step runs on the CPU. For gossip
this is also the cheap side: mixing and publishing read and write the CPU masters directly.
"""

from __future__ import annotations

import torch


class MasterWeights:
    def __init__(self, params: list[torch.Tensor], *, pin: bool) -> None:
        self.params = params
        self.masters = []
        for p in params:
            m = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
            m.copy_(p.detach())
            self.masters.append(m.requires_grad_(True))

    def grads_to_masters(self) -> None:
        """Move the device gradients to the fp32 masters (the optimiser steps there)."""
        for p, m in zip(self.params, self.masters):
            m.grad = None if p.grad is None else p.grad.detach().to("cpu", torch.float32, non_blocking=True)
        if self.params and self.params[0].device.type == "cuda":
            torch.cuda.synchronize()

    @torch.no_grad()
    def push_to_device(self) -> None:
        """Copy the masters into the device weights (casting to their dtype)."""
        for p, m in zip(self.params, self.masters):
            p.copy_(m.detach().to(p.device, p.dtype, non_blocking=True))
