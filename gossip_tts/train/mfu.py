"""Model FLOPs utilisation and peak device memory, for the progress line and /metrics.

MFU = the model's own matmul FLOPs of the batches trained (gossip_tts.model.flops, at the
padded lengths the model ran at) / wall time between steps / the device's dense bf16 peak.
The time includes data waits and gossip at step boundaries: what a user gets, not a kernel
benchmark. The peak comes from a table by device name or from `--peak-tflops`.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from gossip_tts.model import ModelConfig, train_flops_per_sample

PEAK_BF16_TFLOPS: dict[str, float] = {
    # dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets; SXM parts
    "H200": 989.0, "H100": 989.0, "H800": 989.0, "GH200": 989.0, "B200": 2250.0, "A100": 312.0, "A800": 312.0,
    "L40S": 362.0, "L40": 181.0, "L4": 121.0, "A10": 125.0, "A6000": 155.0, "4090": 165.0, "3090": 71.0,
}


def peak_tflops(device: torch.device, explicit: float | None = None) -> float | None:
    """Dense bf16 peak TFLOP/s of `device`: `explicit` if given, else the table (longest name match)."""
    if explicit:
        return explicit
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    hits = [k for k in PEAK_BF16_TFLOPS if k in name]
    return PEAK_BF16_TFLOPS[max(hits, key=len)] if hits else None


def peak_memory_gib(device: torch.device) -> float | None:
    """Most device memory allocated by tensors since start (CUDA), or what the driver holds (MPS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    if device.type == "mps":
        return torch.mps.driver_allocated_memory() / 2**30
    return None


class StepMeter:
    """Per-step model TFLOP/s, MFU (where a peak is known) and peak memory, as StepStats extras."""

    def __init__(self, model_cfg: ModelConfig, device: torch.device, peak: float | None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.model_cfg, self.device, self.peak, self.clock = model_cfg, device, peak, clock
        self._last = clock()
        self._flops_cache: dict[tuple[int, int, int], float] = {}

    def batch_flops(self, size: int, frames: int, text_len: int, ref_len: int) -> float:
        key = (frames, text_len, ref_len)
        if key not in self._flops_cache:
            self._flops_cache[key] = train_flops_per_sample(self.model_cfg, *key)
        return size * self._flops_cache[key]

    def extras(self, flops: float) -> dict[str, float]:
        """Call once per step, after it: figures since the previous call."""
        now = self.clock()
        dt, self._last = now - self._last, now
        out: dict[str, float] = {}
        if dt > 0:
            out["tflops"] = flops / dt / 1e12
            if self.peak:
                out["mfu"] = out["tflops"] / self.peak
        mem = peak_memory_gib(self.device)
        if mem is not None:
            out["peak_mem_gib"] = mem
        return out
