"""The averaged weights in three bytes a value (async_opt.packed_float): a float32's top 24 bits,
rounded stochastically, so a long EMA keeps moving where bfloat16 stops."""

from __future__ import annotations

import torch

from async_opt.averaging import PowerEma, SwarmEstimate, swarm_estimate
from async_opt.packed_float import PackedFloats, pack_into, random_bytes, unpack


def test_values_round_trip_within_a_16_bit_significand() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50_000, generator=g) * torch.logspace(-6, 3, 50_000)
    x[:4] = torch.tensor([0.0, -0.0, 1e-38, -3.0e38])
    packed = PackedFloats(x)
    back = packed.unpacked()
    assert back.dtype == torch.float32 and back.shape == x.shape
    assert float(((back - x).abs() / x.abs().clamp(min=1e-30))[2:].max()) <= 2.0 ** -16 * (1 + 1e-4)
    assert packed.hi.element_size() + packed.lo.element_size() == 3  # three bytes a value
    bf16 = x.to(torch.bfloat16).to(torch.float32)  # the control: bfloat16 alone
    assert float(((bf16 - x).abs() / x.abs().clamp(min=1e-30))[4:].max()) > 2.0 ** -10


def test_stochastic_rounding_is_unbiased_below_the_last_place() -> None:
    n = 200_000
    hi, lo = torch.empty(n, dtype=torch.int16), torch.empty(n, dtype=torch.uint8)
    value = torch.full((n,), 1.0 + 0.3 * 2.0 ** -15)  # 0.3 of the last place kept above 1
    pack_into(value, hi, lo, random_bytes(n, torch.Generator().manual_seed(1), value.device))
    assert abs(float(unpack(hi, lo).double().mean()) - float(value[0].double())) < 0.02 * 2.0 ** -15
    pack_into(value, hi, lo, None)  # to nearest: the 0.3 is lost
    assert float(unpack(hi, lo)[0]) == 1.0
    negative = torch.full((n,), -(1.0 + 0.7 * 2.0 ** -15))
    pack_into(negative, hi, lo, random_bytes(n, torch.Generator().manual_seed(2), value.device))
    assert abs(float(unpack(hi, lo).double().mean()) - float(negative[0].double())) < 0.02 * 2.0 ** -15
    assert float(hi.view(torch.bfloat16)[0]) == -1.0  # the high part alone is the bfloat16, truncated


def test_random_bytes_are_uniform_bytes() -> None:
    b = random_bytes(100_001, torch.Generator().manual_seed(3), torch.device("cpu"))
    assert b.dtype == torch.int32 and b.numel() == 100_001 and int(b.min()) == 0 and int(b.max()) == 255
    counts = torch.bincount(b, minlength=256).float()
    assert float(counts.std() / counts.mean()) < 0.1 and abs(float(b.float().mean()) - 127.5) < 1.0
    high_bits = (b >> 7).float()  # every bit of the byte is drawn, the top one too
    assert abs(float(high_bits.mean()) - 0.5) < 0.01


def _long_ema(store: str, steps: int = 40_000, n: int = 2048) -> torch.Tensor:
    """A power EMA (σ_rel 0.1, a sample every 4 steps) of parameters that drift slowly and jitter,
    as training's do; its error against the float32 EMA of the same samples, over that EMA's RMS."""
    g = torch.Generator().manual_seed(3)
    base, drift = torch.randn(n, generator=g), torch.randn(n, generator=g) * 1e-5
    reference, ema = PowerEma(0.1), PowerEma(0.1, packed=store == "packed")
    low = None
    for step in range(4, steps + 1, 4):
        sample = base + drift * step + 1e-3 * torch.randn(n, generator=g)
        beta = reference.beta(step)
        reference.update(sample, step)
        if store == "bfloat16":  # the control: a bfloat16 average, rounded to nearest
            low = sample.to(torch.bfloat16) if low is None else torch.lerp(low, sample.to(torch.bfloat16), 1 - beta)
        else:
            ema.update(sample, step, generator=g)
    got = low.to(torch.float32) if low is not None else ema.read()
    return (got - reference.value).abs() / reference.value.square().mean().sqrt()


def test_a_long_packed_ema_stays_near_the_float32_one_where_bfloat16_stops_moving() -> None:
    """The packed average's error stays far below what bfloat16 inference rounds each weight by
    (2^-9 of a typical one); a bfloat16 average (the control) stops moving and ends far off."""
    packed, bf16 = _long_ema("packed"), _long_ema("bfloat16")
    assert float(packed.median()) < 2.0 ** -12 and float(packed.quantile(0.99)) < 2.0 ** -9
    assert float(packed.max()) < 2.0 ** -8
    assert float(bf16.median()) > 2.0 ** -4


def test_a_packed_ema_folds_in_an_estimate_a_piece_at_a_time() -> None:
    g = torch.Generator().manual_seed(4)
    n = 3 * (1 << 18) + 5  # pieces that do not divide the vector
    x, public = torch.randn(n, generator=g), torch.randn(n, generator=g)
    copies = [(public + 0.1 * torch.randn(n, generator=g), 1.0) for _ in range(2)]
    whole = swarm_estimate(x, public, copies, None)
    packed, reference = PowerEma(0.1, packed=True), PowerEma(0.1)
    for ema in (packed, reference):
        ema.reset(x, 10)
    packed.update(SwarmEstimate(x, public, copies, None), 20, generator=g)
    reference.update(whole, 20)
    assert torch.allclose(packed.read(), reference.value, rtol=2.0 ** -14, atol=1e-6)


def test_a_read_that_overlaps_an_update_is_not_returned_half_written() -> None:
    packed = PackedFloats(torch.zeros(10))
    seen = []

    def target(part: slice) -> torch.Tensor:
        seen.append(packed.read(attempts=3))  # from inside the write: always overlapping
        return torch.ones(10)[part]

    packed.lerp_(target, 0.5, torch.Generator().manual_seed(0))
    assert seen == [None] and torch.allclose(packed.read(), torch.full((10,), 0.5))


def test_a_reader_that_pauses_gets_the_values_once_the_write_ends() -> None:
    """At the sizes users train one in-place write takes seconds: a reader that must have the
    values (a checkpoint) pauses between attempts and gets them once the write is done; without a
    pause its attempts are spent at once and it gets None."""
    import threading

    packed = PackedFloats(torch.zeros(10))
    started, release = threading.Event(), threading.Event()

    def target(part: slice) -> torch.Tensor:
        started.set()
        release.wait(10)
        return torch.ones(10)[part]

    writer = threading.Thread(target=packed.lerp_, args=(target, 0.5, torch.Generator().manual_seed(0)))
    writer.start()
    started.wait(10)
    assert packed.read(attempts=50) is None  # the control: no pause, every attempt overlaps the write
    pauses = []

    def pause() -> None:
        pauses.append(1)
        if len(pauses) == 3:
            release.set()
            writer.join(10)

    out = packed.read(attempts=50, pause=pause)
    assert out is not None and torch.allclose(out, torch.full((10,), 0.5)) and len(pauses) == 3


def test_an_estimate_of_bfloat16_parameters_is_that_of_their_float32_widening() -> None:
    """A bfloat16 parameter copy (what a publish is handed where the node keeps none) is widened a
    piece at a time: the same estimate, bit for bit, as from the widened copy."""
    g = torch.Generator().manual_seed(5)
    n = 2 * (1 << 18) + 3
    x, public = torch.randn(n, generator=g).to(torch.bfloat16), torch.randn(n, generator=g).to(torch.bfloat16)
    copies = [((public.float() + 0.1 * torch.randn(n, generator=g)).to(torch.bfloat16), 1.0)]
    for rho in (None, 0.5):
        assert torch.equal(swarm_estimate(x, public, copies, rho), swarm_estimate(x.float(), public, copies, rho))
    assert SwarmEstimate(x, public, copies, None).x.dtype == torch.bfloat16  # held as given, not widened whole
