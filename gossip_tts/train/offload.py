"""ZeRO-Offload-style master weights: fp32 parameters and optimiser state live in CPU memory.

Ren et al. 2021 (ZeRO-Offload): the GPU keeps only what forward/backward need (here bf16
weights on CUDA), while the fp32 master copy and AdamW's two moments — 12 of the 14 bytes
per parameter — stay in host memory, and the optimiser step runs on the CPU. For gossip
this is also the cheap side: mixing and publishing read and write the CPU masters directly.

On CUDA the copies are asynchronous through pinned staging buffers in the device dtype
(half the bytes of fp32 over PCIe): each gradient leaves the GPU as soon as backward has
accumulated it (a post-accumulate hook, so the copies overlap the rest of backward), and
training waits once, before the CPU step. Under DDP the hooks would copy unreduced
gradients, so there the copies start right after backward instead.
"""

from __future__ import annotations

import torch


class MasterWeights:
    def __init__(self, params: list[torch.Tensor], *, pin: bool, overlap: bool = False) -> None:
        self.params = params
        self.masters: list[torch.Tensor] = []
        for p in params:
            m = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)
            m.copy_(p.detach())
            self.masters.append(m.requires_grad_(True))
        self._pin = pin
        self._staging: list[torch.Tensor | None] = [None] * len(params)
        self._copied = [False] * len(params)
        self._overlap = overlap and pin
        if self._overlap:
            for i, p in enumerate(params):
                p.register_post_accumulate_grad_hook(lambda p, i=i: self._start_copy(i, p))

    def _buffer(self, i: int, like: torch.Tensor) -> torch.Tensor:
        buf = self._staging[i]
        if buf is None or buf.dtype != like.dtype:
            buf = self._staging[i] = torch.empty(like.shape, dtype=like.dtype, pin_memory=True)
        return buf

    def _start_copy(self, i: int, p: torch.Tensor) -> None:
        """Queue the device-to-host copy of one gradient (stream-ordered, so it is safe to free after)."""
        if p.grad is not None:
            self._buffer(i, p.grad).copy_(p.grad.detach(), non_blocking=True)
            self._copied[i] = True

    def grads_to_masters(self) -> None:
        """Move the device gradients to the fp32 masters (the optimiser steps there)."""
        if not self._pin:  # CPU (or no pinning): plain exact copies
            for p, m in zip(self.params, self.masters):
                m.grad = None if p.grad is None else p.grad.detach().to("cpu", torch.float32, copy=True)
            return
        for i, p in enumerate(self.params):
            if not self._copied[i]:
                self._start_copy(i, p)
        if self.params:
            torch.cuda.current_stream(self.params[0].device).synchronize()
        for i, (p, m) in enumerate(zip(self.params, self.masters)):
            if not self._copied[i]:
                m.grad = None
                continue
            if m.grad is None:
                m.grad = torch.empty_like(m, pin_memory=False)
            m.grad.copy_(self._staging[i])  # bf16 -> fp32 on the CPU
            self._copied[i] = False

    @torch.no_grad()
    def push_to_device(self, which: range | None = None) -> None:
        """Copy the masters (those at indices `which`, else all) into the device weights (casting
        to their dtype): a mix added a tensor at a time pushes what it changed."""
        indices = range(len(self.params)) if which is None else which
        if not self._pin:
            for i in indices:
                p, m = self.params[i], self.masters[i]
                p.copy_(m.detach().to(p.device, p.dtype))
            return
        # Cast on the CPU into the staging buffers, then one async copy each. Reusing the
        # gradient buffers is safe: their device-to-host copies finished (synchronised) above,
        # and the next ones are queued on the same stream after these host-to-device reads.
        for i in indices:
            p, m = self.params[i], self.masters[i]
            buf = self._buffer(i, p)
            buf.copy_(m.detach())
            p.copy_(buf, non_blocking=True)


def offload_adamw(masters: list[torch.Tensor], lr: float, betas: tuple[float, float], weight_decay: float,
                  fast: bool) -> torch.optim.AdamW:
    """AdamW over the CPU masters: fused (one kernel over all tensors) where torch has it, else foreach.

    `fast=False` keeps torch's default per-tensor loop, whose steps match a plain CPU run bit for bit."""
    if fast:
        for kwargs in ({"fused": True}, {"foreach": True}):
            try:
                return torch.optim.AdamW(masters, lr=lr, betas=betas, weight_decay=weight_decay, **kwargs)
            except (RuntimeError, ValueError):
                continue
    return torch.optim.AdamW(masters, lr=lr, betas=betas, weight_decay=weight_decay)
