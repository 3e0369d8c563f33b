"""Choosing the compute device: `auto` means CUDA, then Apple MPS, then CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str) -> torch.device:
    """Map a `--device` value to a torch device, failing clearly if it is not available here.

    torch is imported here, not at module level, so `--help` and config parsing stay fast."""
    import torch

    if name not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {name!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else \
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU or driver"
        raise ValueError(f"--device cuda: {why}; pass --device cpu or auto (see docs/troubleshooting.md)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("--device mps: this torch build has no usable Apple MPS; pass --device cpu or auto")
    return torch.device(name)
