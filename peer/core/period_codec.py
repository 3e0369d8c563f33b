"""The codec of one publish at a long period: the configured codec's bytes per step, spent on a denser update.

With error feedback (CHOCO-SGD) a top-k codec sends the largest f of the entries of x − x̂ at
each publish, and the rest waits. What a period adds spreads over all entries, so x̂ trails x
by about 1 / f periods: 10 steps at a publish every step with top-10%, 640 steps at a publish
every 64, where the consensus step then averages copies that far behind and the peers barely
agree (docs/mixing.md#a-long-publish-period). At a period of H steps the fraction is f · H'
instead (H' the largest power of two not above H, so a peer switches codec rarely), and the
plain value codec once that reaches 1: the public copy trails by at most about ten steps or
one period, and a peer sends no more bytes per step than the configured codec at a publish
every step. The mixing rate follows the codec actually sent (`gossip_config.default_gamma`).

A frame never grows past `max_bytes` that way (`GossipConfig.max_period_frame_bytes`, a quarter
of the outbox: it still holds four): at a large model the period is what the node worker keeps
up with, not what the links could carry, and a dense update of 800M parameters is 800 MB to
every partner. There the fraction stays at the largest multiple that fits, the configured one
at least.

Dense codecs are sent as configured; every sparse kind of the codec table
(`protocol.codec_table`) grows with the period.
"""

from __future__ import annotations

import functools
from decimal import Decimal

from peer.core.cadence import PublishPeriod
from protocol import CodecBase, parse_codec
from protocol.codec_table import DEFAULT_VALUES, read_spec


@functools.lru_cache(maxsize=256)
def codec_for_period(compression: str, period_steps: int, numel: int = 0, max_bytes: float = float("inf")) -> str:
    """The canonical codec spec to publish an update of `numel` entries with at a period of
    `period_steps` local steps: the densest the period allows whose packed arrays fit `max_bytes`.
    Cached: the mixer asks at every step boundary with news, with the same few arguments."""
    parts = read_spec(compression)
    if not parts.kind.sparse or period_steps <= 1:
        return compression
    name, arg = parts.kind.name, parts.argument
    _head, plus, values = compression.partition("+")
    scale = 1 << (int(period_steps).bit_length() - 1)
    while scale > 1:
        fraction = Decimal(arg) * scale
        if fraction >= 1:
            spec = parse_codec(values if plus else DEFAULT_VALUES).spec
        else:
            spec = parse_codec(f"{name}:{format(fraction.normalize(), 'f')}{plus}{values}").spec
        if parse_codec(spec).packed_nbytes(numel) <= max_bytes:
            return spec
        scale //= 2
    return compression


class PeriodCodecs:
    """The node's codec per publish: it measures our period (`PublishPeriod`) and picks the
    codec for it (`codec_for_period`) when `per_period`, else always the configured one.
    `gossip_every`: the pinned steps per publish, the period's floor (None: the budget sets
    them, and the floor is one step; `GossipConfig.gossip_every`)."""

    def __init__(self, compression: str, gossip_every: int | None, per_period: bool, numel: int,
                 max_bytes: float) -> None:
        self.compression, self.per_period, self.numel, self.max_bytes = compression, per_period, numel, max_bytes
        self.period = PublishPeriod(gossip_every or 1)
        """Our steps per publish as measured (partner steps read it too)."""
        self._parsed: dict[str, CodecBase] = {compression: parse_codec(compression)}

    def published(self, step: int) -> CodecBase:
        """We publish at the trainer's `step`: the codec to send it with."""
        self.period.published(step)
        spec = self.compression
        if self.per_period:
            spec = codec_for_period(self.compression, self.period.steps(), self.numel, self.max_bytes)
        if spec not in self._parsed:
            self._parsed[spec] = parse_codec(spec)
        return self._parsed[spec]
