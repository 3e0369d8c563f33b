"""Stochastic rounding of float32 to bfloat16: unbiased, E[round(x)] = x.

A peer hands its publish a bfloat16 copy of its parameters x, half the bytes of float32, and
CHOCO-SGD (Koloskova et al. 2019) sends the residual x − x̂ taken in it. x̂ is bfloat16 itself,
so what it can follow of x is the same either way; the copy is also what the averaged weights
sample at that publish, and there only an unbiased rounding averages out over their samples
(a nearest rounding's error stays put while a parameter sits inside one bfloat16 step).

How: add 16 uniform random bits to the float32 bit pattern, below the 16 bits bfloat16 keeps,
and keep the top 16. The magnitude bits go up by one bfloat16 unit with probability (dropped
bits) / 2^16, which is the distance to the lower neighbour over their spacing: x shares the lower
neighbour's exponent and the upper one lies one unit of it above (also where that starts the next
binade), so this holds in every binade and for subnormals alike. The sign
bit never changes (the sum of finite magnitude bits stays below it), so rounding is symmetric.
Exact bfloat16 values drop nothing and stay; ±inf stays ±inf; a finite value becomes ±inf only
from above bfloat16's largest, with the probability that rounding up there gives. NaN is set to
the canonical NaN, as torch's own conversion does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .mixing import piece_for

__all__ = ["stochastic_round_bf16"]

_KEPT_BITS = 16
_INT64_MIN = -(1 << 63)
_QUIET_NAN = 0x7FC0
"""The bfloat16 pattern of NaN torch's float32 -> bfloat16 conversion writes."""


def _may_hold_nan(piece: Tensor) -> bool:
    """Whether a piece must have its NaNs masked: on the CPU where its sum is NaN (as any NaN makes
    it); on a device always, as reading the sum back would wait on the device once a piece."""
    return piece.device.type != "cpu" or math.isnan(float(piece.sum()))


def stochastic_round_bf16(src: Tensor, out: Tensor, generator: torch.Generator) -> Tensor:
    """Write `src` (float32 or bfloat16) into `out` (bfloat16, as many entries, on the same device,
    contiguous) stochastically rounded, with random bits from `generator` (on that device); `out`.

    Unbiased: the mean of the roundings of x tends to x, every result is one of the two bfloat16
    values around x, so a parameter copy made this way feeds CHOCO-SGD's residual (Koloskova et al.
    2019) no bias. A piece at a time (`async_opt.mixing.piece_for`), so the only temporaries are a
    piece's, on `src`'s device.
    Deterministic for a generator in a given state; a non-contiguous `src` is copied first.
    """
    if out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bfloat16 tensor, got {out.dtype}")
    if src.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"src must be float32 or bfloat16, got {src.dtype}")
    if out.numel() != src.numel():
        raise ValueError(f"out holds {out.numel()} entries, src {src.numel()}")
    if out.device != src.device or generator.device.type != src.device.type:
        raise ValueError(f"src ({src.device}), out ({out.device}) and generator ({generator.device}) "
                         "must be on one device")
    flat_out = out.view(-1)
    if src.dtype == torch.bfloat16:  # already representable: nothing to round
        flat_out.copy_(src.detach().reshape(-1))
        return out
    values = src.detach().reshape(-1)
    words, kept = values.view(torch.int32), flat_out.view(torch.int16)
    n, step = values.numel(), piece_for(values)
    # 64 random bits give four entries their 16 each: a quarter of the generator's calls
    bits = torch.empty(-(-min(step, n) // 4), dtype=torch.int64, device=src.device)
    noise = torch.empty(min(step, n), dtype=torch.int32, device=src.device)
    nan = torch.empty(min(step, n), dtype=torch.bool, device=src.device)
    for start in range(0, n, step):
        part = slice(start, start + step)
        m = words[part].numel()
        r, is_nan = noise[:m], nan[:m]
        bits[:-(-m // 4)].random_(_INT64_MIN, None, generator=generator)  # every 64-bit pattern
        r.copy_(bits.view(torch.int16)[:m]).add_(1 << (_KEPT_BITS - 1))  # uniform in [0, 2^16)
        masks = _may_hold_nan(values[part])
        if masks:
            torch.ne(values[part], values[part], out=is_nan)
            r.masked_fill_(is_nan, 0)  # a NaN's word plus noise could pass int32's largest
        # a finite or infinite magnitude is at most 0x7F800000: adding under 2^16 never reaches the sign
        r.add_(words[part]).bitwise_right_shift_(_KEPT_BITS)  # arithmetic: the sign's bits stay
        if masks:
            r.masked_fill_(is_nan, _QUIET_NAN)
        kept[part].copy_(r)  # each is within int16 after the shift: the cast keeps it
    return out
