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

The step then goes a chunk of masters at a time (`MasterWeights.step`): AdamW is elementwise,
so only the chunk being stepped needs its gradient in fp32, and host memory never holds a whole
fp32 gradient beside the masters and moments.
"""

from __future__ import annotations

import torch

CHUNK_BYTES = 64 << 20
"""Bytes of fp32 gradient the offloaded step holds at once (one reused buffer; a tensor larger than
this gets a buffer its own size). Small beside the 12 bytes a parameter of masters and moments at
the sizes offload is for, yet millions of values, so each `optimizer.step()` call's fixed cost
(Python, grouping its tensors) stays small beside its memory-bound work."""


def chunk_ranges(numels: list[int], budget: int) -> list[range]:
    """Runs of consecutive tensors (their indices) whose fp32 bytes add up to at most `budget`;
    a tensor larger than that is a run of its own."""
    runs: list[range] = []
    start = held = 0
    for i, n in enumerate(numels):
        if i > start and held + 4 * n > budget:
            runs.append(range(start, i))
            start, held = i, 0
        held += 4 * n
    if start < len(numels):
        runs.append(range(start, len(numels)))
    return runs


class MasterWeights:
    def __init__(self, params: list[torch.Tensor], *, pin: bool, overlap: bool = False,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
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
        self._chunks = chunk_ranges([p.numel() for p in params], chunk_bytes)
        self._grad_buffer: torch.Tensor | None = None  # made at the first step, then reused
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

    def _gradients(self) -> list[torch.Tensor | None]:
        """Each parameter's gradient where the step reads it: its pinned staging copy once every
        queued copy is done (CUDA), else the device gradient itself."""
        if not self._pin:
            return [None if p.grad is None else p.grad.detach() for p in self.params]
        for i, p in enumerate(self.params):
            if not self._copied[i]:
                self._start_copy(i, p)
        if self.params:
            torch.cuda.current_stream(self.params[0].device).synchronize()
        return [self._staging[i] if self._copied[i] else None for i in range(len(self.params))]

    def _buffer_for_grads(self) -> torch.Tensor:
        buf = self._grad_buffer
        if buf is None:
            numel = max((sum(self.params[i].numel() for i in run) for run in self._chunks), default=0)
            buf = self._grad_buffer = torch.empty(numel, dtype=torch.float32)
        return buf

    @staticmethod
    def _total_norm(grads: list[torch.Tensor | None], buf: torch.Tensor) -> torch.Tensor:
        """The 2-norm of all gradients as `clip_grad_norm_` computes it over their fp32 copies: each
        tensor's norm over its float32 values, then the norm of those norms, in the same order. A
        gradient that is not already float32 in CPU memory is copied into `buf` first, as the step
        will copy it, so its norm sees exactly the values the step sees."""
        norms = []
        for g in grads:
            if g is None:
                continue
            if g.device.type != "cpu" or g.dtype != torch.float32:
                g = buf[: g.numel()].view(g.shape).copy_(g)
            norms.append(torch.linalg.vector_norm(g, 2.0))
        if not norms:
            return torch.tensor(0.0)
        return torch.linalg.vector_norm(torch.stack(norms), 2.0)

    def step(self, optimizer: torch.optim.Optimizer, max_norm: float) -> float:
        """Clip the gradients to total norm `max_norm` (0: no clipping) and step `optimizer` over the
        masters a chunk at a time; the gradients' total norm (NaN without clipping).

        Each chunk's gradients are copied into views of one fp32 buffer and set as its masters'
        `.grad` for one `optimizer.step()`, then unset: the optimiser skips a tensor without a
        gradient, and AdamW is elementwise with a step count per tensor, so the chunks together take
        the very step one call over whole fp32 gradients would. Clipping stays global: the norm is
        taken over every gradient first, and each chunk is scaled by the coefficient
        `clip_grad_norm_` would use, computed as it does."""
        grads = self._gradients()
        for m in self.masters:
            m.grad = None
        buf = self._buffer_for_grads()
        total = self._total_norm(grads, buf) if max_norm > 0 else None
        coef = None if total is None else torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        for run in self._chunks:
            stepped: list[torch.Tensor] = []
            offset = 0
            for i in run:
                g, m = grads[i], self.masters[i]
                if g is None:
                    continue
                grad = buf[offset : offset + m.numel()].view(m.shape).copy_(g)  # bf16 -> fp32, or to the CPU
                if coef is not None:
                    grad.mul_(coef)
                m.grad = grad
                offset += m.numel()
                stepped.append(m)
            if not stepped:
                continue
            optimizer.step()
            for m in stepped:
                m.grad = None
        self._copied = [False] * len(self.params)
        return float("nan") if total is None else float(total)

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
        # gradient buffers is safe: their device-to-host copies finished (synchronised in `step`),
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
