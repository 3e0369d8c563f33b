"""Choosing the compute device: `auto` means CUDA, then Apple MPS, then CPU."""

from __future__ import annotations

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str) -> torch.device:
    """Map a `--device` value to a torch device, failing clearly if it is not available here."""
    if name not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {name!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA GPU here")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("--device mps was asked for, but this torch build has no usable Apple MPS")
    return torch.device(name)
