"""Learning-rate schedule: linear warmup, then cosine decay to a floor."""

from __future__ import annotations

import math


def warmup_cosine(step: int, *, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier on the peak learning rate at `step` (0-based).

    Warmup keeps AdamW's first, badly-estimated second moments from taking huge steps;
    the cosine tail (Loshchilov & Hutter 2017) settles the model. Past `total` it stays at
    `min_ratio`, so a peer that trains longer than planned keeps learning slowly.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
